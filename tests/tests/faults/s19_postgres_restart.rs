//! Scenario 19: the resource server keeps its fence in PostgreSQL
//! (`--store postgres://`), and PostgreSQL itself is killed (SIGKILL, as
//! a crash) mid-stream and restarted on the same data directory, twice,
//! while the resource server runs on (its pool reconnects by itself).
//!
//! Round 1: a holder is paused past its lease with a write in hand, a
//! contender's write under a newer generation is acknowledged, and
//! PostgreSQL is killed while the contenders write. The contenders are
//! stopped meanwhile, so once PostgreSQL is back the paused holder's late
//! write is the first it judges: it is refused only if the newer mark
//! survived the crash. Round 2: a plain crash under the contenders'
//! writes, some in flight, restarted at once.
//!
//! What makes it safe: every write is one transaction committed with
//! `synchronous_commit` on and `fsync` on (the engine refuses a server
//! without), so a write is acknowledged only once its WAL record, the
//! raised mark included, is on disk; crash recovery replays it.
//!
//! Invariants asserted: I-MONO and I-STALE (the late write refused),
//! I-DUR (no acknowledged write lost across the crashes), I-ONCE,
//! I-TOKEN, I-LIVE (a grant and a write within TTL + 30 s of the last
//! heal); the times from each kill to PostgreSQL accepting queries again,
//! to the late write judged and to a fresh grant and write are in the
//! table's note.
//!
//! The mutation check runs the same story with fencing off
//! (`--unfenced`): the checker must report the late write.

use std::time::{Duration, Instant};

use palisade_testkit::redis::RedisServer;
use palisade_testkit::sql::SqlServer;
use palisade_tests::fault::{
    ClientConfig, ClientLine, FaultRun, Invariant, Report, ResourceServerOptions,
    ResourceServerProcess, Scenario, stop_clients,
};

use crate::story::{LateWrites, late_write};
use crate::{EXIT, STEP, TTL, live_within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_kill_9_and_restart_under_the_store_keeps_the_fence() -> anyhow::Result<()> {
    let (report, late) = postgres_restarts(
        "s19",
        Scenario::new(
            "19 PostgreSQL kill -9 and restart under the PostgreSQL store",
            "redis lock, postgres store",
        ),
        ResourceServerOptions::default(),
    )
    .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    late.assert_fenced(1);
    assert!(report.fenced_writes >= late.fenced, "{report}");
    assert_eq!(report.faults, 2);
    Ok(())
}

/// The mutation check: the same story with fencing off. The late writes
/// land after the newer holders' and the checker must say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfenced_postgres_restart_story_is_caught_by_the_checker() -> anyhow::Result<()> {
    let (report, late) = postgres_restarts(
        "m19",
        Scenario::new(
            "mutation: 19 with fencing off",
            "redis lock, postgres store",
        ),
        ResourceServerOptions::default().unfenced(),
    )
    .await?;
    assert_eq!(
        late.fenced, 0,
        "nothing is fenced with fencing off: {late:?}"
    );
    assert!(late.accepted >= 1, "the late write was accepted: {late:?}");
    assert!(
        report.count(Invariant::Mono) > 0 && report.count(Invariant::Stale) > 0,
        "with fencing off the checker must report the late write: {report}"
    );
    Ok(())
}

/// Scenario 19's story; returns the checker's report and what became of
/// the late write.
async fn postgres_restarts(
    tag: &str,
    scenario: Scenario,
    options: ResourceServerOptions,
) -> anyhow::Result<(Report, LateWrites)> {
    let binaries = palisade_tests::fault_binaries!();
    let redis = RedisServer::start();
    let mut database = SqlServer::postgres();
    let mut run = FaultRun::new(tag)?;
    let server = ResourceServerProcess::start(&binaries, &run, options.store(database.url()))?;
    let base = ClientConfig::redis(&redis.url(), &server.base_url())
        .lock(format!("faults/{tag}"))
        .ttl(TTL);
    let mut holder = run.spawn_client(&binaries, "a", &base.clone().gate().writes_per_hold(2))?;
    let mut others = Vec::new();
    for index in 0..2 {
        let config = base.clone().writes_per_hold(3);
        others.push(run.spawn_client(&binaries, &format!("c{index}"), &config)?);
    }

    // Round 1. The holder has its sequencer and its write ready; it stops.
    let held = holder.wait_holding(STEP).await?;
    holder.pause()?;
    let fault = format!(
        "round 1: SIGSTOP holder a (generation {held}); SIGKILL PostgreSQL while the contenders \
         write, restart it on the same data directory"
    );
    run.inject(&fault)?;
    // Its lease lapses; a contender takes the lock and its write is
    // acknowledged: the newer mark is committed.
    let newer = run
        .wait_any(STEP, |client, line| match line {
            ClientLine::Wrote { generation, .. } if client != "a" && *generation > held => {
                Some(*generation)
            }
            _ => None,
        })
        .await?;
    // Mid-stream: the contenders are writing when PostgreSQL dies.
    let killed_at = Instant::now();
    database.kill()?;
    // They stop now, so the first write the restarted PostgreSQL judges
    // is the paused holder's: refused only if the newer mark survived.
    for other in &others {
        other.pause()?;
    }
    database.restart()?;
    let back = killed_at.elapsed();
    holder.resume()?;
    let mut late = LateWrites::default();
    late_write(&mut holder, held, newer, &mut late).await?;
    let judged = killed_at.elapsed();
    run.heal(&fault)?;
    // The holder leaves (left running it would take the lock again and sit
    // at its gate); the contenders go on.
    holder.stop_and_wait(EXIT).await?;
    for other in &others {
        other.resume()?;
    }
    run.wait_recovered(STEP).await?;
    let first = killed_at.elapsed();

    // Round 2: a plain crash under the contenders' writes, some of them in
    // flight, restarted at once.
    run.wait_any(STEP, |_, line| {
        matches!(line, ClientLine::Wrote { .. }).then_some(())
    })
    .await?;
    let fault = "round 2: SIGKILL PostgreSQL while the contenders write, restart it";
    run.inject(fault)?;
    let killed_at = Instant::now();
    database.kill()?;
    database.restart()?;
    run.heal(fault)?;
    run.wait_recovered(STEP).await?;
    let second = killed_at.elapsed();
    stop_clients(others.iter_mut(), EXIT).await?;

    let report = run
        .verdict(
            &server.base_url(),
            &live_within(TTL + Duration::from_secs(30)),
            &scenario.note(format!(
                "from kill -9 of PostgreSQL: round 1 accepting queries again {:.1} s, late write \
                 judged {:.1} s, a fresh grant and write {:.1} s; round 2 a fresh grant and write \
                 {:.1} s",
                back.as_secs_f64(),
                judged.as_secs_f64(),
                first.as_secs_f64(),
                second.as_secs_f64()
            )),
        )
        .await?;
    Ok((report, late))
}
