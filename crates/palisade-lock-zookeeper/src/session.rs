//! Sessions: one ZooKeeper session is one lease.
//!
//! The session's ephemeral nodes are its holds and its places in queues;
//! ZooKeeper deletes them when it expires the session, which it does once
//! it has heard nothing from the client for the session timeout (= the
//! TTL). So the hold is provably valid only until *the last moment the
//! server may have heard from us* plus the timeout: the keep-alive sends a
//! `sync` and an `exists` every keep-alive interval, and each answer moves
//! the deadline to `sent_at + ttl - safety margin`, counted from when the
//! request was *sent* (the server heard it no earlier). A disconnect
//! changes nothing: no answer, no extension, and the deadline passes by
//! itself (`LeaseWatch` fires at it) whether or not the client library has
//! noticed the connection is gone. This is stricter than Curator's
//! SUSPENDED (a disconnect noticed, the session maybe alive) and LOST (the
//! expiry learned after reconnecting): lease lost fires before LOST can,
//! and at a deadline that does not depend on when SUSPENDED was noticed.

use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use palisade_core::holds::{GiveBack, HoldBackend, HoldTable, Task};
use palisade_core::{LeaseState, LeaseTracker, LeaseWatch, LockError, LostReason, SessionOptions};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::acquire::withdraw_paths;
use crate::client::lock;
use crate::client::{close_from_outside, connect_session};
use crate::errors::{self, BACKEND};
use crate::floor_cache::FloorCache;
use crate::node_watch::NodeWatch;
use crate::task::AbortOnDrop;
use crate::{ConfigError, ZkLockClient};

/// A Palisade lock session on ZooKeeper: one ZooKeeper session, whose
/// timeout is the TTL, under which locks are taken. Implements the core
/// `Lock` trait.
///
/// Re-entry is per session: acquiring a lock this session already holds,
/// in the same mode, succeeds at once with the same generation. Tasks that
/// must exclude each other need sessions of their own; they can share one
/// [`ZkLockClient`]. Clones of a `ZkLock` are the same session.
///
/// The session ends when ZooKeeper expires or closes it, when its lease
/// lapses by the local clock, or when it is [closed](ZkLock::close); then
/// every `acquire` fails with `LockError::SessionClosed`: open a new one.
#[derive(Clone)]
pub struct ZkLock {
    pub(crate) session: Arc<Session>,
}

/// The shared core of a session, owned by the `ZkLock` handles and by
/// every guard taken under it.
pub struct Session {
    /// Itself, for a release's retry in the background.
    me: Weak<Session>,
    pub(crate) client: ZkLockClient,
    pub(crate) options: SessionOptions,
    /// The ZooKeeper session: the lease. Every contender node of this
    /// session is an ephemeral node of it. Taken out to close the session
    /// (dropping the last handle of a non-detached session closes it), so
    /// every other handle lives only for a request, never across a wait;
    /// `None` after that.
    zk: Mutex<Option<zk::Client>>,
    /// With a non-zero lock-delay, a second, detached ZooKeeper session
    /// whose timeout is the TTL plus the delay, kept alive by the same
    /// process. The lock-delay markers are its ephemeral nodes: if this
    /// process dies or is cut off, the contender nodes vanish at the TTL
    /// and the markers the delay later, by the ensemble's clock. When the
    /// lease is lost it is abandoned (`None`), never closed, so its
    /// markers outlive the holds by the delay.
    pub(crate) delay_zk: Mutex<Option<zk::Client>>,
    /// `<session id>`, the sequencer's `lease` field and the `lease` of
    /// this session's holders in inspection.
    pub(crate) lease_id: String,
    /// The session lease's validity, as of the last answered keep-alive.
    tracker: LeaseTracker,
    /// The session-wide lease-lost signal; waiters give up when it fires.
    pub(crate) lease: LeaseWatch,
    /// The session's holds (re-entry, one acquisition per name at a time,
    /// the waiter bound), on core's shared table; ended with the session.
    holds: HoldTable<ZkHold>,
    /// The floor history, kept under a watch so that a grant need not
    /// read it (floor_cache.rs).
    pub(crate) floor_cache: FloorCache,
    /// Holds granted without a listing whose node is not watched yet: the
    /// keep-alive's next tick arms them (node_watch.rs).
    pub(crate) unwatched: Mutex<Vec<Weak<NodeWatch>>>,
    /// The keep-alive and the session-state follower.
    tasks: Mutex<Tasks>,
}

