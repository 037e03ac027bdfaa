//! Holds and guards.
//!
//! A *hold* is one grant on Redis: one owner token, one generation, one
//! lease. A session's re-entrant acquires of the same lock share the hold
//! (the session's `palisade_core::holds` table counts them), each through
//! its own [`RedisGuard`]; the hold is given back on Redis when the last
//! guard goes.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use palisade_core::holds::Hold;
use palisade_core::{LeaseState, LockError, LockGuard, LostReason, SessionOptions};
use tokio::time::Instant;

use crate::keeper::{KeeperShared, SlotKey};
use crate::keys::LockKeys;
use crate::session::SessionInner;

/// A hold of this backend, as the session's table keeps it.
pub(crate) type Held = Hold<RedisHold>;

/// What the Redis backend keeps per hold.
#[derive(Debug)]
pub struct RedisHold {
    pub(crate) keys: LockKeys,
    /// The secret owner token: the first word of the lock value (or the
    /// shared holder's member). Release and extension compare it, so only
    /// this hold can end or extend itself. Never leaves the process except
    /// to Redis; the sequencer carries the public lease id instead.
    pub(crate) token: String,
    /// The session's lease settings (TTL, keep-alive interval, margin,
    /// lock-delay), for the watchdog.
    pub(crate) options: SessionOptions,
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

impl RedisHold {
    pub(crate) fn stop_watchdog(&self) {
        if let Some(keeper) = &self.keeper {
            keeper.cancel(self);
        }
    }
}

impl Drop for RedisHold {
    fn drop(&mut self) {
        self.stop_watchdog();
    }
}

palisade_core::hold_guard! {
    /// Proof that a [`RedisLock`](crate::RedisLock) session holds a lock.
    ///
    /// Dropping it releases in the background (best effort); call
    /// [`LockGuard::release`] to know the release happened.
    pub struct RedisGuard(pub(crate) HoldGuard<SessionInner>);
}

impl RedisGuard {
    /// Extends the lease now (compare-and-PEXPIRE on the owner token), as
    /// the watchdog does. For sessions run without the watchdog, and for
    /// tests. Fails with [`LockError::NotOwner`] if this hold no longer
    /// owns the lock (its lease lapsed and maybe someone else has it): a
    /// holder can never extend a hold that is not its own.
    pub async fn extend(&self) -> Result<(), LockError> {
        let (hold, session) = (self.0.hold(), self.0.backend());
        let redis = hold.data();
        let sent_at = Instant::now();
        let extended = session
            .client
            .extend_call(&redis.keys, &redis.token, hold.mode(), &session.options)
            .await?;
        if !extended {
            hold.tracker().lose(LostReason::KeyDeleted);
            return Err(LockError::NotOwner {
                name: hold.name().clone(),
                generation: hold.generation(),
            });
        }
        *redis
            .last_extension_sent
            .lock()
            .expect("extension time poisoned") = sent_at;
        if !hold.tracker().extend(session.options.valid_until(sent_at)) {
            return Err(self.lease_lost(match hold.tracker().state() {
                LeaseState::Lost(reason) => reason,
                _ => LostReason::Expired,
            }));
        }
        Ok(())
    }

    /// The public lease id of this hold (also in the sequencer).
    pub fn lease_id(&self) -> &str {
        self.issued().lease().unwrap_or_default()
    }
}
