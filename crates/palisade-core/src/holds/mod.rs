//! The session side of every lock backend, written once: which locks a
//! session holds, re-entry, guard counts, one acquisition per name at a
//! time, the per-process waiter bound, losing every hold when the session
//! ends, and releasing (the last guard gives the hold back; a release whose
//! future is dropped, or a dropped guard, finishes in the background).
//!
//! A backend supplies only its protocol: how to be granted a lock (queue,
//! wait, mint a generation), how to keep leases alive, and how to give a
//! hold back (compare-and-delete by owner). It implements [`HoldBackend`]
//! on its session type and calls the table at three points:
//!
//! 1. [`HoldTable::admit`] first: a re-entry comes back as a guard at once;
//!    otherwise the caller gets a [`Turn`], which holds the session's gate
//!    for the name (no other acquisition of that name by this session runs
//!    meanwhile) and, when it waits, a place under the waiter bound.
//! 2. [`Turn::grant`] once the lock service granted the lock: the hold goes
//!    into the table and its first [`HoldGuard`] comes out.
//! 3. [`HoldBackend::give_back`] when the last guard of a hold goes: the
//!    table calls it, and turns its answer into the lease signal's final
//!    state and the caller's `Ok` or [`LockError::NotOwner`].
//!
//! Leases stay with the backend: it renews them and moves the holds'
//! deadlines with [`HoldTable::extend_where`], and ends them with
//! [`HoldTable::lose_where`] or [`HoldTable::end`].
//!
//! # A toy backend
//!
//! An in-memory "lock service" that grants a free lock at once and knows
//! nothing of waiting, to show the shape. A real backend's `acquire` waits
//! on its lock service between `admit` and `grant`.
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::{Arc, Mutex};
//! use std::time::Duration;
//!
//! use palisade_core::holds::{Admission, GiveBack, HoldBackend, HoldGuard, HoldTable, Patience, Task, Waiters};
//! use palisade_core::{Generation, LeaseTracker, LockError, LockGuard, LockName, Mode, Sequencer, SessionOptions};
//! use tokio::time::Instant;
//!
//! /// The lock service: the owner token of each held name, and a counter.
//! #[derive(Default)]
//! struct Service { held: Mutex<(HashMap<LockName, u64>, u64)> }
//!
//! /// A session on it.
//! struct ToySession {
//!     service: Arc<Service>,
//!     holds: HoldTable<u64>, // per hold: the owner token (here the generation)
//!     options: SessionOptions,
//! }
//!
//! impl HoldBackend for ToySession {
//!     type Data = u64;
//!
//!     fn holds(&self) -> &HoldTable<u64> {
//!         &self.holds
//!     }
//!
//!     /// Compare-and-delete on the owner token.
//!     async fn give_back(&self, hold: GiveBack<u64>) -> Result<bool, LockError> {
//!         let mut held = self.service.held.lock().unwrap();
//!         let ours = held.0.get(hold.name()) == Some(hold.data());
//!         if ours {
//!             held.0.remove(hold.name());
//!         }
//!         Ok(ours)
//!     }
//!
//!     fn spawn(&self, task: Task) {
//!         tokio::spawn(task);
//!     }
//! }
//!
//! /// `Lock::try_acquire`, as the toy would implement it.
//! async fn try_acquire(session: &Arc<ToySession>, name: &LockName) -> Result<Option<HoldGuard<ToySession>>, LockError> {
//!     let turn = match HoldTable::admit(session, name, Mode::Exclusive, Patience::Now).await? {
//!         Admission::Reentered(guard) => return Ok(Some(guard)),
//!         Admission::InProgress => return Ok(None),
//!         Admission::Turn(turn) => turn,
//!     };
//!     let sent_at = Instant::now();
//!     let generation = {
//!         let mut held = session.service.held.lock().unwrap();
//!         if held.0.contains_key(name) {
//!             return Ok(None);
//!         }
//!         held.1 += 1;
//!         let generation = held.1;
//!         held.0.insert(name.clone(), generation);
//!         generation
//!     };
//!     let sequencer = Sequencer::new(name.clone(), Mode::Exclusive, Generation::new(generation).unwrap());
//!     let lease = Arc::new(LeaseTracker::new(session.options.valid_until(sent_at)));
//!     turn.grant(sequencer, lease, generation).map(Some)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let service = Arc::new(Service::default());
//! let options = SessionOptions::default();
//! let session = |service: &Arc<Service>| Arc::new(ToySession {
//!     service: service.clone(),
//!     holds: HoldTable::new("toy", &options, Waiters::default()),
//!     options: options.clone(),
//! });
//! let (alice, bob) = (session(&service), session(&service));
//! let name = LockName::new("orders/42")?;
//!
//! let first = try_acquire(&alice, &name).await?.expect("free");
//! let again = try_acquire(&alice, &name).await?.expect("re-entry");
//! assert_eq!(first.generation(), again.generation());
//! assert!(try_acquire(&bob, &name).await?.is_none());
//!
//! let held = first.generation();
//! first.release().await?; // one guard of two: nothing is asked of the service
//! assert!(try_acquire(&bob, &name).await?.is_none());
//! again.release().await?; // the last: given back
//! assert!(try_acquire(&bob, &name).await?.expect("free again").generation() > held);
//! # Ok(())
//! # }
//! ```

