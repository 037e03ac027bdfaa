//! The lock backend trait, its guard, and the session options every backend
//! shares.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::holds::{Admission, HoldBackend, HoldGuard, HoldTable, Patience, Turn};
use crate::{Generation, LeaseState, LeaseWatch, LockError, LockName, Mode, Sequencer};

/// A lock service session: the one trait every Palisade lock backend
/// implements (etcd, Redis and Redlock, PostgreSQL/MariaDB, the in-process
/// embedded one).
///
/// ### One shape for every backend
///
/// | step | type | etcd, for example |
/// |---|---|---|
/// | connect; holds the configuration, shared by sessions | `<Backend>LockClient` | `EtcdLockClient::connect(config)` |
/// | open a session (one lease): implements `Lock` | `<Backend>Lock` | `client.session(options)` |
/// | a grant: implements [`LockGuard`] | `<Backend>Guard` | `session.acquire(&name, mode)` |
///
/// The backends are `Embedded`, `Etcd`, `Redis` and `Sql`; Redlock's name
/// already says "lock", so its types are `RedlockClient`, `Redlock` and
/// `RedlockGuard`. The client is also where the rest of a backend starts:
/// its [`LiveCheck`](crate::LiveCheck) (`<Backend>LiveCheck`, or the
/// embedded client itself), [`Inspect`](crate::Inspect) and
/// [`ForceRelease`](crate::ForceRelease) where the backend can answer them.
///
/// A value of this type is a **session**: it owns one lease (or the
/// equivalent), and re-entry is per session: acquiring a lock the session
/// already holds, in the same mode, succeeds at once with the same
/// generation and adds one to a hold count. The lock is released when every
/// guard of the hold has been released or dropped.
///
/// ### To ensure correctness
///
/// An implementation must guarantee all of the following; the conformance
/// suite in `palisade-testkit` checks them.
///
/// 1. **Generations** are strictly increasing per lock name over successive
///    grants to different holders, never 0, never reused. A new generation is
///    minted only when a holder goes from not holding to holding; re-entry
///    keeps the generation. A grant in exclusive mode has a generation
///    greater than every grant of the same name before it; a shared grant has
///    one greater than every earlier exclusive grant.
/// 2. **Mutual exclusion by lease**: while an exclusive guard's lease is
///    valid ([`LeaseWatch::is_valid`]), no other holder has a valid grant of
///    the same name. Shared holders coexist with each other only.
/// 3. **Isolation**: names are compared whole. A lock on `a/b` never blocks,
///    and is never blocked by, `a` or `a/bc`.
/// 4. **Owner-only release**: releasing or renewing is compare-and-delete /
///    compare-and-extend on the owner's identity; a holder whose lease lapsed
///    can never release or extend someone else's hold.
/// 5. **Cancellation**: dropping an `acquire` future at any `.await` point
///    leaves no queue entry behind: later contenders are not blocked by a
///    waiter that has gone away, beyond at most one lease TTL if the lock
///    service became unreachable during the drop.
/// 6. **Lease lost is signalled before validity ends**: the guard's
///    [`LeaseWatch`] reports `Held` only while the lease is provably alive by
///    the local monotonic clock minus a safety margin, and reports the loss
///    no later than that deadline. Time the machine spent suspended counts
///    (Linux: `CLOCK_BOOTTIME`), although the monotonic clock stops then.
/// 7. **Lock-delay**: if a holder's lease ends without a release (crash,
///    pause, partition) and it held with a non-zero
///    [`SessionOptions::lock_delay`], nobody is granted the lock until that
///    delay has passed after the lease ended. A clean release has no delay.
/// 8. **Waiting is event-driven**: a blocked `acquire` sleeps until the lock
///    service tells it the holder is gone; periodic re-checks are allowed
///    only as a bounded fallback for lost notifications.
///
/// Safety of writes does **not** rest on points 2, 6 and 7: those serve
/// liveness. The resource server's generation check is what refuses a
/// holder that could not know its lease had lapsed.
///
/// ```
/// use palisade_core::{Lock, LockGuard, LockName, Mode};
///
/// async fn transfer<L: Lock>(locks: &L) -> Result<(), palisade_core::LockError> {
///     let name = LockName::new("accounts/7").expect("valid name");
///     let guard = locks.acquire(&name, Mode::Exclusive).await?;
///     let sequencer = guard.sequencer()?; // send it with every write
///     println!("holding {sequencer}");
///     guard.release().await
/// }
/// ```
pub trait Lock: Send + Sync + 'static {
    /// The proof of a hold.
    type Guard: LockGuard;

    /// Waits until the lock is granted in `mode`.
    ///
    /// Waiters are granted in the order they asked (FIFO), except that
    /// consecutive shared waiters are granted together. Returns
    /// [`LockError::Busy`] at once if this process already has the
    /// backend's maximum number of waiters on `name`.
    fn acquire(
        &self,
        name: &LockName,
        mode: Mode,
    ) -> impl Future<Output = Result<Self::Guard, LockError>> + Send;

    /// Takes the lock if it can be granted right now; `Ok(None)` if it is
    /// held in a conflicting mode, queued for, or in its lock-delay.
    fn try_acquire(
        &self,
        name: &LockName,
        mode: Mode,
    ) -> impl Future<Output = Result<Option<Self::Guard>, LockError>> + Send;

    /// Like [`Lock::acquire`], giving up with [`LockError::Timeout`] after
    /// `timeout`. Giving up leaves no queue entry behind (point 5 above).
    fn acquire_timeout(
        &self,
        name: &LockName,
        mode: Mode,
        timeout: Duration,
    ) -> impl Future<Output = Result<Self::Guard, LockError>> + Send {
        async move {
            match tokio::time::timeout(timeout, self.acquire(name, mode)).await {
                Ok(result) => result,
                Err(_elapsed) => Err(LockError::Timeout {
                    name: name.clone(),
                    waited: timeout,
                }),
            }
        }
    }
}

