//! The mutex itself: exclusion, FIFO, name isolation, re-entry, shared mode.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use palisade_core::{Lock, LockError, LockGuard, Mode};
use tokio::time::Instant;

use crate::fixtures::*;

/// 3 separate connections x 8 sessions contend on one lock for a few
/// seconds. Inside the critical section a counter detects any overlap, and
/// the generations are recorded in grant order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_exclusion_across_3_connections_x_8_tasks() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("exclusion");
    let lock = name("exclusion/one");
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let grants = Arc::new(Mutex::new(Vec::<u64>::new()));
    let stop_at = Instant::now() + Duration::from_secs(4);
    let mut tasks = Vec::new();
    for _connection in 0..3 {
        let connection = connect(&etcd.endpoints(), &prefix).await;
        for _task in 0..8 {
            let session = session(&connection, options(10)).await;
            let (lock, inside, overlaps, grants) = (
                lock.clone(),
                inside.clone(),
                overlaps.clone(),
                grants.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut cycles = 0usize;
                while Instant::now() < stop_at {
                    let guard = session.acquire(&lock, Mode::Exclusive).await?;
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    grants.lock().unwrap().push(guard.generation().get());
                    // Long enough for a second holder to be caught inside.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await?;
                    cycles += 1;
                }
                Ok::<usize, LockError>(cycles)
            }));
        }
    }
    let mut per_task = Vec::new();
    for task in tasks {
        per_task.push(task.await.unwrap().expect("every cycle succeeds"));
    }
    let grants = grants.lock().unwrap().clone();
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two holders were inside at once"
    );
    assert_eq!(grants.len(), per_task.iter().sum::<usize>());
    assert!(
        grants.windows(2).all(|pair| pair[0] < pair[1]),
        "generations not strictly increasing in grant order: {grants:?}"
    );
    // FIFO: every one of the 24 sessions got its turns.
    assert!(per_task.iter().all(|&cycles| cycles >= 1), "{per_task:?}");
    println!(
        "{} grants over 24 sessions (min {}, max {} per session)",
        grants.len(),
        per_task.iter().min().unwrap(),
        per_task.iter().max().unwrap()
    );
}

/// Waiters are granted in the order they queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_granted_in_queue_order() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("fifo");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    let lock = name("fifo");
    let mut raw = raw(&etcd.endpoints()).await;
    let mut queue = DirWatch::start(&raw, &lock_dir(&prefix, &lock)).await;
    let holder = session(&connection, options(10)).await;
    let held = holder.acquire(&lock, Mode::Exclusive).await.unwrap();
    queue.next_put().await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for index in 0..5 {
        let session = session(&connection, options(10)).await;
        let (lock, order) = (lock.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = session.acquire(&lock, Mode::Exclusive).await.unwrap();
            order
                .lock()
                .unwrap()
                .push((index, guard.generation().get()));
            guard.release().await.unwrap();
        }));
        // Wait until this waiter's key is in etcd before starting the next.
        queue.next_put().await;
    }
    assert_eq!(
        keys_under(&mut raw, &lock_dir(&prefix, &lock)).await.len(),
        6
    );
    held.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let indexes: Vec<usize> = order.iter().map(|(index, _)| *index).collect();
    assert_eq!(indexes, [0, 1, 2, 3, 4]);
    assert!(order.windows(2).all(|pair| pair[0].1 < pair[1].1));
}

/// `a`, `a/b`, `ab` and `a/bc` are four locks: none blocks another, and the
/// keys of one are never inside the directory of another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_share_a_prefix_never_block_each_other() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("isolation");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    let first = session(&connection, options(10)).await;
    let second = session(&connection, options(10)).await;
    let a = first.acquire(&name("a"), Mode::Exclusive).await.unwrap();
    let mut others = Vec::new();
    for other in ["a/b", "ab", "a/bc", "a/", "a!delay"] {
        let guard = second
            .try_acquire(&name(other), Mode::Exclusive)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("`{other}` was blocked by `a`"));
        others.push(guard);
    }
    // And the other way round: `a` is still held, and only by `first`.
    assert!(
        second
            .try_acquire(&name("a"), Mode::Exclusive)
            .await
            .unwrap()
            .is_none()
    );
    let mut raw = raw(&etcd.endpoints()).await;
    let a_keys = keys_under(&mut raw, &lock_dir(&prefix, &name("a"))).await;
    assert_eq!(a_keys.len(), 1, "{a_keys:?}");
    // The etcdctl pitfall: a bare prefix `<prefix>/a` would have caught them all.
    let pitfall = keys_under(&mut raw, &format!("{prefix}/a")).await;
    assert!(pitfall.len() > 1, "{pitfall:?}");
    // Releasing `a/b` and friends does not release `a`.
    for guard in others {
        guard.release().await.unwrap();
    }
    assert!(
        second
            .try_acquire(&name("a"), Mode::Exclusive)
            .await
            .unwrap()
            .is_none()
    );
    a.release().await.unwrap();
    assert!(
        second
            .try_acquire(&name("a"), Mode::Exclusive)
            .await
            .unwrap()
            .is_some()
    );
}

