//! A session: its lease (a `palisade_sessions` row kept alive in the
//! background), its holds, and acquiring.

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use palisade_core::holds::{GiveBack, HoldBackend, HoldTable, Task, Turn};
use palisade_core::{
    Generation, LeaseTracker, LockError, LockName, LostReason, Mode, Obtain, Sequencer,
    SessionOptions,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::store::{Attempt, Counters, Detached, Request};
use crate::{Dialect, SqlGuard, SqlLockClient};

/// On PostgreSQL a waiter re-checks at the latest this often even when no
/// notification and no expiry is due: the fallback for a lost `NOTIFY`.
const NOTIFY_FALLBACK: Duration = Duration::from_secs(5);
/// MariaDB has no notifications: a waiter re-checks with a back-off from
/// `BACKOFF_MIN` to `BACKOFF_MAX` (with jitter), or at the next expiry if
/// that comes sooner.
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_millis(200);
/// Added to a re-check at an expiry so the database's clock has passed it.
const EXPIRY_SLACK: Duration = Duration::from_millis(5);

/// A lock session on PostgreSQL or MariaDB: implements
/// [`palisade_core::Lock`].
///
/// The session's lease is a row in `palisade_sessions` whose expiry the
/// database's clock judges; a background task renews it every keep-alive
/// interval while the session lives. Every hold of the session stands on
/// that lease. Re-entry is per session, with a local hold count.
#[derive(Debug, Clone)]
pub struct SqlLock {
    pub(crate) inner: Arc<SessionInner>,
}

#[derive(Debug)]
pub struct SessionInner {
    pub(crate) client: SqlLockClient,
    pub(crate) options: SessionOptions,
    ttl_us: i64,
    state: Mutex<SessionState>,
    /// The session's holds: re-entry, one acquire of a name at a time, the
    /// waiter bound (counted per client).
    holds: HoldTable<SqlHold>,
    /// Serialises replacing an ended session row with a new one.
    reopen: tokio::sync::Mutex<()>,
    keeper: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug)]
struct SessionState {
    /// The current session row's id.
    id: Arc<str>,
    /// The database ended the current row: the next acquire opens a new one.
    ended: bool,
}

/// What the SQL backend keeps per hold: the holder row's key.
#[derive(Debug)]
pub struct SqlHold {
    /// The session row the hold stands on (a session whose row the
    /// database ended opens a new one; holds on the old one are lost).
    session_id: Arc<str>,
    /// The acquire token: release is compare-and-delete on it.
    token: i64,
}

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

fn new_session_id() -> Arc<str> {
    let bits: u128 = rand::random();
    Arc::from(format!("{bits:032x}"))
}

impl SqlLock {
    pub(crate) async fn open(
        client: SqlLockClient,
        options: SessionOptions,
    ) -> Result<SqlLock, LockError> {
        let id = new_session_id();
        let ttl_us = micros(options.ttl());
        client
            .inner
            .store
            .open_session(&id, ttl_us, micros(options.lock_delay()))
            .await?;
        let holds = HoldTable::new(
            client.inner.store.dialect.backend(),
            &options,
            client.inner.waiters.clone(),
        );
        let inner = Arc::new(SessionInner {
            client,
            ttl_us,
            state: Mutex::new(SessionState { id, ended: false }),
            holds,
            reopen: tokio::sync::Mutex::new(()),
            keeper: Mutex::new(None),
            options,
        });
        let keeper = tokio::spawn(keep_alive(Arc::downgrade(&inner)));
        *inner.keeper.lock().unwrap_or_else(|p| p.into_inner()) = Some(keeper);
        Ok(SqlLock { inner })
    }

    /// The session's current id (the `palisade_sessions` row).
    pub fn session_id(&self) -> String {
        self.inner.state().id.to_string()
    }