mod guard;
mod waiters;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use crate::{
    Generation, LeaseState, LeaseTracker, LockError, LockName, LostReason, Mode, Sequencer,
    SessionOptions,
};

pub use guard::HoldGuard;
pub use waiters::{WaiterSlot, Waiters};

/// A future run in the background: a release finishing after its caller
/// went away.
pub type Task = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A lock backend's session, as the [`HoldTable`] sees it: its table, and
/// the one request the table makes of the lock service.
///
/// ### To ensure correctness
///
/// 1. **One table per session**: [`HoldBackend::holds`] returns the same
///    table for the session's whole life; re-entry is per table.
/// 2. **Grant through the table**: every hold is created with
///    [`Turn::grant`], after [`HoldTable::admit`] and before the `Turn` is
///    dropped, so that no second acquisition of the name by this session
///    reaches the lock service while one is in progress.
/// 3. **Give back is compare-and-delete**: [`HoldBackend::give_back`] ends
///    the hold on the lock service only if it is still this hold's (owner
///    token, create-revision, ..., or a key that, while the gate is held
///    ([`GiveBack::holds_gate`]), only this hold can have: etcd's key named
///    by the session's lease), and answers `Ok(true)` if it was,
///    `Ok(false)` if the service had already ended it, and `Err` if it
///    could not tell. It is called at most once per hold.
/// 4. **Finish what cannot be answered**: when `give_back` fails, the
///    backend keeps trying in the background (or leaves the hold to its
///    lease), so that a failed release blocks the lock no longer than a
///    TTL.
/// 5. **Leases move the holds' deadlines**: a backend that renews a lease
///    moves every hold standing on it with [`HoldTable::extend_where`] (or
///    its own trackers), and loses them ([`HoldTable::lose_where`],
///    [`HoldTable::end`]) the moment the lease is known gone.
/// 6. **Spawn from anywhere**: [`HoldBackend::spawn`] runs a task even
///    when called outside a Tokio runtime (a guard dropped after
///    shutdown), or drops it, leaving the hold to its lease.
pub trait HoldBackend: Send + Sync + Sized + 'static {
    /// What the backend keeps per hold besides its sequencer and lease:
    /// an owner token, a key, the watchdog's schedule.
    type Data: Send + Sync + 'static;

    /// The session's table.
    fn holds(&self) -> &HoldTable<Self::Data>;

    /// Gives `hold` back to the lock service (compare-and-delete by
    /// owner): `Ok(true)` if it was still this hold's. The session's gate
    /// for the name comes with it ([`GiveBack::take_gate`]).
    fn give_back(
        &self,
        hold: GiveBack<Self::Data>,
    ) -> impl Future<Output = Result<bool, LockError>> + Send;

    /// Runs `task` in the background (see point 6 above).
    fn spawn(&self, task: Task);
}

/// A hold on its way back to the lock service: what
/// [`HoldBackend::give_back`] is handed. It reads as the [`Hold`] itself.
///
/// It carries the session's gate for the name when the hold was still the
/// table's current hold of it: no new acquisition of the name by this
/// session starts before the gate is dropped, which is when the give-back
/// ends unless the backend takes the gate out. Take it to keep it longer,
/// while the service may still have the hold and a new acquisition could
/// collide with it (etcd's one key per session and name, retried in the
/// background), or to drop it sooner. No gate when the table had already
/// forgotten the hold because its lease was lost.
pub struct GiveBack<D> {
    hold: Arc<Hold<D>>,
    gate: Option<Gate>,
}

