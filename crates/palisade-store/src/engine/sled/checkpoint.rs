//! The checkpoint thread (flushed mode): makes sled durable and removes the
//! group log segments that it then holds (see `group_log.rs`).
//!
//! Its own thread, because a checkpoint syncs everything sled wrote since
//! the last one (tens of megabytes at full speed): on the committer it
//! stalled every writer for that long (p99 up to 63 ms where it had been
//! 2 ms, docs/benchmarks.md). sled's flush runs beside the committer's
//! inserts; a segment is removed only after a flush that began after the
//! committer had finished with it, so sled holds all of its groups.

use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use super::group_log::remove_segments;
use super::syncer::Syncer;
use super::worker::Worker;
use crate::FlushStats;

/// The checkpoint thread; finishes the segments handed to it, then stops,
/// when dropped.
#[derive(Debug)]
pub(crate) struct Checkpoints(Worker<PathBuf>);

impl Checkpoints {
    pub(crate) fn start(
        syncer: Syncer,
        dir: PathBuf,
        stats: Arc<Mutex<FlushStats>>,
    ) -> std::io::Result<Checkpoints> {
        let worker = Worker::start("palisade-checkpoint", move |finished: Receiver<PathBuf>| {
            for segment in finished {
                // After a failure the segments stay: the next open
                // replays them.
                let started = std::time::Instant::now();
                let done = syncer.sync("a checkpoint", || {
                    remove_segments(&dir, std::slice::from_ref(&segment))
                        .map_err(|error| format!("removing a group log segment failed: {error}"))
                });
                if done.is_ok() {
                    tracing::debug!(elapsed = ?started.elapsed(), segment = %segment.display(), "checkpoint done");
                    stats.lock().unwrap_or_else(|e| e.into_inner()).checkpoints += 1;
                }
            }
        })?;
        Ok(Checkpoints(worker))
    }

    /// Hands a finished segment over; it is removed once sled's flush
    /// covers it.
    pub(crate) fn checkpoint(&self, segment: PathBuf) {
        // A thread that has ended leaves the segment for the next open's
        // replay.
        let _ = self.0.send(segment);
    }
}
