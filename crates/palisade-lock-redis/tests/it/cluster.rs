//! The Redis backend on a real Redis Cluster on loopback, three masters
//! with a replica each: the conformance suite, keys of one lock in one
//! slot, locks spread over every master, hand-offs notified across the
//! cluster bus, mutual exclusion, a lock's slot moved to another master
//! while it is held and waited for. The tests that kill connections or pause
//! every node start their own 3-master cluster.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use palisade_core::{LiveCheck, Liveness, Lock, LockError, LockGuard, LockName, Mode};
use palisade_lock_redis::{RedisConfig, RedisLock, RedisLockClient, WakeUps};
use palisade_testkit::redis::RedisCluster;
use tokio::time::Instant;

use crate::common;
use common::{client_with, options, unique_prefix};

fn cluster_config(cluster: &RedisCluster, prefix: &str) -> RedisConfig {
    RedisConfig::cluster(cluster.urls().iter().cloned()).with_key_prefix(prefix)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cluster() {
    common::trace();
    let cluster = Arc::new(RedisCluster::start_with_replicas());

    println!("conformance suite on the cluster with replicas");
    let prefix = unique_prefix("cluster-suite");
    let client = client_with(cluster_config(&cluster, &prefix)).await;
    palisade_testkit::lock_suite::test_all(common::SuiteRedis {
        client,
        _servers: cluster.clone(),
    })
    .await;

    keys_of_a_lock_share_a_slot_and_locks_spread_over_masters(&cluster).await;
    for wake_ups in [WakeUps::ShardChannels, WakeUps::ClientChannel] {
        handoffs_are_notified_from_every_master(&cluster, wake_ups).await;
    }
    mutual_exclusion_across_clients(&cluster).await;
    for wake_ups in [WakeUps::ShardChannels, WakeUps::ClientChannel] {
        a_slot_migrated_during_a_hold_and_a_wait(&cluster, wake_ups).await;
    }
}

async fn keys_of_a_lock_share_a_slot_and_locks_spread_over_masters(cluster: &RedisCluster) {
    let prefix = unique_prefix("cluster-spread");
    let client = client_with(cluster_config(cluster, &prefix)).await;
    let session = client.session(options(Duration::from_secs(5))).unwrap();
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3, "three masters");
    let keys_before: Vec<u64> = masters.iter().map(|&node| dbsize(cluster, node)).collect();
    for index in 0..30 {
        let name = LockName::new(format!("spread/{index}")).unwrap();
        let slots: Vec<String> = client
            .keys(&name)
            .all()
            .iter()
            .map(|key| cluster.command(0, &["CLUSTER", "KEYSLOT", key]).unwrap())
            .collect();
        assert!(
            slots.windows(2).all(|pair| pair[0] == pair[1]),
            "{name}: slots {slots:?}"
        );
        let guard = session.acquire(&name, Mode::Exclusive).await.unwrap();
        assert_eq!(
            client
                .live_check()
                .check(&guard.sequencer().unwrap())
                .await
                .unwrap(),
            Liveness::Held
        );
        guard.release().await.unwrap();
    }
    // Listing walks every master: held locks on all three are found.
    let mut held = Vec::new();
    for index in 0..9 {
        let name = LockName::new(format!("listed/{index}")).unwrap();
        held.push(session.acquire(&name, Mode::Exclusive).await.unwrap());
    }
    let listed = palisade_core::Inspect::list(&client, "listed/")
        .await
        .unwrap();
    assert_eq!(listed.len(), 9, "{listed:?}");
    for guard in held {
        guard.release().await.unwrap();
    }
    // Each lock leaves its generation counter on the master of its slot.
    for (&node, before) in masters.iter().zip(&keys_before) {
        let added = dbsize(cluster, node) - before;
        assert!(added > 0, "master {node} got none of the 30 locks");
        println!("master {node}: {added} lock counters");
    }
}

fn dbsize(cluster: &RedisCluster, node: usize) -> u64 {
    cluster.command(node, &["DBSIZE"]).unwrap().parse().unwrap()
}

