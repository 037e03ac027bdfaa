//! Sessions: one lease, its keep-alive, and the locks held under it.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use palisade_core::holds::{GiveBack, HoldBackend, HoldTable, Task};
use palisade_core::{
    LeaseState, LeaseTracker, LeaseWatch, LockError, LostReason, Mode, SessionOptions,
};
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::client::Resend;
use crate::errors::{self, BACKEND};
use crate::keepalive;
use crate::key_watch::KeyWatch;
use crate::keys::{self, LockKeys, lease_hex};
use crate::task::AbortOnDrop;
use crate::watch_hub::WatchHub;
use crate::{ConfigError, EtcdConfig, EtcdLockClient, txns};

/// A Palisade lock session on etcd: one lease, kept alive in the background,
/// under which locks are taken. Implements the core `Lock` trait.
///
/// Re-entry is per session: acquiring a lock this session already holds, in
/// the same mode, succeeds at once with the same generation. Tasks that must
/// exclude each other therefore need their own sessions; they can share one
/// [`EtcdLockClient`]. Clones of an `EtcdLock` are the same session.
///
/// The session ends when its lease ends: dropped (the lease is revoked in
/// the background), [`closed`](EtcdLock::close), revoked or expired on the
/// server, or lapsed by the local clock because keep-alives failed. After
/// that every `acquire` fails with `LockError::SessionClosed`; open a new
/// session.
///
/// ```no_run
/// use std::time::Duration;
/// use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
/// use palisade_lock_etcd::{EtcdConfig, EtcdLock};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let config = EtcdConfig::from_endpoint_list("127.0.0.1:2379")?;
/// let options = SessionOptions::default()
///     .with_ttl(Duration::from_secs(5))
///     .with_lock_delay(Duration::from_secs(2));
/// let locks = EtcdLock::connect(config, options).await?;
///
/// let name = LockName::new("inventory/sku-7")?;
/// let guard = locks.acquire_timeout(&name, Mode::Exclusive, Duration::from_secs(10)).await?;
/// let generation = guard.generation(); // the holder key's create-revision
/// # let _ = generation;
/// guard.release().await?;
/// locks.close().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EtcdLock {
    pub(crate) session: Arc<Session>,
}

/// The shared core of a session, owned by the `EtcdLock` handles and by
/// every guard taken under it (so a guard keeps its lease alive even if the
/// handle is dropped first).
pub struct Session {
    pub(crate) connection: EtcdLockClient,
    pub(crate) options: SessionOptions,
    /// The session's lease. Every contender key of this session is attached
    /// to it, so if the process dies or pauses past the TTL, etcd deletes
    /// its keys and the next waiter moves up. Its id names the keys
    /// (`<prefix>/<name>/<lease id>`), which makes re-queueing after a lost
    /// answer idempotent.
    pub(crate) lease_id: i64,
    /// With a non-zero lock-delay, a second lease whose TTL is the session
    /// TTL plus the delay, kept alive together with the session lease. The
    /// lock-delay markers hang on it: if this session dies, its contender
    /// keys vanish at the TTL and its markers the delay later, measured by
    /// etcd's clock. It is never revoked by a clean close: a lease with no
    /// keys costs nothing, and markers left by a lost hold must outlive it.
    pub(crate) delay_lease_id: Option<i64>,
    /// `<holder name>/<lease id>`: the sequencer's `holder` field.
    pub(crate) holder: String,
    /// The lease id as 16 hex digits: the sequencer's `lease` field.
    pub(crate) lease_text: String,
    /// The contender key's value in each mode, exclusive then shared
    /// (`keys::contender_value`), made once rather than per acquire.
    contender_values: [String; 2],
    /// The session lease's validity and the locks held under it. Shared
    /// with the keep-alive task, which extends them after each successful
    /// renewal.
    pub(crate) lease_state: Arc<SessionLease>,
    /// The session-wide lease-lost signal; waiters give up when it fires.
    pub(crate) lease: LeaseWatch,
    pub(crate) hub: WatchHub,
    /// Follows the holder keys of this session's holds.
    pub(crate) key_watch: KeyWatch,
    keepalive: Mutex<Option<AbortOnDrop>>,
    /// Where guards' drops and cancelled acquires spawn their clean-up.
    pub(crate) runtime: Handle,
}

/// What the keep-alive task and the lock operations share.
pub(crate) struct SessionLease {
    /// The session lease's validity, as of the last successful renewal.
    pub(crate) tracker: LeaseTracker,
    /// The locks this session holds. Its gates serialise this session's
    /// own acquisitions and releases of a name (there is one contender key
    /// per session and name): a second task of the same session waits
    /// behind the first and then re-enters. Ended, for good, when the
    /// lease is known gone.
    pub(crate) holds: HoldTable<EtcdHold>,
}

