//! The lock service's state and every decision it makes: grant, queue, wake,
//! release, renew, expire.
//!
//! All of it runs under the one `std::sync::Mutex` of the service and never
//! awaits: a critical section is a few map lookups, so a tokio mutex would
//! only add cost (the reasoning of mini-redis's `db.rs`). Waiters are woken
//! by sending on their one-shot channel *while the lock is held*, so a grant
//! and the state change that records it are one atomic step.
//!
//! Timers (lease expiry, the end of a lock-delay) and the keep-alive are
//! tokio tasks spawned from here and owned by [`TaskGuard`]s stored next to
//! the state they serve: dropping that state stops them.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use palisade_core::{
    ChangeSender, Generation, Holder, LeaseTracker, LockError, LockInfo, LockName, LostReason,
    Mode, Sequencer, SessionOptions, Signer, name_has_prefix,
};
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::client::ClientInner;
use crate::tasks::{self, TaskGuard};

/// The backend name used in [`LockError`] payloads.
pub(crate) const BACKEND: &str = "embedded";

/// Identifies a session inside one service.
pub(crate) type SessionId = u64;

/// Identifies a queued `acquire` inside one service.
pub(crate) type WaiterId = u64;

/// What a granted request receives: the sequencer and the hold's lease,
/// which the service keeps extending (renewals) or ends (expiry). The
/// session's hold table records it outside the service's mutex.
#[derive(Debug)]
pub(crate) struct Grant {
    pub(crate) sequencer: Sequencer,
    pub(crate) tracker: Arc<LeaseTracker>,
}

/// The answer a queued waiter gets on its one-shot channel.
pub(crate) type Reply = Result<Grant, LockError>;

/// The outcome of asking for a lock.
pub(crate) enum Begin {
    /// Granted at once (a fresh hold or a re-entry).
    Granted(Grant),
    /// Queued: the grant (or a refusal) will arrive on `reply`.
    Queued {
        waiter: WaiterId,
        reply: oneshot::Receiver<Reply>,
    },
    /// Not grantable now, and the caller asked not to queue.
    Refused,
}

/// How a session's lease ended without a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseEnd {
    /// The TTL passed without a renewal.
    Expired,
    /// The test hook `EmbeddedLock::kill_lease` ended it.
    // Only the test hooks (`testing` feature) end a lease this way.
    #[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
    Killed,
}

impl LeaseEnd {
    fn as_str(self) -> &'static str {
        match self {
            LeaseEnd::Expired => "expired",
            LeaseEnd::Killed => "killed",
        }
    }
}

/// Everything the service knows.
pub(crate) struct ServiceState {
    /// The service itself, for the tasks spawned from here. Weak, so that
    /// a timer never keeps a dropped service alive.
    service: Weak<ClientInner>,
    /// Put in every sequencer: generations of different services are not
    /// comparable, and a live check refuses sequencers of other issuers.
    issuer: String,
    /// Signs every sequencer when set (its issuer is `issuer`). The
    /// signature is made once, when the hold is minted, so re-entrant
    /// guards hand out the very same signed text.
    signer: Option<Signer>,
    /// Per-name state. An entry is removed once nothing holds, waits for or
    /// delays its name (see `generation_floor`).
    locks: HashMap<LockName, LockEntry>,
    /// Every open session, ended or not, until its handle is dropped.
    sessions: HashMap<SessionId, SessionRecord>,
    next_session: u64,
    next_waiter: u64,
    /// The highest generation of any entry removed so far. A new entry
    /// starts counting above it, so a name whose entry was forgotten and
    /// created again never sees a generation it has seen before, while the
    /// service keeps no memory for idle names.
    generation_floor: u64,
    /// Hints observers ([`Inspect::changes`](palisade_core::Inspect::changes))
    /// at every change of holders, of any name.
    pub(crate) holders_changed: ChangeSender,
}