/// Every client subscribes its inbox on one node; grants published by
/// scripts on the other masters reach it over the cluster bus. The waiter
/// re-checks only every 30 s, so each grant must come by notification.
///
/// With shard channels, the waiter's channel is subscribed on the master
/// of the lock's slot while it waits, and nowhere else.
async fn handoffs_are_notified_from_every_master(cluster: &RedisCluster, wake_ups: WakeUps) {
    println!("hand-offs, {wake_ups:?}");
    let (_holder_client, holder, waiter_client, waiter) =
        holder_and_waiter(cluster, "cluster-handoff", wake_ups).await;
    const NAMES: usize = 12;
    for index in 0..NAMES {
        let name = LockName::new(format!("handoff/{index}")).unwrap();
        let held = holder.acquire(&name, Mode::Exclusive).await.unwrap();
        let queued_before = waiter_client.stats().queued;
        let waiting = {
            let (waiter, name) = (waiter.clone(), name.clone());
            tokio::spawn(async move { waiter.acquire(&name, Mode::Exclusive).await })
        };
        wait_for_queue(&waiter_client, queued_before).await;
        let slot = cluster.keyslot(waiter_client.keys(&name).lock());
        let on_master = shard_channels(cluster, cluster.master_of_slot(slot));
        match wake_ups {
            WakeUps::ShardChannels => assert!(
                on_master.iter().any(|channel| channel
                    .starts_with(&waiter_client.keys(&name).lock().replace(":lock", ":inbox:"))),
                "the waiter's shard channel is subscribed on its slot's master: {on_master:?}"
            ),
            _ => assert!(on_master.is_empty(), "no shard channel: {on_master:?}"),
        }
        held.release().await.unwrap();
        let granted = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("woken long before the 30 s re-check")
            .unwrap()
            .unwrap();
        granted.release().await.unwrap();
    }
    let stats = waiter_client.stats();
    assert_eq!(stats.handoffs, NAMES as u64);
    assert_eq!(stats.rechecks, 0);
}

/// A holder's client and session, and a waiter's, on `cluster` under a
/// fresh prefix; the waiter re-checks only every 30 s, so a grant it gets
/// sooner came by notification.
async fn holder_and_waiter(
    cluster: &RedisCluster,
    tag: &str,
    wake_ups: WakeUps,
) -> (RedisLockClient, RedisLock, RedisLockClient, Arc<RedisLock>) {
    let prefix = unique_prefix(tag);
    let config = cluster_config(cluster, &prefix)
        .with_waiter_recheck(Duration::from_secs(30))
        .with_wake_ups(wake_ups);
    let (holder_client, waiter_client) =
        (client_with(config.clone()).await, client_with(config).await);
    let holder = holder_client
        .session(options(Duration::from_secs(30)))
        .unwrap();
    let waiter = waiter_client
        .session(options(Duration::from_secs(30)))
        .unwrap();
    (holder_client, holder, waiter_client, Arc::new(waiter))
}