/// What the etcd backend keeps per hold.
pub struct EtcdHold {
    /// The holder key's create-revision: the generation, and the owner
    /// token for compare-and-delete.
    pub(crate) create_revision: i64,
    /// The holder key, watched for deletion (see `key_watch.rs`).
    pub(crate) key: String,
    /// When the grant was made; the key's watch is armed a little later.
    pub(crate) granted_at: Instant,
    /// The revision of the read that proved the grant: the key's watch
    /// starts just after it, so no deletion can slip between the two.
    pub(crate) grant_revision: i64,
}

/// Locks a std mutex, ignoring poisoning: the state stays consistent
/// because no critical section in this crate can panic halfway.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whole seconds, rounded up: etcd TTLs are integer seconds, and rounding
/// up only makes a lease outlive the local validity, never the reverse.
pub(crate) fn ceil_secs(duration: Duration) -> i64 {
    let seconds = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    i64::try_from(seconds.max(1)).unwrap_or(i64::MAX)
}

/// The validity deadline after a renewal sent at `sent_at`, for a lease etcd
/// says lives `granted_seconds`.
pub(crate) fn valid_until(
    options: &SessionOptions,
    sent_at: Instant,
    granted_seconds: i64,
) -> Instant {
    let granted = Duration::from_secs(u64::try_from(granted_seconds).unwrap_or(0));
    if granted >= options.ttl() {
        options.valid_until(sent_at)
    } else {
        sent_at + granted.saturating_sub(options.safety_margin())
    }
}

impl EtcdLockClient {
    /// Opens a session: grants its lease (and, with a lock-delay, its delay
    /// lease) and starts the keep-alive.
    ///
    /// Invalid options are reported as `LockError::Backend` whose source is
    /// a [`ConfigError`].
    pub async fn session(&self, options: SessionOptions) -> Result<EtcdLock, LockError> {
        options
            .validate()
            .map_err(|reason| errors::config(ConfigError::BadSessionOptions { reason }))?;
        let inner = &self.inner;
        let ttl_seconds = ceil_secs(options.ttl());
        let sent_at = Instant::now();
        let (lease_id, granted) = inner.lease_grant(ttl_seconds).await?;
        let delay_lease_id = if options.lock_delay().is_zero() {
            None
        } else {
            // Granted after the session lease, so it also expires after it.
            match inner
                .lease_grant(ttl_seconds + ceil_secs(options.lock_delay()))
                .await
            {
                Ok((delay_lease_id, _)) => Some(delay_lease_id),
                Err(error) => {
                    let _ = inner.lease_revoke(lease_id).await;
                    return Err(error);
                }
            }
        };
        let tracker = LeaseTracker::new(valid_until(&options, sent_at, granted));
        let lease = tracker.watch();
        let lease_state = Arc::new(SessionLease {
            tracker,
            holds: HoldTable::new(BACKEND, &options, inner.waiters.clone()),
        });
        let lease_text = lease_hex(lease_id);
        let holder = format!("{}/{lease_text}", inner.config.holder_name());
        let contender_values =
            [Mode::Exclusive, Mode::Shared].map(|mode| keys::contender_value(mode, &holder));
        let keepalive = tokio::spawn(keepalive::run(keepalive::KeepAlive {
            connection: inner.clone(),
            options: options.clone(),
            lease_id,
            delay_lease_id,
            state: Arc::downgrade(&lease_state),
        }));
        tracing::info!(
            lease = %lease_text,
            ttl = ?options.ttl(),
            lock_delay = ?options.lock_delay(),
            "etcd session opened"
        );
        Ok(EtcdLock {
            session: Arc::new_cyclic(|weak| Session {
                connection: self.clone(),
                options,
                lease_id,
                delay_lease_id,
                holder,
                lease_text,
                contender_values,
                lease_state,
                lease,
                hub: WatchHub::new(inner.clone()),
                key_watch: KeyWatch::start(weak.clone()),
                keepalive: Mutex::new(Some(AbortOnDrop::new(keepalive))),
                runtime: Handle::current(),
            }),
        })
    }
}

impl EtcdLock {
    /// Connects to etcd and opens one session on a connection of its own: the
    /// one call a process (or a test's child process) needs.
    pub async fn connect(
        config: EtcdConfig,
        options: SessionOptions,
    ) -> Result<EtcdLock, LockError> {
        EtcdLockClient::connect(config)
            .await?
            .session(options)
            .await
    }