/// One lock name.
struct LockEntry {
    /// The last generation minted for this name; the next grant gets one
    /// more. Never goes down.
    last_generation: u64,
    /// Who holds the name now: one exclusive hold, or any number of shared
    /// ones. Each hold belongs to a different session (re-entry is counted
    /// by the session's hold table, which asks once per name).
    holders: Vec<Hold>,
    /// FIFO queue of sessions waiting for the name.
    waiters: VecDeque<Waiter>,
    /// Chubby's lock-delay: after a holder's lease ended without a release,
    /// nobody is granted the name before this instant.
    delay_until: Option<Instant>,
    /// The timer that wakes the queue when the lock-delay ends.
    delay_timer: Option<TaskGuard>,
}

/// One session's hold of one name.
struct Hold {
    session: SessionId,
    /// Issued at grant time; every re-entrant guard gets a clone.
    sequencer: Sequencer,
    /// Drives the guards' lease-lost signal: extended by each renewal,
    /// released by a clean release, lost when the lease ends. Shared with
    /// the session's hold table.
    tracker: Arc<LeaseTracker>,
}

/// One queued `acquire`.
struct Waiter {
    id: WaiterId,
    session: SessionId,
    mode: Mode,
    /// Where the grant goes. If the receiver is gone (the `acquire` future
    /// was dropped), sending fails and the grant is undone on the spot.
    reply: oneshot::Sender<Reply>,
}

/// What the service keeps per session.
struct SessionRecord {
    /// Public holder id (`session-<n>`), put in sequencers.
    holder_id: String,
    /// The lease id (hex), put in sequencers.
    lease_id: String,
    options: SessionOptions,
    /// Set when the lease ended without a release; the session is then
    /// closed for good, like a Chubby session or an etcd lease.
    ended: Option<LeaseEnd>,
    /// Names this session holds.
    held: BTreeSet<LockName>,
    /// This session's queued waiters, so that an ended session can answer
    /// them at once.
    waiting: HashMap<WaiterId, LockName>,
    /// The lease, armed while the session holds anything.
    lease: Option<ArmedLease>,
    /// The test hook `stop_keepalive` was called: the lease is never
    /// renewed again.
    keepalive_stopped: bool,
    /// The runtime the session's tasks run on: the one its last `acquire`
    /// or `try_acquire` ran in. Remembered because grants are also made
    /// from contexts without a runtime (a guard dropped after shutdown).
    runtime: Option<Handle>,
}

/// A lease that protects at least one hold.
///
/// A session's lease is *armed* only while the session holds something,
/// because only then is there anything for it to protect: arming starts the
/// TTL, the keep-alive then renews it, and releasing the last hold disarms
/// it (which stops both tasks). An idle session therefore never expires.
struct ArmedLease {
    /// When the service expires the lease unless it is renewed first:
    /// `last_renewal + ttl`.
    deadline: Instant,
    /// When the last renewal (or the arming grant) was made. Every hold's
    /// tracker is valid until `options.valid_until(last_renewal)`, which is
    /// the deadline minus the safety margin: the client reports the loss
    /// before the service acts on it.
    last_renewal: Instant,
    /// Renews the lease every keep-alive interval; `None` once stopped.
    /// Held for its drop; only the test hooks stop it early.
    #[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
    keepalive: Option<TaskGuard>,
    /// Expires the lease at its deadline.
    _expiry_timer: Option<TaskGuard>,
}

impl LockEntry {
    fn new(generation_floor: u64) -> Self {
        LockEntry {
            last_generation: generation_floor,
            holders: Vec::new(),
            waiters: VecDeque::new(),
            delay_until: None,
            delay_timer: None,
        }
    }

    /// Whether a new holder in `mode` is compatible with the current ones.
    fn admits(&self, mode: Mode) -> bool {
        self.holders
            .iter()
            .all(|hold| hold.sequencer.mode().compatible_with(mode))
    }

    /// Whether a lock-delay is in force at `now`; clears a passed one.
    fn delayed(&mut self, now: Instant) -> bool {
        match self.delay_until {
            Some(until) if until > now => true,
            Some(_) => {
                self.delay_until = None;
                self.delay_timer = None;
                false
            }
            None => false,
        }
    }

    fn hold_of(&mut self, session: SessionId) -> Option<&mut Hold> {
        self.holders.iter_mut().find(|hold| hold.session == session)
    }
}

impl Hold {
    fn grant(&self) -> Grant {
        Grant {
            sequencer: self.sequencer.clone(),
            tracker: self.tracker.clone(),
        }
    }
}

