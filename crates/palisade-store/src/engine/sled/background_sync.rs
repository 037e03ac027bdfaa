//! Buffered mode's interval sync: every `flush_every`, sled's flush and
//! then the same sync of sled's files the committer does after each group
//! in flushed mode.
//!
//! sled's own background flusher is not used: like its `flush()`, it ends
//! in `sync_file_range` on Linux, which neither commits the log's metadata
//! nor flushes the disk's write cache (see `committer.rs`). A failed flush
//! or sync fail-stops the store exactly as in flushed mode: writes
//! acknowledged since the last good sync may be gone, and a later sync that
//! succeeds would prove nothing about them.

use std::io;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::committer::{DurableFiles, flush_durably};
use super::group_commit::Health;
use super::worker::Worker;
use crate::FlushStats;

/// The interval sync thread; stopped (and joined) on drop.
#[derive(Debug)]
pub(crate) struct BackgroundSync {
    /// Nothing is ever sent: dropping the sender ends the wait at once, so
    /// a closing store does not wait a period.
    _worker: Worker<()>,
}

impl BackgroundSync {
    /// Starts syncing `db` and its `files` every
    /// `every`, counting each completed sync in `stats` and recording a
    /// failure in `health`.
    pub(crate) fn start(
        db: sled::Db,
        files: Arc<Mutex<DurableFiles>>,
        every: Duration,
        health: Arc<Health>,
        stats: Arc<Mutex<FlushStats>>,
    ) -> io::Result<BackgroundSync> {
        let worker = Worker::start("palisade-syncer", move |stopped: Receiver<()>| {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                if health.failure().is_some() {
                    return;
                }
                if let Err(message) = flush_durably(&db, &files) {
                    tracing::error!(error = %message, "the interval sync failed; the store refuses further requests");
                    health.fail(message);
                    return;
                }
                stats
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .background_syncs += 1;
            }
        })?;
        Ok(BackgroundSync { _worker: worker })
    }
}
