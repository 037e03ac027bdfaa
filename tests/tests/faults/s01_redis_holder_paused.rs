//! Scenario 1: a Redis lock holder is stopped (SIGSTOP) past its TTL with
//! a write in hand; a contender takes the lock and writes; the holder
//! resumes and sends its write.
//!
//! Invariants asserted: I-MONO and I-STALE (every late write is refused as
//! stale, none is accepted), I-DUR and I-ONCE (every acknowledged write is
//! in the final state, none applied twice), I-TOKEN (the default
//! server-clock generations only grow), I-LIVE (after the last resume a
//! client acquires and writes within TTL + 20 s).

use std::time::Duration;

use palisade_testkit::redis::RedisServer;
use palisade_tests::fault::{
    ClientConfig, FaultRun, Invariant, ResourceServerOptions, ResourceServerProcess, Scenario,
    scaled,
};

use crate::story::paused_holder;
use crate::{TTL, live_within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_holder_paused_past_its_ttl_is_fenced() -> anyhow::Result<()> {
    let Some(redis) = RedisServer::start() else {
        return Ok(());
    };
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new("s01")?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let base = ClientConfig::redis(&redis.url(), &server.base_url())
        .lock("faults/s01")
        .ttl(TTL);
    let rounds = scaled(2, 8);
    let late = paused_holder(&mut run, &binaries, &base, scaled(2, 4), rounds).await?;

    let report = run
        .verdict(
            &server.base_url(),
            &live_within(TTL + Duration::from_secs(20)),
            &Scenario::new("1 Redis holder paused past its TTL", "redis"),
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    late.assert_fenced(rounds);
    assert!(report.fenced_writes >= late.fenced, "{report}");
    assert_eq!(report.faults, rounds);
    Ok(())
}
