//! The mutation check: the checker must be able to fail. With fencing
//! switched off in the resource server (`resource-server --unfenced`, test
//! only), scenarios 1, 2 and 14 (Redis, etcd, the SQL backend) run again
//! and the checker has to report the late writes as violations of I-MONO
//! and I-STALE.
//!
//! Scenario 18 (the PostgreSQL store's failover) runs again with the
//! resource server restarted over an empty database instead of the
//! promoted standby: the checker has to report the late write (I-STALE).
//!
//! Scenario 20 (a replica stopped mid fenced reads) runs again with the
//! stopped replica's fenced reads held in transactions across round trips
//! (`resource-server --held-transactions`, today's main before #25): the
//! writes through the other replicas wait for its row, and the scenario's
//! bound on their p99 has to fail.
//!
//! Scenario 7 (a client partitioned from the resource server) belongs to
//! the network binary (`tests/tests/faults_net`), which runs its own
//! unfenced variant with the same server option.

use palisade_testkit::etcd::EtcdServer;
use palisade_testkit::redis::RedisServer;
use palisade_testkit::sql::SqlServer;
use palisade_tests::fault::{
    ClientConfig, FaultRun, Invariant, Report, ResourceServerOptions, ResourceServerProcess,
    Scenario,
};

use crate::TTL;
use crate::s18_postgres_failover::{FailoverTo, primary_lost};
use crate::s20_postgres_paused_replica::paused_replica;
use crate::story::paused_holder;

/// Runs the paused-holder story against an unfenced server and returns the
/// checker's report and how many late writes were accepted.
async fn unfenced_story(
    name: &str,
    scenario: Scenario,
    config: impl FnOnce(&str) -> ClientConfig,
) -> anyhow::Result<(Report, usize)> {
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new(name)?;
    let server =
        ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default().unfenced())?;
    let base = config(&server.base_url()).ttl(TTL);
    let late = paused_holder(&mut run, &binaries, &base, 1, 1).await?;
    assert_eq!(late.fenced, 0, "nothing is fenced with fencing off");
    let report = run
        .verdict(&server.base_url(), &Default::default(), &scenario)
        .await?;
    Ok((report, late.accepted))
}

fn assert_violation_reported(report: &Report, accepted: usize) {
    assert_eq!(accepted, 1, "the late write was accepted");
    assert!(
        report.count(Invariant::Mono) > 0 && report.count(Invariant::Stale) > 0,
        "with fencing off the checker must report the late write: {report}"
    );
    assert!(report.stale_accepted() >= 2, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfenced_redis_story_is_caught_by_the_checker() -> anyhow::Result<()> {
    let redis = RedisServer::start();
    let (report, accepted) = unfenced_story(
        "m01",
        Scenario::new("mutation: 1 with fencing off", "redis").note("mutation check: must be > 0"),
        |server| ClientConfig::redis(&redis.url(), server).lock("faults/m01"),
    )
    .await?;
    assert_violation_reported(&report, accepted);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfenced_etcd_story_is_caught_by_the_checker() -> anyhow::Result<()> {
    let etcd = EtcdServer::start();
    let (report, accepted) = unfenced_story(
        "m02",
        Scenario::new("mutation: 2 with fencing off", "etcd").note("mutation check: must be > 0"),
        |server| ClientConfig::etcd(&etcd.endpoints(), server).lock("faults/m02"),
    )
    .await?;
    assert_violation_reported(&report, accepted);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfenced_sql_story_is_caught_by_the_checker() -> anyhow::Result<()> {
    let postgres = SqlServer::postgres();
    let (report, accepted) = unfenced_story(
        "m14",
        Scenario::new("mutation: 14 with fencing off", "sql (PostgreSQL)")
            .note("mutation check: must be > 0"),
        |server| ClientConfig::sql(&postgres.url(), server).lock("faults/m14"),
    )
    .await?;
    assert_violation_reported(&report, accepted);
    Ok(())
}

/// Scenario 18 with the resource server restarted over an empty database
/// instead of the promoted standby (a standby that had nothing): the
/// paused holder's late write meets no mark, is accepted, and the checker
/// must report it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_to_an_empty_database_is_caught_by_the_checker() -> anyhow::Result<()> {
    let (report, late) = primary_lost(
        "m18",
        Scenario::new(
            "mutation: 18 failing over to an empty database",
            "redis lock, postgres store",
        ),
        FailoverTo::EmptyDatabase,
    )
    .await?;
    assert!(late.accepted >= 1, "the late write met no mark: {late:?}");
    assert!(report.count(Invariant::Stale) > 0, "{report}");
    Ok(())
}

/// Scenario 20 with the stopped replica's fenced reads held in
/// transactions across round trips, and PostgreSQL's idle timeout at its
/// old 30 s: the writes through the others wait for its row and fail at
/// `lock_timeout`, so their p99 exceeds the bound. Safety still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_held_in_transactions_stall_the_other_replicas() -> anyhow::Result<()> {
    let (report, writes) = paused_replica(
        "m20",
        Scenario::new(
            "mutation: 20 with fenced reads held in transactions",
            "sql (PostgreSQL), PostgreSQL engine",
        )
        .note("mutation check: scenario 20's check of the writes must fail"),
        // PostgreSQL's idle timeout as it was (30 s): the stopped
        // replica's row stays held for the whole pause.
        |url| {
            ResourceServerOptions::default()
                .held_transactions()
                .store(format!("{url}?idle_in_transaction_session_timeout=30s"))
        },
    )
    .await?;
    report.assert_safe();
    // Every write waits for the stopped replica's row (until `lock_timeout`
    // refuses it, or the resume frees it): scenario 20's check must fail.
    assert!(
        writes.check().is_err(),
        "the writes through the other replicas were not stalled: {writes:?}"
    );
    Ok(())
}

/// Fencing cannot be switched off by the flag alone: the server also wants
/// `PALISADE_TEST_UNFENCED=1`, and refuses to start without it.
#[test]
fn unfenced_flag_alone_does_not_start_a_server() -> anyhow::Result<()> {
    let binaries = palisade_tests::fault_binaries!();
    let data_dir = tempfile::tempdir()?;
    let output = std::process::Command::new(&binaries.resource_server)
        .arg("--data-dir")
        .arg(data_dir.path())
        .args(["--listen", "127.0.0.1:0", "--unfenced"])
        .env_remove("PALISADE_TEST_UNFENCED")
        .output()?;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("PALISADE_TEST_UNFENCED=1"), "{stderr}");
    assert!(
        output.stdout.is_empty(),
        "it must not have started listening"
    );
    Ok(())
}
