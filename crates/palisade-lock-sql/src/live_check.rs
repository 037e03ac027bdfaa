//! The live check: does a sequencer's holder still hold the lock?

use palisade_core::{LiveCheck, Liveness, LockError, Sequencer};

use crate::{SqlConfig, SqlLockClient, SqlLockError};

/// Chubby's CheckSequencer on the lock tables, for resource servers.
///
/// `Held` means: right now, in one statement on the database, a holder row
/// with the sequencer's lock, generation and mode exists and its session's
/// lease has not expired by the database's clock. Generations are unique per
/// lock (every grant takes a new one), so the pair names one hold. A
/// sequencer from another issuer is `NotHeld`; a database that cannot be
/// asked is an error, never `NotHeld`.
#[derive(Debug, Clone)]
pub struct SqlLiveCheck {
    client: SqlLockClient,
}

impl SqlLiveCheck {
    /// A live check on an existing client.
    pub fn new(client: SqlLockClient) -> Self {
        SqlLiveCheck { client }
    }

    /// Connects a client for the live check alone.
    pub async fn connect(config: SqlConfig) -> Result<Self, SqlLockError> {
        Ok(SqlLiveCheck::new(SqlLockClient::connect(config).await?))
    }
}

impl LiveCheck for SqlLiveCheck {
    async fn check(&self, sequencer: &Sequencer) -> Result<Liveness, LockError> {
        let foreign = sequencer
            .issuer()
            .is_some_and(|issuer| Some(issuer) != self.client.issuer());
        let Ok(generation) = i64::try_from(sequencer.generation().get()) else {
            return Ok(Liveness::NotHeld);
        };
        if foreign {
            return Ok(Liveness::NotHeld);
        }
        let held = self
            .client
            .inner
            .store
            .is_held(sequencer.lock(), generation, sequencer.mode())
            .await?;
        Ok(if held {
            Liveness::Held
        } else {
            Liveness::NotHeld
        })
    }
}
