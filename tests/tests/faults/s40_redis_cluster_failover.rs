//! Scenario 40: on a Redis Cluster with a replica per master, the master
//! of a lock's slot is killed (SIGKILL) under contending holders and a
//! paused writer, and its replica is promoted without the last grants.
//!
//! Two contenders work on the lock while the replica copies everything.
//! Then the replica is stopped (SIGSTOP) and the master drops its link
//! (`CLIENT KILL TYPE replica`), so what the master grants next exists on
//! the master only: the contenders' next three grants, then holder `a`'s,
//! who has its write in hand and is stopped too, as are the contenders.
//! The master dies, the replica resumes and is elected in its place,
//! without `a`'s lock entry and without the counter increments since it
//! stopped (asserted): `a` still believes it holds (its lease is 30 s),
//! and a new client `d` is granted the same lock by the new master and
//! writes. Then `a` resumes and its write goes out, late; the contenders
//! resume with their holds and queue entries gone with the old master,
//! wait again and carry on.
//!
//! With the default server-clock generations the new master's grants are
//! above `a`'s (the clock went on while the counter fell behind): I-TOKEN
//! holds, `a`'s late write is refused as stale, and I-MONO, I-STALE,
//! I-DUR, I-ONCE and I-LIVE (within TTL + 30 s of the promotion) hold.
//! The mutation row runs counter generations, which `RedisConfig` refuses
//! on a cluster: the new master hands out generations already granted,
//! and the checker must report it (I-TOKEN).

use std::time::Duration;

use palisade::LockName;
use palisade::redis::{LockKeys, RedisConfig};
use palisade_testkit::redis::RedisCluster;
use palisade_tests::fault::{
    ClientConfig, ClientLine, ClientProcess, FaultRun, Invariant, Report, ResourceServerOptions,
    ResourceServerProcess, Scenario, stop_clients,
};

use crate::story::{LateWrites, late_write};
use crate::{EXIT, STEP, TTL, live_within};

/// How long the cluster may take to promote the replica: its failure
/// detection (2 s node timeout) and election, on a loaded machine.
const PROMOTION: Duration = Duration::from_secs(60);

/// `a`'s lease: well beyond the promotion, so `a` still holds (in its own
/// view) when `d` is granted the lock by the new master.
const A_TTL: Duration = Duration::from_secs(30);

/// Contenders' grants the master makes after the replica's link is cut,
/// before `a`'s.
const MISSED_GRANTS: usize = 3;

struct Failover {
    report: Report,
    late: LateWrites,
    /// `a`'s generation, and the first generation written after the
    /// promotion.
    held: u64,
    newer: u64,
}

