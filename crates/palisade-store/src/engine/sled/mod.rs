//! The sled engine: the embedded default. Marks, idempotency records and
//! data in two sled trees of one directory, every request applied by one
//! committer thread in groups (in flushed mode one record and one
//! `fdatasync` of the group log per group, sled made durable at
//! checkpoints; see `committer.rs` and `group_log.rs`).
//!
//! Everything here is private to the crate: [`Store::open`](crate::Store::open)
//! is the way in, and no sled type leaves this module except through
//! [`DurableSled`](crate::DurableSled), a utility that is about sled.

mod background_sync;
mod checkpoint;
mod committer;
mod group_commit;
mod group_log;
mod keys;
mod record;
mod syncer;
mod trees;
mod worker;

use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use palisade_core::{LockName, Mode, Sequencer};

use self::background_sync::BackgroundSync;
use self::checkpoint::Checkpoints;
use self::committer::{Committer, Job, Logged, ReadJob, WriteJob};
pub(crate) use self::committer::{DurableFiles, flush_durably};
pub use self::group_commit::FlushStats;
use self::group_commit::{Acknowledged, Health, Slot};
use self::group_log::{GroupLog, LogSwitches};
use self::keys::{FORMAT_KEY, FORMAT_VERSION, LockKeys, decode_state};
use self::syncer::Syncer;
use self::worker::Worker;
use crate::idempotency::FINGERPRINT_LEN;
use crate::{
    Applied, Durability, Engine, EngineFuture, EngineInfo, Marks, Read, ReadRequest, Refused,
    StoreConfig, StoreError, StoredRecord, WriteRequest,
};

/// The engine's name in [`EngineInfo`] and in errors.
pub(crate) const NAME: &str = "sled";

/// A sled failure as the store reports it.
pub(crate) fn sled_error(error: sled::Error) -> StoreError {
    StoreError::Storage {
        engine: NAME,
        message: error.to_string(),
    }
}

/// Opens the sled engine in directory `path` on its own, for code that
/// takes any [`Engine`] (the engine conformance suite, a
/// [`Store::with_engine`](crate::Store::with_engine) of your own).
/// [`Store::open`](crate::Store::open) is the usual way in: it also keeps
/// sled's group-commit counters ([`Store::flush_stats`](crate::Store::flush_stats)).
///
/// The `config`'s durability, cache capacity and idempotency window apply;
/// its limits are the store's business.
pub fn open_sled_engine(
    path: impl AsRef<Path>,
    config: &StoreConfig,
) -> Result<Arc<dyn Engine>, StoreError> {
    Ok(Arc::new(SledEngine::open(path.as_ref(), config)?))
}

/// The sled engine. Dropping it (with the last store that holds it) ends
/// the committer, which flushes one last time, and the interval sync.
#[derive(Debug)]
pub(crate) struct SledEngine {
    db: sled::Db,
    /// Key → value, keyed by lock segment + `/` + user key.
    data: sled::Tree,
    /// Per-lock state (the marks) and idempotency records.
    meta: sled::Tree,
    path: PathBuf,
    durability: Durability,
    /// The committer thread and its queue; dropping it ends the committer
    /// (after its last checkpoint) and waits for it.
    committer: Option<Worker<Job>>,
    health: Arc<Health>,
    stats: Arc<Mutex<FlushStats>>,
    /// sled's files, synced after every flush of sled (see `committer.rs`
    /// for why sled's own flush is not durable on Linux); here for the
    /// mutation row's switch.
    files: Arc<Mutex<DurableFiles>>,
    /// The group log's switches (the mutation row's, tests').
    log_switches: Arc<LogSwitches>,
    /// Makes sled durable: [`SledEngine::flush`].
    syncer: Syncer,
    /// Held for reading by every read outside the committer (see
    /// [`Committer::apply_gate`]).
    apply_gate: Arc<RwLock<()>>,
    /// Buffered mode's interval sync (`background_sync.rs`).
    interval_sync: Option<BackgroundSync>,
}

impl Drop for SledEngine {
    fn drop(&mut self) {
        drop(self.interval_sync.take());
        drop(self.committer.take());
    }
}

