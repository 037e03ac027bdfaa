//! Scenario 30: contending holders on one lock, whose directory was
//! deleted and created again (its sequence numbers started over), then the
//! ensemble's leader is killed (`kill -9`) and restarted under traffic.
//!
//! Invariants: I-TOKEN (a lock node's creation zxid grows across the
//! re-created directory and the new leader's epoch), I-MONO, I-STALE,
//! I-DUR, I-ONCE, and I-LIVE after the restarted member serves again: the
//! waiters carry on. The mutation row plays the same run with generations
//! from the sequence suffix, which starts over with the directory.

use std::time::Duration;

use palisade_testkit::zookeeper::ZooKeeperEnsemble;
use palisade_tests::fault::{
    CheckOptions, ClientConfig, ClientLine, ClientProcess, FaultRun, Invariant, Report,
    ResourceServerOptions, ResourceServerProcess, Scenario, scaled,
};

use crate::{STEP, serial, wait_directory_gone};

/// Session timeout: longer than an election here (a few seconds), so a
/// session can ride one out.
const TTL: Duration = Duration::from_secs(4);
/// How long the killed leader stays down (time is the subject).
const DOWNTIME: Duration = Duration::from_secs(2);
/// I-LIVE: TTL + election + a wide margin.
const LIVE_BOUND: Duration = Duration::from_secs(25);
const LOCK: &str = "faults/s30";

/// Runs the scenario; `mutation` is the backend's test-only flaw, if any.
pub(crate) async fn leader_killed(
    name: &str,
    scenario: Scenario,
    mutation: Option<&'static str>,
) -> anyhow::Result<Report> {
    let _serial = serial().await;
    let binaries = palisade_tests::fault_binaries!();
    let mut ensemble = tokio::task::block_in_place(ZooKeeperEnsemble::start);
    let connect = ensemble.connect_string();
    let mut run = FaultRun::new(name)?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let mut config = ClientConfig::zookeeper(&connect, &server.base_url())
        .lock(LOCK)
        .ttl(TTL)
        .writes_per_hold(3)
        .think(Duration::from_millis(30))
        .write_timeout(Duration::from_secs(3))
        .acquire_timeout(Duration::from_secs(15))
        .register_every(3);
    if let Some(mutation) = mutation {
        config = config.zk_mutation(mutation);
    }

    // A first holder marks the lock, then the directory empties and
    // ZooKeeper reaps it: the next contender creates it again.
    let mut first = run.spawn_client(&binaries, "a0", &config.clone().rounds(3))?;
    let status = first.wait_exit(STEP).await?;
    anyhow::ensure!(status.success(), "a0 exited with {status}");
    wait_directory_gone(&connect, LOCK, STEP).await?;

    // Contending holders: each waits on its predecessor.
    let mut clients: Vec<ClientProcess> = (0..scaled(3, 5))
        .map(|i| run.spawn_client(&binaries, &format!("c{i}"), &config))
        .collect::<anyhow::Result<_>>()?;
    run.wait_any(STEP, |_, line| {
        matches!(line, ClientLine::Wrote { .. } | ClientLine::Refused { .. }).then_some(())
    })
    .await?;

    for round in 0..scaled(1, 3) {
        let leader = tokio::task::block_in_place(|| ensemble.wait_for_leader(STEP))?;
        let fault = format!("kill -9 ZooKeeper leader {} (round {round})", leader + 1);
        run.inject(&fault)?;
        tokio::task::block_in_place(|| ensemble.kill(leader))?;
        tokio::time::sleep(DOWNTIME).await;
        tokio::task::block_in_place(|| ensemble.restart(leader))?;
        run.heal(&fault)?;
        run.wait_recovered(STEP).await?;
    }
    // Every contender got a turn in the run: the waiters carried on.
    for client in &mut clients {
        client.wait_wrote(STEP).await?;
    }
    for client in &mut clients {
        client.stop_and_wait(STEP).await?;
    }
    let options = CheckOptions {
        live_bound: Some(LIVE_BOUND),
    };
    let report = run.verdict(&server.base_url(), &options, &scenario).await?;
    report.assert_safe();
    Ok(report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s30_zookeeper_leader_killed_under_contending_holders() -> anyhow::Result<()> {
    let report = leader_killed(
        "s30-zk-leader-kill",
        Scenario::new(
            "30 ZooKeeper directory re-created, leader kill -9 under contending holders",
            "zookeeper (3 members)",
        ),
        None,
    )
    .await?;
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    assert!(report.accepted_writes > 0, "{report}");
    Ok(())
}