/// A session on core's [`HoldTable`]: the backend writes only its
/// protocol, [`Obtain::take`], and [`Lock`] follows from it. Every
/// acquisition is first admitted by the table ([`HoldTable::admit`]: a
/// re-entry answers at once, another task of the session acquiring the same
/// name makes a non-waiting call answer `None`, the waiter bound and the
/// session's gate for the name); only a [`Turn`] reaches `take`.
///
/// `acquire` admits with [`Patience::Forever`], `try_acquire` with
/// [`Patience::Now`], `acquire_timeout` with [`Patience::Until`]. A backend
/// whose `take` gives up by itself at the turn's deadline (and cleans up
/// before it answers `Ok(None)`) says so with [`Obtain::KEEPS_DEADLINE`];
/// any other is cancelled at the deadline, leaving its clean-up to the
/// drop. The obligations are [`Lock`]'s.
///
/// [`HoldTable`]: crate::holds::HoldTable
/// [`HoldTable::admit`]: crate::holds::HoldTable::admit
pub trait Obtain: Send + Sync + 'static {
    /// The session's side of the hold table.
    type Session: HoldBackend;

    /// The proof of a hold: the backend's wrapper of a [`HoldGuard`].
    type Guard: LockGuard + From<HoldGuard<Self::Session>>;

    /// Whether [`Obtain::take`] honours [`Patience::Until`] itself.
    const KEEPS_DEADLINE: bool = false;

    /// The session whose table admits acquisitions.
    fn session(&self) -> &Arc<Self::Session>;

    /// Asks the lock service for the turn's lock and records the grant
    /// with [`Turn::grant`]. Waits as the turn's [`Turn::patience`] says;
    /// `Ok(None)` means not granted: the lock is not free now
    /// ([`Patience::Now`]), or the deadline passed ([`Patience::Until`]).
    fn take(
        &self,
        turn: Turn<Self::Session>,
    ) -> impl Future<Output = Result<Option<Self::Guard>, LockError>> + Send;
}

/// Admits the acquisition and, on its turn, hands it to the backend.
async fn obtain<T: Obtain>(
    lock: &T,
    name: &LockName,
    mode: Mode,
    patience: Patience,
) -> Result<Option<T::Guard>, LockError> {
    match HoldTable::admit(lock.session(), name, mode, patience).await? {
        Admission::Reentered(guard) => Ok(Some(guard.into())),
        Admission::InProgress => Ok(None),
        Admission::Turn(turn) => lock.take(turn).await,
    }
}

impl<T: Obtain> Lock for T {
    type Guard = T::Guard;

    async fn acquire(&self, name: &LockName, mode: Mode) -> Result<T::Guard, LockError> {
        obtain(self, name, mode, Patience::Forever)
            .await?
            .ok_or_else(|| ended_without_grant(self))
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        mode: Mode,
    ) -> Result<Option<T::Guard>, LockError> {
        obtain(self, name, mode, Patience::Now).await
    }

