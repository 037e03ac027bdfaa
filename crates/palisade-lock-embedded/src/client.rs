//! The in-process lock server.

use std::fmt;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use palisade_core::holds::Waiters;
use palisade_core::{
    Changes, FloorRaised, Inspect, LiveCheck, Liveness, LockError, LockInfo, LockName, RaiseFloor,
    RaiseFloorError, Sequencer, SessionOptions, SharedLiveCheck, Signer,
};
use tokio::time::Instant;

use crate::EmbeddedError;
use crate::session::EmbeddedLock;
use crate::state::ServiceState;

/// The in-process lock server: per-name state (holders, FIFO queue,
/// generation counter, lock-delay) and the session leases.
///
/// Cheap to clone: clones share one service. Open sessions with
/// [`EmbeddedLockClient::session`]; give a resource server its live check
/// by passing the service itself (it implements [`LiveCheck`]).
///
/// Generations start at 1 for a new service and are not comparable with
/// another service's: every sequencer carries the service's issuer id, and
/// the live check refuses sequencers of other issuers.
///
/// ```
/// use palisade_core::{LiveCheck, Liveness, Lock, LockGuard, LockName, Mode, SessionOptions};
/// use palisade_lock_embedded::EmbeddedLockClient;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let service = EmbeddedLockClient::with_issuer("demo")?;
/// let session = service.session(SessionOptions::default())?;
/// let guard = session.acquire(&LockName::new("stock/apples")?, Mode::Exclusive).await?;
///
/// let sequencer = guard.sequencer()?;
/// assert_eq!(sequencer.issuer(), Some("demo"));
/// assert_eq!(service.check(&sequencer).await?, Liveness::Held);
///
/// guard.release().await?;
/// assert_eq!(service.check(&sequencer).await?, Liveness::NotHeld);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct EmbeddedLockClient {
    inner: Arc<ClientInner>,
}

/// What the service's clones, sessions and tasks share.
pub(crate) struct ClientInner {
    issuer: String,
    /// The signing key's id, when sequencers are signed (the signer itself
    /// lives in the state, next to the code that mints sequencers).
    key_id: Option<String>,
    /// All state, behind one `std` mutex. Critical sections are short and
    /// never span an `.await`.
    state: Mutex<ServiceState>,
    /// Waiters per lock over every session: the waiter bound
    /// (`SessionOptions::max_waiters`), one service being one process.
    pub(crate) waiters: Waiters,
}

impl ClientInner {
    /// Locks the state. A panic while the lock was held (a bug) leaves the
    /// state as consistent as the code that panicked left it; carrying on
    /// beats poisoning every later lock operation of the process.
    pub(crate) fn lock_state(&self) -> MutexGuard<'_, ServiceState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl EmbeddedLockClient {
    /// A service with a random issuer id, `embedded-<16 hex digits>`.
    pub fn new() -> Self {
        Self::build(format!("embedded-{}", random_hex()), None)
    }

    /// A service whose sequencers are signed by `signer`: its issuer
    /// becomes the service's issuer, and every sequencer a guard hands out
    /// carries an HMAC over all of its fields, so a resource server holding
    /// the key (a [`palisade_core::Verifier`]) refuses forgeries before they
    /// can move a mark.
    ///
    /// ```
    /// use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions, Signer, SigningKey, Verifier};
    /// use palisade_lock_embedded::EmbeddedLockClient;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let key = SigningKey::new("k1", [7u8; 32])?;
    /// let service = EmbeddedLockClient::with_signer(Signer::new("demo", key.clone())?);
    /// let session = service.session(SessionOptions::default())?;
    /// let guard = session.acquire(&LockName::new("stock/apples")?, Mode::Exclusive).await?;
    ///
    /// let verifier = Verifier::new().with_key(key)?.with_issuer("demo")?;
    /// assert!(verifier.verify(&guard.sequencer()?).is_ok());
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_signer(signer: Signer) -> Self {
        Self::build(signer.issuer().to_owned(), Some(signer))
    }

    /// A service whose sequencers carry `issuer` (1 to
    /// [`Sequencer::MAX_ID_LEN`] bytes, no control characters).
    pub fn with_issuer(issuer: impl Into<String>) -> Result<Self, EmbeddedError> {
        let issuer = issuer.into();
        match Sequencer::check_issuer(&issuer) {
            Ok(_) => Ok(Self::build(issuer, None)),
            Err(source) => Err(EmbeddedError::InvalidIssuer { issuer, source }),
        }
    }

