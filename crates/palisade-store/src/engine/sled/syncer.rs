//! Making sled durable: its flush and then the sync of its files
//! ([`flush_durably`]), with the engine's fail-stop around it. One piece
//! for everyone who does it: the checkpoint thread, the interval sync, the
//! committer's last checkpoint, and an explicit flush.

use std::sync::{Arc, Mutex};

use super::committer::{DurableFiles, flush_durably};
use super::group_commit::Health;

#[derive(Debug, Clone)]
pub(crate) struct Syncer {
    db: sled::Db,
    files: Arc<Mutex<DurableFiles>>,
    health: Arc<Health>,
}

impl Syncer {
    pub(crate) fn new(db: sled::Db, files: Arc<Mutex<DurableFiles>>, health: Arc<Health>) -> Self {
        Syncer { db, files, health }
    }

    /// Flushes sled durably, then runs `then` (what the flush makes safe:
    /// removing the log segments it covers). A fail-stopped engine refuses
    /// (after a failed fsync the kernel may have dropped the pages it could
    /// not write, so a later sync that succeeds proves nothing about them);
    /// a failure here fail-stops it, logged as `what`'s. The error is the
    /// text a fail-stopped store reports.
    pub(crate) fn sync(
        &self,
        what: &str,
        then: impl FnOnce() -> Result<(), String>,
    ) -> Result<(), String> {
        if let Some(message) = self.health.failure() {
            return Err(message);
        }
        let done = flush_durably(&self.db, &self.files).and_then(|()| then());
        if let Err(message) = &done {
            tracing::error!(error = %message, "{what} failed; the store refuses further requests");
            self.health.fail(message.clone());
        }
        done
    }
}
