//! A client session on the embedded service: the [`Lock`] implementation.

use std::fmt;
use std::sync::Arc;

use palisade_core::holds::{GiveBack, HoldBackend, HoldTable, Task, Turn};
use palisade_core::{LockError, LockName, Mode, Obtain, SessionOptions};
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::client::EmbeddedLockClient;
use crate::guard::EmbeddedGuard;
#[cfg(any(test, feature = "testing"))]
use crate::state::LeaseEnd;
use crate::state::{BACKEND, Begin, Grant, Reply, SessionId, WaiterId};

/// A session on an [`EmbeddedLockClient`]: one lease, one holder id, and
/// the [`Lock`](palisade_core::Lock) trait.
///
/// - **Re-entry** is per session (the session's `palisade_core::holds`
///   table): acquiring a name the session already holds in the same mode
///   succeeds at once with the same generation and one more count; the
///   hold ends when every guard is released. Asking in the other mode
///   fails with [`LockError::ModeConflict`].
/// - **The lease** is armed when the session goes from holding nothing to
///   holding something, renewed every `keepalive_interval` by a background
///   task while it holds anything, and disarmed when it holds nothing again.
///   If the service sees no renewal for `ttl`, the lease ends: every hold of
///   the session is removed, its guards report lease lost, lock-delays
///   start, and the session is closed for good
///   ([`LockError::SessionClosed`] from then on).
///
/// - **Waiting** is first come, first served: a writer waits for every
///   earlier holder and waiter, a reader only for earlier writers, and
///   consecutive readers at the head of the queue are granted together. A
///   request that would wait while [`SessionOptions::max_waiters`] others
///   wait for the same name on the service fails at once with
///   [`LockError::Busy`].
/// - **Lock-delay**: if the lease ends without a release and the options
///   set a [`SessionOptions::lock_delay`], the names the session held are
///   granted to nobody until the delay has passed since the lease ended.
///
/// Cheap to clone: clones are the same session (same holder, same
/// re-entry counts).
///
/// ```
/// use std::time::Duration;
/// use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
/// use palisade_lock_embedded::EmbeddedLockClient;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let service = EmbeddedLockClient::new();
/// let options = SessionOptions::default().with_ttl(Duration::from_secs(3));
/// let paused_client = service.session(options.clone())?;
/// let name = LockName::new("jobs/nightly")?;
///
/// let guard = paused_client.acquire(&name, Mode::Exclusive).await?;
/// paused_client.stop_keepalive(); // play a client that stops renewing
///
/// let mut lease = guard.lease();
/// lease.lost().await; // fires at the local validity deadline
/// assert!(guard.sequencer().is_err());
///
/// let other = service.session(options)?;
/// let next = other.acquire(&name, Mode::Exclusive).await?; // after the TTL
/// assert!(next.generation() > guard.generation());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct EmbeddedLock {
    session: Arc<SessionHandle>,
}

/// The session's identity and its holds. Shared by the session's clones and
/// its guards; when the last of them is gone, the service forgets the
/// session.
pub struct SessionHandle {
    pub(crate) service: EmbeddedLockClient,
    pub(crate) id: SessionId,
    holder_id: String,
    lease_id: String,
    options: SessionOptions,
    /// Re-entry, guard counts, one request per name at a time, the waiter
    /// bound. The service keeps one hold per session and name.
    holds: HoldTable<()>,
}

/// The embedded protocol behind the session's hold table: a hold is given
/// back to the in-process service, which wakes the next waiter at once.
impl HoldBackend for SessionHandle {
    type Data = ();

    fn holds(&self) -> &HoldTable<()> {
        &self.holds
    }