    /// Ends this session's lease on the database now, without releasing
    /// anything, the way a crash would: its holds are treated as gone (with
    /// the session's lock-delay) and its keep-alive is refused from here
    /// on, so every guard reports its lease lost. For tests and drills.
    pub async fn expire_session(&self) -> Result<(), LockError> {
        let id = self.inner.state().id.clone();
        let names: Vec<LockName> = (self.inner.holds.holds().iter())
            .map(|hold| hold.name().clone())
            .collect();
        let store = &self.inner.client.inner.store;
        store.end_session(&id, false).await?;
        for name in names {
            store.wake_local(name.as_str());
        }
        Ok(())
    }
}

impl SqlLock {
    /// Sleeps until woken for `name` or until `bound`; after a wake-up, as
    /// long as one unlocked read shows a live waiter ahead of `waiter` that
    /// must go first, sleeps on (up to the same deadline). Without this,
    /// every release woke every waiter into a grant transaction queued on
    /// the lock row, and the head of the queue waited behind them all.
    async fn sleep_until_turn(
        &self,
        wake: &mut tokio::sync::broadcast::Receiver<Arc<str>>,
        name: &LockName,
        mode: Mode,
        waiter: Option<i64>,
        bound: Duration,
    ) {
        let store = &self.inner.client.inner.store;
        let deadline = Instant::now() + bound;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            crate::wake::wait_for(wake, name.as_str(), left).await;
            let Some(waiter) = waiter else { return };
            if Instant::now() >= deadline {
                return;
            }
            match store.queued_ahead(name, waiter, mode).await {
                Ok(true) => Counters::count(&store.counters.rechecks_skipped),
                // Free to try, or the read failed: the grant transaction
                // decides (and reports an error).
                Ok(false) | Err(_) => return,
            }
        }
    }
}

impl Obtain for SqlLock {
    type Session = SessionInner;
    type Guard = SqlGuard;

    fn session(&self) -> &Arc<SessionInner> {
        &self.inner
    }

    async fn take(&self, turn: Turn<SessionInner>) -> Result<Option<SqlGuard>, LockError> {
        let (name, mode, wait) = (&turn.name().clone(), turn.mode(), turn.patience().waits());
        let store = &self.inner.client.inner.store;
        let token: i64 = rand::random();
        // Subscribed before the first attempt, so a release between the
        // attempt and the wait is not missed.
        let mut wake = store.wake.subscribe();
        let mut cleanup = Cleanup {
            session: self.inner.clone(),
            name: name.clone(),
            token,
            session_id: None,
            waiter: None,
            in_flight: None,
        };
        let mut pauses = palisade_core::retry_pauses(BACKOFF_MIN, BACKOFF_MAX);
        loop {
            let session_id = self.inner.live_session_id().await?;
            cleanup.session_id = Some(session_id.clone());
            let sent_at = Instant::now();
            let grant = store.grant(Request {
                name: name.clone(),
                session: session_id.clone(),
                mode,
                waiter: cleanup.waiter,
                enqueue: wait,
                token,
                ttl_us: self.inner.ttl_us,
            });
            // Kept in the cleanup while it runs: dropped meanwhile, the
            // cleanup waits for it to end before removing what it wrote.
            let attempt = cleanup.in_flight.insert(grant).await;
            cleanup.in_flight = None;
            let attempt = attempt?;
            match attempt {
                Attempt::Granted { generation } => {
                    cleanup.disarm();
                    return self
                        .inner
                        .install(turn, session_id, token, generation, sent_at)
                        .map(Some);
                }
                Attempt::SessionEnded => {
                    // The queue entry (if any) died with the session.
                    cleanup.waiter = None;
                    self.inner.mark_ended(&session_id);
                }
                Attempt::Waiting {
                    waiter,
                    recheck_after,
                } => {
                    if cleanup.waiter.is_some() {
                        // Woken, but not its turn: the work a wake-up wasted.
                        Counters::count(&store.counters.rechecks);
                    }
                    if !wait {
                        cleanup.disarm();
                        return Ok(None);
                    }
                    let expiry = recheck_after.map(|after| after + EXPIRY_SLACK);
                    let bound = match store.dialect {
                        Dialect::Postgres => expiry.unwrap_or(NOTIFY_FALLBACK).min(NOTIFY_FALLBACK),
                        Dialect::MariaDb => {
                            let jittered = pauses.next().unwrap_or(BACKOFF_MAX);
                            expiry.map_or(jittered, |expiry| expiry.min(jittered))
                        }
                    };
                    cleanup.waiter = waiter;
                    self.sleep_until_turn(&mut wake, name, mode, cleanup.waiter, bound)
                        .await;
                }
            }
        }
    }
}