impl ServiceState {
    pub(crate) fn new(service: Weak<ClientInner>, issuer: String, signer: Option<Signer>) -> Self {
        ServiceState {
            service,
            issuer,
            signer,
            locks: HashMap::new(),
            sessions: HashMap::new(),
            next_session: 1,
            next_waiter: 1,
            generation_floor: 0,
            holders_changed: ChangeSender::new(),
        }
    }

    /// Registers a new session; returns its id, holder id and lease id.
    pub(crate) fn open_session(&mut self, options: SessionOptions) -> (SessionId, String, String) {
        let id = self.next_session;
        self.next_session += 1;
        let holder_id = format!("session-{id}");
        let lease_id = format!("{id:x}");
        tracing::debug!(holder = %holder_id, lease = %lease_id, ttl = ?options.ttl(), "session opened");
        self.sessions.insert(
            id,
            SessionRecord {
                holder_id: holder_id.clone(),
                lease_id: lease_id.clone(),
                options,
                ended: None,
                held: BTreeSet::new(),
                waiting: HashMap::new(),
                lease: None,
                keepalive_stopped: false,
                runtime: None,
            },
        );
        (id, holder_id, lease_id)
    }

    /// Forgets a session whose last handle is gone. Guards keep the handle
    /// alive, so normally nothing is held or awaited any more; whatever is
    /// left is released cleanly.
    pub(crate) fn close_session(&mut self, session: SessionId, now: Instant) {
        let Some(mut record) = self.sessions.remove(&session) else {
            return;
        };
        let mut touched: BTreeSet<LockName> = BTreeSet::new();
        for name in std::mem::take(&mut record.held) {
            if let Some(entry) = self.locks.get_mut(&name) {
                entry.holders.retain(|hold| {
                    if hold.session == session {
                        hold.tracker.release();
                        false
                    } else {
                        true
                    }
                });
                self.holders_changed.notify();
            }
            touched.insert(name);
        }
        for (waiter, name) in std::mem::take(&mut record.waiting) {
            self.answer_removed_waiter(&name, waiter, Err(LockError::SessionClosed));
            touched.insert(name);
        }
        tracing::debug!(holder = %record.holder_id, "session closed");
        drop(record);
        for name in touched {
            self.grant_waiters(&name, now);
            self.evict_if_idle(&name, now);
        }
    }

    /// Remembers the runtime a session's requests run in.
    pub(crate) fn note_runtime(&mut self, session: SessionId, runtime: Option<Handle>) {
        if let (Some(record), Some(runtime)) = (self.sessions.get_mut(&session), runtime) {
            record.runtime = Some(runtime);
        }
    }

    /// The runtime the session's requests last ran in.
    pub(crate) fn runtime_of(&self, session: SessionId) -> Option<Handle> {
        self.sessions
            .get(&session)
            .and_then(|record| record.runtime.clone())
    }

    /// Whether the session's lease ended (it is closed for good).
    pub(crate) fn session_ended(&mut self, session: SessionId, now: Instant) -> bool {
        self.reap_session_if_due(session, now);
        self.sessions
            .get(&session)
            .is_none_or(|record| record.ended.is_some())
    }

