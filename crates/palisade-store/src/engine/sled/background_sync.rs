//! Buffered mode's interval sync: every `flush_every`, sled's flush and
//! then the sync of sled's files (the same [`Syncer`] a checkpoint uses in
//! flushed mode).
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

use super::syncer::Syncer;
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
    /// Starts syncing through `syncer` every `every`, counting each
    /// completed sync in `stats`; the first failure fail-stops the store
    /// and ends the thread.
    pub(crate) fn start(
        syncer: Syncer,
        every: Duration,
        stats: Arc<Mutex<FlushStats>>,
    ) -> io::Result<BackgroundSync> {
        let worker = Worker::start("palisade-syncer", move |stopped: Receiver<()>| {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                if syncer.sync("the interval sync", || Ok(())).is_err() {
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
