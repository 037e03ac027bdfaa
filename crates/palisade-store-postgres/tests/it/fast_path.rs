//! The single-put fast path (`schema::FAST_PUT`) under contention: many
//! writers of single puts on one lock, most at the generation already in
//! the mark (the fast path), some raising it (the function). The accepted
//! writes in commit order must never go down in generation, and the value
//! left is the last accepted write's. Without the fast path's `FOR UPDATE`
//! a put read at the old mark commits after a raise: this test fails.

use std::sync::Arc;
use std::time::Duration;

use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_store::{Applied, Engine, Op, ReadRequest, Refused, WriteRequest};
use palisade_store_postgres::{PostgresConfig, PostgresEngine};
use palisade_testkit::sql::SqlServer;

const WRITERS: u64 = 16;
const STEPS: u64 = 40;
/// The bound on one write, for a loaded machine.
const CALL_BOUND: Duration = Duration::from_secs(60);

/// An exclusive sequencer of `lock` at `generation`.
pub(crate) fn exclusive(lock: &str, generation: u64) -> Sequencer {
    Sequencer::new(
        LockName::new(lock).expect("a valid lock name"),
        Mode::Exclusive,
        Generation::new(generation).expect("a non-zero generation"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_puts_at_and_above_the_mark_commit_in_generation_order() {
    let server = SqlServer::postgres();
    let engine = PostgresEngine::open(PostgresConfig::new(server.url()).with_max_connections(16))
        .await
        .expect("opening the engine");
    let engine: Arc<dyn Engine> = Arc::new(engine);
    let lock = "fast/contended";
    let barrier = Arc::new(tokio::sync::Barrier::new(WRITERS as usize));
    let mut tasks = Vec::new();
    for task in 0..WRITERS {
        let (engine, barrier) = (Arc::clone(&engine), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            for step in 0..STEPS {
                barrier.wait().await;
                // One writer in four raises the mark by one each step; the
                // others write at the previous step's generation: most of
                // them at the mark (the fast path), racing the raise.
                let generation = if task % 4 == 0 { step + 2 } else { step + 1 };
                let tag = format!("{task}-{step}");
                let request = WriteRequest::new(
                    exclusive(lock, generation),
                    vec![Op::put(&b"k"[..], tag.clone().into_bytes())],
                    None,
                );
                let outcome = tokio::time::timeout(CALL_BOUND, engine.write(request))
                    .await
                    .expect("a write answered within the bound")
                    .expect("no storage failure");
                seen.push((tag, generation, outcome));
            }
            seen
        }));
    }
    let mut seen = Vec::new();
    for task in tasks {
        seen.extend(task.await.expect("a writer task"));
    }
    check_history(engine.as_ref(), lock, seen, STEPS).await;
}

/// One write of a contended history: its tag (the value it wrote), its
/// generation and what the engine answered.
pub(crate) type Seen = (String, u64, Result<Applied, Refused>);

/// Checks the writes of one lock's contended history (single puts of key
/// `k`, some raising the mark): every accepted write answered at its own
/// generation, every refused one below the mark; more than `steps`
/// accepted; the accepted ones, in commit order, never down in
/// generation; and the value left is the last accepted write's.
pub(crate) async fn check_history(engine: &dyn Engine, lock: &str, seen: Vec<Seen>, steps: u64) {
    let mut accepted = Vec::new();
    for (tag, generation, outcome) in seen {
        match outcome {
            Ok(applied) => {
                assert_eq!(applied.marks.exclusive, generation, "{lock}: write {tag}");
                accepted.push((applied.commit_seq, generation, tag));
            }
            Err(Refused::Stale { marks, .. }) => {
                assert!(
                    generation < marks.exclusive,
                    "{lock}: write {tag} at {generation}: {marks}"
                );
            }
            Err(other) => panic!("{lock}: write {tag}: unexpected {other:?}"),
        }
    }
    accepted.sort();
    assert!(
        accepted.len() as u64 > steps,
        "{lock}: {} accepted",
        accepted.len()
    );
    for pair in accepted.windows(2) {
        assert!(
            pair[1].1 >= pair[0].1,
            "{lock}: a stale write was accepted: {:?} committed after {:?}",
            pair[1],
            pair[0]
        );
    }
    let read = engine
        .read(ReadRequest::new(
            &LockName::new(lock).expect("a valid lock name"),
            b"k",
            None,
        ))
        .await
        .expect("a read")
        .expect("a plain read is never refused");
    let last = &accepted.last().expect("writes were accepted").2;
    assert_eq!(read.value.as_deref(), Some(last.as_bytes()), "{lock}");
}
