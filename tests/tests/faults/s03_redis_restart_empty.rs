//! Scenario 3: Redis is killed (SIGKILL) and restarted without persistence
//! while the resource server holds marks for its locks: every lock's
//! generation counter is gone.
//!
//! Two clients work on two locks, then exit; Redis dies and comes back
//! empty; two fresh clients (processes that never saw a generation) take
//! over. Each generation scheme runs as its own test:
//!
//! - **Counter** (a plain `INCR`): the fresh clients are granted small
//!   generations again, below the marks. I-TOKEN is violated by design and
//!   the test asserts the checker reports it. The resource server refuses
//!   the low generations (409 stale, so I-MONO and I-STALE hold), the
//!   clients raise the lock's floor to the mark carried by the refusal
//!   (`RedisLockClient::raise_floor`), and the lock works again (I-LIVE).
//! - **ServerClock** (the default: `max(counter + 1, Redis time in µs)`):
//!   the recreated counter starts above every generation issued before;
//!   I-TOKEN holds, and nothing needs recovering.
//!
//! Both assert I-MONO, I-STALE, I-DUR, I-ONCE and I-LIVE (within TTL +
//! 20 s of the restart).

use std::time::Duration;

use palisade_testkit::redis::{Persistence, RedisOptions, RedisServer};
use palisade_tests::fault::{
    ClientConfig, FaultRun, Invariant, Report, ResourceServerOptions, ResourceServerProcess,
    Scenario, scaled, stop_clients,
};

use crate::{EXIT, STEP, TTL, live_within};

/// Runs the scenario with the counter scheme or the default one.
async fn redis_restarted_empty(counter: bool) -> anyhow::Result<Report> {
    let mut redis = RedisServer::spawn(RedisOptions::persistence(Persistence::None));
    let binaries = palisade_tests::fault_binaries!();
    let scheme = if counter { "counter" } else { "server-clock" };
    let mut run = FaultRun::new(&format!("s03-{scheme}"))?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let mut base = ClientConfig::redis(&redis.url(), &server.base_url())
        .lock("faults/s03/x")
        .lock("faults/s03/y")
        .ttl(TTL)
        .raise_floor_on_stale();
    if counter {
        base = base.counter_scheme();
    }

    // Before: generations climb and the marks follow them.
    let rounds = scaled(6, 30);
    let mut before = Vec::new();
    for id in ["a", "b"] {
        before.push(run.spawn_client(&binaries, id, &base.clone().rounds(rounds))?);
    }
    for client in &mut before {
        let status = client.wait_exit(EXIT).await?;
        anyhow::ensure!(status.success(), "{} exited with {status}", client.id());
    }

    // Redis dies and comes back with nothing.
    let fault = "SIGKILL redis, restart without persistence";
    run.inject(fault)?;
    redis.kill()?;
    redis.restart()?;
    run.heal(fault)?;

    // After: fresh processes, which never saw a generation of these locks.
    let mut after = Vec::new();
    for id in ["c", "d"] {
        after.push(run.spawn_client(&binaries, id, &base.clone())?);
    }
    run.wait_recovered(STEP).await?;
    // Let both locks go through a few more holds, then stop.
    let mut writes = 0;
    run.wait_any(STEP, |_, line| {
        if matches!(line, palisade_tests::fault::ClientLine::Wrote { .. }) {
            writes += 1;
        }
        (writes >= scaled(12, 60)).then_some(())
    })
    .await?;
    stop_clients(after.iter_mut(), EXIT).await?;

    let scenario = Scenario::new(
        "3 Redis restarted without persistence",
        format!("redis ({scheme})"),
    );
    let scenario = if counter {
        scenario.note(
            "by design: the counter restarted at 1; low generations refused, floor raised from the 409 mark",
        )
    } else {
        scenario
    };
    let report = run
        .verdict(
            &server.base_url(),
            &live_within(TTL + Duration::from_secs(20)),
            &scenario,
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Live]);
    Ok(report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_scheme_regresses_and_is_fenced_then_recovers() -> anyhow::Result<()> {
    let report = redis_restarted_empty(true).await?;
    assert!(
        report.count(Invariant::Token) > 0,
        "the counter restarted at 1 after the data loss: I-TOKEN must be reported violated ({report})"
    );
    assert!(
        report.fenced_writes > 0,
        "the regressed generations must have been refused at the resource server ({report})"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_clock_scheme_stays_above_the_marks() -> anyhow::Result<()> {
    let report = redis_restarted_empty(false).await?;
    report.assert_holds(&[Invariant::Token]);
    Ok(())
}