    /// The connection this session runs on.
    pub fn connection(&self) -> &EtcdLockClient {
        &self.session.connection
    }

    /// The session's lease id (also in its keys and sequencers, in hex).
    pub fn lease_id(&self) -> i64 {
        self.session.lease_id
    }

    /// The sequencer `holder` field of this session: `<holder name>/<lease
    /// id in hex>`.
    pub fn holder(&self) -> &str {
        &self.session.holder
    }

    /// The session's options.
    pub fn options(&self) -> &SessionOptions {
        &self.session.options
    }

    /// The session lease's signal: valid while the lease is provably alive;
    /// fires when it is lost (every hold of the session is lost with it).
    pub fn lease(&self) -> LeaseWatch {
        self.session.lease.clone()
    }

    /// Whether the session can still acquire.
    pub fn is_open(&self) -> bool {
        self.session.ensure_open().is_ok()
    }

    /// Ends the session: stops the keep-alive and revokes the lease, which
    /// deletes this session's keys. Release guards first for a clean
    /// hand-off: holds still open here end as lost, so their lock-delay
    /// (if any) applies.
    pub async fn close(self) -> Result<(), LockError> {
        self.session.stop_keepalive();
        self.session.end(LostReason::SessionClosed);
        self.session
            .connection
            .inner
            .lease_revoke(self.session.lease_id)
            .await
    }

    /// Test and demo hook: stops renewing this session's lease, for good,
    /// as a stop-the-world pause (GC, SIGSTOP) of the holder would. Nothing
    /// is revoked or released: etcd expires the lease one TTL after the last
    /// renewal, the holder keys go with it, and the guards' lease-lost
    /// signal fires at their local validity deadline. The GC-pause and
    /// flash-sale demos use it to pause a holder inside one process; in
    /// production, close the session instead.
    #[cfg(feature = "testing")]
    pub fn stop_keepalive(&self) {
        self.session.stop_keepalive();
        tracing::warn!(lease = %lease_hex(self.session.lease_id), "keep-alive stopped on purpose (test hook)");
    }

    /// Ends the session on the server the way a crash would, for fault
    /// injection in tests and drills: the keep-alive stops, the lease is
    /// revoked without releasing anything, and the lock-delay of every hold
    /// runs from now (its marker moves to a fresh lease of exactly the
    /// delay). The local side is not told: guards find out as a crashed
    /// holder that came back would, through their key watch or the
    /// validity deadline.
    #[cfg(feature = "testing")]
    pub async fn simulate_crash(&self) -> Result<(), LockError> {
        let session = &self.session;
        session.stop_keepalive();
        let inner = &session.connection.inner;
        let held: Vec<(palisade_core::LockName, palisade_core::Mode, i64)> = session
            .holds()
            .holds()
            .iter()
            .map(|hold| {
                (
                    hold.name().clone(),
                    hold.mode(),
                    hold.data().create_revision,
                )
            })
            .collect();
        if session.delay_lease_id.is_some() && !held.is_empty() {
            let delay = session.options.lock_delay();
            let (fresh_lease, _) = inner.lease_grant(ceil_secs(delay)).await?;
            for (name, mode, create_revision) in &held {
                let keys = crate::keys::LockKeys::new(inner.config.prefix(), name);
                let value = crate::keys::marker_value(
                    *mode,
                    *create_revision,
                    delay.as_millis(),
                    &session.holder,
                );
                inner
                    .txn(
                        "simulate crash",
                        crate::txns::mark(
                            &keys,
                            session.lease_id,
                            *create_revision,
                            fresh_lease,
                            &value,
                        ),
                    )
                    .await?;
            }
        }
        tracing::warn!(lease = %lease_hex(session.lease_id), "simulated crash: lease revoked without release");
        inner.lease_revoke(session.lease_id).await
    }
}

impl fmt::Debug for EtcdLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLock")
            .field("lease", &lease_hex(self.session.lease_id))
            .field("holder", &self.session.holder)
            .field("options", &self.session.options)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// The value of this session's contender key in `mode`.
    pub(crate) fn contender_value(&self, mode: Mode) -> &str {
        match mode {
            Mode::Exclusive => &self.contender_values[0],
            Mode::Shared => &self.contender_values[1],
        }
    }

    /// Fails with `SessionClosed` once the lease is known lost or lapsed.
    pub(crate) fn ensure_open(&self) -> Result<(), LockError> {
        self.lease_state.ensure_open()
    }

    /// Whether the lease is provably valid now.
    pub(crate) fn is_valid(&self) -> bool {
        self.ensure_open().is_ok()
    }

    /// Marks the session over, and every hold lost, for `reason`.
    pub(crate) fn end(&self, reason: LostReason) {
        self.lease_state.end(reason);
    }

    fn stop_keepalive(&self) {
        lock(&self.keepalive).take();
    }
}

