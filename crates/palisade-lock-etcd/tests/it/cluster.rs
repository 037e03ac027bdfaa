//! A 3-member etcd cluster on loopback: the leader is killed (`kill -9`)
//! while a client holds a lock and another waits.
//!
//! The lock-side half of the failover scenario: generations stay strictly
//! increasing across the leader change, the holder either keeps the lock
//! or is cleanly told it lost it (there is never a moment where two
//! exclusive holders both believe they hold it), and the lock is usable
//! again within election time + TTL. (That no stale write is accepted is
//! the resource server's half, tested with the server.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use palisade_core::{Generation, LeaseState, Lock, LockGuard, LockName, LostReason, Mode};
use palisade_lock_etcd::{EtcdGuard, EtcdLock};
use palisade_testkit::etcd::EtcdCluster;
use tokio::time::Instant;

use crate::fixtures::*;

/// TTL of the sessions: above the ~2 s an election takes here, so a holder
/// connected to every member can ride through it.
const TTL_SECS: u64 = 5;
/// Election time + TTL, with a generous margin for a loaded machine.
const USABLE_WITHIN: Duration = Duration::from_secs(2 + TTL_SECS + 13);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_leader_keeps_generations_increasing_and_the_lock_usable() {
    let mut cluster = tokio::task::block_in_place(EtcdCluster::start);
    let endpoints = cluster.endpoints();
    let prefix = unique_prefix("cluster");
    let lock = name("cluster");
    let mut generations = Vec::new();

    // Warm-up: the lock works through any member.
    let everywhere = connect(&endpoints, &prefix).await;
    let warm = session(&everywhere, options(TTL_SECS)).await;
    for _ in 0..3 {
        let guard = warm.acquire(&lock, Mode::Exclusive).await.unwrap();
        generations.push(guard.generation());
        guard.release().await.unwrap();
    }

    // Scenario 1: the holder talks to every member and rides through the
    // election; it keeps the lock two more seconds, then releases, and the
    // waiter gets it.
    let leader = wait_for_leader(&mut cluster);
    let holder = session(&connect(&endpoints, &prefix).await, options(TTL_SECS)).await;
    let held = holder.acquire(&lock, Mode::Exclusive).await.unwrap();
    generations.push(held.generation());
    let waiter = session(&connect(&endpoints, &prefix).await, options(TTL_SECS)).await;
    let scenario = Failover {
        prefix: &prefix,
        lock: &lock,
        endpoints: &endpoints,
    };
    generations.push(
        scenario
            .run(
                &mut cluster,
                leader,
                held,
                waiter,
                Some(Duration::from_secs(2)),
            )
            .await,
    );

    // The lock is usable again by a fresh session, within the bound.
    let fresh = session(&connect(&endpoints, &prefix).await, options(TTL_SECS)).await;
    let guard = fresh
        .acquire_timeout(&lock, Mode::Exclusive, USABLE_WITHIN)
        .await
        .unwrap();
    generations.push(guard.generation());
    guard.release().await.unwrap();

    // The killed member comes back with `--initial-cluster-state existing`
    // and serves the lock on its own endpoint.
    tokio::task::block_in_place(|| cluster.restart(leader)).unwrap();
    let rejoined = session(
        &connect(&[cluster.endpoint(leader)], &prefix).await,
        options(TTL_SECS),
    )
    .await;
    let guard = rejoined
        .acquire_timeout(&lock, Mode::Exclusive, USABLE_WITHIN)
        .await
        .unwrap();
    generations.push(guard.generation());
    guard.release().await.unwrap();

    // Scenario 2: the holder talks only to the leader, which dies. It
    // cannot renew, and must know it lost the lock before anyone else is
    // granted it.
    let leader = wait_for_leader(&mut cluster);
    let pinned = session(
        &connect(&[cluster.endpoint(leader)], &prefix).await,
        options(TTL_SECS),
    )
    .await;
    let held = pinned.acquire(&lock, Mode::Exclusive).await.unwrap();
    generations.push(held.generation());
    let waiter = session(&connect(&endpoints, &prefix).await, options(TTL_SECS)).await;
    generations.push(scenario.run(&mut cluster, leader, held, waiter, None).await);

    assert!(
        generations.windows(2).all(|pair| pair[0] < pair[1]),
        "generations not strictly increasing across leader changes: {generations:?}"
    );
}

fn wait_for_leader(cluster: &mut EtcdCluster) -> usize {
    tokio::task::block_in_place(|| cluster.wait_for_leader(Duration::from_secs(15)))
        .expect("the cluster elects a leader")
}

struct Failover<'a> {
    prefix: &'a str,
    lock: &'a LockName,
    endpoints: &'a [String],
}

impl Failover<'_> {
    /// Kills `leader` while `held` is held and `waiter` waits. With
    /// `hold_for`, the holder keeps using the lock that long after the kill
    /// (unless it learns it lost it), then releases; without, it holds
    /// until it learns it lost the lease, which must happen. Returns the
    /// waiter's generation.
    async fn run(
        &self,
        cluster: &mut EtcdCluster,
        leader: usize,
        held: EtcdGuard,
        waiter: EtcdLock,
        hold_for: Option<Duration>,
    ) -> Generation {
        let held_generation = held.generation();
        let holder_lease = held.lease();
        let releasing = Arc::new(AtomicBool::new(false));
        let raw = raw(self.endpoints).await;
        let mut queue = DirWatch::start(&raw, &lock_dir(self.prefix, self.lock)).await;
        let waiter_key = format!("{:016x}", waiter.lease_id());
        let waiting = {
            let (lock, releasing, holder_lease) =
                (self.lock.clone(), releasing.clone(), holder_lease.clone());
            tokio::spawn(async move {
                let guard = waiter
                    .acquire_timeout(&lock, Mode::Exclusive, USABLE_WITHIN)
                    .await
                    .expect("the waiter is granted after the failover");
                // At the grant, the old holder must have stopped: released,
                // or knows its lease is lost.
                let old_holder_stopped =
                    releasing.load(Ordering::SeqCst) || !holder_lease.is_valid();
                (guard, old_holder_stopped)
            })
        };
        while !queue.next_put().await.ends_with(&waiter_key) {}
        drop(queue);

        tokio::task::block_in_place(|| cluster.kill(leader)).unwrap();
        let killed_at = Instant::now();
        let mut lease = held.lease();
        match hold_for {
            Some(hold_for) => {
                tokio::select! {
                    state = lease.lost() => println!("holder lost its lease ({state:?}) {:?} after the kill", killed_at.elapsed()),
                    () = tokio::time::sleep(hold_for) => println!("holder still valid {hold_for:?} after the kill"),
                }
            }
            None => {
                let state = tokio::time::timeout(USABLE_WITHIN, lease.lost())
                    .await
                    .expect("a holder cut off from the cluster learns it lost its lease");
                assert!(
                    matches!(
                        state,
                        LeaseState::Lost(LostReason::Expired | LostReason::KeepAliveFailed)
                    ),
                    "{state:?}"
                );
                println!(
                    "pinned holder reported {state:?} {:?} after the kill",
                    killed_at.elapsed()
                );
            }
        }
        releasing.store(true, Ordering::SeqCst);
        let released = held.release().await;
        println!("holder's release: {released:?}");

        let (guard, old_holder_stopped) = waiting.await.unwrap();
        println!("waiter granted {:?} after the kill", killed_at.elapsed());
        assert!(
            old_holder_stopped,
            "two exclusive holders believed they held the lock"
        );
        assert!(guard.generation() > held_generation);
        let generation = guard.generation();
        guard.release().await.unwrap();
        generation
    }
}