async fn master_killed_under_contention(tag: &str, counter: bool) -> anyhow::Result<Failover> {
    let binaries = palisade_tests::fault_binaries!();
    let mut cluster = tokio::task::block_in_place(RedisCluster::start_with_replicas);
    let mut run = FaultRun::new(tag)?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let lock = format!("faults/{tag}");
    let key = LockKeys::new(RedisConfig::DEFAULT_KEY_PREFIX, &LockName::new(&lock)?)
        .lock()
        .to_owned();
    let master = cluster.master_of_slot(cluster.keyslot(&key));
    let replica = cluster.replica_of(master);
    let mut base = ClientConfig::redis_cluster(cluster.urls(), &server.base_url())
        .lock(lock)
        .ttl(TTL);
    if counter {
        // Refused generations would otherwise stop the lock for good.
        base = base.counter_scheme().raise_floor_on_stale();
    }

    // Contenders work while the replica copies every grant.
    let mut others: Vec<ClientProcess> = Vec::new();
    for index in 0..2 {
        let config = base.clone().writes_per_hold(3);
        others.push(run.spawn_client(&binaries, &format!("c{index}"), &config)?);
    }
    let mut writes = 0;
    run.wait_any(STEP, |_, line| {
        writes += usize::from(matches!(line, ClientLine::Wrote { .. }));
        (writes >= 3).then_some(())
    })
    .await?;

    // From here the master's grants are its own; `a` is one of them.
    let fault = "SIGSTOP the replica, cut its link; a granted and SIGSTOPped with its write; SIGKILL the master; SIGCONT the replica, promoted";
    run.inject(fault)?;
    cluster.pause(replica)?;
    // And its link is cut: what the master sent before is still in the
    // socket for the replica to read when it resumes, nothing after.
    cluster.command(master, &["CLIENT", "KILL", "TYPE", "replica"])?;
    // The contenders take the lock a few more times on the master alone,
    // so the replica misses several increments, not only `a`'s.
    run.drain_feed();
    let mut grants = 0;
    run.wait_any(STEP, |_, line| {
        grants += usize::from(matches!(line, ClientLine::Granted { .. }));
        (grants >= MISSED_GRANTS).then_some(())
    })
    .await?;
    // `a`'s lease outlasts the failover: when the new master grants the
    // lock, two holders believe they hold it.
    let a_config = base.clone().gate().writes_per_hold(2).ttl(A_TTL);
    let mut a = run.spawn_client(&binaries, "a", &a_config)?;
    let held = a.wait_holding(STEP).await?;
    a.pause()?;
    // The contenders stop too, wherever they are (holding, waiting): the
    // first grant of the new master goes to a client that asks after the
    // failover, `d`. In the mutation row that grant repeats a generation
    // the old master had already handed out, which the checker counts
    // only for an acquire sent after that earlier grant completed (a
    // contender's acquire pending across the failover overlaps it).
    for other in &others {
        other.pause()?;
    }
    // `a`'s entry (its random token, its generation): what the promoted
    // replica must not have. A contender's grant by the new master makes
    // a different one.
    let a_entry = cluster.command(master, &["GET", &key])?;
    cluster.kill(master)?;
    cluster.resume(replica)?;
    let took = tokio::task::block_in_place(|| cluster.wait_for_promotion(replica, PROMOTION));
    eprintln!("[{tag}] replica promoted {took:?} after the master died");
    anyhow::ensure!(
        cluster.command(replica, &["GET", &key])? != a_entry,
        "the promoted replica has a's lock entry {a_entry:?}: the failover lost nothing"
    );
    anyhow::ensure!(took < A_TTL / 2, "promoted within a's lease");

    // A new client is granted the lock by the new master and writes.
    run.drain_feed();
    let d = run.spawn_client(&binaries, "d", &base.clone().writes_per_hold(3))?;
    let newer = run
        .wait_any(STEP, |client, line| match line {
            ClientLine::Wrote { generation, .. } if client == "d" => Some(*generation),
            _ => None,
        })
        .await?;
    a.resume()?;
    let mut late = LateWrites::default();
    late_write(&mut a, held, newer, &mut late).await?;
    // The contenders wake with their holds and queue entries gone with the
    // old master: they wait again and carry on.
    for other in &others {
        other.resume()?;
    }
    run.heal(fault)?;

    a.stop_and_wait(EXIT).await?;
    run.wait_recovered(STEP).await?;
    others.push(d);
    stop_clients(others.iter_mut(), EXIT).await?;

    let scheme = if counter { "counter" } else { "server-clock" };
    let scenario = Scenario::new(
        "40 Redis Cluster master killed, replica promoted without the last grants",
        format!("redis cluster ({scheme})"),
    );
    let scenario = if counter {
        scenario.note("mutation: counter generations on a cluster, refused outside tests")
    } else {
        scenario
    };
    let report = run
        .verdict(&server.base_url(), &live_within(TTL + PROMOTION), &scenario)
        .await?;
    Ok(Failover {
        report,
        late,
        held,
        newer,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_master_killed_replica_promoted_is_fenced() -> anyhow::Result<()> {
    let failover = master_killed_under_contention("s40", false).await?;
    let report = &failover.report;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    failover.late.assert_fenced(1);
    assert!(
        failover.newer > failover.held,
        "the new master's grant {} is above a's {}",
        failover.newer,
        failover.held
    );
    Ok(())
}

/// The mutation row: counter generations on the same failover. The new
/// master's counter missed the last increments and grants generations
/// again that the old master had already granted; the checker says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_failover_with_counter_generations_is_caught_by_the_checker()
-> anyhow::Result<()> {
    let failover = master_killed_under_contention("m40", true).await?;
    let report = &failover.report;
    assert!(
        report.count(Invariant::Token) > 0,
        "the promoted replica's counter was behind: I-TOKEN must be reported violated ({report})"
    );
    assert!(
        failover.newer <= failover.held,
        "the new master granted {} again at or below a's {}",
        failover.newer,
        failover.held
    );
    Ok(())
}
