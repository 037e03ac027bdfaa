//! Scenario 4: Redis with `appendonly yes, appendfsync always` is killed
//! (SIGKILL) in the middle of acquire, renew and write traffic, and
//! restarted on the same data directory.
//!
//! The clients use the plain counter scheme on purpose: here the counter's
//! durability is what is tested, not the server-clock floor that would
//! hide its loss. Holds in progress lose their lease while Redis is down
//! (the watchdog cannot renew), acquires fail or time out with an unknown
//! outcome, and everyone carries on once Redis is back.
//!
//! Invariants asserted: I-TOKEN (no generation is ever issued twice or
//! below an earlier one: every `INCR` acknowledged was in the AOF), I-MONO,
//! I-STALE, I-DUR, I-ONCE, and I-LIVE (a grant and a write within TTL +
//! 20 s of the last restart).

use std::time::Duration;

use palisade_testkit::redis::{Persistence, RedisOptions, RedisServer};
use palisade_tests::fault::{
    ClientConfig, ClientLine, FaultRun, Invariant, ResourceServerOptions, ResourceServerProcess,
    Scenario, scaled, stop_clients,
};

use crate::{EXIT, STEP, TTL, live_within};

/// How long Redis stays dead: the fault itself, long enough for holds to
/// notice (a keep-alive interval is TTL/4).
const DOWNTIME: Duration = Duration::from_millis(800);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_kill_9_with_aof_always_keeps_generations_and_writes() -> anyhow::Result<()> {
    let mut redis = RedisServer::spawn(RedisOptions::persistence(Persistence::AofAlways));
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new("s04")?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let base = ClientConfig::redis(&redis.url(), &server.base_url())
        .lock("faults/s04/x")
        .lock("faults/s04/y")
        .ttl(TTL)
        .counter_scheme()
        .think(Duration::from_millis(10))
        .register_every(4);
    let mut clients = Vec::new();
    for index in 0..scaled(3, 6) {
        clients.push(run.spawn_client(&binaries, &format!("c{index}"), &base)?);
    }

    let kills = scaled(2, 6);
    for kill in 1..=kills {
        // Traffic is flowing: several writes since the last restart.
        let mut writes = 0;
        run.drain_feed();
        run.wait_any(STEP, |_, line| {
            writes += usize::from(matches!(line, ClientLine::Wrote { .. }));
            (writes >= 8).then_some(())
        })
        .await?;

        let fault = format!("kill {kill}: SIGKILL redis (AOF always), restart");
        run.inject(&fault)?;
        redis.kill()?;
        // The outage itself: time is the subject here.
        tokio::time::sleep(DOWNTIME).await;
        redis.restart()?;
        run.heal(&fault)?;
        run.wait_recovered(STEP).await?;
    }
    stop_clients(clients.iter_mut(), EXIT).await?;

    let report = run
        .verdict(
            &server.base_url(),
            &live_within(TTL + Duration::from_secs(20)),
            &Scenario::new(
                "4 Redis kill -9 under traffic, AOF always",
                "redis (counter, AOF)",
            ),
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    assert_eq!(report.faults, kills);
    assert!(report.grants > kills, "{report}");
    Ok(())
}