/// A session's background tasks, stopped with it.
#[derive(Default)]
struct Tasks {
    /// Stopped alone by the test hooks, as a paused process stops it;
    /// otherwise only held.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    keepalive: Option<AbortOnDrop>,
    _follower: Option<AbortOnDrop>,
}

/// What the session keeps per hold besides its sequencer and lease.
pub struct ZkHold {
    /// The contender node (deleting it releases the lock) and its watch:
    /// its deletion by anyone else (a forced release) loses the hold.
    pub(crate) node: Arc<NodeWatch>,
    /// The lock-delay marker's path, when the session has a lock-delay:
    /// deleted just before the node on a release, left to expire with the
    /// lock-delay session otherwise.
    pub(crate) marker: Option<String>,
}

/// The session-level sequencer `lease` field: ZooKeeper's session id.
pub(crate) fn lease_hex(session_id: i64) -> String {
    format!("{:016x}", session_id as u64)
}

impl ZkLockClient {
    /// Opens a session (a ZooKeeper session of its own) with `options`.
    ///
    /// The TTL is the session timeout asked of ZooKeeper; a server that
    /// grants another (its `minSessionTimeout`/`maxSessionTimeout` allow
    /// something else) is refused with
    /// [`ConfigError::SessionTimeoutRefused`], as is a lock-delay whose
    /// session (TTL + delay) cannot be granted.
    pub async fn session(&self, options: SessionOptions) -> Result<ZkLock, LockError> {
        options
            .validate()
            .map_err(|reason| errors::config(ConfigError::BadSessionOptions { reason }))?;
        let config = self.config();
        let ttl = whole_millis(options.ttl());
        let started = Instant::now();
        let zk = connect_session(config, ttl, false).await?;
        check_granted(&zk, ttl, "ttl", "")?;
        let delay_zk = if options.lock_delay().is_zero() {
            None
        } else {
            let asked = whole_millis(options.ttl() + options.lock_delay());
            let delay_zk = connect_session(config, asked, true).await?;
            if let Err(error) =
                check_granted(&delay_zk, asked, "ttl + lock-delay", " and lock-delay")
            {
                // Nothing hangs on it yet: let it expire.
                drop(delay_zk);
                return Err(error);
            }
            Some(delay_zk)
        };
        // The server created the session after the connect was sent.
        let tracker = LeaseTracker::new(options.valid_until(started));
        let states = zk.state_watcher();
        let lease = tracker.watch();
        let holds = HoldTable::new(BACKEND, &options, self.inner.waiters.clone());
        let session = Arc::new_cyclic(|me| Session {
            me: me.clone(),
            client: self.clone(),
            lease_id: lease_hex(zk.session_id().0),
            zk: Mutex::new(Some(zk)),
            delay_zk: Mutex::new(delay_zk),
            options,
            tracker,
            lease,
            holds,
            floor_cache: FloorCache::default(),
            unwatched: Mutex::default(),
            tasks: Mutex::default(),
        });
        let keepalive = tokio::spawn(keep_alive(Arc::downgrade(&session)));
        let follower = tokio::spawn(follow_state(Arc::downgrade(&session), states));
        *lock(&session.tasks) = Tasks {
            keepalive: Some(AbortOnDrop(keepalive)),
            _follower: Some(AbortOnDrop(follower)),
        };
        tracing::info!(backend = BACKEND, session = %session.lease_id, ttl = ?session.options.ttl(), "session opened");
        Ok(ZkLock { session })
    }
}