async fn wait_for_queue(client: &RedisLockClient, queued_before: u64) {
    // The waiter's own client counts the reply "queued"; there is no event
    // to await from outside its task.
    let deadline = Instant::now() + Duration::from_secs(5);
    while client.stats().queued == queued_before {
        assert!(Instant::now() < deadline, "the waiter was never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn mutual_exclusion_across_clients(cluster: &RedisCluster) {
    let prefix = unique_prefix("cluster-mutex");
    let name = LockName::new("contended").unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(Mutex::new(Vec::new()));
    let run_until = Instant::now() + Duration::from_secs(2);
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let client = client_with(cluster_config(cluster, &prefix)).await;
        for _ in 0..4 {
            let session = client.session(options(Duration::from_secs(5))).unwrap();
            let (name, inside, overlaps, granted) = (
                name.clone(),
                inside.clone(),
                overlaps.clone(),
                granted.clone(),
            );
            tasks.push(tokio::spawn(async move {
                while Instant::now() < run_until {
                    let guard = session
                        .acquire_timeout(&name, Mode::Exclusive, Duration::from_secs(20))
                        .await
                        .unwrap();
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    granted.lock().unwrap().push(guard.generation());
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let granted = granted.lock().unwrap().clone();
    println!("{} grants on the cluster in 2 s", granted.len());
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert!(granted.len() > 8);
    assert!(granted.windows(2).all(|pair| pair[0] < pair[1]));
}

/// A waiter's connections to the cluster are killed (`CLIENT KILL` of every
/// command and pub/sub connection on every master, the holder's included)
/// while it waits, and the holder releases at once, while the waiter's inbox
/// may still be resubscribing: the grant notification may be lost. The
/// waiter re-checks only every 30 s, so it must be woken by the inbox's
/// re-check after resubscribing (or by the notification), long before that.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_survives_losing_its_connections_to_the_masters() {
    common::trace();
    let cluster = RedisCluster::start();
    let (_holder_client, holder, waiter_client, waiter) =
        holder_and_waiter(&cluster, "cluster-conn-loss", WakeUps::Default).await;
    let name = LockName::new("conn-loss").unwrap();
    for round in 0..3 {
        let held = holder.acquire(&name, Mode::Exclusive).await.unwrap();
        let queued_before = waiter_client.stats().queued;
        let waiting = {
            let (waiter, name) = (waiter.clone(), name.clone());
            tokio::spawn(async move {
                waiter
                    .acquire_timeout(&name, Mode::Exclusive, Duration::from_secs(20))
                    .await
            })
        };
        wait_for_queue(&waiter_client, queued_before).await;
        let mut killed = 0;
        for node in 0..cluster.urls().len() {
            for kind in ["pubsub", "normal"] {
                killed += cluster
                    .command(node, &["CLIENT", "KILL", "TYPE", kind, "SKIPME", "yes"])
                    .unwrap()
                    .trim()
                    .parse::<u64>()
                    .unwrap();
            }
        }
        assert!(killed >= 2, "round {round}: killed {killed} connections");
        let held_generation = held.generation();
        // A release is not resent on a dropped connection (Redis may have
        // run it); if it failed, the client retries it in the background.
        match held.release().await {
            Ok(()) | Err(LockError::Unavailable { .. }) => {}
            Err(other) => panic!("round {round}: the holder's release: {other}"),
        }
        let granted = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("woken long before the 30 s re-check")
            .unwrap()
            .expect("the waiter is granted after losing its connections");
        assert!(granted.generation() > held_generation);
        assert!(granted.lease().is_valid());
        println!(
            "round {round}: {killed} connections killed; {:?}",
            waiter_client.stats()
        );
        granted.release().await.unwrap();
    }
    // The lock stays usable.
    let guard = holder
        .acquire_timeout(&name, Mode::Exclusive, Duration::from_secs(10))
        .await
        .unwrap();
    guard.release().await.unwrap();
}

/// Every master stops answering (`CLIENT PAUSE ALL`) for longer than the
/// waiter's calls may take while it waits, and it re-checks in that time: a
/// queued waiter keeps its place and tries again until the masters answer,
/// rather than failing its acquire.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_rides_through_masters_that_stop_answering() {
    common::trace();
    let cluster = RedisCluster::start();
    let prefix = unique_prefix("cluster-pause");
    let config = cluster_config(&cluster, &prefix)
        .with_response_timeout(Duration::from_millis(300))
        .with_waiter_recheck(Duration::from_millis(200));
    let (holder_client, waiter_client) =
        (client_with(config.clone()).await, client_with(config).await);
    let holder = Arc::new(
        holder_client
            .session(options(Duration::from_secs(30)))
            .unwrap(),
    );
    let waiter = waiter_client
        .session(options(Duration::from_secs(30)))
        .unwrap();
    let name = LockName::new("paused").unwrap();
    let held = holder.acquire(&name, Mode::Exclusive).await.unwrap();
    let held_generation = held.generation();
    let queued_before = waiter_client.stats().queued;
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move {
            waiter
                .acquire_timeout(&name, Mode::Exclusive, Duration::from_secs(20))
                .await
        })
    };
    wait_for_queue(&waiter_client, queued_before).await;

    // 3 s: five times what one of the waiter's calls may take (twice the
    // response timeout), fifteen of its re-check intervals.
    for node in 0..cluster.urls().len() {
        cluster
            .command(node, &["CLIENT", "PAUSE", "3000", "ALL"])
            .unwrap();
    }
    let paused_at = Instant::now();
    let rechecks_before = waiter_client.stats().rechecks;
    // The release is held by the pause like every other command.
    let released = tokio::spawn(async move { held.release().await });
    let granted = waiting
        .await
        .unwrap()
        .expect("the waiter rides through the pause");
    println!(
        "granted {:?} after the pause began; {} re-checks meanwhile",
        paused_at.elapsed(),
        waiter_client.stats().rechecks - rechecks_before
    );
    assert!(
        paused_at.elapsed() >= Duration::from_millis(2500),
        "granted while every master was paused"
    );
    assert!(granted.generation() > held_generation);
    // The holder's release, sent into the pause, may have timed out; then
    // it was retried in the background (and Redis ran the first one late).
    match released.await.unwrap() {
        Ok(()) | Err(LockError::BackendTimeout { .. } | LockError::Unavailable { .. }) => {}
        Err(other) => panic!("the holder's release: {other}"),
    }
    granted.release().await.unwrap();
}

/// The lock's slot moves to another master (`SETSLOT ... IMPORTING` and
/// `MIGRATING`, `MIGRATE`, `SETSLOT ... NODE`) while the lock is held and
/// a waiter is queued, and the holder releases while the slot is split:
/// the source answers its release script `TRYAGAIN` (some of the lock's
/// keys are there, some not), the client sends it again until the slot
/// has moved, and the waiter is handed the lock by the script on the new
/// master. The waiter re-checks only every 30 s, so the grant must come by
/// notification: no wake-up is lost, and neither side sees an error.
/// Twice, so the slot moves away and on again.
///
/// A shard channel moves with its slot: the old master unsubscribes the
/// waiter's client, which subscribes again on the new one and has the
/// waiter look at the lock at once, again when it is subscribed on the
/// new one, and a few times over the next 3 s.
async fn a_slot_migrated_during_a_hold_and_a_wait(cluster: &RedisCluster, wake_ups: WakeUps) {
    println!("slot migration, {wake_ups:?}");
    let (holder_client, holder, waiter_client, waiter) =
        holder_and_waiter(cluster, "cluster-migrate", wake_ups).await;
    let name = LockName::new("migrating").unwrap();
    let slot = cluster.keyslot(holder_client.keys(&name).lock());
    for round in 0..2 {
        let held = holder.acquire(&name, Mode::Exclusive).await.unwrap();
        let held_generation = held.generation();
        let queued_before = waiter_client.stats().queued;
        let waiting = {
            let (waiter, name) = (waiter.clone(), name.clone());
            tokio::spawn(async move { waiter.acquire(&name, Mode::Exclusive).await })
        };
        wait_for_queue(&waiter_client, queued_before).await;
        let from = cluster.master_of_slot(slot);
        let to = cluster
            .masters()
            .into_iter()
            .find(|&master| master != from)
            .expect("another master");
        let refused_before = tryagain_replies(cluster, from);
        let runtime = tokio::runtime::Handle::current();
        let mut release = None;
        tokio::task::block_in_place(|| {
            cluster.migrate_slot(slot, to, || {
                release = Some(runtime.spawn(async move { held.release().await }));
                // The release reached the source and was told to try again.
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while tryagain_replies(cluster, from) == refused_before {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "round {round}: the release never met the split slot"
                    );
                    // Counted by the node; no event to wait on.
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        })
        .unwrap();
        release
            .expect("the release was sent")
            .await
            .unwrap()
            .expect("the release rides through the migration");
        let granted = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("woken long before the 30 s re-check")
            .unwrap()
            .expect("the waiter is granted on the new master");
        assert!(granted.generation() > held_generation);
        assert_eq!(cluster.master_of_slot(slot), to, "round {round}");
        println!(
            "round {round}: slot {slot} moved from node {from} to node {to}; {:?}",
            waiter_client.stats()
        );
        granted.release().await.unwrap();
    }
    let rechecks = waiter_client.stats().rechecks;
    match wake_ups {
        // Each re-check was prompted by the moved channel, not by the
        // 30 s timer (the grants came within 10 s): at once, when it is
        // confirmed again, and three follow-ups over 3 s; a move can drop
        // the channel twice (its resubscription may reach the source
        // before every master has taken the slot's new owner).
        WakeUps::ShardChannels => assert!(
            rechecks <= 20,
            "at most ten re-checks per move, each prompted by the moved channel: {rechecks}"
        ),
        _ => assert_eq!(rechecks, 0, "every grant was notified"),
    }
}

/// The shard channels node `index` has subscribers for.
fn shard_channels(cluster: &RedisCluster, index: usize) -> Vec<String> {
    cluster
        .command(index, &["PUBSUB", "SHARDCHANNELS"])
        .unwrap()
        .lines()
        .map(str::to_owned)
        .filter(|line| !line.is_empty())
        .collect()
}

/// How many `TRYAGAIN` errors node `index` has replied (`INFO errorstats`).
fn tryagain_replies(cluster: &RedisCluster, index: usize) -> u64 {
    let info = cluster.command(index, &["INFO", "errorstats"]).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("errorstat_TRYAGAIN:count="))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0)
}