    fn build(issuer: String, signer: Option<Signer>) -> Self {
        let key_id = signer.as_ref().map(|signer| signer.key_id().to_owned());
        let inner = Arc::new_cyclic(|me| ClientInner {
            issuer: issuer.clone(),
            key_id,
            state: Mutex::new(ServiceState::new(me.clone(), issuer, signer)),
            waiters: Waiters::default(),
        });
        EmbeddedLockClient { inner }
    }

    /// The issuer id put in every sequencer.
    pub fn issuer(&self) -> &str {
        &self.inner.issuer
    }

    /// The id of the key that signs this service's sequencers, if they are
    /// signed (see [`EmbeddedLockClient::with_signer`]).
    pub fn signing_key_id(&self) -> Option<&str> {
        self.inner.key_id.as_deref()
    }

    /// Opens a session: its own lease (armed while it holds anything) and
    /// holder id. Fails if `options` cannot keep a lease alive.
    pub fn session(&self, options: SessionOptions) -> Result<EmbeddedLock, EmbeddedError> {
        options
            .validate()
            .map_err(|reason| EmbeddedError::InvalidOptions { reason })?;
        let (id, holder_id, lease_id) = self.inner.lock_state().open_session(options.clone());
        Ok(EmbeddedLock::new(
            self.clone(),
            id,
            holder_id,
            lease_id,
            options,
        ))
    }

    /// The sequencers of the current holders of `name` (one exclusive
    /// holder, or the shared ones), for diagnostics and tests.
    pub fn holders(&self, name: &LockName) -> Vec<Sequencer> {
        self.inner.lock_state().holders(name)
    }

    /// How many requests are queued for `name`, for diagnostics and tests.
    pub fn waiters(&self, name: &LockName) -> usize {
        self.inner.lock_state().waiters(name)
    }

    /// The service as a type-erased live check, for a resource server that
    /// picks its live check at runtime.
    pub fn shared_live_check(&self) -> SharedLiveCheck {
        Arc::new(self.clone())
    }

    pub(crate) fn inner(&self) -> &Arc<ClientInner> {
        &self.inner
    }
}

impl Default for EmbeddedLockClient {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for EmbeddedLockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedLockClient")
            .field("issuer", &self.inner.issuer)
            .field("signing_key_id", &self.inner.key_id)
            .finish_non_exhaustive()
    }
}

/// What the service holds, queues and delays, read under its one mutex.
impl Inspect for EmbeddedLockClient {
    async fn inspect(&self, name: &LockName) -> Result<LockInfo, LockError> {
        Ok(self.inner.lock_state().inspect(name, Instant::now()))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockInfo>, LockError> {
        Ok(self.inner.lock_state().list(prefix, Instant::now()))
    }

    /// Pushed by the service itself at every change of holders, of any
    /// name (so also of names outside `prefix`): it never needs `every`.
    async fn changes(&self, _prefix: &str, _every: Duration) -> Result<Changes, LockError> {
        Ok(self.inner.lock_state().holders_changed.subscribe())
    }
}

/// Raising a lock's counter, for the conformance suite and for demos of the
/// recovery; an in-process service never loses its counter.
impl RaiseFloor for EmbeddedLockClient {
    async fn raise_floor(
        &self,
        name: &LockName,
        mark: u64,
    ) -> Result<FloorRaised, RaiseFloorError> {
        if mark == u64::MAX {
            return Err(RaiseFloorError::OutOfRange {
                mark,
                limit: u64::MAX,
            });
        }
        let (before, after) = self.inner.lock_state().raise_floor(name, mark);
        Ok(FloorRaised::new(before, after))
    }
}

/// Chubby's CheckSequencer for the embedded service: `Held` iff the lock is
/// held right now with exactly that generation (and mode, holder and lease,
/// where the sequencer names them) by a session whose lease is valid.
/// Sequencers of another issuer, or without one, are `NotHeld`.
impl LiveCheck for EmbeddedLockClient {
    async fn check(&self, sequencer: &Sequencer) -> Result<Liveness, LockError> {
        let live = self.inner.lock_state().is_live(sequencer, Instant::now());
        tracing::debug!(lock = %sequencer.lock(), generation = sequencer.generation().get(), live, "live check");
        Ok(if live {
            Liveness::Held
        } else {
            Liveness::NotHeld
        })
    }
}

/// 64 random bits as hex, from the standard library's randomly seeded
/// hasher (mixed with the time and the process id).
fn random_hex() -> String {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or_default(),
    );
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
}