    async fn give_back(&self, hold: GiveBack<()>) -> Result<bool, LockError> {
        let released = self.service.inner().lock_state().release(
            self.id,
            hold.name(),
            hold.generation(),
            Instant::now(),
        );
        match released {
            Ok(()) => Ok(true),
            Err(LockError::NotOwner { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Nothing here waits but the gate: the release is done before this
    /// returns unless another request of the session holds the gate.
    fn spawn(&self, task: Task) {
        let runtime = self.service.inner().lock_state().runtime_of(self.id);
        crate::tasks::run_or_spawn(runtime.as_ref(), task);
    }
}

impl Drop for SessionHandle {
    fn drop(&mut self) {
        self.service
            .inner()
            .lock_state()
            .close_session(self.id, Instant::now());
    }
}

impl EmbeddedLock {
    pub(crate) fn new(
        service: EmbeddedLockClient,
        id: SessionId,
        holder_id: String,
        lease_id: String,
        options: SessionOptions,
    ) -> Self {
        let holds = HoldTable::new(BACKEND, &options, service.inner().waiters.clone());
        EmbeddedLock {
            session: Arc::new(SessionHandle {
                service,
                id,
                holder_id,
                lease_id,
                options,
                holds,
            }),
        }
    }

    /// The public holder id (`session-<n>`), as put in sequencers.
    pub fn holder_id(&self) -> &str {
        &self.session.holder_id
    }

    /// The lease id (hex), as put in sequencers.
    pub fn lease_id(&self) -> &str {
        &self.session.lease_id
    }

    /// The session's options.
    pub fn options(&self) -> &SessionOptions {
        &self.session.options
    }

    /// The service this session is on.
    pub fn service(&self) -> &EmbeddedLockClient {
        &self.session.service
    }

    /// Whether the session's lease has ended (expired or killed): every
    /// request then fails with [`LockError::SessionClosed`].
    pub fn is_closed(&self) -> bool {
        self.session
            .service
            .inner()
            .lock_state()
            .session_ended(self.session.id, Instant::now())
    }

    /// Test hook: the service forgets this session's lease at once, as if
    /// its TTL had passed (a crash). Every hold is removed and its guards
    /// report [`LostReason::Revoked`](palisade_core::LostReason::Revoked),
    /// lock-delays start, queued requests of this session fail, and the
    /// session is closed.
    #[cfg(any(test, feature = "testing"))]
    pub fn kill_lease(&self) {
        let now = Instant::now();
        self.session.service.inner().lock_state().end_lease(
            self.session.id,
            LeaseEnd::Killed,
            now,
            now,
        );
    }

    /// Test hook: stops renewing this session's lease, for good (a paused
    /// client). The guards' lease-lost signal then fires at their local
    /// validity deadline, and the service expires the lease a safety margin
    /// later, when the TTL has passed since the last renewal.
    #[cfg(any(test, feature = "testing"))]
    pub fn stop_keepalive(&self) {
        self.session
            .service
            .inner()
            .lock_state()
            .stop_keepalive(self.session.id);
    }

    /// Runs one request against the service, remembering this task's
    /// runtime for the session's background tasks.
    fn begin(&self, name: &LockName, mode: Mode, queue: bool) -> Result<Begin, LockError> {
        let mut state = self.session.service.inner().lock_state();
        state.note_runtime(self.session.id, Handle::try_current().ok());
        state.begin(self.session.id, name, mode, queue, Instant::now())
    }
}

/// Records `grant` in the session's table.
fn install(turn: Turn<SessionHandle>, grant: Grant) -> Result<EmbeddedGuard, LockError> {
    turn.grant(grant.sequencer, grant.tracker, ())
        .map(EmbeddedGuard)
}

impl fmt::Debug for EmbeddedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedLock")
            .field("issuer", &self.session.service.issuer())
            .field("holder", &self.session.holder_id)
            .field("lease", &self.session.lease_id)
            .finish_non_exhaustive()
    }
}

impl Obtain for EmbeddedLock {
    type Session = SessionHandle;
    type Guard = EmbeddedGuard;

    fn session(&self) -> &Arc<SessionHandle> {
        &self.session
    }

    /// A waiting call waits for the grant on a one-shot channel; no
    /// polling. Dropping the future takes its entry out of the queue, or
    /// releases a grant that raced with the drop.
    async fn take(&self, turn: Turn<SessionHandle>) -> Result<Option<EmbeddedGuard>, LockError> {
        let (name, mode, wait) = (&turn.name().clone(), turn.mode(), turn.patience().waits());
        match self.begin(name, mode, wait)? {
            Begin::Granted(grant) => install(turn, grant).map(Some),
            Begin::Refused => Ok(None),
            Begin::Queued { waiter, reply } => {
                let pending = PendingWaiter {
                    session: Arc::clone(&self.session),
                    name: name.clone(),
                    waiter,
                    reply,
                    answered: false,
                };
                if !wait {
                    // Not reachable without queueing; if it were, the
                    // drop leaves nothing behind.
                    return Ok(None);
                }
                install(turn, pending.wait().await?).map(Some)
            }
        }
    }
}

/// A queued request, owned by its `acquire` future. Its `Drop` is the
/// cancellation contract: if the future goes away before the answer is
/// taken, the queue entry is removed, or, if the grant was already made, it
/// is released, so no phantom holder or stale waiter remains.
struct PendingWaiter {
    session: Arc<SessionHandle>,
    name: LockName,
    waiter: WaiterId,
    reply: oneshot::Receiver<Reply>,
    /// Set once the answer has been taken off the channel.
    answered: bool,
}

impl PendingWaiter {
    async fn wait(mut self) -> Result<Grant, LockError> {
        let answer = (&mut self.reply).await;
        self.answered = true;
        match answer {
            Ok(reply) => reply,
            // The service dropped the request without an answer: it only
            // does that when the session is gone.
            Err(_closed) => Err(LockError::SessionClosed),
        }
    }
}

impl Drop for PendingWaiter {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        // From here on a grant can no longer be sent: the service undoes it
        // itself when the send fails.
        self.reply.close();
        let mut state = self.session.service.inner().lock_state();
        let now = Instant::now();
        if state.cancel_waiter(self.session.id, &self.name, self.waiter, now) {
            return;
        }
        // Not queued any more: it was answered before the close. Undo a
        // grant; an error needs nothing.
        if let Ok(Ok(grant)) = self.reply.try_recv() {
            let generation = grant.sequencer.generation();
            tracing::debug!(lock = %self.name, generation = generation.get(), "acquire dropped after its grant: releasing it");
            let _ = state.release(self.session.id, &self.name, generation, now);
        }
    }
}
