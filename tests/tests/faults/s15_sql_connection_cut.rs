//! Scenario 15: a SQL backend (PostgreSQL) holder's connection to the
//! database is cut by a fault proxy while it holds the lock with a write in
//! hand. Its keep-alive cannot reach the database, so its lease lapses and
//! the guard signals it; the database's clock ends its session row and a
//! contender (connected directly) is granted a newer generation and
//! writes. The cut holder's write then goes out, late, to the resource
//! server (which it still reaches). The cut heals and the holder is granted
//! the lock again and writes.
//!
//! Invariants asserted: I-MONO and I-STALE (every late write refused as
//! stale), I-DUR, I-ONCE, I-TOKEN, I-LIVE (after the last heal a client
//! acquires and writes within TTL + 20 s); and in every round the lost
//! lease is signalled before the late write and the cut holder recovers.

use std::time::Duration;

use palisade_testkit::proxy::FaultProxy;
use palisade_testkit::sql::SqlServer;
use palisade_tests::fault::net::loopback;
use palisade_tests::fault::{
    ClientConfig, ClientLine, FaultRun, Invariant, ResourceServerOptions, ResourceServerProcess,
    Scenario, scaled, stop_clients,
};

use crate::{EXIT, STEP, TTL, live_within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_holder_cut_from_its_database_is_fenced_and_recovers() -> anyhow::Result<()> {
    let postgres = SqlServer::postgres();
    let proxy = FaultProxy::start("holder a to PostgreSQL", loopback(postgres.port()))?;
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new("s15")?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let base = ClientConfig::sql(&postgres.url(), &server.base_url())
        .lock("faults/s15")
        .ttl(TTL);
    let via_proxy = format!("postgres://postgres@{}/postgres", proxy.address());
    let holder_config = ClientConfig {
        endpoints: via_proxy,
        ..base.clone()
    }
    .gate()
    .writes_per_hold(2);
    let mut holder = run.spawn_client(&binaries, "a", &holder_config)?;
    let mut others = Vec::new();
    for index in 0..2 {
        let id = format!("c{index}");
        others.push(run.spawn_client(&binaries, &id, &base.clone().writes_per_hold(3))?);
    }

    let rounds = scaled(2, 6);
    for round in 1..=rounds {
        let held = holder.wait_holding(STEP).await?;
        let fault = format!("round {round}: cut holder a from PostgreSQL (generation {held})");
        proxy.partition();
        run.inject(&fault)?;

        // The lease lapses and the guard says so.
        holder
            .wait_for(STEP, |line| match line {
                ClientLine::Lost { generation, .. } if *generation == held => Some(()),
                _ => None,
            })
            .await?;
        // The database ends a's session; a contender takes over and writes.
        let newer = run
            .wait_any(STEP, |client, line| match line {
                ClientLine::Wrote { generation, .. } if client != "a" && *generation > held => {
                    Some(*generation)
                }
                _ => None,
            })
            .await?;

        // a's write, late: fenced.
        holder.go()?;
        let late = holder
            .wait_for(STEP, |line| match line {
                ClientLine::Refused { generation, .. }
                | ClientLine::Wrote { generation, .. }
                | ClientLine::GaveUp { generation, .. }
                    if *generation == held =>
                {
                    Some(line.clone())
                }
                _ => None,
            })
            .await?;
        assert!(
            matches!(&late, ClientLine::Refused { detail, .. } if detail == "stale"),
            "the cut holder's late write (generation {held}, after {newer}) must be fenced: {late:?}"
        );

        // The cut heals: a is granted the lock again, above the takeover.
        proxy.pass();
        run.heal(&fault)?;
        let (regranted, _) = holder.wait_granted(STEP).await?;
        assert!(regranted > newer, "regranted {regranted} after {newer}");
    }

    holder.stop_and_wait(EXIT).await?;
    run.wait_recovered(STEP).await?;
    stop_clients(others.iter_mut(), EXIT).await?;

    let report = run
        .verdict(
            &server.base_url(),
            &live_within(TTL + Duration::from_secs(20)),
            &Scenario::new("15 SQL holder cut from its database", "sql (PostgreSQL)"),
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    assert_eq!(report.faults, rounds);
    assert!(report.fenced_writes >= rounds, "{report}");
    Ok(())
}
