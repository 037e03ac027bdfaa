//! Scenario 5: the etcd leader is killed (`kill -9`) under traffic from
//! several client processes, stays down for a while, and is restarted on
//! its data directory with `--initial-cluster-state existing`.
//!
//! Invariants:
//! - I-TOKEN: every grant's generation (the holder key's create revision,
//!   raft-committed) is above every grant acknowledged before it, across
//!   the leader change: etcd's revisions never go backwards.
//! - I-MONO, I-STALE: the resource server accepts writes in generation
//!   order, whatever the clients believed about their leases during the
//!   election.
//! - I-DUR: every acknowledged write is in the final state.
//! - I-ONCE: a write retried after a timeout is applied once.
//! - I-LIVE: after the restarted member is healthy again, a client acquires
//!   and writes within TTL + election + a wide margin.

use std::time::Duration;

use palisade_testkit::etcd::EtcdCluster;
use palisade_tests::fault::{
    CheckOptions, ClientConfig, ClientProcess, FaultRun, Invariant, ResourceServerOptions,
    ResourceServerProcess, Scenario, scaled,
};

use crate::{wait_for_fresh_hold, wait_for_write};

/// Lease TTL: longer than an election (about 2 s here), so a session can
/// ride one out, and short enough that a lost one frees its lock soon.
const TTL: Duration = Duration::from_secs(3);
/// How long the killed leader stays down: the cluster elects a new leader
/// and the clients work on with two members.
const DOWNTIME: Duration = Duration::from_secs(3);
/// How long the workload goes on after each heal (time is the subject:
/// traffic on the healed cluster, the restarted member catching up).
const TRAFFIC_AFTER_HEAL: Duration = Duration::from_secs(2);
/// Process start-up, a write, a lock freed by an expiring lease: generous
/// for a loaded 2-core machine.
const STEP: Duration = Duration::from_secs(45);
/// I-LIVE: TTL + election (about 2 s) + margin, generous for CI.
const LIVE_BOUND: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_etcd_leader_kill_and_restart_under_traffic() -> anyhow::Result<()> {
    let _serial = crate::serial().await;
    let binaries = palisade_tests::fault_binaries!();
    let mut cluster = EtcdCluster::start();
    let mut run = FaultRun::new("s5-leader-kill")?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let endpoints = cluster.endpoints();
    let n_clients = scaled(3, 6);
    let kills = scaled(1, 3);

    // Every client knows every member, contends for two locks, and retries
    // a write whose outcome is unknown with the same request id.
    let config = ClientConfig::etcd(&endpoints, &server.base_url())
        .lock("s5/a")
        .lock("s5/b")
        .ttl(TTL)
        .writes_per_hold(3)
        .think(Duration::from_millis(30))
        .write_timeout(Duration::from_secs(3))
        .retries(2)
        .acquire_timeout(Duration::from_secs(10))
        .register_every(3);
    let mut clients: Vec<ClientProcess> = (0..n_clients)
        .map(|i| run.spawn_client(&binaries, &format!("c{i}"), &config))
        .collect::<anyhow::Result<_>>()?;
    // Traffic first: every client has written once.
    for client in &mut clients {
        wait_for_write(client, STEP).await?;
    }

    for round in 0..kills {
        let leader =
            tokio::task::block_in_place(|| cluster.wait_for_leader(Duration::from_secs(30)))?;
        let fault = format!("kill -9 etcd leader m{} (round {round})", leader + 1);
        run.inject(&fault)?;
        tokio::task::block_in_place(|| cluster.kill(leader))?;
        // The clients keep going against the two survivors; time is the
        // subject here (how long the member stays dead).
        tokio::time::sleep(DOWNTIME).await;
        tokio::task::block_in_place(|| cluster.restart(leader))?;
        run.heal(&fault)?;
        // Traffic after the heal: some client takes a lock and writes,
        // and the workload goes on for a while on the healed cluster.
        wait_for_fresh_hold(&mut clients, STEP).await?;
        tokio::time::sleep(TRAFFIC_AFTER_HEAL).await;
    }

    for client in &mut clients {
        client.stop_and_wait(STEP).await?;
    }
    let options = CheckOptions {
        live_bound: Some(LIVE_BOUND),
    };
    let report = run
        .verdict(
            &server.base_url(),
            &options,
            &Scenario::new(
                "5 etcd leader kill -9 and restart under traffic",
                "etcd (3 members)",
            ),
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    assert_eq!(report.faults, kills);
    assert!(report.accepted_writes > 0, "{report}");
    assert!(
        report.recovery.is_some(),
        "no write after the heal: {report}"
    );
    Ok(())
}