impl SledEngine {
    /// Opens (or creates) the engine's database in directory `path`.
    ///
    /// sled locks the directory. When an engine in this same process closed
    /// it a moment ago, sled's IO threads may hold that lock for a few more
    /// milliseconds after the last handle is dropped; `open` retries such a
    /// lock error for up to two seconds before giving up.
    pub(crate) fn open(path: &Path, config: &StoreConfig) -> Result<SledEngine, StoreError> {
        let sled_config = sled::Config::new()
            .path(path)
            .cache_capacity(config.cache_capacity_bytes)
            // The engine does every flush: its checkpoints (flushed), the
            // interval sync (buffered). sled's own background flush would
            // not sync (see `background_sync.rs`) and would only hold
            // sled's lock against them.
            .flush_every_ms(None);
        let db = open_with_retry(&sled_config)?;
        let files = DurableFiles::open(path).map_err(io_error)?;
        let data = db.open_tree("palisade-data").map_err(sled_error)?;
        let meta = db.open_tree("palisade-meta").map_err(sled_error)?;
        let files = Arc::new(Mutex::new(files));
        match meta.get(FORMAT_KEY).map_err(sled_error)? {
            None => {
                meta.insert(FORMAT_KEY, FORMAT_VERSION)
                    .map_err(sled_error)?;
                flush_durably(&db, &files)
                    .map_err(|message| StoreError::FlushFailed { message })?;
            }
            Some(version) if version == FORMAT_VERSION => {}
            Some(version) => {
                return Err(StoreError::Corrupt {
                    what: format!(
                        "the data directory has format {:?}; this version reads format {:?}",
                        String::from_utf8_lossy(&version),
                        String::from_utf8_lossy(FORMAT_VERSION)
                    ),
                });
            }
        }
        let next_segment = replay_group_log(path, &db, &data, &meta, &files)?;
        let last_seq = committer::last_commit_seq(&db, &meta)?;
        let log_switches = Arc::new(LogSwitches::default());
        let health = Arc::new(Health::default());
        let syncer = Syncer::new(db.clone(), Arc::clone(&files), Arc::clone(&health));
        let stats = Arc::new(Mutex::new(FlushStats::default()));
        let log = match config.durability {
            Durability::Flushed => Some(Logged {
                log: GroupLog::create(path, next_segment, Arc::clone(&log_switches))
                    .map_err(io_error)?,
                checkpoints: Checkpoints::start(
                    syncer.clone(),
                    path.to_path_buf(),
                    Arc::clone(&stats),
                )
                .map_err(io_error)?,
            }),
            Durability::Buffered { .. } => None,
        };
        let apply_gate = Arc::new(RwLock::new(()));
        let committer = Committer {
            data: data.clone(),
            meta: meta.clone(),
            idempotency_window: u64::from(config.idempotency_window.max(1)),
            health: Arc::clone(&health),
            stats: Arc::clone(&stats),
            syncer: syncer.clone(),
            log,
            apply_gate: Arc::clone(&apply_gate),
            last_seq,
        };
        let committer = Worker::start("palisade-committer", move |jobs: Receiver<Job>| {
            committer.run(jobs)
        })
        .map_err(io_error)?;
        let interval_sync = match config.durability {
            Durability::Flushed => None,
            Durability::Buffered { flush_every } => Some(
                BackgroundSync::start(
                    syncer.clone(),
                    flush_every.max(Duration::from_millis(1)),
                    Arc::clone(&stats),
                )
                .map_err(io_error)?,
            ),
        };
        Ok(SledEngine {
            db,
            data,
            meta,
            path: path.to_path_buf(),
            durability: config.durability,
            committer: Some(committer),
            health,
            stats,
            files,
            log_switches,
            syncer,
            apply_gate,
            interval_sync,
        })
    }