    /// Asks for `name` in `mode` on behalf of `session`: re-entry, an
    /// immediate grant, a place in the queue (if `queue`), or a refusal.
    pub(crate) fn begin(
        &mut self,
        session: SessionId,
        name: &LockName,
        mode: Mode,
        queue: bool,
        now: Instant,
    ) -> Result<Begin, LockError> {
        self.reap_session_if_due(session, now);
        self.reap_holders_of(name, now);
        if self
            .sessions
            .get(&session)
            .is_none_or(|record| record.ended.is_some())
        {
            return Err(LockError::SessionClosed);
        }
        let generation_floor = self.generation_floor;
        let entry = self
            .locks
            .entry(name.clone())
            .or_insert_with(|| LockEntry::new(generation_floor));

        if let Some(hold) = entry.hold_of(session) {
            // The session's table forgot this hold (its lease lapsed
            // locally before the service expired it): the same grant, lost.
            let held = hold.sequencer.mode();
            if held != mode {
                return Err(LockError::ModeConflict {
                    name: name.clone(),
                    held,
                    requested: mode,
                });
            }
            return Ok(Begin::Granted(hold.grant()));
        }

        let delayed = entry.delayed(now);
        if !delayed && entry.waiters.is_empty() && entry.admits(mode) {
            return self.add_hold(session, name, mode, now).map(Begin::Granted);
        }
        if !queue {
            tracing::debug!(lock = %name, %mode, delayed, waiters = entry.waiters.len(), "try-acquire refused: not grantable now");
            return Ok(Begin::Refused);
        }
        let waiter = self.next_waiter;
        self.next_waiter += 1;
        let (reply_sender, reply) = oneshot::channel();
        entry.waiters.push_back(Waiter {
            id: waiter,
            session,
            mode,
            reply: reply_sender,
        });
        tracing::debug!(lock = %name, %mode, position = entry.waiters.len(), delayed, "queued");
        if let Some(record) = self.sessions.get_mut(&session) {
            record.waiting.insert(waiter, name.clone());
        }
        Ok(Begin::Queued { waiter, reply })
    }

    /// Takes a waiter whose `acquire` future was dropped out of the queue.
    /// Returns `false` if it was no longer queued (it was answered: the
    /// caller then undoes a grant it finds on its channel).
    pub(crate) fn cancel_waiter(
        &mut self,
        session: SessionId,
        name: &LockName,
        waiter: WaiterId,
        now: Instant,
    ) -> bool {
        let Some(entry) = self.locks.get_mut(name) else {
            return false;
        };
        let Some(position) = entry.waiters.iter().position(|queued| queued.id == waiter) else {
            return false;
        };
        entry.waiters.remove(position);
        if let Some(record) = self.sessions.get_mut(&session) {
            record.waiting.remove(&waiter);
        }
        tracing::debug!(lock = %name, position = position + 1, "waiter gone: removed from the queue");
        // The waiter may have been the one blocking those behind it (a
        // writer ahead of readers while readers hold).
        self.grant_waiters(name, now);
        self.evict_if_idle(name, now);
        true
    }

    /// Ends `session`'s hold of `name` with `generation` (its last guard
    /// went); then the queue moves.
    pub(crate) fn release(
        &mut self,
        session: SessionId,
        name: &LockName,
        generation: Generation,
        now: Instant,
    ) -> Result<(), LockError> {
        self.reap_session_if_due(session, now);
        let not_owner = || LockError::NotOwner {
            name: name.clone(),
            generation,
        };
        let entry = self.locks.get_mut(name).ok_or_else(not_owner)?;
        let position = entry
            .holders
            .iter()
            .position(|hold| hold.session == session && hold.sequencer.generation() == generation)
            .ok_or_else(|| {
                tracing::info!(lock = %name, generation = generation.get(), "release refused: not the owner (the hold is gone)");
                not_owner()
            })?;
        let hold = entry.holders.swap_remove(position);
        self.holders_changed.notify();
        hold.tracker.release();
        tracing::info!(lock = %name, generation = generation.get(), mode = %hold.sequencer.mode(), "released");
        if let Some(record) = self.sessions.get_mut(&session) {
            record.held.remove(name);
            if record.held.is_empty() && record.lease.take().is_some() {
                tracing::trace!(holder = %record.holder_id, "lease disarmed: nothing held");
            }
        }
        self.grant_waiters(name, now);
        self.evict_if_idle(name, now);
        Ok(())
    }

    /// The keep-alive's renewal, sent at `sent_at`. Returns `false` once
    /// there is nothing (more) to renew, which stops the keep-alive.
    pub(crate) fn renew(&mut self, session: SessionId, sent_at: Instant, now: Instant) -> bool {
        self.reap_session_if_due(session, now);
        let ServiceState {
            locks, sessions, ..
        } = self;
        let Some(record) = sessions.get_mut(&session) else {
            return false;
        };
        if record.ended.is_some() || record.keepalive_stopped {
            return false;
        }
        let Some(lease) = record.lease.as_mut() else {
            return false;
        };
        lease.deadline = sent_at + record.options.ttl();
        lease.last_renewal = sent_at;
        let valid_until = record.options.valid_until(sent_at);
        for name in &record.held {
            if let Some(hold) = locks.get_mut(name).and_then(|entry| entry.hold_of(session)) {
                if !hold.tracker.extend(valid_until) {
                    tracing::warn!(lock = %name, generation = hold.sequencer.generation().get(), "renewal came after the local validity deadline: the hold stays lost");
                }
            }
        }
        tracing::trace!(holder = %record.holder_id, holds = record.held.len(), "lease renewed");
        true
    }