impl<D> GiveBack<D> {
    /// The gate, taken out: `None` if there was none or it was taken.
    pub fn take_gate(&mut self) -> Option<Gate> {
        self.gate.take()
    }

    /// Whether the gate is here: the hold was the table's current hold of
    /// its name, so no other acquisition of the name by this session
    /// exists or can start until the gate is dropped.
    pub fn holds_gate(&self) -> bool {
        self.gate.is_some()
    }
}

impl<D> std::ops::Deref for GiveBack<D> {
    type Target = Hold<D>;

    fn deref(&self) -> &Hold<D> {
        &self.hold
    }
}

/// How long an acquisition may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patience {
    /// Not at all: `try_acquire`.
    Now,
    /// Until this instant: `acquire_timeout`.
    Until(Instant),
    /// As long as it takes: `acquire`.
    Forever,
}

impl Patience {
    /// Whether the caller waits at all (and so counts against the waiter
    /// bound).
    pub fn waits(self) -> bool {
        self != Patience::Now
    }

    /// The deadline, if there is one.
    pub fn deadline(self) -> Option<Instant> {
        match self {
            Patience::Until(deadline) => Some(deadline),
            Patience::Now | Patience::Forever => None,
        }
    }
}

/// What [`HoldTable::admit`] decided.
pub enum Admission<B: HoldBackend> {
    /// The session holds the lock in this mode already: one more guard on
    /// that hold, same generation. Nothing is asked of the lock service.
    Reentered(HoldGuard<B>),
    /// [`Patience::Now`], and another acquisition of the name by this
    /// session is in progress: the lock is not free for this one.
    InProgress,
    /// The caller's turn to ask the lock service.
    Turn(Turn<B>),
}

impl<B: HoldBackend> fmt::Debug for Admission<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Admission::Reentered(guard) => f.debug_tuple("Reentered").field(guard).finish(),
            Admission::InProgress => f.write_str("InProgress"),
            Admission::Turn(turn) => f.debug_tuple("Turn").field(turn).finish(),
        }
    }
}

/// One acquisition's turn at the lock service: holds the session's gate for
/// the name (no other acquisition of it by this session runs meanwhile)
/// and, when it waits, a place under the waiter bound. Dropping it without
/// [`Turn::grant`] frees both.
pub struct Turn<B: HoldBackend> {
    backend: Arc<B>,
    name: LockName,
    mode: Mode,
    patience: Patience,
    started: Instant,
    gate: Gate,
    /// Counted against the per-process waiter bound while the turn lasts.
    _slot: Option<WaiterSlot>,
}

impl<B: HoldBackend> Turn<B> {
    /// The lock asked for.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The mode asked for.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// How long the caller waits.
    pub fn patience(&self) -> Patience {
        self.patience
    }

    /// When [`HoldTable::admit`] was called.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The [`LockError::Timeout`] of this acquisition, as of now.
    pub fn timeout(&self) -> LockError {
        LockError::Timeout {
            name: self.name.clone(),
            waited: self.started.elapsed(),
        }
    }

    /// Records the grant the lock service made: a hold of the name in
    /// `sequencer`'s mode, with `lease` (shared with the backend's
    /// keep-alive, which extends it) and the backend's `data`, and its
    /// first guard. The gate opens after the hold is in the table.
    ///
    /// Fails with [`LockError::SessionClosed`] (the lease lost at once) if
    /// the session was [ended](HoldTable::end) while the grant was made;
    /// giving the grant back is then the backend's business.
    pub fn grant(
        self,
        sequencer: Sequencer,
        lease: Arc<LeaseTracker>,
        data: B::Data,
    ) -> Result<HoldGuard<B>, LockError> {
        debug_assert_eq!(sequencer.lock(), &self.name, "a grant of another lock");
        let table = self.backend.holds();
        let hold = Arc::new(Hold {
            sequencer,
            tracker: lease,
            guards: AtomicUsize::new(1),
            data,
        });
        {
            let mut state = table.lock();
            if let Some(reason) = state.ended {
                hold.tracker.lose(reason);
                return Err(LockError::SessionClosed);
            }
            // A hold still under the name is a lost one (admit forgets
            // those under the gate); its guards release it as forgotten.
            state.holds.insert(self.name.clone(), hold.clone());
        }
        tracing::debug!(backend = table.backend, lock = %self.name, generation = hold.generation().get(), mode = %hold.mode(), "hold recorded");
        Ok(HoldGuard::new(self.backend, hold))
    }