    async fn acquire_timeout(
        &self,
        name: &LockName,
        mode: Mode,
        timeout: Duration,
    ) -> Result<T::Guard, LockError> {
        let started = Instant::now();
        let deadline = started + timeout;
        let attempt = obtain(self, name, mode, Patience::Until(deadline));
        let granted = if T::KEEPS_DEADLINE {
            attempt.await?
        } else {
            match tokio::time::timeout_at(deadline, attempt).await {
                Ok(granted) => Some(granted?.ok_or_else(|| ended_without_grant(self))?),
                Err(_elapsed) => None,
            }
        };
        granted.ok_or_else(|| LockError::Timeout {
            name: name.clone(),
            waited: started.elapsed(),
        })
    }
}

fn ended_without_grant<T: Obtain>(lock: &T) -> LockError {
    LockError::ended_without_grant(lock.session().holds().backend())
}

/// Proof that a session holds a lock, and the handle on that hold.
///
/// The guard owns the keep-alive: while it lives, the backend renews the
/// lease in the background and moves [`LockGuard::lease`]'s deadline
/// forward. Dropping a guard releases it in the background, best effort;
/// call [`LockGuard::release`] to know the release happened.
///
/// ```
/// # use palisade_core::{LockGuard, LockError};
/// # async fn work<G: LockGuard>(guard: G) -> Result<(), LockError> {
/// let mut lease = guard.lease();
/// tokio::select! {
///     _ = lease.lost() => { /* stop writing: the sequencer is no longer ours */ }
///     _ = do_the_work(&guard) => {}
/// }
/// guard.release().await
/// # }
/// # async fn do_the_work<G: LockGuard>(_: &G) {}
/// ```
pub trait LockGuard: Send + Sync + fmt::Debug + 'static {
    /// The sequencer as it was issued, whether or not the lease is still
    /// valid. Prefer [`LockGuard::sequencer`], which refuses once the lease
    /// may have lapsed; this one is for logs, and for tests that play a
    /// stale client on purpose.
    fn issued(&self) -> &Sequencer;

    /// The lease-lost signal for this hold.
    fn lease(&self) -> LeaseWatch;

    /// Releases this guard. When it is the last guard of the hold, the lock
    /// is released on the lock service (compare-and-delete by owner) and
    /// waiters are woken. Returns [`LockError::NotOwner`] if the lock service
    /// shows the hold was already gone.
    fn release(self) -> impl Future<Output = Result<(), LockError>> + Send;

    /// The sequencer to send with a request, or [`LockError::LeaseLost`]
    /// once the lease may have lapsed by the local monotonic clock (plus any
    /// time the machine spent suspended).
    ///
    /// A sequencer obtained here can still be stale by the time it reaches a
    /// resource server (the caller may pause in between); the server's
    /// generation check is the backstop.
    fn sequencer(&self) -> Result<Sequencer, LockError> {
        match self.lease().state() {
            LeaseState::Held { .. } => Ok(self.issued().clone()),
            LeaseState::Lost(reason) => Err(self.lease_lost(reason)),
            LeaseState::Released => Err(LockError::NotOwner {
                name: self.name().clone(),
                generation: self.generation(),
            }),
        }
    }

    /// The lock held.
    fn name(&self) -> &LockName {
        self.issued().lock()
    }

    /// The mode held.
    fn mode(&self) -> Mode {
        self.issued().mode()
    }

    /// The generation of this hold.
    fn generation(&self) -> Generation {
        self.issued().generation()
    }

    /// Whether the lease is still provably valid.
    fn is_valid(&self) -> bool {
        self.lease().is_valid()
    }

    /// The [`LockError::LeaseLost`] error for this hold.
    fn lease_lost(&self, reason: crate::LostReason) -> LockError {
        LockError::LeaseLost {
            name: self.name().clone(),
            generation: self.generation(),
            reason,
        }
    }
}

/// What a request's sequencer comes from: a [`Sequencer`] as it is, or a
/// [`LockGuard`], asked at the moment of sending (so nothing is sent once
/// its lease may have lapsed). Lets one client method serve both instead
/// of a variant for each.
pub trait SequencerSource {
    /// The sequencer to send now.
    fn sequencer_now(&self) -> Result<std::borrow::Cow<'_, Sequencer>, LockError>;
}

