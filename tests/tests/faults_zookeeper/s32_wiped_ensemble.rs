//! Scenario 32: ZooKeeper loses its data (its data directory wiped, the
//! server restarted on the same port) while the resource server holds
//! marks for its locks: zxids start over below them.
//!
//! Two clients work on two locks, then exit; ZooKeeper is wiped; two
//! fresh clients (processes that never saw a generation) take over. Their
//! first grants are below the marks: I-TOKEN is violated by design (the
//! regression, named in docs/SAFETY.md) and the checker must say so. The
//! resource server refuses the low generations (409 stale: I-MONO and
//! I-STALE hold), the clients raise the generation floor to the mark the
//! refusal carries (`ZkLockClient::raise_floor`, what `palisade
//! raise-floor` runs), and the locks work again (I-LIVE).

use std::time::Duration;

use palisade_testkit::zookeeper::ZooKeeperServer;
use palisade_tests::fault::{
    ClientConfig, ClientLine, FaultRun, Invariant, ResourceServerOptions, ResourceServerProcess,
    Scenario, scaled, stop_clients,
};

use crate::{STEP, serial};

const TTL: Duration = Duration::from_secs(2);
/// I-LIVE: a restarted JVM, a refusal, a raised floor, a new grant.
const LIVE_BOUND: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s32_wiped_zookeeper_regresses_is_fenced_and_a_raised_floor_recovers() -> anyhow::Result<()>
{
    let _serial = serial().await;
    let binaries = palisade_tests::fault_binaries!();
    let mut zookeeper = tokio::task::block_in_place(ZooKeeperServer::spawn);
    let mut run = FaultRun::new("s32-zk-wiped")?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let base = ClientConfig::zookeeper(&zookeeper.connect_string(), &server.base_url())
        .lock("faults/s32/x")
        .lock("faults/s32/y")
        .ttl(TTL)
        .raise_floor_on_stale();

    // Before: generations climb and the marks follow them.
    let mut before = Vec::new();
    for id in ["a", "b"] {
        before.push(run.spawn_client(&binaries, id, &base.clone().rounds(scaled(6, 30)))?);
    }
    for client in &mut before {
        let status = client.wait_exit(STEP).await?;
        anyhow::ensure!(status.success(), "{} exited with {status}", client.id());
    }

    let fault = "ZooKeeper data directory wiped, server restarted";
    run.inject(fault)?;
    tokio::task::block_in_place(|| zookeeper.wipe())?;
    run.heal(fault)?;

    // After: fresh processes, which never saw a generation of these locks.
    let mut after = Vec::new();
    for id in ["c", "d"] {
        after.push(run.spawn_client(&binaries, id, &base)?);
    }
    run.wait_any(STEP, |_, line| {
        matches!(line, ClientLine::Raised { .. }).then_some(())
    })
    .await?;
    run.wait_recovered(STEP).await?;
    stop_clients(after.iter_mut(), STEP).await?;

    let scenario = Scenario::new("32 ZooKeeper wiped and restarted", "zookeeper").note(
        "by design: zxids started over; low generations refused, floor raised from the 409 mark",
    );
    let report = run
        .verdict(
            &server.base_url(),
            &palisade_tests::fault::CheckOptions {
                live_bound: Some(LIVE_BOUND),
            },
            &scenario,
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Live]);
    assert!(
        report.count(Invariant::Token) > 0,
        "zxids started over after the wipe: I-TOKEN must be reported violated ({report})"
    );
    assert!(
        report.fenced_writes > 0,
        "the regressed generations must have been refused ({report})"
    );
    Ok(())
}