impl SessionInner {
    fn state(&self) -> MutexGuard<'_, SessionState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn install(
        &self,
        turn: Turn<SessionInner>,
        session_id: Arc<str>,
        token: i64,
        generation: i64,
        sent_at: Instant,
    ) -> Result<SqlGuard, LockError> {
        let name = turn.name();
        let generation = u64::try_from(generation)
            .ok()
            .and_then(Generation::new)
            .ok_or_else(|| LockError::Backend {
                backend: self.client.inner.store.dialect.backend(),
                source: format!("the lock table issued generation {generation} for `{name}`")
                    .into(),
            })?;
        let mut sequencer = Sequencer::new(name.clone(), turn.mode(), generation);
        if let Some(signer) = &self.client.inner.signer {
            sequencer = signer.sign(sequencer);
        }
        let lease = Arc::new(LeaseTracker::new(self.options.valid_until(sent_at)));
        let guard = turn.grant(sequencer, lease, SqlHold { session_id, token })?;
        Ok(SqlGuard(guard))
    }

    /// The current session id, opening a new session row if the database
    /// ended the old one.
    async fn live_session_id(&self) -> Result<Arc<str>, LockError> {
        {
            let state = self.state();
            if !state.ended {
                return Ok(state.id.clone());
            }
        }
        let _reopening = self.reopen.lock().await;
        {
            let state = self.state();
            if !state.ended {
                return Ok(state.id.clone());
            }
        }
        let id = new_session_id();
        self.client
            .inner
            .store
            .open_session(&id, self.ttl_us, micros(self.options.lock_delay()))
            .await?;
        let mut state = self.state();
        state.id = id.clone();
        state.ended = false;
        Ok(id)
    }

    /// The database refused session `id`: every hold on it is lost.
    fn mark_ended(&self, id: &Arc<str>) {
        {
            let mut state = self.state();
            if &state.id == id {
                state.ended = true;
            }
        }
        self.holds
            .lose_where(|hold| hold.data().session_id == *id, LostReason::Revoked);
    }
}

/// The SQL protocol behind the session's hold table: a hold is given back
/// by deleting its holder row, compare-and-delete by session and token,
/// which wakes the next waiter.
impl HoldBackend for SessionInner {
    type Data = SqlHold;

    fn holds(&self) -> &HoldTable<SqlHold> {
        &self.holds
    }

    /// Tokens are unique per acquire, so the gate is not kept. A failed
    /// delete is retried in the background: the row may still be there,
    /// and the session keeps renewing it.
    async fn give_back(&self, hold: GiveBack<SqlHold>) -> Result<bool, LockError> {
        let sql = hold.data();
        let store = &self.client.inner.store;
        match store
            .release(hold.name(), &sql.session_id, sql.token, None)
            .await
        {
            Ok(found) => Ok(found),
            Err(error) => {
                retry_release(&self.client, hold.name(), &sql.session_id, sql.token, None);
                Err(error)
            }
        }
    }

    fn spawn(&self, task: Task) {
        // Without a runtime the row stays until the session's lease ends.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(task);
        }
    }
}

impl Drop for SessionInner {
    fn drop(&mut self) {
        if let Some(keeper) = self.keeper.lock().unwrap_or_else(|p| p.into_inner()).take() {
            keeper.abort();
        }
        // Every guard is gone (each holds the session), so nothing is held:
        // close the row cleanly, without a lock-delay.
        let id = self.state().id.clone();
        let client = self.client.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = client.inner.store.end_session(&id, true).await {
                    tracing::debug!(%error, session = %id, "closing the session row failed; it expires by itself");
                }
            });
        }
    }
}