impl SequencerSource for Sequencer {
    fn sequencer_now(&self) -> Result<std::borrow::Cow<'_, Sequencer>, LockError> {
        Ok(std::borrow::Cow::Borrowed(self))
    }
}

impl<G: LockGuard> SequencerSource for G {
    fn sequencer_now(&self) -> Result<std::borrow::Cow<'_, Sequencer>, LockError> {
        self.sequencer().map(std::borrow::Cow::Owned)
    }
}

/// Session settings every backend understands.
///
/// ```
/// use std::time::Duration;
/// use palisade_core::SessionOptions;
///
/// let options = SessionOptions::default()
///     .with_ttl(Duration::from_secs(5))
///     .with_lock_delay(Duration::from_secs(2));
/// assert_eq!(options.keepalive_interval(), Duration::from_secs(5) / 3);
/// assert!(options.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOptions {
    /// How long the lock service keeps a hold without a renewal.
    ttl: Duration,
    /// How often the guard's keep-alive renews; `None` means a third of the
    /// TTL, so two renewals can fail before the lease is in danger.
    keepalive_interval: Option<Duration>,
    /// Subtracted from every validity deadline. It covers the request's
    /// flight time and the lock service's clock running faster than ours; the
    /// lease is reported lost this long before the service could expire it.
    safety_margin: Duration,
    /// Chubby's lock-delay: after this session's lease ends without a
    /// release, nobody gets the lock for this long.
    lock_delay: Duration,
    /// The most waiters one process queues on one lock before acquiring
    /// fails fast with [`LockError::Busy`].
    max_waiters: usize,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            ttl: Duration::from_secs(10),
            keepalive_interval: None,
            safety_margin: Duration::from_millis(500),
            lock_delay: Duration::ZERO,
            max_waiters: 1024,
        }
    }
}

impl SessionOptions {
    /// Sets the lease TTL. The safety margin stays as set, so it must remain
    /// below the TTL (see [`SessionOptions::validate`]).
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets the keep-alive interval.
    pub fn with_keepalive_interval(mut self, interval: Duration) -> Self {
        self.keepalive_interval = Some(interval);
        self
    }

    /// Sets the safety margin.
    pub fn with_safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = margin;
        self
    }

    /// Sets the lock-delay applied when this session's lease is lost.
    pub fn with_lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// Sets the per-process waiter bound per lock (at least 1).
    pub fn with_max_waiters(mut self, max_waiters: usize) -> Self {
        self.max_waiters = max_waiters;
        self
    }

    /// The lease TTL.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The keep-alive interval (a third of the TTL unless set).
    pub fn keepalive_interval(&self) -> Duration {
        self.keepalive_interval.unwrap_or(self.ttl / 3)
    }

    /// The safety margin.
    pub fn safety_margin(&self) -> Duration {
        self.safety_margin
    }

    /// The lock-delay.
    pub fn lock_delay(&self) -> Duration {
        self.lock_delay
    }

    /// The per-process waiter bound per lock.
    pub fn max_waiters(&self) -> usize {
        self.max_waiters
    }

    /// The validity deadline of a lease renewed by a request *sent* at
    /// `sent_at`: the service extended it no earlier than that, so it lives
    /// at least until `sent_at + ttl`; the margin is taken off.
    pub fn valid_until(&self, sent_at: Instant) -> Instant {
        sent_at + self.ttl.saturating_sub(self.safety_margin)
    }

    /// Checks that the settings can keep a lease alive: the margin is below
    /// the TTL, and a renewal comes before validity ends.
    pub fn validate(&self) -> Result<(), String> {
        if self.ttl.is_zero() {
            return Err("ttl must be positive".into());
        }
        if self.safety_margin >= self.ttl {
            return Err(format!(
                "safety margin {:?} must be below the ttl {:?}",
                self.safety_margin, self.ttl
            ));
        }
        let interval = self.keepalive_interval();
        if interval.is_zero() || interval >= self.ttl - self.safety_margin {
            return Err(format!(
                "keep-alive interval {:?} must be positive and below ttl minus safety margin ({:?})",
                interval,
                self.ttl - self.safety_margin
            ));
        }
        if self.max_waiters == 0 {
            return Err("max_waiters must be at least 1".into());
        }
        Ok(())
    }
}
