//! Scenario 13: the SQL backend's database (PostgreSQL, and MariaDB) is
//! killed (SIGKILL) under contending holders and restarted on the same data
//! directory, each time while a hold is in progress.
//!
//! The database stays down until a holder reports its lease lost (its
//! keep-alive cannot renew, so the lease lapses by itself: an event, not a
//! timed outage). Acquires meanwhile fail or end unknown, releases fail,
//! and everyone carries on once the database is back; the grants committed
//! before the kill are durable (fsync and synchronous commit on PostgreSQL,
//! `innodb_flush_log_at_trx_commit=1` on MariaDB), so the generation column
//! never goes back.
//!
//! Invariants asserted: I-TOKEN (no generation issued twice or below an
//! earlier one), I-MONO, I-STALE, I-DUR, I-ONCE, I-LIVE (a grant and a
//! write within TTL + 30 s of the last restart), and that every outage
//! signalled a lost lease.

use std::time::Duration;

use palisade_testkit::sql::SqlServer;
use palisade_tests::fault::{
    ClientConfig, ClientLine, FaultRun, Invariant, ResourceServerOptions, ResourceServerProcess,
    Scenario, scaled, stop_clients,
};

use crate::{EXIT, STEP, TTL, live_within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_kill_9_under_contention_keeps_generations_and_writes() -> anyhow::Result<()> {
    database_restarts(
        "s13pg",
        SqlServer::postgres(),
        Scenario::new(
            "13 SQL database kill -9 under contention",
            "sql (PostgreSQL)",
        ),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_kill_9_under_contention_keeps_generations_and_writes() -> anyhow::Result<()> {
    database_restarts(
        "s13maria",
        SqlServer::mariadb(),
        Scenario::new("13 SQL database kill -9 under contention", "sql (MariaDB)"),
    )
    .await
}

async fn database_restarts(
    tag: &str,
    mut database: SqlServer,
    scenario: Scenario,
) -> anyhow::Result<()> {
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new(tag)?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    // Long holds (15 writes, 150 ms apart) so a kill always lands in one,
    // and its lease lapses while it still has writes to make.
    let base = ClientConfig::sql(&database.url(), &server.base_url())
        .lock(format!("faults/{tag}/x"))
        .lock(format!("faults/{tag}/y"))
        .ttl(TTL)
        .writes_per_hold(15)
        .think(Duration::from_millis(150))
        .register_every(4);
    let mut clients = Vec::new();
    for index in 0..scaled(3, 6) {
        clients.push(run.spawn_client(&binaries, &format!("c{index}"), &base)?);
    }

    let kills = scaled(2, 5);
    let mut lost_signalled = 0;
    let mut longest_outage = Duration::ZERO;
    for kill in 1..=kills {
        // A hold is in progress: a grant, and a write under it.
        let (holder, generation) = run.wait_recovered(STEP).await?;
        let fault =
            format!("kill {kill}: SIGKILL the database ({holder} holds {generation}), restart");
        run.inject(&fault)?;
        let killed_at = std::time::Instant::now();
        database.kill()?;
        // Down until a holder's lease lapses and it says so.
        run.wait_any(STEP, |_, line| {
            matches!(line, ClientLine::Lost { .. }).then_some(())
        })
        .await?;
        lost_signalled += 1;
        database.restart()?;
        longest_outage = longest_outage.max(killed_at.elapsed());
        run.heal(&fault)?;
        run.wait_recovered(STEP).await?;
    }
    stop_clients(clients.iter_mut(), EXIT).await?;

    let report = run
        .verdict(
            &server.base_url(),
            &live_within(TTL + Duration::from_secs(30)),
            &scenario.note(format!(
                "{lost_signalled} lost leases signalled; database down up to {:.1} s per kill",
                longest_outage.as_secs_f64()
            )),
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    assert_eq!(report.faults, kills);
    assert_eq!(lost_signalled, kills);
    assert!(report.grants > kills, "{report}");
    Ok(())
}
