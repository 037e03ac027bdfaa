//! One demo client in this process: takes the lock, reads and writes one
//! number, releases. Client A and B of the GC-pause story, every flash-sale
//! buyer, and the client processes (which wrap one of these) are all this.

use std::time::Duration;

use palisade_core::{
    LeaseState, LeaseWatch, Lock, LockGuard, LockName, Mode, Sequencer, SessionOptions,
};

use crate::DemoError;
use crate::backend::{AnySession, Locks, Renewal};
use crate::storage::{Stale, Storage, WriteOutcome};
use palisade_lock_any::AnyGuard;

/// A client with its own lock sessions and a storage connection.
#[derive(Debug)]
pub(crate) struct LocalClient {
    locks: Locks,
    options: SessionOptions,
    storage: Storage,
    lock: LockName,
    key: String,
    /// How the next session is opened (see [`Renewal`]).
    renewal: Renewal,
    /// The session of the current hold. Each acquire opens a fresh one: a
    /// session paused past its lease is over for good.
    session: Option<AnySession>,
    guard: Option<AnyGuard>,
    /// The sequencer fetched right after the grant, while the lease was
    /// valid. Writes carry this one, as a client that checked its lease and
    /// then paused before its request left would.
    sequencer: Option<Sequencer>,
}

impl LocalClient {
    pub(crate) fn new(
        locks: Locks,
        options: SessionOptions,
        storage: Storage,
        lock: LockName,
        key: impl Into<String>,
    ) -> Self {
        LocalClient {
            locks,
            options,
            storage,
            lock,
            key: key.into(),
            renewal: Renewal::KeepAlive,
            session: None,
            guard: None,
            sequencer: None,
        }
    }

    /// How the sessions of later acquires are opened.
    pub(crate) fn set_renewal(&mut self, renewal: Renewal) {
        self.renewal = renewal;
    }

    pub(crate) fn lock(&self) -> &LockName {
        &self.lock
    }

    /// Opens a fresh session and waits up to `wait` for the lock.
    pub(crate) async fn acquire(&mut self, wait: Duration) -> Result<Sequencer, DemoError> {
        self.forget_hold();
        let session = self.locks.session(&self.options, self.renewal).await?;
        let guard = session
            .lock
            .acquire_timeout(&self.lock, Mode::Exclusive, wait)
            .await?;
        let sequencer = guard.sequencer()?;
        tracing::debug!(lock = %self.lock, generation = sequencer.generation().get(), "demo client acquired");
        self.session = Some(session);
        self.guard = Some(guard);
        self.sequencer = Some(sequencer.clone());
        Ok(sequencer)
    }

    /// Reads the number, with the hold's sequencer if there is one.
    pub(crate) async fn read(&self) -> Result<Result<Option<i64>, Stale>, DemoError> {
        self.storage
            .read(&self.lock, &self.key, self.sequencer.as_ref())
            .await
    }

    /// Reads the number without a sequencer: what anyone sees now, moving
    /// no mark.
    pub(crate) async fn peek(&self) -> Result<Option<i64>, DemoError> {
        match self.storage.read(&self.lock, &self.key, None).await? {
            Ok(value) => Ok(value),
            Err(stale) => Err(DemoError::story(format!(
                "a read without a sequencer was refused (generation {} < {})",
                stale.presented, stale.mark
            ))),
        }
    }

    /// Writes the number with the sequencer fetched at the grant, whatever
    /// the lease says now.
    pub(crate) async fn write(&self, value: i64) -> Result<WriteOutcome, DemoError> {
        self.storage
            .write(&self.lock, &self.key, self.sequencer.as_ref(), value)
            .await
    }

    /// Sells one item of the number, read as `seen`, with the sequencer
    /// fetched at the grant (see [`Storage::sell`]).
    pub(crate) async fn sell(&self, seen: i64) -> Result<WriteOutcome, DemoError> {
        self.storage
            .sell(&self.lock, &self.key, self.sequencer.as_ref(), seen)
            .await
    }

    /// Whether a sale decrements the stored number where it is rather
    /// than writing back what was read.
    pub(crate) fn decrements_in_place(&self) -> bool {
        self.storage.decrements_in_place()
    }

    /// The hold's lease-lost signal.
    pub(crate) fn lease_watch(&self) -> Option<LeaseWatch> {
        self.guard.as_ref().map(LockGuard::lease)
    }

    /// Where the hold's lease stands now (`None` without a hold).
    pub(crate) fn lease_state(&self) -> Option<LeaseState> {
        self.guard.as_ref().map(|guard| guard.lease().state())
    }

    /// Stops the current session's lease renewal (a stop-the-world pause
    /// begins) and says how, for the timeline.
    pub(crate) fn stop_renewal(&self) -> &'static str {
        match &self.session {
            Some(session) => session.stop_renewal(),
            None => "it holds nothing",
        }
    }

    /// Releases the hold. Fails when the lock service no longer had it
    /// (the lease had already ended), which is expected after a pause.
    pub(crate) async fn release(&mut self) -> Result<(), palisade_core::LockError> {
        let guard = self.guard.take();
        self.sequencer = None;
        let result = match guard {
            Some(guard) => guard.release().await,
            None => Ok(()),
        };
        self.session = None;
        result
    }

    fn forget_hold(&mut self) {
        // Dropping a guard releases it in the background, best effort.
        self.guard = None;
        self.sequencer = None;
        self.session = None;
    }
}

/// A lease state in words, for timelines and client processes.
pub(crate) fn describe_lease(state: Option<LeaseState>) -> (bool, String) {
    match state {
        Some(LeaseState::Held { valid_until }) => (
            true,
            format!(
                "valid for another {} ms",
                valid_until
                    .saturating_duration_since(tokio::time::Instant::now())
                    .as_millis()
            ),
        ),
        Some(LeaseState::Lost(reason)) => (false, format!("lease lost: {reason}")),
        Some(LeaseState::Released) => (false, "released".to_owned()),
        None => (false, "holds nothing".to_owned()),
    }
}
