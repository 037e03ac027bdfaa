//! Leases: kept alive, lost (deleted key, revoked lease, unreachable etcd),
//! and Chubby's lock-delay.

use std::time::Duration;

use palisade_core::LockName;
use palisade_core::{LeaseState, Lock, LockError, LockGuard, LostReason, Mode};
use palisade_lock_etcd::{EtcdLock, EtcdLockClient};
use palisade_testkit::etcd::EtcdServer;
use tokio::time::Instant;

use crate::fixtures::*;

/// Within this, a lost lease must be reported (generous: 2-core CI).
const REPORT_WITHIN: Duration = Duration::from_secs(10);

/// An etcd, a connection under a fresh prefix, a lock name, and two
/// sessions of the same TTL on it.
struct Two {
    etcd: EtcdServer,
    prefix: String,
    connection: EtcdLockClient,
    lock: LockName,
    holder: EtcdLock,
    other: EtcdLock,
}

impl Two {
    async fn start(tag: &str, ttl_secs: u64) -> Two {
        let etcd = crate::fixtures::etcd();
        let prefix = unique_prefix(tag);
        let connection = connect(&etcd.endpoints(), &prefix).await;
        let holder = session(&connection, options(ttl_secs)).await;
        let other = session(&connection, options(ttl_secs)).await;
        Two {
            etcd,
            prefix,
            connection,
            lock: name(tag),
            holder,
            other,
        }
    }

    /// Deletes `guard`'s key (a hold of `holder`) behind its back, as an
    /// operator would, and waits for the guard to report its lease lost.
    /// Returns the raw client, the key and the state reported.
    async fn delete_holders_key(
        &self,
        guard: &impl LockGuard,
    ) -> (etcd_client::Client, String, LeaseState) {
        let mut raw = raw(&self.etcd.endpoints()).await;
        let dir = lock_dir(&self.prefix, &self.lock);
        let key = format!("{dir}{:016x}", self.holder.lease_id());
        raw.delete(key.clone(), None).await.unwrap();
        let mut lease = guard.lease();
        let state = tokio::time::timeout(REPORT_WITHIN, lease.lost())
            .await
            .unwrap();
        (raw, key, state)
    }
}

/// `session` takes `lock` and lets it go again.
async fn takes_and_releases(session: &EtcdLock, lock: &LockName) {
    let guard = session.acquire(lock, Mode::Exclusive).await.unwrap();
    guard.release().await.unwrap();
}

/// A hold outlives its TTL many times over while the keep-alive runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keepalive_keeps_a_hold_valid_past_its_ttl() {
    let Two {
        etcd: _etcd,
        prefix: _,
        connection,
        lock,
        holder,
        other,
    } = Two::start("keepalive", 2).await;
    let guard = holder.acquire(&lock, Mode::Exclusive).await.unwrap();
    let before = connection.rpc_counts().keepalives;
    // Time is the subject here: hold for three TTLs.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(guard.is_valid(), "{:?}", guard.lease().state());
    assert!(guard.sequencer().is_ok());
    assert!(connection.rpc_counts().keepalives > before);
    assert!(
        other
            .try_acquire(&lock, Mode::Exclusive)
            .await
            .unwrap()
            .is_none()
    );
    guard.release().await.unwrap();
}

/// An operator deletes the holder's key: the guard reports the loss, the
/// next contender gets a higher generation, and the old release is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_holder_key_is_reported_lost() {
    let two = Two::start("deleted", 10).await;
    let (holder, next, lock) = (&two.holder, &two.other, &two.lock);
    let guard = holder.acquire(lock, Mode::Exclusive).await.unwrap();
    let (_, _, state) = two.delete_holders_key(&guard).await;
    assert_eq!(state, LeaseState::Lost(LostReason::KeyDeleted));
    assert!(matches!(
        guard.sequencer(),
        Err(LockError::LeaseLost {
            reason: LostReason::KeyDeleted,
            ..
        })
    ));
    let taken = next
        .try_acquire(lock, Mode::Exclusive)
        .await
        .unwrap()
        .unwrap();
    assert!(taken.generation() > guard.generation());
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotOwner { .. })
    ));
    // The session itself is fine and can queue again.
    assert!(holder.is_open());
    taken.release().await.unwrap();
    takes_and_releases(holder, lock).await;
}

/// A hold lost to a deleted key, its name acquired again by the same
/// session (a new key of the same name, under the same lease): the old
/// guard's release is refused and deletes nothing; the new hold keeps
/// its key. A release without the gate must compare on the key's
/// creation, where a current hold's release may delete plainly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_holds_release_leaves_the_sessions_new_hold_of_the_name_alone() {
    let two = Two::start("reheld", 10).await;
    let (holder, other, lock) = (&two.holder, &two.other, &two.lock);
    let old = holder.acquire(lock, Mode::Exclusive).await.unwrap();
    let (mut raw, key, _) = two.delete_holders_key(&old).await;
    let new = holder.acquire(lock, Mode::Exclusive).await.unwrap();
    assert!(new.generation() > old.generation());
    assert!(matches!(
        old.release().await,
        Err(LockError::NotOwner { .. })
    ));
    let kept = raw.get(key, None).await.unwrap();
    assert_eq!(
        kept.kvs().first().map(|kv| kv.create_revision()),
        Some(i64::try_from(new.generation().get()).unwrap()),
        "the new hold's key is still there"
    );
    assert!(new.is_valid());
    assert!(
        other
            .try_acquire(lock, Mode::Exclusive)
            .await
            .unwrap()
            .is_none(),
        "the lock is still held"
    );
    new.release().await.unwrap();
    takes_and_releases(other, lock).await;
}