/// Re-entry in one session: same generation, a count, released at zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_keeps_the_generation_and_counts() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("reentry");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    let owner = session(&connection, options(10)).await;
    let other = session(&connection, options(10)).await;
    let lock = name("reentry");
    let outer = owner.acquire(&lock, Mode::Exclusive).await.unwrap();
    let inner = owner.acquire(&lock, Mode::Exclusive).await.unwrap();
    let third = owner
        .try_acquire(&lock, Mode::Exclusive)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outer.generation(), inner.generation());
    assert_eq!(outer.generation(), third.generation());
    // The other mode cannot be re-entered.
    match owner.try_acquire(&lock, Mode::Shared).await {
        Err(LockError::ModeConflict {
            held: Mode::Exclusive,
            requested: Mode::Shared,
            ..
        }) => {}
        other => panic!("expected ModeConflict, got {other:?}"),
    }
    inner.release().await.unwrap();
    third.release().await.unwrap();
    assert!(
        other
            .try_acquire(&lock, Mode::Exclusive)
            .await
            .unwrap()
            .is_none()
    );
    assert!(outer.is_valid());
    let outer_generation = outer.generation();
    outer.release().await.unwrap();
    let next = other
        .try_acquire(&lock, Mode::Exclusive)
        .await
        .unwrap()
        .unwrap();
    assert!(next.generation() > outer_generation);
    let next_generation = next.generation();
    next.release().await.unwrap();

    // Two tasks of one session asking at once, while a third session holds:
    // one queues, the other waits behind it in the session and re-enters.
    let blocker = other.acquire(&lock, Mode::Exclusive).await.unwrap();
    let (first, second) = (owner.clone(), owner.clone());
    let (lock1, lock2) = (lock.clone(), lock.clone());
    let one = tokio::spawn(async move { first.acquire(&lock1, Mode::Exclusive).await });
    let two = tokio::spawn(async move { second.acquire(&lock2, Mode::Exclusive).await });
    blocker.release().await.unwrap();
    let one = one.await.unwrap().unwrap();
    let two = two.await.unwrap().unwrap();
    assert_eq!(one.generation(), two.generation());
    assert!(one.generation() > next_generation);
    one.release().await.unwrap();
    two.release().await.unwrap();
    assert!(
        other
            .try_acquire(&lock, Mode::Exclusive)
            .await
            .unwrap()
            .is_some()
    );
}