    /// The deadline of the session's armed lease, if armed.
    pub(crate) fn lease_deadline(&self, session: SessionId) -> Option<Instant> {
        self.sessions
            .get(&session)
            .and_then(|record| record.lease.as_ref())
            .map(|lease| lease.deadline)
    }

    /// Stops the session's keep-alive for good (a test hook's work).
    #[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
    pub(crate) fn stop_keepalive(&mut self, session: SessionId) {
        if let Some(record) = self.sessions.get_mut(&session) {
            record.keepalive_stopped = true;
            if let Some(lease) = record.lease.as_mut() {
                lease.keepalive = None;
            }
            tracing::info!(holder = %record.holder_id, "keep-alive stopped");
        }
    }

    /// Ends `session`'s lease without a release, effective `ended_at`: its
    /// holds are removed, their trackers lost, lock-delays started, its
    /// waiters refused, and the queues of the names involved move on.
    pub(crate) fn end_lease(
        &mut self,
        session: SessionId,
        end: LeaseEnd,
        ended_at: Instant,
        now: Instant,
    ) {
        let Some(record) = self.sessions.get_mut(&session) else {
            return;
        };
        if record.ended.is_some() {
            return;
        }
        record.ended = Some(end);
        // Dropping the armed lease stops the keep-alive and the timer.
        record.lease = None;
        let held = std::mem::take(&mut record.held);
        let waiting = std::mem::take(&mut record.waiting);
        let lock_delay = record.options.lock_delay();
        let runtime = record.runtime.clone();
        tracing::warn!(holder = %record.holder_id, lease = %record.lease_id, end = end.as_str(), holds = held.len(), "lease ended without a release");

        let mut touched: BTreeSet<LockName> = BTreeSet::new();
        for name in held {
            if let Some(entry) = self.locks.get_mut(&name) {
                if let Some(position) = entry
                    .holders
                    .iter()
                    .position(|hold| hold.session == session)
                {
                    let hold = entry.holders.swap_remove(position);
                    self.holders_changed.notify();
                    self.holders_changed.notify();
                    hold.tracker.lose(LostReason::Revoked);
                    tracing::warn!(lock = %name, generation = hold.sequencer.generation().get(), end = end.as_str(), "lease lost: hold removed");
                }
                let until = ended_at + lock_delay;
                if !lock_delay.is_zero()
                    && until > now
                    && entry.delay_until.is_none_or(|current| current < until)
                {
                    entry.delay_until = Some(until);
                    entry.delay_timer = tasks::spawn(
                        runtime.as_ref(),
                        tasks::lock_delay_timer(self.service.clone(), name.clone(), until),
                    );
                    tracing::info!(lock = %name, delay = ?lock_delay, remaining = ?until - now, "lock-delay started");
                }
            }
            touched.insert(name);
        }
        for (waiter, name) in waiting {
            self.answer_removed_waiter(&name, waiter, Err(LockError::SessionClosed));
            touched.insert(name);
        }
        for name in touched {
            self.grant_waiters(&name, now);
            self.evict_if_idle(&name, now);
        }
    }

    /// Called by the lock-delay timer: grants what the delay held back.
    pub(crate) fn lock_delay_ended(&mut self, name: &LockName, now: Instant) {
        tracing::debug!(lock = %name, "lock-delay timer fired");
        self.grant_waiters(name, now);
        self.evict_if_idle(name, now);
    }