/// The lease is revoked behind the session's back: holds are lost, and the
/// session refuses to acquire ("lease not found" → `SessionClosed`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_lease_is_reported_lost_and_closes_the_session() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("revoked");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    let holder = session(&connection, options(10)).await;
    let guard = holder
        .acquire(&name("revoked"), Mode::Exclusive)
        .await
        .unwrap();
    let mut raw = raw(&etcd.endpoints()).await;
    raw.lease_revoke(holder.lease_id()).await.unwrap();
    let state = tokio::time::timeout(REPORT_WITHIN, guard.lease().lost())
        .await
        .unwrap();
    assert!(
        matches!(
            state,
            LeaseState::Lost(LostReason::KeyDeleted | LostReason::Revoked)
        ),
        "{state:?}"
    );
    match holder
        .acquire(&name("revoked/other"), Mode::Exclusive)
        .await
    {
        Err(LockError::SessionClosed) => {}
        other => panic!("expected SessionClosed, got {other:?}"),
    }
    assert!(!holder.is_open());
    assert!(!holder.lease().is_valid());
}

/// etcd stops answering (SIGSTOP): keep-alives fail, and the guard reports
/// the loss by its own deadline, without hearing from etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_etcd_makes_the_hold_lapse_by_its_deadline() {
    let etcd = EtcdServer::spawn();
    let prefix = unique_prefix("unreachable");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    let holder = session(&connection, options(2)).await;
    let guard = holder
        .acquire(&name("unreachable"), Mode::Exclusive)
        .await
        .unwrap();
    let paused_at = Instant::now();
    etcd.pause().unwrap();
    let state = tokio::time::timeout(REPORT_WITHIN, guard.lease().lost()).await;
    let lapsed_at = Instant::now();
    etcd.resume().unwrap();
    let state = state.expect("the loss is reported while etcd is frozen");
    assert!(
        matches!(
            state,
            LeaseState::Lost(LostReason::Expired | LostReason::KeepAliveFailed)
        ),
        "{state:?}"
    );
    // No renewal was sent after the pause, so validity ended at the latest
    // one TTL (minus the margin) after it; the signal came by then (plus
    // scheduling slack on a loaded machine).
    let bound = paused_at + Duration::from_secs(2) + Duration::from_millis(500);
    assert!(
        lapsed_at <= bound,
        "reported {:?} after the pause",
        lapsed_at - paused_at
    );
    assert!(guard.sequencer().is_err());
}

/// Chubby's lock-delay: a holder that loses its lease without releasing
/// keeps everyone out for the delay, a waiter as much as a newcomer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_delay_holds_the_lock_after_a_lost_lease() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("lockdelay");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    let lock = name("lockdelay");
    let delay = Duration::from_secs(3);
    let raw = raw(&etcd.endpoints()).await;
    let mut queue = DirWatch::start(&raw, &lock_dir(&prefix, &lock)).await;
    let crashing = session(&connection, options(10).with_lock_delay(delay)).await;
    let held = crashing.acquire(&lock, Mode::Exclusive).await.unwrap();
    let waiter = session(&connection, options(10)).await;
    let waiter_lease = waiter.lease_id();
    let (waiter_lock, waiter_session) = (lock.clone(), waiter.clone());
    let waiting = tokio::spawn(async move {
        let guard = waiter_session
            .acquire(&waiter_lock, Mode::Exclusive)
            .await
            .unwrap();
        (Instant::now(), guard)
    });
    queue.queued(waiter_lease).await;

    let crashed_at = Instant::now();
    crashing.simulate_crash().await.unwrap();
    // A newcomer is kept out too, though nobody holds the lock.
    let newcomer = session(&connection, options(10)).await;
    assert!(
        newcomer
            .try_acquire(&lock, Mode::Exclusive)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        newcomer
            .try_acquire(&lock, Mode::Shared)
            .await
            .unwrap()
            .is_none()
    );

    let (granted_at, guard) = tokio::time::timeout(delay + REPORT_WITHIN, waiting)
        .await
        .expect("the waiter is granted after the delay")
        .unwrap();
    let waited = granted_at - crashed_at;
    assert!(
        waited >= delay - Duration::from_millis(50),
        "granted after {waited:?}, delay {delay:?}"
    );
    assert!(guard.generation() > held.generation());
    // The crashed holder finds out on its own.
    let state = tokio::time::timeout(REPORT_WITHIN, held.lease().lost())
        .await
        .unwrap();
    assert!(matches!(state, LeaseState::Lost(_)), "{state:?}");
    guard.release().await.unwrap();
}

/// A clean release has no lock-delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_release_has_no_lock_delay() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("cleandelay");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    let lock = name("cleandelay");
    let careful = session(
        &connection,
        options(10).with_lock_delay(Duration::from_secs(30)),
    )
    .await;
    let other = session(&connection, options(10)).await;
    let guard = careful.acquire(&lock, Mode::Exclusive).await.unwrap();
    let mut raw = raw(&etcd.endpoints()).await;
    let marker = format!(
        "{}delay-{:016x}",
        lock_dir(&prefix, &lock),
        careful.lease_id()
    );
    let keys = keys_under(&mut raw, &lock_dir(&prefix, &lock)).await;
    assert!(keys.contains(&marker), "the holder's marker: {keys:?}");
    guard.release().await.unwrap();
    assert!(
        keys_under(&mut raw, &lock_dir(&prefix, &lock))
            .await
            .is_empty()
    );
    let next = other.try_acquire(&lock, Mode::Exclusive).await.unwrap();
    assert!(
        next.is_some(),
        "a clean release must not impose the lock-delay"
    );
}