/// A duration as ZooKeeper sees it: whole milliseconds.
fn whole_millis(duration: Duration) -> Duration {
    Duration::from_millis(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

/// Refuses a session whose granted timeout differs from `asked`.
fn check_granted(
    zk: &zk::Client,
    asked: Duration,
    what: &'static str,
    hint: &'static str,
) -> Result<(), LockError> {
    let granted = zk.session_timeout();
    if granted != asked {
        return Err(errors::config(ConfigError::SessionTimeoutRefused {
            what,
            asked,
            granted,
            hint,
        }));
    }
    Ok(())
}

impl ZkLock {
    /// Connects a client with `config` and opens one session on it.
    pub async fn connect(
        config: crate::ZkConfig,
        options: SessionOptions,
    ) -> Result<ZkLock, LockError> {
        ZkLockClient::connect(config).await?.session(options).await
    }

    /// The client this session was opened on.
    pub fn client(&self) -> &ZkLockClient {
        &self.session.client
    }

    /// ZooKeeper's id of this session, as the sequencers' `lease` field
    /// writes it (16 hex digits).
    pub fn session_id(&self) -> &str {
        &self.session.lease_id
    }

    /// The session-wide lease: lost when ZooKeeper may have expired the
    /// session.
    pub fn lease(&self) -> LeaseWatch {
        self.session.lease.clone()
    }

    /// Whether the session can still take locks.
    pub fn is_open(&self) -> bool {
        self.session.check_open().is_ok()
    }

    /// Ends the session cleanly: every hold is released (ZooKeeper deletes
    /// the session's nodes at once), with no lock-delay.
    pub async fn close(&self) -> Result<(), LockError> {
        self.session.end(LostReason::SessionClosed, true);
        self.session.close_zk().await
    }

    /// Test hook: ends the ZooKeeper session on the server, as an expiry
    /// after a crash would, without releasing anything: the keep-alive
    /// stops, the ZooKeeper session is closed (its nodes go at once), the
    /// lock-delay session is abandoned (its markers stay for TTL + delay),
    /// and the holds are lost as soon as the session's state says it is
    /// over. Returns once the server has ended the session.
    ///
    /// The session is closed by its own client, not from another
    /// connection: the server moves a session to its newest connection,
    /// so the owning client, still running, would re-attach and cut the
    /// closing connection off before its close was answered, over and
    /// over.
    #[cfg(feature = "testing")]
    pub async fn simulate_crash(&self) -> Result<(), LockError> {
        self.stop_keepalive();
        lock(&self.session.delay_zk).take();
        self.session.close_zk().await
    }

    /// Test hook: stops the keep-alive, as a starved or paused process
    /// would; the lease then lapses at its deadline.
    #[cfg(feature = "testing")]
    pub fn stop_keepalive(&self) {
        lock(&self.session.tasks).keepalive.take();
    }
}

impl fmt::Debug for ZkLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkLock")
            .field("session", &self.session.lease_id)
            .field("lease", &self.session.lease.state())
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Fails unless the session can still take locks.
    pub(crate) fn check_open(&self) -> Result<(), LockError> {
        if self.is_over() || !self.lease.is_valid() {
            return Err(LockError::SessionClosed);
        }
        Ok(())
    }

    /// Whether the session is known to be over (final).
    pub(crate) fn is_over(&self) -> bool {
        self.holds.ended().is_some()
    }

    /// The ZooKeeper session's client, until it was closed.
    pub(crate) fn zk(&self) -> Result<zk::Client, LockError> {
        lock(&self.zk).clone().ok_or(LockError::SessionClosed)
    }

    /// Closes the ZooKeeper session from its own client: ZooKeeper deletes
    /// its nodes at once. Returns once the server answered (or the session
    /// was already over).
    async fn close_zk(&self) -> Result<(), LockError> {
        let Some(zk) = lock(&self.zk).take() else {
            return Ok(());
        };
        let mut states = zk.state_watcher();
        // Dropping the only handle of a non-detached session sends
        // CloseSession; the state turns terminal once the server answered.
        drop(zk);
        let timeout = self.client.config().request_timeout();
        let closed = async { while !states.changed().await.is_terminated() {} };
        tokio::time::timeout(timeout, closed)
            .await
            .map_err(|_| errors::timed_out("close session", timeout))
    }

    /// The lock-delay session, while it lives.
    pub(crate) fn delay_zk(&self) -> Option<zk::Client> {
        lock(&self.delay_zk).clone()
    }

    /// After a keep-alive sent at `sent_at` was answered: every hold and
    /// the session lease are valid until `sent_at + ttl - margin`.
    fn renewed(&self, sent_at: Instant) -> bool {
        let valid_until = self.options.valid_until(sent_at);
        if self.is_over() || !self.tracker.extend(valid_until) {
            return false;
        }
        self.holds.extend_where(|_| true, valid_until);
        true
    }

    /// Ends the session: every hold is lost for `reason`. A clean end
    /// (`close`) closes the lock-delay session too; any other abandons it,
    /// so the markers of the lost holds keep their lock-delay.
    pub(crate) fn end(&self, reason: LostReason, clean: bool) {
        if self.holds.end(reason) {
            self.tracker.lose(reason);
            tracing::warn!(backend = BACKEND, session = %self.lease_id, reason = reason.as_str(), "session ended");
        }
        let abandoned = lock(&self.delay_zk).take();
        if let (true, Some(delay_zk)) = (clean, abandoned) {
            let config = self.client.config().clone();
            let info = delay_zk.session().clone();
            self.client.inner.runtime.spawn(async move {
                let _ = close_from_outside(&config, info).await;
            });
        }
    }
}

/// Renews the lease every keep-alive interval: a `sync` (answered through
/// the leader, so a server cut off from the quorum cannot answer it) and
/// an `exists`, pipelined; the answer extends every hold from the moment
/// the pair was sent.
async fn keep_alive(session: Weak<Session>) {
    let Some(interval) = session.upgrade().map(|s| s.options.keepalive_interval()) else {
        return;
    };
    loop {
        tokio::time::sleep(interval).await;
        let Some(session) = session.upgrade() else {
            return;
        };
        if session.is_over() {
            return;
        }
        // Sent ahead of the keep-alive's own requests, in its pipeline.
        let unwatched = std::mem::take(&mut *lock(&session.unwatched));
        for node in unwatched.iter().filter_map(Weak::upgrade) {
            node.arm(&session, None);
        }
        let Ok(zk) = session.zk() else {
            return;
        };
        let sent_at = Instant::now();
        let sync = zk.sync("/");
        let exists = zk.check_stat("/");
        let inner = &session.client.inner;
        let answered = async {
            inner.bounded("keep-alive", sync).await?;
            inner.bounded("keep-alive", exists).await
        };
        match answered.await {
            Ok(_) => {
                if !session.renewed(sent_at) {
                    session.end(LostReason::Expired, false);
                    return;
                }
            }
            Err(zk::Error::SessionExpired) => {
                session.end(LostReason::Revoked, false);
                return;
            }
            Err(zk::Error::ClientClosed) => {
                session.end(LostReason::SessionClosed, false);
                return;
            }
            Err(error) => {
                tracing::debug!(backend = BACKEND, session = %session.lease_id, %error, "keep-alive not answered");
                if !matches!(session.lease.state(), LeaseState::Held { .. }) {
                    session.end(LostReason::Expired, false);
                    return;
                }
            }
        }
    }
}

/// Follows the ZooKeeper session's state: an expiry or a close ends the
/// session at once; a disconnect (Curator's SUSPENDED) is only logged, as
/// the lease's deadline already counts from the last answered request.
async fn follow_state(session: Weak<Session>, mut states: zk::StateWatcher) {
    loop {
        let state = states.changed().await;
        let Some(session) = session.upgrade() else {
            return;
        };
        match state {
            zk::SessionState::Disconnected => {
                tracing::warn!(backend = BACKEND, session = %session.lease_id, lease_left = ?session.lease.remaining(), "disconnected from ZooKeeper; the lease lapses at its deadline unless a keep-alive is answered first");
                #[cfg(feature = "testing")]
                if session.client.config().mutation == crate::Mutation::LeaseFromDisconnectNotice {
                    // The mutation: count the lease from the moment the
                    // disconnect was noticed, not from the last answer, as
                    // Curator's LOST does (a session timeout after
                    // SUSPENDED).
                    let valid_until = Instant::now() + session.options.ttl();
                    let _ = session.tracker.extend(valid_until);
                    session.holds.extend_where(|_| true, valid_until);
                }
            }
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                tracing::info!(backend = BACKEND, session = %session.lease_id, "reconnected to ZooKeeper");
            }
            zk::SessionState::Expired => {
                session.end(LostReason::Revoked, false);
                return;
            }
            zk::SessionState::Closed | zk::SessionState::AuthFailed => {
                session.end(LostReason::SessionClosed, false);
                return;
            }
        }
    }
}