    /// Whether `sequencer` names a current hold: this issuer, that
    /// generation and mode (and holder and lease, if given), held by a
    /// session whose lease is valid now.
    pub(crate) fn is_live(&mut self, sequencer: &Sequencer, now: Instant) -> bool {
        if sequencer.issuer() != Some(self.issuer.as_str()) {
            return false;
        }
        self.reap_holders_of(sequencer.lock(), now);
        let Some(entry) = self.locks.get(sequencer.lock()) else {
            return false;
        };
        entry.holders.iter().any(|hold| {
            let issued = &hold.sequencer;
            issued.generation() == sequencer.generation()
                && issued.mode() == sequencer.mode()
                && sequencer
                    .holder()
                    .is_none_or(|holder| issued.holder() == Some(holder))
                && sequencer
                    .lease()
                    .is_none_or(|lease| issued.lease() == Some(lease))
                && self.sessions.get(&hold.session).is_some_and(|record| {
                    record.ended.is_none()
                        && record
                            .lease
                            .as_ref()
                            .is_some_and(|lease| lease.deadline > now)
                })
        })
    }

    /// Raises `name`'s counter to at least `mark`; returns it before and
    /// after. The service keeps no entry for an idle name, so for one the
    /// floor every new entry starts from is raised (other idle names jump
    /// with it, which only ever moves generations up).
    pub(crate) fn raise_floor(&mut self, name: &LockName, mark: u64) -> (u64, u64) {
        let counter = match self.locks.get_mut(name) {
            Some(entry) => &mut entry.last_generation,
            None => &mut self.generation_floor,
        };
        let before = *counter;
        *counter = before.max(mark);
        tracing::info!(lock = %name, mark, before, after = *counter, "generation floor raised");
        (before, *counter)
    }

