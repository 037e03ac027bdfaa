//! A replica cut off in the middle of fenced reads stalls no other replica
//! (#25): two engines over one PostgreSQL, replica A's connections through
//! a fault proxy. Eight readers read one lock through A; the proxy then
//! holds everything (A stopped, or partitioned away, mid-request), and
//! replica B writes to the same lock. Every fenced read is one statement
//! that PostgreSQL runs and commits by itself, so B's writes go on.
//!
//! With the reads held in a transaction across round trips again (the
//! mutation switch), A's cut-off transaction keeps the lock's row and B's
//! writes wait, then fail at `lock_timeout`: the second test shows the
//! first one would catch that.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_store::{Engine, Op, ReadRequest, WriteRequest};
use palisade_store_postgres::{PostgresConfig, PostgresEngine};
use palisade_testkit::proxy::FaultProxy;
use palisade_testkit::sql::SqlServer;

const READERS: usize = 8;
/// How long replica B writes while A is cut off.
const CUT_OFF_FOR: Duration = Duration::from_secs(4);
/// The documented bound on a write's wait for its lock's row: the engine's
/// default `lock_timeout`.
const BOUND: Duration = Duration::from_secs(2);

fn sequencer(mode: Mode, generation: u64) -> Sequencer {
    Sequencer::new(
        LockName::new("paused/L").unwrap(),
        mode,
        Generation::new(generation).unwrap(),
    )
}

/// One write of replica B while A was cut off: whether it was applied,
/// and how long it took.
type Outcome = (bool, Duration);

/// Runs the story with replica A configured by `replica_a`; returns B's
/// writes during the cut.
async fn cut_off_story(replica_a: impl FnOnce(PostgresConfig) -> PostgresConfig) -> Vec<Outcome> {
    let postgres = SqlServer::postgres();
    let address = format!("127.0.0.1:{}", postgres.port()).parse().unwrap();
    let proxy = FaultProxy::start("replica A to PostgreSQL", address).unwrap();
    let url_through_proxy = format!(
        "postgres://postgres@127.0.0.1:{}/postgres",
        proxy.address().port()
    );
    let b = PostgresEngine::open(PostgresConfig::new(postgres.url()))
        .await
        .unwrap();
    let a = PostgresEngine::open(replica_a(PostgresConfig::new(url_through_proxy)))
        .await
        .unwrap();
    let write = |b: &PostgresEngine| {
        let request = WriteRequest::new(
            sequencer(Mode::Exclusive, 1),
            vec![Op::put(&b"k"[..], &b"v"[..])],
            None,
        );
        let b = b.clone();
        async move { b.write(request).await }
    };
    write(&b).await.unwrap().unwrap();

    // Readers through A, at the lock's generation, as fast as they can.
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let (a, reads) = (a.clone(), Arc::clone(&reads));
            tokio::spawn(async move {
                let lock = LockName::new("paused/L").unwrap();
                loop {
                    let read = a
                        .read(ReadRequest::new(
                            &lock,
                            b"k",
                            Some(&sequencer(Mode::Shared, 1)),
                        ))
                        .await;
                    assert!(read.is_ok_and(|read| read.is_ok()), "an admitted read");
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while reads.load(Ordering::Relaxed) < 100 {
        assert!(Instant::now() < deadline, "the readers never got going");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // A is cut off mid-stream: whatever it sent is there, no answer gets
    // back and nothing more is sent (what a SIGSTOP does to it too).
    proxy.partition();
    let cut = Instant::now();
    let mut outcomes = Vec::new();
    while cut.elapsed() < CUT_OFF_FOR {
        let started = Instant::now();
        let applied = matches!(write(&b).await, Ok(Ok(_)));
        outcomes.push((applied, started.elapsed()));
    }
    for reader in readers {
        reader.abort();
    }
    outcomes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_mid_read_stalls_no_other_replica() {
    let outcomes = cut_off_story(|config| config).await;
    assert!(outcomes.len() > 1, "{outcomes:?}");
    for (applied, took) in &outcomes {
        assert!(
            applied,
            "a write through B failed while A was cut off: {outcomes:?}"
        );
        assert!(
            *took < BOUND,
            "a write through B took {took:?} while A was cut off: {outcomes:?}"
        );
    }
}

/// The mutation check: the same story with every fenced read of A a
/// transaction held across round trips (today's main before #25). B's
/// writes to the lock then wait for A's cut-off transaction and fail at
/// `lock_timeout`, which the test above would report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_reads_held_in_transactions_a_cut_off_replica_stalls_the_others() {
    let outcomes = cut_off_story(PostgresConfig::hold_transactions_unsafe_for_mutation_tests).await;
    assert!(
        outcomes
            .iter()
            .any(|(applied, took)| !applied || *took >= BOUND),
        "B's writes went through although A held the lock's row: {outcomes:?}"
    );
}