impl SessionLease {
    /// Fails with `SessionClosed` once the lease is known lost or lapsed.
    pub(crate) fn ensure_open(&self) -> Result<(), LockError> {
        if self.holds.ended().is_some() || !matches!(self.tracker.state(), LeaseState::Held { .. })
        {
            Err(LockError::SessionClosed)
        } else {
            Ok(())
        }
    }

    /// Marks the session over, and every hold lost, for `reason`.
    pub(crate) fn end(&self, reason: LostReason) {
        if self.holds.end(reason) && self.tracker.lose(reason) {
            tracing::warn!(%reason, "etcd session lease lost");
        }
    }
}

/// The etcd protocol behind the session's hold table: a hold is given back
/// by deleting its key, compare-and-delete on its create-revision.
impl HoldBackend for Session {
    type Data = EtcdHold;

    fn holds(&self) -> &HoldTable<EtcdHold> {
        &self.lease_state.holds
    }

    /// Deletes the holder key (with its lock-delay marker), which wakes the
    /// next waiter, under the gate, so no acquisition of this session can
    /// reuse the key meanwhile. If etcd cannot answer, the delete is
    /// retried in the background, still under the gate.
    async fn give_back(&self, mut hold: GiveBack<EtcdHold>) -> Result<bool, LockError> {
        let create_revision = hold.data().create_revision;
        let marked = self.delay_lease_id.is_some();
        let inner = &self.connection.inner;
        // Dropped mid-way, this future finishes in the background (the
        // table's doing), so the gate stays held until etcd answered.
        let released = if hold.holds_gate() && !marked {
            // The table's current hold, with the gate: no other key of
            // this session for the name exists or can be made meanwhile,
            // so the key is this hold's and a plain delete (what etcd's
            // own Unlock sends) says whether it was still there.
            inner
                .delete_resending("release", Resend::OnlyUnsent, &hold.data().key)
                .await
                .map(|deleted| deleted > 0)
        } else {
            // Forgotten by the table (a later acquisition of the name may
            // have made a key of the same name), or a lock-delay marker to
            // remove with it: only the key of this hold's creation.
            let keys = LockKeys::new(inner.config.prefix(), hold.name());
            inner
                .txn_made("release", Resend::OnlyUnsent, || {
                    txns::remove(&keys, self.lease_id, Some(create_revision), marked)
                })
                .await
                .map(|response| response.succeeded())
        };
        match released {
            Ok(released) => Ok(released),
            Err(error) => {
                // The key may still be there: keep trying, with the gate.
                let keys = LockKeys::new(inner.config.prefix(), hold.name());
                self.spawn_withdraw(keys, Some(create_revision), hold.take_gate());
                Err(error)
            }
        }
    }

    fn spawn(&self, task: Task) {
        self.runtime.spawn(task);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Every guard is gone (each holds this session), so every hold was
        // released; revoking the lease removes what is left (waiters'
        // keys from cancelled acquires whose clean-up has not run).
        self.stop_keepalive();
        let inner = self.connection.inner.clone();
        let lease_id = self.lease_id;
        let closed = self.lease_state.holds.ended().is_some();
        self.runtime.spawn(async move {
            if let Err(error) = inner.lease_revoke(lease_id).await {
                tracing::debug!(%error, lease = %lease_hex(lease_id), "revoking a dropped session's lease failed; it expires by itself");
            }
        });
        if !closed {
            tracing::debug!(lease = %lease_hex(lease_id), "etcd session dropped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_rounding() {
        assert_eq!(ceil_secs(Duration::from_secs(2)), 2);
        assert_eq!(ceil_secs(Duration::from_millis(2001)), 3);
        assert_eq!(ceil_secs(Duration::from_millis(10)), 1);
        assert_eq!(ceil_secs(Duration::ZERO), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn validity_uses_the_shorter_of_asked_and_granted() {
        let options = SessionOptions::default()
            .with_ttl(Duration::from_secs(10))
            .with_safety_margin(Duration::from_secs(1));
        let now = Instant::now();
        assert_eq!(valid_until(&options, now, 10), now + Duration::from_secs(9));
        assert_eq!(valid_until(&options, now, 60), now + Duration::from_secs(9));
        assert_eq!(valid_until(&options, now, 5), now + Duration::from_secs(4));
        assert_eq!(valid_until(&options, now, 0), now);
    }
}