/// ZooKeeper's side of the session's hold table: a hold is given back by
/// deleting its lock-delay marker and then its node, which wakes the
/// contender behind it.
impl HoldBackend for Session {
    type Data = ZkHold;

    fn holds(&self) -> &HoldTable<ZkHold> {
        &self.holds
    }

    /// Node names are unique per attempt, so a new acquisition cannot
    /// collide with this release; the gate is kept anyway until the delete
    /// is answered, so the session's next acquisition of the name does
    /// not queue behind its own old node.
    async fn give_back(&self, mut hold: GiveBack<ZkHold>) -> Result<bool, LockError> {
        let gate = hold.take_gate();
        let data = hold.data();
        // Our own delete is no forced release. The watch is stopped only
        // once the delete is answered: by then the delete has fired its
        // watcher (ZooKeeper sends a session's watch events before the
        // reply that follows them), whereas a watcher dropped unfired costs
        // a request to remove it on the server, before the delete.
        let _stop_watch = data.node.release();
        let inner = &self.client.inner;
        if let (Some(marker), Some(delay_zk)) = (&data.marker, self.delay_zk()) {
            // The marker first: a contender woken by the node's deletion
            // must not find it orphaned. A failure leaves it to expire with
            // the lock-delay session (a delay the next holder waits out).
            let _ = inner
                .bounded("delete marker", delay_zk.delete(marker, None))
                .await;
        }
        let Ok(zk) = self.zk() else {
            // Closed: its nodes went with it.
            return Ok(false);
        };
        let deleted = inner
            .bounded("release", zk.delete(&data.node.path, None))
            .await;
        drop((zk, gate));
        match deleted {
            Ok(()) => Ok(true),
            // Gone already: a forced release, or the session's end.
            Err(zk::Error::NoNode | zk::Error::SessionExpired | zk::Error::ClientClosed) => {
                Ok(false)
            }
            Err(error) => {
                // Keep trying in the background while the session lives:
                // the delete is safe to repeat, and the session's end
                // takes the node anyway.
                let (me, node) = (self.me.clone(), data.node.path.clone());
                self.spawn(Box::pin(async move {
                    for pause in palisade_core::retry_pauses(
                        Duration::from_millis(50),
                        Duration::from_secs(2),
                    ) {
                        tokio::time::sleep(pause).await;
                        let Some(session) = me.upgrade() else {
                            return;
                        };
                        if session.is_over()
                            || withdraw_paths(&session, Some(node.clone()), None)
                                .await
                                .is_ok()
                        {
                            return;
                        }
                    }
                }));
                Err(inner.error("release", error))
            }
        }
    }

    fn spawn(&self, task: Task) {
        self.client.inner.runtime.spawn(task);
    }
}
