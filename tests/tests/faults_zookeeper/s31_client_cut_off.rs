//! Scenario 31: a holder is cut off from ZooKeeper by the fault proxy for
//! longer than its session timeout, while it keeps writing to the resource
//! server (that path stays open) and a second client waits for the lock.
//!
//! The holder's lease is counted from the last request ZooKeeper answered,
//! so it must say `LOST` before the waiter is granted the lock (which
//! happens only once the server expired the holder's session), and stop
//! writing: none of its writes reaches the server after the new holder's,
//! so nothing of it is even fenced. Invariants: I-MONO, I-STALE, I-DUR,
//! I-ONCE, I-TOKEN, and I-LIVE after the heal. The mutation row counts the
//! lease from the disconnect notice instead, with fencing off: the holder
//! writes on after the new grant, until its stretched lease lapses (the
//! cut lasts that long), and the checker reports it.

use std::net::SocketAddr;
use std::time::Duration;

use palisade_testkit::proxy::FaultProxy;
use palisade_testkit::zookeeper::ZooKeeperServer;
use palisade_tests::fault::{
    CheckOptions, ClientConfig, ClientLine, FaultRun, Invariant, Report, ResourceServerOptions,
    ResourceServerProcess, Scenario,
};

use crate::{STEP, serial};

/// Session timeout. The client library notices a silent connection after
/// 0.4 of it; the holder's lease ends at 0.75 of it after the last answer
/// (the safety margin is a quarter), ZooKeeper expires the session at 1.0
/// (rounded up to its 500 ms tick), and the mutation's lease at 1.4: five
/// seconds keeps each pair more than a second apart.
const TTL: Duration = Duration::from_secs(5);
/// I-LIVE: TTL + expiry on the next tick + a wide margin.
const LIVE_BOUND: Duration = Duration::from_secs(20);
const LOCK: &str = "faults/s31";

/// What the run showed: the report, and whether the cut-off holder said
/// `LOST` before the waiter's grant.
pub(crate) struct CutOff {
    pub report: Report,
    pub lost_before_grant: bool,
}

/// Runs the scenario; `mutation` is the backend's test-only flaw, played
/// against a resource server with fencing off.
pub(crate) async fn holder_cut_off(
    name: &str,
    scenario: Scenario,
    mutation: Option<&'static str>,
) -> anyhow::Result<CutOff> {
    let _serial = serial().await;
    let binaries = palisade_tests::fault_binaries!();
    let zookeeper = tokio::task::block_in_place(ZooKeeperServer::spawn);
    let upstream: SocketAddr = zookeeper
        .client_addr()
        .ok_or_else(|| anyhow::anyhow!("a spawned server has an address"))?;
    let proxy = FaultProxy::start("s31 a to zookeeper", upstream)?;
    let mut run = FaultRun::new(name)?;
    let options = match mutation {
        Some(_) => ResourceServerOptions::default().unfenced(),
        None => ResourceServerOptions::default(),
    };
    let server = ResourceServerProcess::start(&binaries, &run, options)?;
    // The holder writes on and on (one hold), checking its lease before
    // every write.
    let holder = ClientConfig::zookeeper(&proxy.address().to_string(), &server.base_url())
        .lock(LOCK)
        .ttl(TTL)
        .writes_per_hold(100_000)
        .think(Duration::from_millis(50));
    let holder = match mutation {
        Some(mutation) => holder.zk_mutation(mutation),
        None => holder,
    };
    let waiter = ClientConfig::zookeeper(&zookeeper.connect_string(), &server.base_url())
        .lock(LOCK)
        .ttl(TTL)
        .acquire_timeout(STEP);

    let mut a = run.spawn_client(&binaries, "a", &holder)?;
    a.wait_wrote(STEP).await?;
    let mut b = run.spawn_client(&binaries, "b", &waiter)?;
    b.wait_for(STEP, |line| matches!(line, ClientLine::Ready).then_some(()))
        .await?;

    let fault = "fault proxy cuts a from ZooKeeper past its session timeout";
    run.drain_feed();
    run.inject(fault)?;
    proxy.partition();
    // Which comes first on the run's stream: the holder's lease lost, or
    // the waiter's grant (ZooKeeper expired the holder's session)?
    let lost_before_grant = run
        .wait_any(STEP, |client, line| match (client, line) {
            ("a", ClientLine::Lost { .. }) => Some(true),
            ("b", ClientLine::Granted { .. }) => Some(false),
            _ => None,
        })
        .await?;
    // The cut heals once the new holder has written and the cut-off
    // holder has said `LOST`. Not sooner: the holder learns of its
    // session's expiry the moment it reaches ZooKeeper again (its
    // reconnect, held by the proxy, is answered on the heal), which would
    // end the mutation's stretched lease within milliseconds of the new
    // grant and leave the row to chance.
    let (mut lost, mut wrote) = (lost_before_grant, false);
    run.wait_any(STEP, |client, line| {
        match (client, line) {
            ("a", ClientLine::Lost { .. }) => lost = true,
            ("b", ClientLine::Wrote { .. }) => wrote = true,
            _ => {}
        }
        (lost && wrote).then_some(())
    })
    .await?;
    proxy.pass();
    run.heal(fault)?;
    run.wait_recovered(STEP).await?;
    for client in [&mut a, &mut b] {
        client.stop_and_wait(STEP).await?;
    }
    let options = CheckOptions {
        live_bound: Some(LIVE_BOUND),
    };
    let report = run.verdict(&server.base_url(), &options, &scenario).await?;
    Ok(CutOff {
        report,
        lost_before_grant,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s31_zookeeper_holder_cut_off_stops_before_its_session_expires() -> anyhow::Result<()> {
    let outcome = holder_cut_off(
        "s31-zk-cut-off",
        Scenario::new(
            "31 ZooKeeper holder cut off past its session timeout",
            "zookeeper",
        )
        .note("lease lost before the new grant; the holder stopped writing"),
        None,
    )
    .await?;
    let report = &outcome.report;
    assert!(
        outcome.lost_before_grant,
        "the holder must say its lease is lost before ZooKeeper expires its session: {report}"
    );
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    assert_eq!(
        report.fenced_writes, 0,
        "the holder stopped writing before the new holder existed: {report}"
    );
    Ok(())
}