    /// Group-commit counters.
    pub(crate) fn flush_stats(&self) -> FlushStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Ok` unless a flush has failed (then the engine is fail-stopped).
    fn check_health(&self) -> Result<(), StoreError> {
        match self.health.failure() {
            Some(message) => Err(StoreError::FlushFailed { message }),
            None => Ok(()),
        }
    }

    /// Flushes everything to disk now, blocking: sled's flush, then a sync
    /// of sled's files. A failure fail-stops the engine, and a fail-stopped
    /// engine refuses to flush: after a failed fsync the kernel may have
    /// dropped the pages it could not write, so a later flush that succeeds
    /// proves nothing about them.
    fn flush(&self) -> Result<(), StoreError> {
        // A group is answered before it is applied to sled: wait for an
        // apply under way, so that sled's files cover every write answered
        // before this call (passing the gate, not holding it: a flush
        // takes milliseconds, and the committer's next apply must not wait
        // for it).
        drop(self.reading());
        self.syncer
            .sync("a flush", || Ok(()))
            .map_err(|message| StoreError::FlushFailed { message })
    }

    /// The fault suite's I-DUR mutation: acknowledge after writing the
    /// group log, without syncing it or sled's files. See
    /// [`Store::skip_file_sync_unsafe_for_mutation_tests`](crate::Store::skip_file_sync_unsafe_for_mutation_tests).
    pub(crate) fn skip_file_sync(&self) {
        tracing::warn!("the store acknowledges writes WITHOUT syncing its files (test only)");
        self.log_switches
            .skip_sync
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .skip_sync();
    }

    /// Held while reading outside the committer: no read sees half of a
    /// group being applied.
    fn reading(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.apply_gate.read().unwrap_or_else(|e| e.into_inner())
    }

    fn enqueue(&self, job: Job) -> Result<(), StoreError> {
        match &self.committer {
            Some(committer) => committer.send(job).map_err(|_| StoreError::ShutDown),
            None => Err(StoreError::ShutDown),
        }
    }

    fn read_marks(&self, lock: &LockName, keys: &LockKeys) -> Result<Marks, StoreError> {
        let raw = self.meta.get(keys.state()).map_err(sled_error)?;
        decode_state(raw.as_deref())
            .map(|state| state.marks)
            .ok_or_else(|| committer::corrupt_state(lock))
    }

    /// Queues a fenced read of `key` (empty: of nothing) to the committer.
    fn queue_read(
        &self,
        sequencer: &Sequencer,
        key: Vec<u8>,
    ) -> Result<Acknowledged<Result<Read, Refused>>, StoreError> {
        let slot = Slot::new();
        self.enqueue(Job::Read(ReadJob {
            sequencer: sequencer.clone(),
            keys: LockKeys::new(sequencer.lock()),
            key,
            slot: Arc::clone(&slot),
        }))?;
        Ok(Acknowledged::from_slot(slot))
    }

    fn queue_write(
        &self,
        request: WriteRequest,
    ) -> Result<Acknowledged<Result<Applied, Refused>>, StoreError> {
        // The record's layout holds a SHA-256 digest: refuse anything else
        // before it is queued, rather than record what cannot be read back.
        if request.request_id.is_some() && request.fingerprint.len() != FINGERPRINT_LEN {
            return Err(StoreError::Corrupt {
                what: format!(
                    "a request fingerprint of {} bytes; the sled engine records {FINGERPRINT_LEN}",
                    request.fingerprint.len()
                ),
            });
        }
        let slot = Slot::new();
        self.enqueue(Job::Write(WriteJob {
            keys: LockKeys::new(request.sequencer.lock()),
            request,
            slot: Arc::clone(&slot),
        }))?;
        Ok(Acknowledged::from_slot(slot))
    }
}

/// A future that fails at once: for calls refused before anything queued.
fn failed<T: Send + 'static>(error: StoreError) -> EngineFuture<T> {
    Box::pin(std::future::ready(Err(error)))
}

impl Engine for SledEngine {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            name: NAME,
            durability: self.durability.to_string(),
            location: self.path.display().to_string(),
        }
    }

    fn durability(&self) -> Durability {
        self.durability
    }

    fn write(&self, request: WriteRequest) -> EngineFuture<Result<Applied, Refused>> {
        // Queued now, not when the future is first polled: requests made
        // one after another are decided in that order.
        match self.check_health().and_then(|()| self.queue_write(request)) {
            Ok(queued) => queued.boxed(),
            Err(error) => failed(error),
        }
    }

    fn read(&self, request: ReadRequest<'_>) -> EngineFuture<Result<Read, Refused>> {
        let ReadRequest {
            lock,
            key,
            sequencer,
        } = request;
        if let Err(error) = self.check_health() {
            return failed(error);
        }
        match sequencer {
            Some(sequencer) => match self.queue_read(sequencer, key.to_vec()) {
                Ok(queued) => queued.boxed(),
                Err(error) => failed(error),
            },
            None => {
                let keys = LockKeys::new(lock);
                let _reading = self.reading();
                let read = self
                    .data
                    .get(keys.data(key))
                    .map_err(sled_error)
                    .and_then(|value| {
                        let marks = self.read_marks(lock, &keys)?;
                        Ok(Read {
                            value: value.map(Bytes::from_owner),
                            marks,
                        })
                    });
                Box::pin(std::future::ready(read.map(Ok)))
            }
        }
    }

    fn admit(&self, sequencer: &Sequencer) -> EngineFuture<Result<Marks, Refused>> {
        if let Err(error) = self.check_health() {
            return failed(error);
        }
        // Queued now, so admissions are decided in call order (the guard
        // relies on it).
        match sequencer.mode() {
            Mode::Exclusive => {
                match self.queue_write(WriteRequest::new(sequencer.clone(), Vec::new(), None)) {
                    Ok(queued) => {
                        Box::pin(async move { Ok(queued.await?.map(|applied| applied.marks)) })
                    }
                    Err(error) => failed(error),
                }
            }
            // The data key of the empty user key is `<segment>/`, which
            // never holds a value: user keys are never empty.
            Mode::Shared => match self.queue_read(sequencer, Vec::new()) {
                Ok(queued) => Box::pin(async move { Ok(queued.await?.map(|read| read.marks)) }),
                Err(error) => failed(error),
            },
        }
    }

    fn marks(&self, lock: &LockName) -> EngineFuture<Marks> {
        let marks = self.check_health().and_then(|()| {
            let _reading = self.reading();
            self.read_marks(lock, &LockKeys::new(lock))
        });
        Box::pin(std::future::ready(marks))
    }

    fn health(&self) -> EngineFuture<()> {
        Box::pin(std::future::ready(self.check_health()))
    }

    /// Flushes (blocking the calling thread for the flush: call it off
    /// async worker threads). The engine keeps serving afterwards.
    fn close(&self) -> EngineFuture<()> {
        Box::pin(std::future::ready(self.flush()))
    }

    fn dump(&self) -> EngineFuture<Vec<StoredRecord>> {
        let _reading = self.reading();
        let mut records = Vec::new();
        let mut scan = || -> Result<(), sled::Error> {
            for tree_name in self.db.tree_names() {
                let place = String::from_utf8_lossy(&tree_name).into_owned();
                for entry in self.db.open_tree(&tree_name)?.iter() {
                    let (key, value) = entry?;
                    records.push(StoredRecord {
                        place: place.clone(),
                        key: key.to_vec(),
                        value: value.to_vec(),
                    });
                }
            }
            Ok(())
        };
        match scan() {
            Ok(()) => {
                records.sort();
                Box::pin(std::future::ready(Ok(records)))
            }
            Err(error) => failed(sled_error(error)),
        }
    }
}

/// Replays whatever the group log in `path` holds over sled's trees (a
/// crash left it there, see `group_log.rs`), makes the result durable
/// with a checkpoint, and removes the segments. Done in every mode, so a
/// buffered store opened after a flushed one crashed loses nothing.
/// Returns the number for the next segment.
fn replay_group_log(
    path: &Path,
    db: &sled::Db,
    data: &sled::Tree,
    meta: &sled::Tree,
    files: &Mutex<DurableFiles>,
) -> Result<u64, StoreError> {
    let recovered = group_log::recover(path).map_err(|error| match error.kind() {
        std::io::ErrorKind::InvalidData => StoreError::Corrupt {
            what: format!("the group log cannot be replayed: {error}"),
        },
        _ => io_error(error),
    })?;
    if recovered.segments.is_empty() {
        return Ok(recovered.next_segment);
    }
    for group in &recovered.groups {
        group.effects.apply(data, meta).map_err(sled_error)?;
    }
    flush_durably(db, files).map_err(|message| StoreError::FlushFailed { message })?;
    group_log::remove_segments(path, &recovered.segments).map_err(io_error)?;
    if !recovered.groups.is_empty() {
        tracing::info!(
            groups = recovered.groups.len(),
            "replayed the group log after an unclean stop"
        );
    }
    Ok(recovered.next_segment)
}

/// An I/O error of the engine's own files as the store reports it.
pub(crate) fn io_error(error: std::io::Error) -> StoreError {
    sled_error(sled::Error::Io(error))
}

/// Opens sled, retrying (bounded) while another handle in this process is
/// still releasing the directory lock. There is no event to wait for: sled
/// releases the lock when its IO threads drop their last file handle.
pub(crate) fn open_with_retry(config: &sled::Config) -> Result<sled::Db, StoreError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let mut pauses =
        palisade_core::retry_pauses(Duration::from_millis(5), Duration::from_millis(50));
    loop {
        match config.open() {
            Ok(db) => return Ok(db),
            Err(sled::Error::Io(error))
                if error.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(pauses.next().unwrap_or(Duration::from_millis(50)));
            }
            Err(error) => return Err(sled_error(error)),
        }
    }
}

#[cfg(test)]
mod tests;
