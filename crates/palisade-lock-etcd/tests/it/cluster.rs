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
use palisade_testkit::proxy::{Direction, FaultProxy};
use tokio::time::Instant;

use crate::fixtures::*;

/// TTL of the sessions: above the ~2 s an election takes here, so a holder
/// connected to every member can ride through it.
const TTL_SECS: u64 = 5;
/// Election time + TTL, with a generous margin for a loaded machine.
const USABLE_WITHIN: Duration = Duration::from_secs(2 + TTL_SECS + 13);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_leader_keeps_generations_increasing_and_the_lock_usable() {
    trace();
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

/// The member a waiter's watch and keep-alive streams run on is killed
/// (`kill -9`) while the waiter's re-read of the queue is on its way to it:
/// a follower here, the leader below. The waiter must be granted, with a
/// generation above the holder's, its lease must be renewed through another
/// member, and the lock must stay usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_rides_through_the_loss_of_the_follower_its_streams_use() {
    let mut cluster = tokio::task::block_in_place(EtcdCluster::start);
    let leader = wait_for_leader(&mut cluster);
    let follower = (leader + 1) % EtcdCluster::SIZE;
    waiter_rides_through_the_loss_of(&mut cluster, follower).await;
}

/// As above, with the leader carrying the waiter's streams: the waiter also
/// rides through the election.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_rides_through_the_loss_of_the_leader_its_streams_use() {
    let mut cluster = tokio::task::block_in_place(EtcdCluster::start);
    let leader = wait_for_leader(&mut cluster);
    waiter_rides_through_the_loss_of(&mut cluster, leader).await;
}

/// Queues a waiter whose streams all run on member `victim` (through a
/// proxy, its only endpoint) behind a holder on the other members. The
/// proxy then holds the waiter's requests; the holder releases, the waiter
/// hears it and sends its re-read into the proxy; the waiter learns the
/// other members and `victim` is killed, which breaks the re-read, the
/// watch and the keep-alive stream at once.
async fn waiter_rides_through_the_loss_of(cluster: &mut EtcdCluster, victim: usize) {
    trace();
    let prefix = unique_prefix("member-loss");
    let lock = name("member-loss");
    let survivors: Vec<String> = (0..EtcdCluster::SIZE)
        .filter(|&member| member != victim)
        .map(|member| cluster.endpoint(member))
        .collect();
    let holder = session(&connect(&survivors, &prefix).await, options(TTL_SECS)).await;
    let held = holder.acquire(&lock, Mode::Exclusive).await.unwrap();
    let held_generation = held.generation();

    let pin = FaultProxy::start("waiter-member", cluster.client_addr(victim)).unwrap();
    let waiter = session(&connect(&[pin.url()], &prefix).await, options(TTL_SECS)).await;
    first_renewal(&waiter).await;
    let raw = raw(&survivors).await;
    let mut queue = DirWatch::start(&raw, &lock_dir(&prefix, &lock)).await;
    let waiting = {
        let (waiter, lock) = (waiter.clone(), lock.clone());
        tokio::spawn(async move {
            waiter
                .acquire_timeout(&lock, Mode::Exclusive, USABLE_WITHIN)
                .await
        })
    };
    queue.queued(waiter.lease_id()).await;
    blocker_watched(&waiter).await;

    pin.drop_one_way(Direction::ClientToServer);
    let reads_before = waiter.connection().rpc_counts().txns;
    held.release().await.unwrap();
    poll_until("the waiter's re-read", || {
        waiter.connection().rpc_counts().txns > reads_before
    })
    .await;
    assert!(
        pin.wait_for_held(1, Duration::from_secs(20)).await,
        "the waiter's request reaches the proxy"
    );
    for endpoint in &survivors {
        waiter.connection().add_endpoint(endpoint).await.unwrap();
    }
    tokio::task::block_in_place(|| cluster.kill(victim)).unwrap();
    let killed_at = Instant::now();
    // The proxy would accept connections and hold them; without it the
    // waiter's endpoint refuses them, as a dead member's does.
    drop(pin);

    let guard = waiting
        .await
        .unwrap()
        .expect("the waiter is granted after losing its member");
    println!("waiter granted {:?} after the kill", killed_at.elapsed());
    assert!(guard.generation() > held_generation);
    // The lease lives in raft: renewed through a surviving member, it
    // outlives a TTL counted from the kill.
    let mut renewed = guard.lease();
    let outlives = killed_at + Duration::from_secs(TTL_SECS);
    let deadline = Instant::now() + USABLE_WITHIN;
    while renewed.valid_until().is_none_or(|until| until <= outlives) {
        assert!(
            Instant::now() < deadline,
            "the waiter's lease is not renewed"
        );
        // No event announces a renewal; poll with a short period.
        tokio::select! {
            state = renewed.lost() => panic!("the waiter's lease was lost: {state:?}"),
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
    let waiter_generation = guard.generation();
    guard.release().await.unwrap();

    // The lock is usable again, by a fresh session.
    let fresh = session(&connect(&survivors, &prefix).await, options(TTL_SECS)).await;
    let guard = fresh
        .acquire_timeout(&lock, Mode::Exclusive, USABLE_WITHIN)
        .await
        .unwrap();
    assert!(guard.generation() > waiter_generation);
    guard.release().await.unwrap();
}

/// Waits until `session`'s keep-alive stream is open (its first renewal
/// moved the validity deadline).
async fn first_renewal(session: &EtcdLock) {
    let granted_until = session.lease().valid_until().expect("a fresh session");
    poll_until("the first keep-alive renewal", || {
        session
            .lease()
            .valid_until()
            .is_some_and(|until| until > granted_until)
    })
    .await;
}

/// Waits until `session`'s waiter has registered both watches on its
/// blocker: the hub registers them one after the other on one stream, so
/// the second means the stream is open.
async fn blocker_watched(session: &EtcdLock) {
    poll_until("the waiter's blocker watch", || {
        session.connection().rpc_counts().watch_creates >= 2
    })
    .await;
}

/// Polls `done` every 20 ms, for at most 20 s: nothing announces these
/// events to an outside observer.
async fn poll_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