    /// The sequencers of the current holders of `name`.
    pub(crate) fn holders(&self, name: &LockName) -> Vec<Sequencer> {
        self.locks
            .get(name)
            .map(|entry| {
                entry
                    .holders
                    .iter()
                    .map(|hold| hold.sequencer.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// What an operator sees of `name` at `now`: live holds with their
    /// lease time left, the queue in order, the lock-delay left.
    pub(crate) fn inspect(&mut self, name: &LockName, now: Instant) -> LockInfo {
        self.reap_holders_of(name, now);
        let mut info = LockInfo::free(name.clone());
        let Some(entry) = self.locks.get_mut(name) else {
            return info;
        };
        let delay_left = entry
            .delayed(now)
            .then(|| entry.delay_until.map(|until| until - now))
            .flatten();
        info.lock_delay_left = delay_left;
        for hold in &entry.holders {
            let issued = &hold.sequencer;
            let lease_left = self
                .sessions
                .get(&hold.session)
                .and_then(|record| record.lease.as_ref())
                .map(|lease| lease.deadline.saturating_duration_since(now));
            info.holders.push(
                Holder::new(issued.mode(), issued.generation())
                    .with_lease_left(lease_left)
                    .with_lease(issued.lease().map(str::to_owned))
                    .with_holder(issued.holder().map(str::to_owned)),
            );
        }
        info.holders.sort_by_key(|holder| holder.generation);
        let waiters = entry
            .waiters
            .iter()
            .map(|waiter| {
                let record = self.sessions.get(&waiter.session);
                palisade_core::Waiter::new(
                    waiter.mode,
                    record.map(|record| record.lease_id.clone()),
                    record.map(|record| record.holder_id.clone()),
                )
            })
            .collect();
        info.waiters = Some(waiters);
        info
    }

    /// Every name starting with `prefix` that is not idle at `now`, sorted.
    pub(crate) fn list(&mut self, prefix: &str, now: Instant) -> Vec<LockInfo> {
        let mut names: Vec<LockName> = self
            .locks
            .keys()
            .filter(|name| name_has_prefix(name, prefix))
            .cloned()
            .collect();
        names.sort();
        names
            .iter()
            .map(|name| self.inspect(name, now))
            .filter(|info| !info.is_idle())
            .collect()
    }

    /// How many requests are queued for `name`.
    pub(crate) fn waiters(&self, name: &LockName) -> usize {
        self.locks.get(name).map_or(0, |entry| entry.waiters.len())
    }

    /// Grants waiters from the head of `name`'s queue for as long as they
    /// can be granted: one writer, or every reader up to the next writer.
    fn grant_waiters(&mut self, name: &LockName, now: Instant) {
        loop {
            let Some(entry) = self.locks.get_mut(name) else {
                return;
            };
            if entry.delayed(now) {
                return;
            }
            let Some(head) = entry.waiters.front() else {
                return;
            };
            let (session, mode) = (head.session, head.mode);
            if entry.hold_of(session).is_some() {
                // The head's session holds the name already (its table
                // forgot a lapsed hold before the service expired it).
                let Some(waiter) = entry.waiters.pop_front() else {
                    return;
                };
                self.forget_waiting(session, waiter.id);
                self.answer_reentrant(name, waiter);
                continue;
            }
            if !entry.admits(mode) {
                return;
            }
            let Some(waiter) = entry.waiters.pop_front() else {
                return;
            };
            self.forget_waiting(session, waiter.id);
            let grant = match self.add_hold(session, name, mode, now) {
                Ok(grant) => grant,
                Err(error) => {
                    let _ = waiter.reply.send(Err(error));
                    continue;
                }
            };
            let generation = grant.sequencer.generation();
            if waiter.reply.send(Ok(grant)).is_err() {
                // The waiter's future was dropped while we decided: undo,
                // so no phantom holder remains.
                tracing::debug!(lock = %name, generation = generation.get(), "waiter gone before its grant arrived: grant undone");
                self.undo_fresh_hold(session, name);
                continue;
            }
            tracing::info!(lock = %name, generation = generation.get(), %mode, "woken: waiter granted");
        }
    }

    /// Answers a waiter whose session already holds `name` (its table
    /// forgot a lapsed hold): that grant in the same mode, a mode conflict
    /// otherwise.
    fn answer_reentrant(&mut self, name: &LockName, waiter: Waiter) {
        let Some(hold) = self
            .locks
            .get_mut(name)
            .and_then(|entry| entry.hold_of(waiter.session))
        else {
            return;
        };
        let held = hold.sequencer.mode();
        if held != waiter.mode {
            let _ = waiter.reply.send(Err(LockError::ModeConflict {
                name: name.clone(),
                held,
                requested: waiter.mode,
            }));
            return;
        }
        let _ = waiter.reply.send(Ok(hold.grant()));
    }

    /// Mints a generation and records a fresh hold of `name` by `session`,
    /// arming the session's lease if this is its first hold.
    fn add_hold(
        &mut self,
        session: SessionId,
        name: &LockName,
        mode: Mode,
        now: Instant,
    ) -> Result<Grant, LockError> {
        let ServiceState {
            service,
            issuer,
            signer,
            locks,
            sessions,
            ..
        } = self;
        let record = sessions.get_mut(&session).ok_or(LockError::SessionClosed)?;
        let entry = locks.get_mut(name).ok_or(LockError::SessionClosed)?;
        let generation = entry
            .last_generation
            .checked_add(1)
            .and_then(Generation::new)
            .ok_or_else(|| LockError::Backend {
                backend: BACKEND,
                source: format!("the generation counter of lock `{name}` is exhausted").into(),
            })?;
        let (last_renewal, deadline) = match &record.lease {
            Some(lease) => (lease.last_renewal, lease.deadline),
            None => (now, now + record.options.ttl()),
        };
        let sequencer = Sequencer::new(name.clone(), mode, generation)
            .with_issuer(issuer)
            .and_then(|sequencer| sequencer.with_holder(&record.holder_id))
            .and_then(|sequencer| sequencer.with_lease(&record.lease_id))
            .map(|sequencer| sequencer.with_expiry_hint(unix_millis_at(deadline, now)))
            .map_err(|error| LockError::Backend {
                backend: BACKEND,
                source: Box::new(error),
            })?;
        let sequencer = match signer {
            Some(signer) => {
                tracing::debug!(lock = %name, generation = generation.get(), key_id = signer.key_id(), "sequencer signed");
                signer.sign(sequencer)
            }
            None => sequencer,
        };
        entry.last_generation = generation.get();
        if record.lease.is_none() {
            let keepalive = if record.keepalive_stopped {
                None
            } else {
                tasks::spawn(
                    record.runtime.as_ref(),
                    tasks::keepalive(
                        service.clone(),
                        session,
                        record.options.keepalive_interval(),
                    ),
                )
            };
            let expiry_timer = tasks::spawn(
                record.runtime.as_ref(),
                tasks::lease_expiry_timer(service.clone(), session),
            );
            record.lease = Some(ArmedLease {
                deadline,
                last_renewal,
                keepalive,
                _expiry_timer: expiry_timer,
            });
            tracing::trace!(holder = %record.holder_id, ttl = ?record.options.ttl(), "lease armed");
        }
        let tracker = Arc::new(LeaseTracker::new(record.options.valid_until(last_renewal)));
        entry.holders.push(Hold {
            session,
            sequencer: sequencer.clone(),
            tracker: tracker.clone(),
        });
        record.held.insert(name.clone());
        self.holders_changed.notify();
        tracing::info!(lock = %name, generation = generation.get(), %mode, holder = %record.holder_id, "granted");
        Ok(Grant { sequencer, tracker })
    }

    /// Removes a hold that was just made for a waiter that turned out to be
    /// gone.
    fn undo_fresh_hold(&mut self, session: SessionId, name: &LockName) {
        if let Some(entry) = self.locks.get_mut(name) {
            if let Some(position) = entry
                .holders
                .iter()
                .position(|hold| hold.session == session)
            {
                entry.holders.swap_remove(position).tracker.release();
                self.holders_changed.notify();
            }
        }
        if let Some(record) = self.sessions.get_mut(&session) {
            record.held.remove(name);
            if record.held.is_empty() {
                record.lease = None;
            }
        }
    }

    fn forget_waiting(&mut self, session: SessionId, waiter: WaiterId) {
        if let Some(record) = self.sessions.get_mut(&session) {
            record.waiting.remove(&waiter);
        }
    }

    /// Takes waiter `waiter` out of `name`'s queue and answers it.
    fn answer_removed_waiter(&mut self, name: &LockName, waiter: WaiterId, reply: Reply) {
        if let Some(entry) = self.locks.get_mut(name) {
            if let Some(position) = entry.waiters.iter().position(|queued| queued.id == waiter) {
                if let Some(queued) = entry.waiters.remove(position) {
                    let _ = queued.reply.send(reply);
                }
            }
        }
    }

    /// Expires the session's lease if its deadline has passed.
    fn reap_session_if_due(&mut self, session: SessionId, now: Instant) {
        let due = self
            .sessions
            .get(&session)
            .filter(|record| record.ended.is_none())
            .and_then(|record| record.lease.as_ref())
            .map(|lease| lease.deadline)
            .filter(|deadline| *deadline <= now);
        if let Some(deadline) = due {
            self.end_lease(session, LeaseEnd::Expired, deadline, now);
        }
    }

    /// Expires the leases of `name`'s holders whose deadline has passed, so
    /// a decision about `name` never counts a holder the service would
    /// already have expired had its timer run on time.
    fn reap_holders_of(&mut self, name: &LockName, now: Instant) {
        let holders: Vec<SessionId> = self
            .locks
            .get(name)
            .map(|entry| entry.holders.iter().map(|hold| hold.session).collect())
            .unwrap_or_default();
        for session in holders {
            self.reap_session_if_due(session, now);
        }
    }

    /// Forgets `name`'s entry once nothing holds, awaits or delays it,
    /// raising the generation floor so the name's counter never restarts
    /// lower.
    fn evict_if_idle(&mut self, name: &LockName, now: Instant) {
        let idle = self.locks.get_mut(name).is_some_and(|entry| {
            entry.holders.is_empty() && entry.waiters.is_empty() && !entry.delayed(now)
        });
        if idle {
            if let Some(entry) = self.locks.remove(name) {
                self.generation_floor = self.generation_floor.max(entry.last_generation);
            }
        }
    }
}

/// The wall-clock time (ms since the Unix epoch) that corresponds to the
/// monotonic instant `at`: a hint for humans, never used for decisions.
fn unix_millis_at(at: Instant, now: Instant) -> u64 {
    let wall = SystemTime::now() + at.saturating_duration_since(now);
    wall.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis()
        .try_into()
        .unwrap_or(u64::MAX)
}