    /// Gives up the turn but keeps the gate, for a clean-up that must
    /// finish before the session's next acquisition of the name starts
    /// (the waiter place is freed now).
    pub fn into_gate(self) -> Gate {
        self.gate
    }
}

impl<B: HoldBackend> fmt::Debug for Turn<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Turn")
            .field("name", &self.name)
            .field("mode", &self.mode)
            .field("patience", &self.patience)
            .finish_non_exhaustive()
    }
}

/// The session's gate for one lock name, held: no acquisition of that name
/// by the session starts while it lives. Only held, never read.
pub struct Gate(#[allow(dead_code)] OwnedMutexGuard<()>);

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Gate")
    }
}

/// One hold: a grant of one lock to one session, shared by the guards of
/// its re-entries.
pub struct Hold<D> {
    /// As issued; every re-entrant guard hands out this very text (a
    /// signature is made once per hold).
    sequencer: Sequencer,
    /// The hold's lease signal, shared with the backend's keep-alive.
    tracker: Arc<LeaseTracker>,
    /// Guards alive. Changed only under the table's mutex; 0 once the last
    /// one started giving the hold back.
    guards: AtomicUsize,
    data: D,
}

impl<D> Hold<D> {
    /// The lock held.
    pub fn name(&self) -> &LockName {
        self.sequencer.lock()
    }

    /// The mode held.
    pub fn mode(&self) -> Mode {
        self.sequencer.mode()
    }

    /// The generation of the hold.
    pub fn generation(&self) -> Generation {
        self.sequencer.generation()
    }

    /// The sequencer, as issued.
    pub fn sequencer(&self) -> &Sequencer {
        &self.sequencer
    }

    /// The hold's lease signal, for the backend to extend, lose or watch.
    pub fn tracker(&self) -> &Arc<LeaseTracker> {
        &self.tracker
    }

    /// What the backend keeps for this hold.
    pub fn data(&self) -> &D {
        &self.data
    }

    /// Whether the lease is still provably valid.
    pub fn is_held(&self) -> bool {
        matches!(self.tracker.state(), LeaseState::Held { .. })
    }

    /// How many guards of the hold are alive.
    pub fn guards(&self) -> usize {
        self.guards.load(Ordering::Relaxed)
    }
}

impl<D: fmt::Debug> fmt::Debug for Hold<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hold")
            .field("sequencer", &self.sequencer.to_string())
            .field("lease", &self.tracker.state())
            .field("guards", &self.guards())
            .field("data", &self.data)
            .finish()
    }
}

/// One session's table of holds, gates and waiters; see the
/// [module docs](self).
pub struct HoldTable<D> {
    /// The backend's name, for log lines.
    backend: &'static str,
    /// [`SessionOptions::max_waiters`] of the session.
    max_waiters: usize,
    /// Shared by the sessions the bound spans (a client's, the process's).
    waiters: Waiters,
    state: Mutex<TableState<D>>,
}

struct TableState<D> {
    /// The current hold of each name. A hold leaves when its last guard
    /// gives it back, when an acquisition finds its lease lost, or when the
    /// backend drains the table.
    holds: HashMap<LockName, Arc<Hold<D>>>,
    /// One async mutex per name: an acquisition holds it from before it
    /// asks the lock service until its hold is in the table, and the last
    /// guard's release holds it while it removes the hold. Weak, so an
    /// unused gate costs only its map entry until the next prune.
    gates: HashMap<LockName, Weak<tokio::sync::Mutex<()>>>,
    /// The map size at which dead gates are pruned next.
    prune_gates_at: usize,
    /// Set by [`HoldTable::end`]: no grant is recorded any more.
    ended: Option<LostReason>,
}

/// The smallest gate map that is pruned.
const GATES_PRUNED_FROM: usize = 64;

