//! Acquiring: queue, wait for the one key ahead, confirm, grant.
//!
//! 1. **Queue**: first a claim ([`txns::claim_if_free`]): if the lock's
//!    directory is empty, put `<prefix>/<name>/<lease>` with the session's
//!    lease, and nothing otherwise. Its success is the grant: that one
//!    round trip, with no read, is the whole uncontended acquire. A lock
//!    found busy costs a second transaction ([`txns::enqueue`]): put the
//!    key if it does not exist and read the queue. (One transaction doing
//!    both is three times the claim's size, and etcd logs and applies every
//!    request whole, unused branch included: on the common, free path the
//!    claim alone cost etcd 25–30 µs less per cycle.)
//! 2. **Wait** while [`Snapshot::turn`](crate::queue::Snapshot::turn) names a blocker: watch that one key
//!    for deletion, starting "now" so etcd serves the watch at once rather
//!    than from its 100 ms catch-up loop (registered twice, see
//!    [`BlockerWatch`]); if the watch was created after the last read's
//!    revision, read again (the blocker may have gone in between). Every
//!    wake-up re-reads the queue.
//! 3. **Confirm and grant**: the read that finds no blocker also finds this
//!    session's own key with its create-revision, so the lease was alive at
//!    that revision; with a lock-delay, the marker is written on condition
//!    that the key still has that create-revision. Only then is a guard
//!    returned, with generation = the key's create-revision.
//!
//! A waiter that gives up (timeout, `try_acquire` finding the lock busy, a
//! dropped future) deletes its own key, compare-and-delete on its
//! create-revision, so it never blocks the contenders behind it.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use etcd_client::{Txn, TxnOp, TxnOpResponse, TxnResponse};
use palisade_core::holds::{Gate, Patience, Turn};
use palisade_core::{
    Generation, LeaseState, LeaseTracker, LockError, LockName, LostReason, Mode, Obtain, Sequencer,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::EtcdLock;
use crate::client::Resend;
use crate::errors::BACKEND;
use crate::guard::EtcdGuard;
use crate::keys::{self, LockKeys};
use crate::queue::{self, Blocker, Contender};
use crate::session::{EtcdHold, Session};
use crate::txns;
use crate::watch_hub::{Registration, Signal, WatchHub};

/// Waiting with a deadline ([`Patience::Until`]) gives up by itself: on
/// giving up, this waiter's key is deleted before the `Timeout` error is
/// returned (unless etcd cannot be reached; then it is deleted in the
/// background, or goes with the lease).
impl Obtain for EtcdLock {
    type Session = Session;
    type Guard = EtcdGuard;

    const KEEPS_DEADLINE: bool = true;

    fn session(&self) -> &Arc<Session> {
        &self.session
    }

    fn take(
        &self,
        turn: Turn<Session>,
    ) -> impl Future<Output = Result<Option<EtcdGuard>, LockError>> + Send {
        self.session.acquire(turn)
    }
}

fn timeout_error(name: &LockName, started: Instant) -> LockError {
    LockError::Timeout {
        name: name.clone(),
        waited: started.elapsed(),
    }
}

/// How a turn in the queue ended.
enum Outcome {
    /// Granted; `revision` is the revision of the read that proved it.
    Granted { me: Contender, revision: i64 },
    /// Not free now, and the caller does not wait.
    Busy,
    /// This session's key vanished while its lease is still valid (deleted
    /// by someone else): queue again at the back.
    KeyLost,
}

/// This session's place in one lock's queue while it is being acquired.
///
/// Dropping it while `queued` (a cancelled `acquire`, an error) deletes the
/// key in the background, holding the session's gate for the name until
/// that is done so a new attempt of the same session cannot be deleted by
/// the clean-up of the old one.
struct QueueEntry {
    session: Arc<Session>,
    keys: LockKeys,
    /// The key's create-revision once known: the clean-up compares on it.
    create_revision: Option<i64>,
    /// Whether a contender key of this attempt may exist.
    queued: bool,
    /// The hold table's turn: the session's gate for the name, and a place
    /// under the waiter bound. Taken by the grant.
    turn: Option<Turn<Session>>,
}

impl QueueEntry {
    /// Deletes the key now, waiting for the answer; on failure the drop
    /// retries in the background.
    async fn withdraw_now(&mut self) {
        if !self.queued {
            return;
        }
        let txn = txns::remove(
            &self.keys,
            self.session.lease_id,
            self.create_revision,
            self.session.delay_lease_id.is_some(),
        );
        if self
            .session
            .connection
            .inner
            .txn("withdraw", txn)
            .await
            .is_ok()
        {
            self.queued = false;
            tracing::debug!(lock_dir = self.keys.dir(), "withdrew from the queue");
        }
    }
}

impl Drop for QueueEntry {
    fn drop(&mut self) {
        if self.queued {
            let gate = self.turn.take().map(Turn::into_gate);
            self.session
                .spawn_withdraw(self.keys.clone(), self.create_revision, gate);
        }
    }
}

impl Session {
    /// `Ok(None)` only with `Patience::Now`, when the lock is not free.
    async fn acquire(
        self: &Arc<Self>,
        turn: Turn<Session>,
    ) -> Result<Option<EtcdGuard>, LockError> {
        let (name, mode) = (&turn.name().clone(), turn.mode());
        let (patience, started) = (turn.patience(), turn.started());
        self.ensure_open()?;
        let mut entry = QueueEntry {
            session: self.clone(),
            keys: LockKeys::new(self.connection.inner.config.prefix(), name),
            create_revision: None,
            queued: false,
            turn: Some(turn),
        };
        // A key deleted under a valid lease (by an operator) sends us to the
        // back of the queue; a few times, then it is treated as lost.
        for _requeue in 0..8 {
            match self
                .queue_and_wait(&mut entry, name, mode, patience, started)
                .await
            {
                Ok(Outcome::Granted { me, revision }) => {
                    return self
                        .grant(entry, name, mode, me, revision, started)
                        .await
                        .map(Some);
                }
                Ok(Outcome::Busy) => {
                    entry.withdraw_now().await;
                    return Ok(None);
                }
                Ok(Outcome::KeyLost) => {
                    tracing::warn!(lock = %name, "our queued key was deleted; queueing again");
                    entry.create_revision = None;
                }
                Err(error) => {
                    if matches!(error, LockError::Timeout { .. }) {
                        entry.withdraw_now().await;
                    }
                    return Err(error);
                }
            }
        }
        Err(LockError::SessionClosed)
    }

    /// Queues (step 1) and waits (step 2).
    async fn queue_and_wait(
        &self,
        entry: &mut QueueEntry,
        name: &LockName,
        mode: Mode,
        patience: Patience,
        started: Instant,
    ) -> Result<Outcome, LockError> {
        let (deadline, waits) = (patience.deadline(), patience.waits());
        let keys = entry.keys.clone();
        let value = self.contender_value(mode);
        let try_free_only = !waits && mode == Mode::Exclusive;
        // From here on the key may exist, whatever the answer.
        entry.queued = true;
        let first = self
            .txn_retrying("enqueue", name, started, deadline, waits, || {
                if try_free_only {
                    txns::enqueue_if_free(&keys, self.lease_id, value)
                } else {
                    txns::claim_if_free(&keys, self.lease_id, value)
                }
            })
            .await?;
        let response = if first.succeeded() || try_free_only {
            first
        } else {
            self.txn_retrying("enqueue", name, started, deadline, waits, || {
                txns::enqueue(&keys, self.lease_id, value)
            })
            .await?
        };
        let mut snapshot = txns::enqueued(&keys, self.lease_id, mode, &response);
        let mut me = match snapshot.by_lease(self.lease_id) {
            Some(me) => me,
            None if try_free_only && !response.succeeded() => {
                // Busy, and nothing was written.
                entry.queued = false;
                return Ok(Outcome::Busy);
            }
            None => return self.key_lost(),
        };
        if me.mode != mode {
            // A key left by an earlier attempt in the other mode: keep the
            // place, change the mode.
            let earlier = me.create_revision;
            let response = self
                .txn_retrying("enqueue", name, started, deadline, waits, || {
                    txns::requeue_mode(&keys, self.lease_id, earlier, value)
                })
                .await?;
            snapshot = txns::snapshot(&keys, &response);
            me = match snapshot.by_lease(self.lease_id) {
                Some(current) if current.create_revision == earlier => current,
                _ => return self.key_lost(),
            };
        }
        entry.create_revision = Some(me.create_revision);
        tracing::debug!(lock = %name, %mode, revision = me.create_revision, "queued");

        let fallback = (self.options.ttl() * 3).max(Duration::from_secs(30));
        let mut session_lease = self.lease.clone();
        let mut blocker_watch: Option<BlockerWatch> = None;
        loop {
            let blocker = match snapshot.turn(me) {
                queue::Turn::Granted => {
                    return Ok(Outcome::Granted {
                        me,
                        revision: snapshot.revision,
                    });
                }
                queue::Turn::Gone => return self.key_lost(),
                queue::Turn::Wait(_) if !waits => return Ok(Outcome::Busy),
                queue::Turn::Wait(blocker) => blocker,
            };
            let blocker_key = match blocker {
                Blocker::Predecessor(ahead) => keys.contender(ahead.lease),
                Blocker::LockDelay { lease } => keys.marker(lease),
            };
            if blocker_watch
                .as_ref()
                .is_none_or(|watch| watch.key != blocker_key)
            {
                tracing::debug!(lock = %name, revision = me.create_revision, waits_for = %blocker_key, "waiting");
                blocker_watch = Some(BlockerWatch::new(&self.hub, blocker_key));
            }
            let watch = blocker_watch.as_mut().expect("set just above");
            // Wait for something that calls for a fresh read.
            let broken = loop {
                if watch
                    .created_at()
                    .is_some_and(|created| created > snapshot.revision)
                {
                    // The watch started after our read: what happened in
                    // between is only in a new read.
                    break false;
                }
                let signal = tokio::select! {
                    signal = watch.signals.recv() => signal.unwrap_or((0, Signal::Broken)),
                    _ = session_lease.lost() => return Err(LockError::SessionClosed),
                    () = sleep_until(deadline) => return Err(timeout_error(name, started)),
                    () = tokio::time::sleep(fallback) => {
                        self.connection.inner.counters.bump(|counts| &mut counts.fallback_rechecks);
                        break false;
                    }
                };
                match signal {
                    (id, Signal::Created { revision }) => watch.created(id, revision),
                    (_, Signal::Deleted { .. } | Signal::Put { .. }) => break false,
                    (_, Signal::Broken) => break true,
                }
            };
            if broken {
                blocker_watch = None;
            }
            let response = self
                .txn_retrying("read queue", name, started, deadline, true, || {
                    txns::read(&keys)
                })
                .await?;
            snapshot = txns::snapshot(&keys, &response);
            tracing::trace!(lock = %name, revision = snapshot.revision, "woken");
        }
    }

    fn key_lost(&self) -> Result<Outcome, LockError> {
        if self.is_valid() {
            Ok(Outcome::KeyLost)
        } else {
            Err(LockError::SessionClosed)
        }
    }

    /// Step 3: marker, hold, guard.
    async fn grant(
        self: &Arc<Self>,
        mut entry: QueueEntry,
        name: &LockName,
        mode: Mode,
        me: Contender,
        revision: i64,
        started: Instant,
    ) -> Result<EtcdGuard, LockError> {
        let generation = u64::try_from(me.create_revision)
            .ok()
            .and_then(Generation::new)
            .ok_or_else(|| LockError::Backend {
                backend: BACKEND,
                source: format!("etcd reported create-revision {}", me.create_revision).into(),
            })?;
        if let Some(delay_lease) = self.delay_lease_id {
            let value = keys::marker_value(
                mode,
                me.create_revision,
                self.options.lock_delay().as_millis(),
                &self.holder,
            );
            let response = self
                .txn_retrying("mark", name, started, None, true, || {
                    txns::mark(
                        &entry.keys,
                        self.lease_id,
                        me.create_revision,
                        delay_lease,
                        &value,
                    )
                })
                .await?;
            if !response.succeeded() {
                return Err(LockError::NotOwner {
                    name: name.clone(),
                    generation,
                });
            }
        }
        let valid_until = match self.lease_state.tracker.state() {
            LeaseState::Held { valid_until } if self.lease_state.holds.ended().is_none() => {
                valid_until
            }
            _ => return Err(LockError::SessionClosed),
        };
        let sequencer = self.sequencer(name, mode, generation, valid_until)?;
        let first_hold = self.lease_state.holds.is_empty();
        let turn = entry.turn.take().ok_or(LockError::SessionClosed)?;
        let guard = turn.grant(
            sequencer,
            Arc::new(LeaseTracker::new(valid_until)),
            EtcdHold {
                create_revision: me.create_revision,
                key: entry.keys.contender(self.lease_id),
                granted_at: Instant::now(),
                grant_revision: revision,
            },
        )?;
        if first_hold {
            self.key_watch.hold_added();
        }
        entry.queued = false;
        tracing::info!(
            lock = %name,
            generation = me.create_revision,
            %mode,
            waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "acquired"
        );
        Ok(EtcdGuard(guard))
    }

    fn sequencer(
        &self,
        name: &LockName,
        mode: Mode,
        generation: Generation,
        valid_until: Instant,
    ) -> Result<Sequencer, LockError> {
        let expires = SystemTime::now() + valid_until.saturating_duration_since(Instant::now());
        let expires_unix_ms = expires
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        let sequencer = Sequencer::new(name.clone(), mode, generation)
            .with_issuer(&self.connection.inner.issuer)
            .and_then(|sequencer| sequencer.with_holder(&self.holder))
            .and_then(|sequencer| sequencer.with_lease(&self.lease_text))
            .map(|sequencer| sequencer.with_expiry_hint(expires_unix_ms))
            .map_err(|error| LockError::Backend {
                backend: BACKEND,
                source: Box::new(error),
            })?;
        // Signed once per hold: re-entrant guards share this very text.
        Ok(match self.connection.inner.config.signer() {
            Some(signer) => {
                tracing::debug!(lock = %name, generation = generation.get(), key_id = signer.key_id(), "sequencer signed");
                signer.sign(sequencer)
            }
            None => sequencer,
        })
    }

    /// Runs a transaction, retrying failures of the service (`Unavailable`,
    /// `BackendTimeout`) with back-off while `retry` is set, the session is
    /// valid and the deadline allows. A retry is safe: every transaction
    /// here is conditional on the key's create-revision, or idempotent.
    pub(crate) async fn txn_retrying(
        &self,
        operation: &'static str,
        name: &LockName,
        started: Instant,
        deadline: Option<Instant>,
        retry: bool,
        make: impl Fn() -> Txn,
    ) -> Result<TxnResponse, LockError> {
        let mut pauses =
            palisade_core::retry_pauses(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            match self
                .connection
                .inner
                .txn_made(operation, Resend::Always, &make)
                .await
            {
                Ok(response) => return Ok(response),
                Err(LockError::SessionClosed) => {
                    self.end(LostReason::Revoked);
                    return Err(LockError::SessionClosed);
                }
                Err(error @ (LockError::Unavailable { .. } | LockError::BackendTimeout { .. }))
                    if retry && self.is_valid() =>
                {
                    let pause = pauses.next().unwrap_or(Duration::from_secs(1));
                    let retry_at = Instant::now() + pause;
                    if deadline.is_some_and(|deadline| retry_at >= deadline) {
                        return Err(timeout_error(name, started));
                    }
                    tracing::debug!(lock = %name, operation, %error, ?pause, "etcd request failed; retrying");
                    tokio::time::sleep_until(retry_at).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Deletes this session's key of one lock in the background, retrying
    /// while the session lives, holding `gate` until done.
    pub(crate) fn spawn_withdraw(
        &self,
        keys: LockKeys,
        create_revision: Option<i64>,
        gate: Option<Gate>,
    ) {
        let connection = self.connection.inner.clone();
        let lease_state = self.lease_state.clone();
        let (lease_id, marked) = (self.lease_id, self.delay_lease_id.is_some());
        self.runtime.spawn(async move {
            let _gate = gate;
            let mut pauses =
                palisade_core::retry_pauses(Duration::from_millis(100), Duration::from_secs(2));
            loop {
                let txn = txns::remove(&keys, lease_id, create_revision, marked);
                match connection.txn("withdraw", txn).await {
                    Ok(_) => {
                        tracing::debug!(lock_dir = keys.dir(), "withdrew from the queue");
                        return;
                    }
                    // The lease ends without us; etcd then deletes the key.
                    Err(_) if lease_state.ensure_open().is_err() => return,
                    Err(error) => {
                        let pause = pauses.next().unwrap_or(Duration::from_secs(2));
                        tracing::debug!(%error, ?pause, "withdrawing failed; retrying");
                        tokio::time::sleep(pause).await;
                    }
                }
            }
        });
    }

    /// Reads one key: its create-revision if it exists, and the revision
    /// of the read.
    pub(crate) async fn read_key(&self, key: &str) -> Result<(Option<i64>, i64), LockError> {
        let response = self
            .connection
            .inner
            .txn("read own key", Txn::new().and_then([TxnOp::get(key, None)]))
            .await?;
        let revision = response
            .header()
            .map(|header| header.revision())
            .unwrap_or_default();
        let create_revision = response.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.create_revision()),
            _ => None,
        });
        Ok((create_revision, revision))
    }
}

/// The watch a waiter keeps on its blocker.
///
/// It is registered twice on the session's stream, and the waiter wakes on
/// whichever reports first. etcd reads its current revision before it
/// registers a watch; a write that commits in between leaves the watch
/// "unsynced", served by a catch-up loop that runs every 100 ms. Under a
/// steady stream of writes (a busy lock) about one registration in a
/// hundred and fifty loses that race, and one late wake-up stalls the whole
/// queue behind it. Two registrations lose it together about as often as
/// the square of that; the second costs one message each way, no round trip.
struct BlockerWatch {
    key: String,
    registrations: [(Registration, Option<i64>); 2],
    signals: mpsc::UnboundedReceiver<(i64, Signal)>,
}

impl BlockerWatch {
    fn new(hub: &WatchHub, key: String) -> BlockerWatch {
        let (sink, signals) = mpsc::unbounded_channel();
        let registrations = [
            (hub.watch(key.clone(), 0, sink.clone()), None),
            (hub.watch(key.clone(), 0, sink), None),
        ];
        BlockerWatch {
            key,
            registrations,
            signals,
        }
    }

    fn created(&mut self, id: i64, revision: i64) {
        for (registration, created_at) in &mut self.registrations {
            if registration.id() == id {
                *created_at = Some(revision);
            }
        }
    }

    /// Once both registrations exist: the later one's creation revision.
    /// Together they report every change after it.
    fn created_at(&self) -> Option<i64> {
        let [(_, first), (_, second)] = &self.registrations;
        Some((*first)?.max((*second)?))
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
