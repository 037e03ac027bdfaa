//! Scenario 17: three resource servers over one 3-member etcd cluster
//! (`--store etcd://...`), the clients' writes spread over them; the lock
//! service is the same cluster (locks and store under separate prefixes).
//! An etcd lock holder writing through replica 0 is stopped (SIGSTOP) past
//! its lease with a write in hand; a contender is granted a newer
//! generation and writes through another replica; the holder resumes and
//! sends its late write to replica 0. Then one replica is killed (SIGKILL)
//! while clients write through it, and restarted.
//!
//! Invariants asserted: I-MONO and I-STALE (every late write refused by
//! whichever replica gets it: the marks live in etcd, not in a replica),
//! I-DUR (nothing acknowledged by any replica is lost, the killed one
//! included), I-ONCE, I-TOKEN, I-LIVE. The final state is read through a
//! replica the holder never wrote to.

use std::time::Duration;

use palisade_testkit::etcd::EtcdCluster;
use palisade_tests::fault::{
    ClientConfig, ClientLine, FaultRun, Invariant, ResourceServerOptions, ResourceServerProcess,
    Scenario, scaled,
};

use crate::story::paused_holder_over;
use crate::{STEP, TTL, live_within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_replicas_fence_a_paused_holder_and_lose_nothing() -> anyhow::Result<()> {
    let tag = "s17";
    let cluster = tokio::task::spawn_blocking(EtcdCluster::start).await?;
    let hosts: Vec<String> = cluster
        .endpoints()
        .iter()
        .map(|endpoint| endpoint.trim_start_matches("http://").to_owned())
        .collect();
    let store = format!(
        "etcd://{}/palisade-faults/{tag}-{}",
        hosts.join(","),
        std::process::id()
    );
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new(tag)?;
    let mut replicas = Vec::new();
    for index in 0..3 {
        let dir = run.dir().join(format!("replica-{index}"));
        std::fs::create_dir_all(&dir)?;
        replicas.push(ResourceServerProcess::start_at(
            &binaries.resource_server,
            &dir,
            ResourceServerOptions::default().store(store.clone()),
        )?);
    }
    let urls: Vec<String> = replicas.iter().map(|r| r.base_url()).collect();
    let base = ClientConfig::etcd(&cluster.endpoints(), &urls[0])
        .lock(format!("faults/{tag}"))
        .ttl(TTL);

    // The paused holder's late write goes through replica 0, the newer
    // holder's writes through replica 1 or 2.
    let rounds = scaled(2, 6);
    let late = paused_holder_over(&mut run, &binaries, &base, 2, rounds, &urls).await?;

    // A second wave writing through every replica, one of which dies.
    let kill = "SIGKILL replica 2 while clients write through it, restart";
    let wave = base.clone().writes_per_hold(4);
    let mut writers = Vec::new();
    for (index, url) in urls.iter().enumerate() {
        let mut config = wave.clone();
        config.server = url.clone();
        writers.push(run.spawn_client(&binaries, &format!("w{index}"), &config)?);
    }
    // Someone wrote through replica 2 (client w2) before it dies.
    run.wait_any(STEP, |client, line| {
        (client == "w2" && matches!(line, ClientLine::Wrote { .. })).then_some(())
    })
    .await?;
    run.inject(kill)?;
    replicas[2].kill()?;
    // The others go on writing through replicas 0 and 1.
    run.wait_any(STEP, |client, line| {
        (client != "w2" && matches!(line, ClientLine::Wrote { .. })).then_some(())
    })
    .await?;
    replicas[2].restart()?;
    run.heal(kill)?;
    run.wait_recovered(STEP).await?;
    palisade_tests::fault::stop_clients(writers.iter_mut(), crate::EXIT).await?;

    let report = run
        .verdict(
            &urls[1],
            &live_within(TTL + Duration::from_secs(20)),
            &Scenario::new(
                "17 three replicas over one etcd cluster: paused holder, replica kill -9",
                "etcd (3 members), etcd engine",
            ),
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    late.assert_fenced(rounds);
    assert!(report.fenced_writes >= late.fenced, "{report}");
    assert_eq!(report.faults, rounds + 1);
    Ok(())
}
