//! Scenario 42: on a Redis Cluster with a replica per master, the slot of
//! a contended lock is moved to another master and back (`CLUSTER SETSLOT
//! ... MIGRATING/IMPORTING`, `MIGRATE` of each key, `SETSLOT ... NODE`)
//! while three clients hold and wait for it and write under it.
//!
//! Each move first migrates the lock's generation key alone and waits
//! 300 ms: while the lock is split between two masters its scripts are
//! answered `TRYAGAIN` (asserted from the source's error counts), then
//! `ASK`; the backend sends them again within its bound. The queue moves
//! with the lock, and so do the waiters' shard channels. What the user of
//! the lock must see: nothing but time. Every acquire is granted (none
//! fails or times out), every write gets its answer, and the checker's
//! invariants hold (I-MONO, I-STALE, I-DUR, I-ONCE, I-TOKEN, I-LIVE); every
//! client writes again after the second move (no wake-up lost).

use std::collections::HashSet;
use std::time::Duration;

use palisade::LockName;
use palisade::redis::{LockKeys, RedisConfig};
use palisade_testkit::redis::RedisCluster;
use palisade_tests::fault::{
    ClientConfig, ClientLine, ClientProcess, FaultRun, Invariant, ResourceServerOptions,
    ResourceServerProcess, Scenario, stop_clients,
};
use palisade_tests::history::{OpKind, Phase};

use crate::{EXIT, STEP, TTL, live_within};

/// How long the slot stays split (marked migrating, keys not yet moved):
/// the window in which the clients' scripts are told to try again.
const SPLIT: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_slot_moved_under_contention_costs_only_time() -> anyhow::Result<()> {
    let binaries = palisade_tests::fault_binaries!();
    let cluster = tokio::task::block_in_place(RedisCluster::start_with_replicas);
    let mut run = FaultRun::new("s42")?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let lock = "faults/s42";
    let keys = LockKeys::new(RedisConfig::DEFAULT_KEY_PREFIX, &LockName::new(lock)?);
    let slot = cluster.keyslot(keys.lock());
    let generation_key = keys.generation().to_owned();
    let base = ClientConfig::redis_cluster(cluster.urls(), &server.base_url())
        .lock(lock)
        .ttl(TTL)
        .writes_per_hold(3);
    let mut clients: Vec<ClientProcess> = Vec::new();
    for index in 0..3 {
        clients.push(run.spawn_client(&binaries, &format!("c{index}"), &base)?);
    }
    let mut writes = 0;
    run.wait_any(STEP, |_, line| {
        writes += usize::from(matches!(line, ClientLine::Wrote { .. }));
        (writes >= 6).then_some(())
    })
    .await?;

    let fault = "the lock's slot moved to another master and back, held and waited on";
    run.inject(fault)?;
    let home = cluster.master_of_slot(slot);
    let away = cluster
        .masters()
        .into_iter()
        .find(|&master| master != home)
        .ok_or_else(|| anyhow::anyhow!("no other master"))?;
    for to in [away, home] {
        let from = cluster.master_of_slot(slot);
        let refused_before = tryagain_replies(&cluster, from)?;
        tokio::task::block_in_place(|| {
            cluster.migrate_slot(slot, to, || {
                // The lock's generation key moves first and the rest stays:
                // its scripts find the lock split between two masters and
                // are told to try again. The window is the subject.
                let (host, port) = cluster.urls()[to]
                    .trim_start_matches("redis://")
                    .split_once(':')
                    .expect("host:port");
                let moved = cluster.command(
                    from,
                    &[
                        "MIGRATE",
                        host,
                        port,
                        "",
                        "0",
                        "5000",
                        "KEYS",
                        &generation_key,
                    ],
                );
                assert!(moved.is_ok(), "MIGRATE the generation key: {moved:?}");
                std::thread::sleep(SPLIT);
            })
        })?;
        anyhow::ensure!(cluster.master_of_slot(slot) == to, "the slot moved");
        anyhow::ensure!(
            tryagain_replies(&cluster, from)? > refused_before,
            "the clients met the split slot (TRYAGAIN)"
        );
        // Every client writes again after each move: none is stuck.
        run.drain_feed();
        let mut wrote: HashSet<String> = HashSet::new();
        run.wait_any(STEP, |client, line| {
            if matches!(line, ClientLine::Wrote { .. }) {
                wrote.insert(client.to_owned());
            }
            (wrote.len() == clients.len()).then_some(())
        })
        .await?;
    }
    run.heal(fault)?;
    run.wait_recovered(STEP).await?;
    stop_clients(clients.iter_mut(), EXIT).await?;

    let events = run.events()?;
    let errors: Vec<String> = events
        .iter()
        .filter(|event| {
            matches!(event.op, OpKind::Acquire | OpKind::Write)
                && matches!(event.phase, Phase::Fail | Phase::Unknown)
                // Refusals by the fence and acquires ended by the harness
                // stopping the clients are not errors of the moves.
                && !matches!(event.detail.as_deref(), Some("stale" | "stopped"))
        })
        .map(|event| {
            format!(
                "{} {:?} {:?}: {:?}",
                event.client, event.op, event.phase, event.detail
            )
        })
        .collect();
    let report = run
        .verdict(
            &server.base_url(),
            &live_within(TTL + STEP),
            &Scenario::new(
                "42 Redis Cluster slot moved twice under contention",
                "redis cluster (server-clock)",
            )
            .note(format!("{} errors seen by the clients", errors.len())),
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    assert!(
        errors.is_empty(),
        "the moves cost the clients only time, no error: {errors:?}"
    );
    Ok(())
}

/// How many `TRYAGAIN` errors node `index` has replied (`INFO errorstats`).
fn tryagain_replies(cluster: &RedisCluster, index: usize) -> anyhow::Result<u64> {
    let info = cluster.command(index, &["INFO", "errorstats"])?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("errorstat_TRYAGAIN:count="))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0))
}