/// Readers share; a writer waits for the readers before it; a reader
/// arriving after a queued writer waits for that writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_and_exclusive_interplay() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("shared");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    let lock = name("shared");
    let raw = raw(&etcd.endpoints()).await;
    let mut queue = DirWatch::start(&raw, &lock_dir(&prefix, &lock)).await;
    let reader1 = session(&connection, options(10)).await;
    let reader2 = session(&connection, options(10)).await;
    let r1 = reader1.acquire(&lock, Mode::Shared).await.unwrap();
    let r2 = reader2
        .try_acquire(&lock, Mode::Shared)
        .await
        .unwrap()
        .expect("readers share");
    assert_ne!(r1.generation(), r2.generation());
    queue.next_put().await;
    queue.next_put().await;

    let order = Arc::new(Mutex::new(Vec::new()));
    let writer = session(&connection, options(10)).await;
    let (lock_w, order_w) = (lock.clone(), order.clone());
    let writer_task = tokio::spawn(async move {
        let guard = writer.acquire(&lock_w, Mode::Exclusive).await.unwrap();
        order_w.lock().unwrap().push(("writer", guard.generation()));
        // Hold briefly so the late reader is seen to wait for it.
        tokio::time::sleep(Duration::from_millis(50)).await;
        guard.release().await.unwrap();
    });
    queue.next_put().await;
    // With a writer queued, a new reader cannot get in, though only
    // readers hold the lock: readers wait for earlier writers.
    let prober = session(&connection, options(10)).await;
    assert!(
        prober
            .try_acquire(&lock, Mode::Shared)
            .await
            .unwrap()
            .is_none()
    );

    let reader3 = session(&connection, options(10)).await;
    let reader3_key = format!("{:016x}", reader3.lease_id());
    let (lock_r, order_r) = (lock.clone(), order.clone());
    let reader3_task = tokio::spawn(async move {
        let guard = reader3.acquire(&lock_r, Mode::Shared).await.unwrap();
        order_r
            .lock()
            .unwrap()
            .push(("reader3", guard.generation()));
        guard.release().await.unwrap();
    });
    // Wait for reader3's key (the prober's came and went before it).
    while !queue.next_put().await.ends_with(&reader3_key) {}
    let readers_generation = r1.generation().max(r2.generation());
    r1.release().await.unwrap();
    assert!(
        order.lock().unwrap().is_empty(),
        "the writer got in while a reader held"
    );
    r2.release().await.unwrap();
    writer_task.await.unwrap();
    reader3_task.await.unwrap();
    let order = order.lock().unwrap().clone();
    assert_eq!(order[0].0, "writer");
    assert_eq!(order[1].0, "reader3");
    assert!(order[0].1 > readers_generation);
    assert!(order[1].1 > order[0].1);
}

/// Uncontended, an acquire is one transaction: the put alone, whose success
/// shows that the lock's directory was empty, with no read. The grant so
/// decided still excludes the next contender, and the release is one more
/// transaction.
#[tokio::test]
async fn an_uncontended_acquire_is_one_transaction() {
    let etcd = crate::fixtures::etcd();
    let connection = connect(&etcd.endpoints(), &unique_prefix("one-txn")).await;
    let first = session(&connection, options(10)).await;
    let second = session(&connection, options(10)).await;
    let lock = name("one-txn");
    let before = connection.rpc_counts().txns;
    let guard = first.acquire(&lock, Mode::Exclusive).await.unwrap();
    assert_eq!(connection.rpc_counts().txns - before, 1, "acquire");
    assert!(
        second
            .try_acquire(&lock, Mode::Exclusive)
            .await
            .unwrap()
            .is_none(),
        "a second contender was granted next to the first"
    );
    let generation = guard.generation().get();
    let before = connection.rpc_counts().txns;
    guard.release().await.unwrap();
    assert_eq!(connection.rpc_counts().txns - before, 1, "release");
    let next = second
        .try_acquire(&lock, Mode::Exclusive)
        .await
        .unwrap()
        .expect("free after the release");
    assert!(next.generation().get() > generation);
    next.release().await.unwrap();
}

/// A waiting acquire first only claims the lock if it is free (the smaller
/// request); finding it busy, it queues with a second transaction. An etcd
/// of its own: another test's write would move the revision and could add
/// a re-read to the count.
#[tokio::test]
async fn a_busy_lock_is_claimed_then_queued_for() {
    let etcd = palisade_testkit::etcd::EtcdServer::start();
    let prefix = unique_prefix("claim");
    let holder_connection = connect(&etcd.endpoints(), &prefix).await;
    let waiter_connection = connect(&etcd.endpoints(), &prefix).await;
    let holder = session(&holder_connection, options(10)).await;
    let waiter = session(&waiter_connection, options(10)).await;
    let lock = name("claim");
    let raw = raw(&etcd.endpoints()).await;
    let mut queue = DirWatch::start(&raw, &lock_dir(&prefix, &lock)).await;
    let held = holder.acquire(&lock, Mode::Exclusive).await.unwrap();
    queue.queued(holder.lease_id()).await;

    let before = waiter_connection.rpc_counts().txns;
    let waiting = {
        let (waiter, lock) = (waiter.clone(), lock.clone());
        tokio::spawn(async move { waiter.acquire(&lock, Mode::Exclusive).await })
    };
    queue.queued(waiter.lease_id()).await;
    assert_eq!(
        waiter_connection.rpc_counts().txns - before,
        2,
        "a claim, then the queueing"
    );
    let generation = held.generation().get();
    held.release().await.unwrap();
    let granted = waiting.await.unwrap().unwrap();
    assert!(granted.generation().get() > generation);
    granted.release().await.unwrap();
}
