//! Holds and guards.
//!
//! A *hold* is one grant on Redis: one owner token, one generation, one
//! lease. A session's re-entrant acquires of the same lock share the hold,
//! each through its own [`RedisGuard`]; the hold is released on Redis when
//! the last guard goes.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use palisade_core::{
    LeaseState, LeaseTracker, LeaseWatch, LockError, LockGuard, LockName, LostReason, Mode,
    Sequencer, SessionOptions,
};
use tokio::time::Instant;

use crate::error::BACKEND;
use crate::keeper::{KeeperShared, SlotKey};
use crate::keys::LockKeys;
use crate::session::SessionInner;

/// One grant on Redis, shared by the guards of a re-entrant hold.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) name: LockName,
    pub(crate) keys: LockKeys,
    pub(crate) mode: Mode,
    /// The secret owner token: the first word of the lock value (or the
    /// shared holder's member). Release and extension compare it, so only
    /// this hold can end or extend itself. Never leaves the process except
    /// to Redis; the sequencer carries the public lease id instead.
    pub(crate) token: String,
    /// What the guard hands out.
    pub(crate) sequencer: Sequencer,
    /// The lease-lost signal. The watchdog moves its deadline forward; it
    /// fires by itself when the deadline passes without an extension.
    pub(crate) tracker: LeaseTracker,
    /// The session's lease settings (TTL, keep-alive interval, margin,
    /// lock-delay), for the watchdog.
    pub(crate) options: SessionOptions,
    /// How many guards of this hold are alive (re-entry count). Changed
    /// only under the session's `holds` mutex.
    pub(crate) guards: Mutex<usize>,
    /// The client's watchdog schedule, and this hold's place in it (`None`
    /// while unscheduled: no watchdog, an extension in flight, or ended).
    pub(crate) keeper: Option<Arc<KeeperShared>>,
    pub(crate) keeper_slot: Mutex<Option<SlotKey>>,
    /// When the last successful extension (or the grant) was sent: the
    /// keep-alive interval counts from there.
    pub(crate) last_extension_sent: Mutex<Instant>,
    /// Set once the hold has been given back (released or expired), so it
    /// is done once.
    pub(crate) ended: AtomicBool,
}

impl Hold {
    pub(crate) fn stop_watchdog(&self) {
        if let Some(keeper) = &self.keeper {
            keeper.cancel(self);
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.stop_watchdog();
    }
}

/// Proof that a [`RedisLock`](crate::RedisLock) session holds a lock.
///
/// Dropping it releases in the background (best effort); call
/// [`LockGuard::release`] to know the release happened.
#[derive(Debug)]
pub struct RedisGuard {
    pub(crate) hold: Arc<Hold>,
    pub(crate) session: Arc<SessionInner>,
    pub(crate) released: bool,
}

impl RedisGuard {
    /// Extends the lease now (compare-and-PEXPIRE on the owner token), as
    /// the watchdog does. For sessions run without the watchdog, and for
    /// tests. Fails with [`LockError::NotOwner`] if this hold no longer
    /// owns the lock (its lease lapsed and maybe someone else has it): a
    /// holder can never extend a hold that is not its own.
    pub async fn extend(&self) -> Result<(), LockError> {
        let sent_at = Instant::now();
        let extended = self
            .session
            .client
            .extend_call(
                &self.hold.keys,
                &self.hold.token,
                self.hold.mode,
                &self.session.options,
            )
            .await?;
        if !extended {
            self.hold.tracker.lose(LostReason::KeyDeleted);
            return Err(LockError::NotOwner {
                name: self.hold.name.clone(),
                generation: self.hold.sequencer.generation(),
            });
        }
        *self
            .hold
            .last_extension_sent
            .lock()
            .expect("extension time poisoned") = sent_at;
        if !self
            .hold
            .tracker
            .extend(self.session.options.valid_until(sent_at))
        {
            return Err(self.lease_lost(match self.hold.tracker.state() {
                LeaseState::Lost(reason) => reason,
                _ => LostReason::Expired,
            }));
        }
        Ok(())
    }

    /// The public lease id of this hold (also in the sequencer).
    pub fn lease_id(&self) -> &str {
        self.hold.sequencer.lease().unwrap_or_default()
    }
}

impl LockGuard for RedisGuard {
    fn issued(&self) -> &Sequencer {
        &self.hold.sequencer
    }

    fn lease(&self) -> LeaseWatch {
        self.hold.tracker.watch()
    }

    async fn release(mut self) -> Result<(), LockError> {
        self.released = true;
        let session = self.session.clone();
        session.release_guard(&self.hold).await
    }
}

impl Drop for RedisGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let Some(last) = self.session.forget_guard(&self.hold) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let session = self.session.clone();
                runtime.spawn(async move {
                    if let Err(error) = session.give_back(&last).await {
                        tracing::debug!(backend = BACKEND, lock = %last.name, %error, "background release failed");
                    }
                });
            }
            Err(_) => {
                // No runtime to release from: the lease runs out by itself.
                last.stop_watchdog();
                tracing::warn!(backend = BACKEND, lock = %last.name, "guard dropped outside a runtime; the hold expires with its TTL");
            }
        }
    }
}
