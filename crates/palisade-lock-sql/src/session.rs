//! A session: its lease (a `palisade_sessions` row kept alive in the
//! background), its holds, and acquiring.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use palisade_core::{
    Generation, LeaseState, LeaseTracker, Lock, LockError, LockName, LostReason, Mode, Sequencer,
    SessionOptions,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::store::{Attempt, Counters, Request};
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
pub(crate) struct SessionInner {
    pub(crate) client: SqlLockClient,
    pub(crate) options: SessionOptions,
    ttl_us: i64,
    state: Mutex<SessionState>,
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
    holds: HashMap<LockName, LocalHold>,
    waiters: HashMap<LockName, usize>,
}

#[derive(Debug)]
struct LocalHold {
    session_id: Arc<str>,
    token: i64,
    count: usize,
    tracker: LeaseTracker,
    sequencer: Sequencer,
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
        let inner = Arc::new(SessionInner {
            client,
            ttl_us,
            state: Mutex::new(SessionState {
                id,
                ended: false,
                holds: HashMap::new(),
                waiters: HashMap::new(),
            }),
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
        let (id, names) = {
            let state = self.inner.state();
            (
                state.id.clone(),
                state.holds.keys().cloned().collect::<Vec<_>>(),
            )
        };
        let store = &self.inner.client.inner.store;
        store.end_session(&id, false).await?;
        for name in names {
            store.wake_local(name.as_str());
        }
        Ok(())
    }

    async fn obtain(
        &self,
        name: &LockName,
        mode: Mode,
        wait: bool,
    ) -> Result<Option<SqlGuard>, LockError> {
        if let Some(guard) = self.inner.reenter(name, mode)? {
            return Ok(Some(guard));
        }
        let _slot = if wait {
            Some(WaiterSlot::take(&self.inner, name)?)
        } else {
            None
        };
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
        };
        let mut pauses = palisade_core::retry_pauses(BACKOFF_MIN, BACKOFF_MAX);
        loop {
            let session_id = self.inner.live_session_id().await?;
            cleanup.session_id = Some(session_id.clone());
            let sent_at = Instant::now();
            let attempt = store
                .grant(Request {
                    name,
                    session: &session_id,
                    mode,
                    waiter: cleanup.waiter,
                    enqueue: wait,
                    token,
                    ttl_us: self.inner.ttl_us,
                })
                .await?;
            match attempt {
                Attempt::Granted { generation } => {
                    cleanup.disarm();
                    return self
                        .inner
                        .install(name, mode, session_id, token, generation, sent_at)
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

impl Lock for SqlLock {
    type Guard = SqlGuard;

    async fn acquire(&self, name: &LockName, mode: Mode) -> Result<SqlGuard, LockError> {
        match self.obtain(name, mode, true).await? {
            Some(guard) => Ok(guard),
            // `obtain` with waiting on returns only a grant or an error.
            None => Err(LockError::Backend {
                backend: self.inner.client.inner.store.dialect.backend(),
                source: "a waiting acquire returned without a grant".into(),
            }),
        }
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        mode: Mode,
    ) -> Result<Option<SqlGuard>, LockError> {
        self.obtain(name, mode, false).await
    }
}

impl SessionInner {
    fn state(&self) -> MutexGuard<'_, SessionState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Re-entry: a valid local hold in the same mode gives another guard on
    /// it; a hold whose lease was lost is forgotten so a fresh grant can
    /// replace it.
    fn reenter(
        self: &Arc<Self>,
        name: &LockName,
        mode: Mode,
    ) -> Result<Option<SqlGuard>, LockError> {
        let mut state = self.state();
        let Some(hold) = state.holds.get_mut(name) else {
            return Ok(None);
        };
        if !matches!(hold.tracker.state(), LeaseState::Held { .. }) {
            state.holds.remove(name);
            return Ok(None);
        }
        if hold.sequencer.mode() != mode {
            return Err(LockError::ModeConflict {
                name: name.clone(),
                held: hold.sequencer.mode(),
                requested: mode,
            });
        }
        hold.count += 1;
        Ok(Some(SqlGuard::new(
            self.clone(),
            hold.session_id.clone(),
            hold.token,
            hold.sequencer.clone(),
            hold.tracker.watch(),
        )))
    }

    fn install(
        self: &Arc<Self>,
        name: &LockName,
        mode: Mode,
        session_id: Arc<str>,
        token: i64,
        generation: i64,
        sent_at: Instant,
    ) -> Result<SqlGuard, LockError> {
        let generation = u64::try_from(generation)
            .ok()
            .and_then(Generation::new)
            .ok_or_else(|| LockError::Backend {
                backend: self.client.inner.store.dialect.backend(),
                source: format!("the lock table issued generation {generation} for `{name}`")
                    .into(),
            })?;
        let mut sequencer = Sequencer::new(name.clone(), mode, generation);
        if let Some(signer) = &self.client.inner.signer {
            sequencer = signer.sign(sequencer);
        }
        let tracker = LeaseTracker::new(self.options.valid_until(sent_at));
        let watch = tracker.watch();
        self.state().holds.insert(
            name.clone(),
            LocalHold {
                session_id: session_id.clone(),
                token,
                count: 1,
                tracker,
                sequencer: sequencer.clone(),
            },
        );
        Ok(SqlGuard::new(
            self.clone(),
            session_id,
            token,
            sequencer,
            watch,
        ))
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
        let mut state = self.state();
        if &state.id == id {
            state.ended = true;
        }
        for hold in state.holds.values() {
            if &hold.session_id == id {
                hold.tracker.lose(LostReason::Revoked);
            }
        }
    }

    /// Releases one guard of the hold with `token`; the last one deletes
    /// the holder row (compare-and-delete by session and token).
    pub(crate) async fn release_one(
        &self,
        name: &LockName,
        session_id: &str,
        token: i64,
        generation: Generation,
    ) -> Result<(), LockError> {
        let tracker = {
            let mut state = self.state();
            match state.holds.get_mut(name) {
                Some(hold) if hold.token == token => {
                    hold.count -= 1;
                    if hold.count > 0 {
                        return Ok(());
                    }
                    state.holds.remove(name).map(|hold| hold.tracker)
                }
                // A hold already forgotten (its lease was lost): still try
                // to delete its row, which tells whether it was gone.
                _ => None,
            }
        };
        let found = match self
            .client
            .inner
            .store
            .release(name, session_id, token, None)
            .await
        {
            Ok(found) => found,
            Err(error) => {
                // The row may still be there, and the session keeps renewing
                // it: keep trying in the background so it cannot block the
                // lock for the rest of the session's life.
                if let Some(tracker) = tracker {
                    tracker.lose(LostReason::KeepAliveFailed);
                }
                retry_release(&self.client, name, session_id, token, None);
                return Err(error);
            }
        };
        if found {
            if let Some(tracker) = tracker {
                tracker.release();
            }
            Ok(())
        } else {
            if let Some(tracker) = tracker {
                tracker.lose(LostReason::KeyDeleted);
            }
            Err(LockError::NotOwner {
                name: name.clone(),
                generation,
            })
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
            Ok(true) => {
                let valid_until = session.options.valid_until(sent_at);
                let state = session.state();
                for hold in state.holds.values().filter(|hold| hold.session_id == id) {
                    if let LeaseState::Held {
                        valid_until: current,
                    } = hold.tracker.state()
                        && current < valid_until
                    {
                        hold.tracker.extend(valid_until);
                    }
                }
            }
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

/// A place in the per-process waiter bound of a lock.
struct WaiterSlot {
    session: Arc<SessionInner>,
    name: LockName,
}

impl WaiterSlot {
    fn take(session: &Arc<SessionInner>, name: &LockName) -> Result<WaiterSlot, LockError> {
        let mut state = session.state();
        let count = state.waiters.entry(name.clone()).or_insert(0);
        if *count >= session.options.max_waiters() {
            return Err(LockError::Busy {
                name: name.clone(),
                waiters: *count,
            });
        }
        *count += 1;
        Ok(WaiterSlot {
            session: session.clone(),
            name: name.clone(),
        })
    }
}

impl Drop for WaiterSlot {
    fn drop(&mut self) {
        let mut state = self.session.state();
        if let Some(count) = state.waiters.get_mut(&self.name) {
            *count -= 1;
            if *count == 0 {
                state.waiters.remove(&self.name);
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
        let (session, name, token, waiter) = (
            self.session.clone(),
            self.name.clone(),
            self.token,
            self.waiter,
        );
        runtime.spawn(async move {
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
