//! Giving up never leaves a queue entry behind.

use std::time::Duration;

use palisade_core::{Lock, LockError, LockGuard, Mode};

use crate::fixtures::*;

/// `acquire_timeout` deletes its key before it returns `Timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_waiter_withdraws_its_key() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("timeout");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    let lock = name("timeout");
    let holder = session(&connection, options(10)).await;
    let waiter = session(&connection, options(10)).await;
    let latecomer = session(&connection, options(10)).await;
    let held = holder.acquire(&lock, Mode::Exclusive).await.unwrap();
    match waiter
        .acquire_timeout(&lock, Mode::Exclusive, Duration::from_millis(300))
        .await
    {
        Err(LockError::Timeout { name, .. }) => assert_eq!(name, lock),
        other => panic!("expected Timeout, got {other:?}"),
    }
    let mut raw = raw(&etcd.endpoints()).await;
    let keys = keys_under(&mut raw, &lock_dir(&prefix, &lock)).await;
    assert_eq!(
        keys,
        [format!(
            "{}{:016x}",
            lock_dir(&prefix, &lock),
            holder.lease_id()
        )]
    );
    held.release().await.unwrap();
    let next = latecomer.try_acquire(&lock, Mode::Exclusive).await.unwrap();
    assert!(next.is_some(), "a withdrawn waiter still blocked the lock");
}

/// Dropping a waiting `acquire` future (here: aborting its task) deletes
/// its key, and the contender behind it moves up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acquire_withdraws_its_key() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("dropped");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    let lock = name("dropped");
    let raw = raw(&etcd.endpoints()).await;
    let mut queue = DirWatch::start(&raw, &lock_dir(&prefix, &lock)).await;
    let holder = session(&connection, options(10)).await;
    let held = holder.acquire(&lock, Mode::Exclusive).await.unwrap();
    let held_generation = held.generation();
    queue.next_put().await;

    let quitter = session(&connection, options(10)).await;
    let quitter_lease = quitter.lease_id();
    let (quitter_lock, quitter_session) = (lock.clone(), quitter.clone());
    let waiting = tokio::spawn(async move {
        quitter_session
            .acquire(&quitter_lock, Mode::Exclusive)
            .await
    });
    let quitter_key = queue.next_put().await;
    assert!(quitter_key.ends_with(&format!("{quitter_lease:016x}")));

    // Someone queued behind the quitter, watching the quitter's key.
    let patient = session(&connection, options(10)).await;
    let (patient_lock, patient_session) = (lock.clone(), patient.clone());
    let behind = tokio::spawn(async move {
        patient_session
            .acquire(&patient_lock, Mode::Exclusive)
            .await
    });
    queue.next_put().await;

    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    queue.deleted(&quitter_key).await;

    held.release().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(10), behind)
        .await
        .expect("the contender behind a dropped waiter is granted")
        .unwrap()
        .unwrap();
    assert!(granted.generation() > held_generation);
    granted.release().await.unwrap();
    drop(quitter);
}

/// `try_acquire` on a busy lock returns `None` and leaves no key, in both
/// modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_on_a_busy_lock_leaves_nothing() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("try");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    let lock = name("try");
    let holder = session(&connection, options(10)).await;
    let trier = session(&connection, options(10)).await;
    let held = holder.acquire(&lock, Mode::Exclusive).await.unwrap();
    assert!(
        trier
            .try_acquire(&lock, Mode::Exclusive)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        trier
            .try_acquire(&lock, Mode::Shared)
            .await
            .unwrap()
            .is_none()
    );
    let mut raw = raw(&etcd.endpoints()).await;
    assert_eq!(
        keys_under(&mut raw, &lock_dir(&prefix, &lock)).await.len(),
        1
    );
    held.release().await.unwrap();
    let mine = trier
        .try_acquire(&lock, Mode::Exclusive)
        .await
        .unwrap()
        .unwrap();
    mine.release().await.unwrap();
    assert!(
        keys_under(&mut raw, &lock_dir(&prefix, &lock))
            .await
            .is_empty()
    );
}

/// The per-process waiter bound fails fast with `Busy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_waiters_fail_fast_with_busy() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("busy");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    let lock = name("busy");
    let raw = raw(&etcd.endpoints()).await;
    let mut queue = DirWatch::start(&raw, &lock_dir(&prefix, &lock)).await;
    let bounded = options(10).with_max_waiters(2);
    let holder = session(&connection, bounded.clone()).await;
    let held = holder.acquire(&lock, Mode::Exclusive).await.unwrap();
    queue.next_put().await;
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let waiter = session(&connection, bounded.clone()).await;
        let lock = lock.clone();
        waiters.push(tokio::spawn(async move {
            waiter.acquire(&lock, Mode::Exclusive).await
        }));
        queue.next_put().await;
    }
    let third = session(&connection, bounded.clone()).await;
    match third.acquire(&lock, Mode::Exclusive).await {
        Err(LockError::Busy { waiters: 2, .. }) => {}
        other => panic!("expected Busy, got {other:?}"),
    }
    held.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap().unwrap().release().await.unwrap();
    }
}
