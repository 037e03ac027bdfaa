//! The live check: does a sequencer's holder still hold the lock?

use palisade_core::{LiveCheck, Liveness, LockError, Sequencer};

use crate::error::BACKEND;
use crate::scripts::MAX_GENERATION;
use crate::{RedisConfig, RedisLockClient, RedisLockError};

/// Chubby's CheckSequencer on Redis, for resource servers
/// (`--live-check redis --redis-url ...`).
///
/// `Held` means: right now, on the Redis primary that owns the lock's slot,
/// a live hold of the sequencer's mode has its generation and lease id.
/// Sequencers from another issuer, or without a generation this backend
/// could have issued, are `NotHeld`. An unreachable Redis is an error, never
/// `NotHeld`.
///
/// ```no_run
/// use std::sync::Arc;
/// use palisade_core::SharedLiveCheck;
/// use palisade_lock_redis::{RedisConfig, RedisLiveCheck};
///
/// # async fn run() -> Result<(), palisade_lock_redis::RedisLockError> {
/// let check: SharedLiveCheck =
///     Arc::new(RedisLiveCheck::connect(RedisConfig::new("redis://127.0.0.1:6379")).await?);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisLiveCheck {
    client: RedisLockClient,
}

impl RedisLiveCheck {
    /// A live check on an existing client (same prefix and issuer).
    pub fn new(client: RedisLockClient) -> Self {
        RedisLiveCheck { client }
    }

    /// Connects a client for the live check alone.
    pub async fn connect(config: RedisConfig) -> Result<Self, RedisLockError> {
        Ok(RedisLiveCheck::new(RedisLockClient::connect(config).await?))
    }
}

impl LiveCheck for RedisLiveCheck {
    async fn check(&self, sequencer: &Sequencer) -> Result<Liveness, LockError> {
        let name = sequencer.lock();
        let generation = sequencer.generation();
        if sequencer
            .issuer()
            .is_some_and(|issuer| issuer != self.client.issuer())
            || generation.get() >= MAX_GENERATION
        {
            tracing::debug!(backend = BACKEND, lock = %name, %generation, issuer = ?sequencer.issuer(), "live check: not ours");
            return Ok(Liveness::NotHeld);
        }
        let held = self
            .client
            .check_call(
                &self.client.keys(name),
                sequencer.mode(),
                generation.get(),
                sequencer.lease(),
            )
            .await?;
        tracing::debug!(backend = BACKEND, lock = %name, %generation, held, "live check");
        Ok(if held {
            Liveness::Held
        } else {
            Liveness::NotHeld
        })
    }
}
