//! Scenario 2: an etcd lock holder's process is stopped (SIGSTOP) past its
//! lease with a write in hand: its keep-alive stops with it, etcd expires
//! the lease and deletes its key, a contender's key becomes the oldest and
//! it writes; the holder resumes and sends its write.
//!
//! Invariants asserted: I-MONO and I-STALE (every late write refused),
//! I-DUR, I-ONCE, I-TOKEN (create-revisions only grow), I-LIVE (after the
//! last resume a client acquires and writes within TTL + 20 s).

use std::time::Duration;

use palisade_testkit::etcd::EtcdServer;
use palisade_tests::fault::{
    ClientConfig, FaultRun, Invariant, ResourceServerOptions, ResourceServerProcess, Scenario,
    scaled,
};

use crate::story::paused_holder;
use crate::{TTL, live_within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_holder_paused_past_its_lease_is_fenced() -> anyhow::Result<()> {
    let Some(etcd) = EtcdServer::start() else {
        return Ok(());
    };
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new("s02")?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let base = ClientConfig::etcd(&etcd.endpoints(), &server.base_url())
        .lock("faults/s02")
        .ttl(TTL);
    let rounds = scaled(2, 8);
    let late = paused_holder(&mut run, &binaries, &base, scaled(2, 4), rounds).await?;

    let report = run
        .verdict(
            &server.base_url(),
            &live_within(TTL + Duration::from_secs(20)),
            &Scenario::new("2 etcd holder paused past its lease", "etcd"),
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    late.assert_fenced(rounds);
    assert!(report.fenced_writes >= late.fenced, "{report}");
    assert_eq!(report.faults, rounds);
    Ok(())
}