/// Renews the session row every keep-alive interval and moves every hold's
/// validity deadline forward; a refused renewal loses every hold at once.
/// A failed one changes nothing: each lease lapses by itself at its
/// deadline.
async fn keep_alive(session: Weak<SessionInner>) {
    let Some(interval) = session.upgrade().map(|s| s.options.keepalive_interval()) else {
        return;
    };
    loop {
        tokio::time::sleep(interval).await;
        let Some(session) = session.upgrade() else {
            return;
        };
        let (id, ended) = {
            let state = session.state();
            (state.id.clone(), state.ended)
        };
        if ended {
            continue;
        }
        let sent_at = Instant::now();
        // A renewal slower than the interval is given up: the next one
        // starts on time, and the leases lapse by themselves meanwhile.
        let store = &session.client.inner.store;
        let renewal = tokio::time::timeout(interval, store.renew_session(&id, session.ttl_us))
            .await
            .unwrap_or_else(|_| {
                Err(LockError::BackendTimeout {
                    backend: store.dialect.backend(),
                    operation: "renew",
                    after: interval,
                })
            });
        match renewal {
            Ok(true) => session.holds.extend_where(
                |hold| hold.data().session_id == id,
                session.options.valid_until(sent_at),
            ),
            Ok(false) => {
                tracing::info!(session = %id, "the database ended this session's lease; its holds are lost");
                session.mark_ended(&id);
            }
            Err(error) => {
                tracing::warn!(session = %id, %error, "renewing the session's lease failed");
            }
        }
    }
}

/// Removes what a dropped `acquire` left on the database: its queue entry,
/// and a hold granted in a transaction whose answer never arrived.
struct Cleanup {
    session: Arc<SessionInner>,
    name: LockName,
    token: i64,
    session_id: Option<Arc<str>>,
    waiter: Option<i64>,
    /// The grant transaction running, if any: it runs on to its end.
    in_flight: Option<Detached<Attempt>>,
}

impl Cleanup {
    fn disarm(&mut self) {
        self.session_id = None;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(session_id) = self.session_id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (session, name, token, mut waiter) = (
            self.session.clone(),
            self.name.clone(),
            self.token,
            self.waiter,
        );
        let in_flight = self.in_flight.take();
        runtime.spawn(async move {
            // A grant still running ends first, so what it wrote (a hold,
            // or a queue entry) is removed too.
            if let Some(grant) = in_flight
                && let Ok(Attempt::Waiting {
                    waiter: Some(queued),
                    ..
                }) = grant.await
            {
                waiter = Some(queued);
            }
            let store = &session.client.inner.store;
            if let Err(error) = store.release(&name, &session_id, token, waiter).await {
                tracing::debug!(%error, lock = %name, "cleaning up after a dropped acquire failed; retrying");
                retry_release(&session.client, &name, &session_id, token, waiter);
            }
        });
    }
}

/// Retries a compare-and-delete that failed, with a bounded back-off, until
/// the database answers (deleted, or already gone) or the client is
/// dropped. Compare-and-delete by token is idempotent, so retrying is safe.
fn retry_release(
    client: &SqlLockClient,
    name: &LockName,
    session_id: &str,
    token: i64,
    waiter: Option<i64>,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let client = Arc::downgrade(&client.inner);
    let (name, session_id) = (name.clone(), session_id.to_owned());
    runtime.spawn(async move {
        let mut pauses =
            palisade_core::retry_pauses(Duration::from_millis(100), Duration::from_secs(2));
        loop {
            tokio::time::sleep(pauses.next().unwrap_or(Duration::from_secs(2))).await;
            let Some(client) = client.upgrade() else {
                return;
            };
            match client
                .store
                .release(&name, &session_id, token, waiter)
                .await
            {
                Ok(_) => return,
                Err(error) => {
                    tracing::debug!(%error, lock = %name, "retrying a release");
                }
            }
        }
    });
}