impl<D: Send + Sync + 'static> HoldTable<D> {
    /// An empty table for a session with `options`, counting waiters in
    /// `waiters` (share one [`Waiters`] among the sessions the bound
    /// spans). `backend` names the backend in log lines.
    pub fn new(backend: &'static str, options: &SessionOptions, waiters: Waiters) -> Self {
        HoldTable {
            backend,
            max_waiters: options.max_waiters(),
            waiters,
            state: Mutex::new(TableState {
                holds: HashMap::new(),
                gates: HashMap::new(),
                prune_gates_at: GATES_PRUNED_FROM,
                ended: None,
            }),
        }
    }

    /// Starts an acquisition of `name` in `mode` by `backend`'s session:
    ///
    /// - a valid hold of the name in the same mode is re-entered (a new
    ///   guard, the same generation), in the other mode refused with
    ///   [`LockError::ModeConflict`]; a lost one is forgotten;
    /// - a caller that waits takes a place under the waiter bound or fails
    ///   with [`LockError::Busy`];
    /// - then it takes the session's gate for the name (waiting behind the
    ///   session's other acquisition of it, until the deadline:
    ///   [`LockError::Timeout`]; with [`Patience::Now`] not at all:
    ///   [`Admission::InProgress`]), and looks for a re-entry again, since
    ///   the acquisition it waited for may have been granted.
    ///
    /// Fails with [`LockError::SessionClosed`] once the table was
    /// [ended](HoldTable::end). Cancel-safe: dropping the future leaves
    /// nothing behind.
    pub async fn admit<B: HoldBackend<Data = D>>(
        backend: &Arc<B>,
        name: &LockName,
        mode: Mode,
        patience: Patience,
    ) -> Result<Admission<B>, LockError> {
        let table = backend.holds();
        let started = Instant::now();
        if let Some(guard) = table.reenter(backend, name, mode)? {
            return Ok(Admission::Reentered(guard));
        }
        table.ensure_open()?;
        let slot = if patience.waits() {
            Some(table.waiters.enter(name, table.max_waiters)?)
        } else {
            None
        };
        let gate = table.gate(name);
        let gate = match patience {
            Patience::Now => match gate.try_lock_owned() {
                Ok(gate) => gate,
                Err(_) => return Ok(Admission::InProgress),
            },
            Patience::Forever => gate.lock_owned().await,
            Patience::Until(deadline) => {
                match tokio::time::timeout_at(deadline, gate.lock_owned()).await {
                    Ok(gate) => gate,
                    Err(_elapsed) => {
                        return Err(LockError::Timeout {
                            name: name.clone(),
                            waited: started.elapsed(),
                        });
                    }
                }
            }
        };
        if let Some(guard) = table.reenter(backend, name, mode)? {
            return Ok(Admission::Reentered(guard));
        }
        table.ensure_open()?;
        Ok(Admission::Turn(Turn {
            backend: backend.clone(),
            name: name.clone(),
            mode,
            patience,
            started,
            gate: Gate(gate),
            _slot: slot,
        }))
    }

    /// The backend's name, for errors and log lines.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The current hold of `name`, if any.
    pub fn hold(&self, name: &LockName) -> Option<Arc<Hold<D>>> {
        self.lock().holds.get(name).cloned()
    }

    /// Every current hold.
    pub fn holds(&self) -> Vec<Arc<Hold<D>>> {
        self.lock().holds.values().cloned().collect()
    }

    /// Whether the table has no current hold.
    pub fn is_empty(&self) -> bool {
        self.lock().holds.is_empty()
    }

    /// Moves the validity deadline of every valid current hold for which
    /// `standing_on` is true forward to `valid_until` (never back): what a
    /// backend does after renewing the lease those holds stand on. A hold
    /// whose deadline has already passed stays lost.
    pub fn extend_where(&self, standing_on: impl Fn(&Hold<D>) -> bool, valid_until: Instant) {
        let state = self.lock();
        for hold in state.holds.values().filter(|hold| standing_on(hold)) {
            if let LeaseState::Held {
                valid_until: current,
            } = hold.tracker.state()
                && current < valid_until
                && !hold.tracker.extend(valid_until)
            {
                tracing::warn!(backend = self.backend, lock = %hold.name(), generation = hold.generation().get(), "renewal came after the local validity deadline: the hold stays lost");
            }
        }
    }

    /// Declares every current hold for which `standing_on` is true lost
    /// for `reason`: its lease is known gone.
    pub fn lose_where(&self, standing_on: impl Fn(&Hold<D>) -> bool, reason: LostReason) {
        let state = self.lock();
        for hold in state.holds.values().filter(|hold| standing_on(hold)) {
            if hold.tracker.lose(reason) {
                tracing::warn!(backend = self.backend, lock = %hold.name(), generation = hold.generation().get(), %reason, "lease lost");
            }
        }
    }

    /// Ends the session: every current hold is lost for `reason`, and no
    /// grant is recorded from now on ([`LockError::SessionClosed`]).
    /// Returns `false` if it was already ended.
    pub fn end(&self, reason: LostReason) -> bool {
        let first = {
            let mut state = self.lock();
            let first = state.ended.is_none();
            state.ended.get_or_insert(reason);
            first
        };
        self.lose_where(|_| true, reason);
        first
    }

    /// Why the session ended, once [ended](HoldTable::end).
    pub fn ended(&self) -> Option<LostReason> {
        self.lock().ended
    }

    /// Takes every hold out of the table: a backend that ends them on the
    /// lock service itself (a forced expiry). Their guards still release
    /// them, as forgotten holds.
    pub fn drain(&self) -> Vec<Arc<Hold<D>>> {
        self.lock().holds.drain().map(|(_, hold)| hold).collect()
    }

    /// The waiter counts this table's bound uses.
    pub fn waiters(&self) -> &Waiters {
        &self.waiters
    }

    fn lock(&self) -> MutexGuard<'_, TableState<D>> {
        // No critical section here can panic halfway; a poisoned table is
        // still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ensure_open(&self) -> Result<(), LockError> {
        match self.lock().ended {
            Some(_) => Err(LockError::SessionClosed),
            None => Ok(()),
        }
    }

    /// A guard on the current hold of `name` in `mode`, if there is a valid
    /// one; forgets a lost one.
    fn reenter<B: HoldBackend<Data = D>>(
        &self,
        backend: &Arc<B>,
        name: &LockName,
        mode: Mode,
    ) -> Result<Option<HoldGuard<B>>, LockError> {
        let mut state = self.lock();
        let Some(hold) = state.holds.get(name) else {
            return Ok(None);
        };
        if !hold.is_held() {
            // A lost hold cannot be re-entered: its guards keep reporting
            // the loss and release it as forgotten; a new acquisition
            // starts afresh.
            tracing::debug!(backend = self.backend, lock = %name, generation = hold.generation().get(), "a lost hold is forgotten");
            state.holds.remove(name);
            return Ok(None);
        }
        if hold.mode() != mode {
            tracing::info!(backend = self.backend, lock = %name, generation = hold.generation().get(), held = %hold.mode(), requested = %mode, "refused: re-entry in the other mode");
            return Err(LockError::ModeConflict {
                name: name.clone(),
                held: hold.mode(),
                requested: mode,
            });
        }
        let count = hold.guards.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::debug!(backend = self.backend, lock = %name, generation = hold.generation().get(), count, "re-entered");
        Ok(Some(HoldGuard::new(backend.clone(), hold.clone())))
    }

    /// The session's gate for `name`.
    fn gate(&self, name: &LockName) -> Arc<tokio::sync::Mutex<()>> {
        let mut state = self.lock();
        if let Some(entry) = state.gates.get_mut(name) {
            // A name taken again reuses its entry (one lookup, no copy of
            // the name), whether its last gate is still alive or not.
            return entry.upgrade().unwrap_or_else(|| {
                let gate = Arc::new(tokio::sync::Mutex::new(()));
                *entry = Arc::downgrade(&gate);
                gate
            });
        }
        if state.gates.len() >= state.prune_gates_at {
            state.gates.retain(|_, gate| gate.strong_count() > 0);
            state.prune_gates_at = (state.gates.len() * 2).max(GATES_PRUNED_FROM);
        }
        let gate = Arc::new(tokio::sync::Mutex::new(()));
        state.gates.insert(name.clone(), Arc::downgrade(&gate));
        gate
    }
}

impl<D> fmt::Debug for HoldTable<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("HoldTable")
            .field("backend", &self.backend)
            .field("holds", &state.holds.len())
            .field("ended", &state.ended)
            .finish_non_exhaustive()
    }
}
