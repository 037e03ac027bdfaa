//! The fenced store: its public face. Writes (and reads with a sequencer)
//! are queued to the committer thread (`committer.rs`), which applies them
//! in groups, one sled transaction and one flush per group.

use std::path::Path;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use palisade_core::{LockName, Mode, Sequencer};
use sled::IVec;

use crate::background_sync::BackgroundSync;
use crate::committer::{self, Committer, DurableFiles, Job, ReadJob, WriteJob};
use crate::group_commit::{Epochs, FlushStats, Pending, Slot};
use crate::idempotency;
use crate::keys::{FORMAT_KEY, FORMAT_VERSION, LockKeys, LockState};
use crate::{
    Applied, Durability, LimitKind, Marks, Op, Read, Refused, RequestId, StoreConfig, StoreError,
};

/// The fenced store. Cheap to clone (an `Arc` inside); every clone is the
/// same store.
///
/// Writes are applied by one background thread, the committer, in groups:
/// one sled transaction and (in [`Durability::Flushed`] mode) one flush per
/// group. The `submit*` methods queue a request and return a [`Pending`]
/// to `.await` (they never block on sled's locks); [`Store::apply`],
/// [`Store::get`] and [`Store::marks`] are blocking conveniences over them.
///
/// ```
/// use palisade_core::{Generation, LockName, Mode, Sequencer};
/// use palisade_store::{Marks, Op, Refused, Store, StoreConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let store = Store::open(dir.path(), StoreConfig::default())?;
/// let lock = LockName::new("orders/42")?;
/// let holder = |generation| {
///     Sequencer::new(lock.clone(), Mode::Exclusive, Generation::new(generation).unwrap())
/// };
///
/// // Generation 34 writes: accepted, the mark moves to 34.
/// let applied = store.apply(&holder(34), &[Op::put("stock", "7")], None)?.unwrap();
/// assert_eq!(applied.marks, Marks { exclusive: 34, shared: 0 });
///
/// // A paused holder with generation 33 wakes up and writes: refused, and
/// // the refusal is an outcome (inner `Err`), not a failure.
/// match store.apply(&holder(33), &[Op::put("stock", "8")], None)? {
///     Err(Refused::Stale { presented, marks, .. }) => {
///         assert_eq!(presented.get(), 33);
///         assert_eq!(marks.exclusive, 34);
///     }
///     other => panic!("expected a stale refusal, got {other:?}"),
/// }
/// let read = store.get(&lock, b"stock", None)?.unwrap();
/// assert_eq!(read.value.as_deref(), Some(&b"7"[..]));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    db: sled::Db,
    /// Key → value, keyed by lock segment + `/` + user key.
    data: sled::Tree,
    /// Per-lock state (the marks) and idempotency records.
    meta: sled::Tree,
    config: StoreConfig,
    /// The committer's queue. Dropping it (with the last `Store`) ends the
    /// committer, which flushes one last time.
    jobs: Option<Sender<Job>>,
    committer: Option<JoinHandle<()>>,
    epochs: Arc<Epochs>,
    stats: Arc<Mutex<FlushStats>>,
    /// sled's files, synced after every flush (see `committer.rs` for why
    /// sled's own flush is not durable on Linux). `None` after
    /// [`Store::from_db`], which does not know the directory.
    files: Option<Arc<Mutex<DurableFiles>>>,
    /// Buffered mode's interval sync (`background_sync.rs`).
    syncer: Option<BackgroundSync>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        drop(self.syncer.take());
        drop(self.jobs.take());
        if let Some(committer) = self.committer.take() {
            let _ = committer.join();
        }
    }
}

impl Store {
    /// Opens (or creates) the store in directory `path`.
    ///
    /// sled locks the directory. When a store in this same process closed
    /// it a moment ago, sled's IO threads may hold that lock for a few more
    /// milliseconds after the last handle is dropped; `open` retries such a
    /// lock error for up to two seconds before giving up.
    pub fn open(path: impl AsRef<Path>, config: StoreConfig) -> Result<Store, StoreError> {
        let sled_config = sled::Config::new()
            .path(path.as_ref())
            .cache_capacity(config.cache_capacity_bytes)
            // The store does every flush: the committer after each group
            // (flushed), the interval sync (buffered). sled's own background
            // flush would not sync (see `background_sync.rs`) and would only
            // hold sled's lock against them.
            .flush_every_ms(None);
        let db = open_with_retry(&sled_config)?;
        let files = DurableFiles::open(path.as_ref()).map_err(sled::Error::Io)?;
        Store::from_parts(db, config, Some(files))
    }

    /// Wraps an already open sled database (trees `palisade-data` and
    /// `palisade-meta` are used). sled's own `flush_every_ms` setting is left
    /// as the caller configured it.
    ///
    /// The store does not know where such a database keeps its files, so in
    /// [`Durability::Flushed`] mode an acknowledgement means sled's own
    /// `flush()` returned (and in [`Durability::Buffered`] mode the interval
    /// sync is sled's `flush()` alone): on Linux that is `sync_file_range`, which neither
    /// commits the log's metadata nor flushes the disk's write cache, and
    /// does not survive a power cut. [`Store::open`] also syncs sled's files
    /// and keeps the full guarantee.
    pub fn from_db(db: sled::Db, config: StoreConfig) -> Result<Store, StoreError> {
        Store::from_parts(db, config, None)
    }

    fn from_parts(
        db: sled::Db,
        config: StoreConfig,
        files: Option<DurableFiles>,
    ) -> Result<Store, StoreError> {
        let data = db.open_tree("palisade-data")?;
        let meta = db.open_tree("palisade-meta")?;
        let files = files.map(|files| Arc::new(Mutex::new(files)));
        match meta.get(FORMAT_KEY)? {
            None => {
                meta.insert(FORMAT_KEY, FORMAT_VERSION)?;
                committer::flush_durably(&db, files.as_deref())
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
        let config = StoreConfig {
            idempotency_window: config.idempotency_window.max(1),
            ..config
        };
        let epochs = Arc::new(Epochs::default());
        let stats = Arc::new(Mutex::new(FlushStats::default()));
        let (sender, receiver) = channel();
        let committer = Committer {
            db: db.clone(),
            data: data.clone(),
            meta: meta.clone(),
            durability: config.durability,
            idempotency_window: u64::from(config.idempotency_window),
            epochs: Arc::clone(&epochs),
            stats: Arc::clone(&stats),
            files: files.clone(),
        };
        let handle = std::thread::Builder::new()
            .name("palisade-committer".into())
            .spawn(move || committer.run(receiver))
            .map_err(|e| StoreError::Io(sled::Error::Io(e)))?;
        let syncer = match config.durability {
            Durability::Flushed => None,
            Durability::Buffered { flush_every } => Some(
                BackgroundSync::start(
                    db.clone(),
                    files.clone(),
                    flush_every.max(Duration::from_millis(1)),
                    Arc::clone(&epochs),
                    Arc::clone(&stats),
                )
                .map_err(|e| StoreError::Io(sled::Error::Io(e)))?,
            ),
        };
        Ok(Store {
            inner: Arc::new(Inner {
                db,
                data,
                meta,
                config,
                jobs: Some(sender),
                committer: Some(handle),
                epochs,
                stats,
                files,
                syncer,
            }),
        })
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// The durability mode.
    pub fn durability(&self) -> Durability {
        self.inner.config.durability
    }

    /// Group-commit counters (`flushes` and `tickets` in
    /// [`Durability::Flushed`] mode, `background_syncs` in
    /// [`Durability::Buffered`] mode).
    pub fn flush_stats(&self) -> FlushStats {
        *self.inner.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Ok` unless a flush has failed (then the store is fail-stopped).
    pub fn check_health(&self) -> Result<(), StoreError> {
        match self.inner.epochs.failure() {
            Some(message) => Err(StoreError::FlushFailed { message }),
            None => Ok(()),
        }
    }

    /// Flushes everything to disk now (blocking), e.g. at shutdown: sled's
    /// flush, then (for a store opened with [`Store::open`]) a sync of
    /// sled's files.
    ///
    /// A failure here fail-stops the store like a failed flush of the
    /// committer, and a fail-stopped store refuses to flush: after a failed
    /// fsync the kernel may have dropped the pages it could not write, so a
    /// later flush that succeeds proves nothing about them.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.check_health()?;
        committer::flush_durably(&self.inner.db, self.inner.files.as_deref()).map_err(|message| {
            tracing::error!(error = %message, "flush failed; the store refuses further requests");
            self.inner.epochs.fail(message.clone());
            StoreError::FlushFailed { message }
        })
    }

    /// **Unsafe for data; the fault suite's mutation check only.** From now
    /// on the store acknowledges every group after sled's own flush without
    /// syncing sled's files, which is exactly the bug the durable sync
    /// fixes: the acknowledged writes survive `kill -9` (they are in the
    /// page cache) but not a disk that dies before its journal commits.
    ///
    /// The fault suite's `resource-server --unsynced` (which also demands
    /// `PALISADE_TEST_UNSYNCED=1`) calls it to show that the checker
    /// reports acknowledged writes lost (I-DUR) when the sync is missing.
    /// Nothing else may: `palisade-server` never does. A no-op for a store
    /// that never syncs its files ([`Store::from_db`], `Buffered`).
    #[doc(hidden)]
    pub fn skip_file_sync_unsafe_for_mutation_tests(&self) {
        if let Some(files) = &self.inner.files {
            tracing::warn!("the store acknowledges writes WITHOUT syncing its files (test only)");
            files.lock().unwrap_or_else(|e| e.into_inner()).skip_sync();
        }
    }

    fn check_key(&self, key: &[u8]) -> Result<(), StoreError> {
        if key.is_empty() {
            return Err(StoreError::EmptyKey);
        }
        let max = self.inner.config.limits.max_key_bytes;
        if key.len() > max {
            return Err(StoreError::TooLarge {
                kind: LimitKind::Key,
                actual: key.len(),
                max,
            });
        }
        Ok(())
    }

    fn check_ops(&self, ops: &[Op]) -> Result<(), StoreError> {
        let limits = self.inner.config.limits;
        if ops.len() > limits.max_batch_ops {
            return Err(StoreError::TooLarge {
                kind: LimitKind::BatchOps,
                actual: ops.len(),
                max: limits.max_batch_ops,
            });
        }
        for op in ops {
            self.check_key(op.key())?;
            let values: [Option<&IVec>; 2] = match op {
                Op::Put { value, .. } => [Some(value), None],
                Op::Delete { .. } => [None, None],
                Op::Cas { expected, new, .. } => [expected.as_ref(), new.as_ref()],
            };
            for value in values.into_iter().flatten() {
                if value.len() > limits.max_value_bytes {
                    return Err(StoreError::TooLarge {
                        kind: LimitKind::Value,
                        actual: value.len(),
                        max: limits.max_value_bytes,
                    });
                }
            }
        }
        Ok(())
    }

    fn enqueue(&self, job: Job) -> Result<(), StoreError> {
        match self.inner.jobs.as_ref() {
            Some(sender) => sender.send(job).map_err(|_| StoreError::ShutDown),
            None => Err(StoreError::ShutDown),
        }
    }

    /// Wraps an outcome read outside the committer: it waits for the flush
    /// of any group that may have committed before the read.
    fn observed<T>(&self, outcome: T) -> Pending<T> {
        let epoch = match self.inner.config.durability {
            Durability::Flushed => self.inner.epochs.needed_by_reader(),
            Durability::Buffered { .. } => None,
        };
        Pending::after_epoch(outcome, epoch, Arc::clone(&self.inner.epochs))
    }

    /// Applies `ops` under `sequencer`, blocking until the outcome is
    /// acknowledged (see [`Durability`]). The lock is `sequencer.lock()`.
    ///
    /// In one sled transaction: if `request_id` was seen on this lock, the
    /// remembered outcome is returned and nothing is applied; otherwise the
    /// fencing rule is checked ([`Marks::admit`]), every op is applied in
    /// order, the mark is raised and the request id is recorded. Any refusal
    /// (stale generation, shared sequencer, failed compare-and-swap) leaves
    /// everything as it was, the mark included.
    ///
    /// An empty `ops` is allowed: it only raises the mark, which fences
    /// older holders without writing data.
    pub fn apply(
        &self,
        sequencer: &Sequencer,
        ops: &[Op],
        request_id: Option<&RequestId>,
    ) -> Result<Result<Applied, Refused>, StoreError> {
        self.submit(sequencer, ops, request_id)?.wait()
    }

    /// Like [`Store::apply`], but returns at once with a [`Pending`] that
    /// resolves when the outcome is acknowledged. This is the method for
    /// async code: `store.submit(..)?.await`.
    pub fn submit(
        &self,
        sequencer: &Sequencer,
        ops: &[Op],
        request_id: Option<&RequestId>,
    ) -> Result<Pending<Result<Applied, Refused>>, StoreError> {
        self.check_health()?;
        self.check_ops(ops)?;
        let slot = Slot::new();
        if sequencer.mode() != Mode::Exclusive {
            let refused = Refused::SharedOnWrite {
                lock: sequencer.lock().clone(),
                presented: sequencer.generation(),
            };
            committer::trace_refusal(sequencer, &refused);
            slot.fill(Ok(Err(refused)));
            return Ok(Pending::from_slot(slot));
        }
        self.enqueue(Job::Write(WriteJob {
            sequencer: sequencer.clone(),
            keys: LockKeys::new(sequencer.lock()),
            ops: ops.to_vec(),
            request_id: request_id.cloned(),
            fingerprint: request_id.map(|_| idempotency::fingerprint(sequencer, ops)),
            slot: Arc::clone(&slot),
        }))?;
        Ok(Pending::from_slot(slot))
    }

    /// Reads `key` in `lock`'s keyspace, blocking until acknowledged.
    ///
    /// Without a sequencer this is a plain read. With one (shared or
    /// exclusive), the fencing rule is checked and the mark raised in the
    /// same transaction as the read: a reader with a new generation fences
    /// older writers. The sequencer must be for `lock`.
    pub fn get(
        &self,
        lock: &LockName,
        key: &[u8],
        sequencer: Option<&Sequencer>,
    ) -> Result<Result<Read, Refused>, StoreError> {
        self.submit_get(lock, key, sequencer)?.wait()
    }

    /// Like [`Store::get`], returning a [`Pending`] to await.
    pub fn submit_get(
        &self,
        lock: &LockName,
        key: &[u8],
        sequencer: Option<&Sequencer>,
    ) -> Result<Pending<Result<Read, Refused>>, StoreError> {
        self.check_health()?;
        self.check_key(key)?;
        let keys = LockKeys::new(lock);
        let Some(sequencer) = sequencer else {
            let value = self.inner.data.get(keys.data(key))?;
            let marks = self.read_marks(lock, &keys)?;
            return Ok(self.observed(Ok(Read { value, marks })));
        };
        if sequencer.lock() != lock {
            let refused = Refused::LockMismatch {
                requested: lock.clone(),
                presented: sequencer.lock().clone(),
            };
            committer::trace_refusal(sequencer, &refused);
            return Ok(self.observed(Err(refused)));
        }
        let slot = Slot::new();
        self.enqueue(Job::Read(ReadJob {
            sequencer: sequencer.clone(),
            keys,
            key: key.to_vec(),
            slot: Arc::clone(&slot),
        }))?;
        Ok(Pending::from_slot(slot))
    }

    /// Checks `sequencer` against its lock's marks and raises them, touching
    /// no data: the fencing step alone, for a service that keeps its data
    /// elsewhere and uses this store only for its marks.
    ///
    /// Exclusive and shared sequencers are both accepted (an exclusive one
    /// is an empty write, a shared one a read of nothing), so the rules and
    /// the durability are exactly those of [`Store::submit`] and
    /// [`Store::submit_get`]: the returned future resolves once the new
    /// mark is acknowledged, and a refusal changes nothing. The request is
    /// queued when this method is called, not when the future is first
    /// polled, so calls made one after another are decided in that order.
    ///
    /// The outcome is the lock's marks after the request, or the refusal
    /// ([`Refused::Stale`] with the current marks).
    pub fn submit_admit(
        &self,
        sequencer: &Sequencer,
    ) -> Result<
        impl std::future::Future<Output = Result<Result<Marks, Refused>, StoreError>> + Send + 'static,
        StoreError,
    > {
        self.check_health()?;
        enum Queued {
            Write(Pending<Result<Applied, Refused>>),
            Read(Pending<Result<Read, Refused>>),
        }
        let queued = match sequencer.mode() {
            Mode::Exclusive => Queued::Write(self.submit(sequencer, &[], None)?),
            Mode::Shared => {
                let slot = Slot::new();
                self.enqueue(Job::Read(ReadJob {
                    sequencer: sequencer.clone(),
                    keys: LockKeys::new(sequencer.lock()),
                    // The data key of the empty user key is `<segment>/`,
                    // which never holds a value: user keys are never empty.
                    key: Vec::new(),
                    slot: Arc::clone(&slot),
                }))?;
                Queued::Read(Pending::from_slot(slot))
            }
        };
        Ok(async move {
            Ok(match queued {
                Queued::Write(pending) => pending.await?.map(|applied| applied.marks),
                Queued::Read(pending) => pending.await?.map(|read| read.marks),
            })
        })
    }

    fn read_marks(&self, lock: &LockName, keys: &LockKeys) -> Result<Marks, StoreError> {
        let raw = self.inner.meta.get(keys.state())?;
        LockState::decode(raw.as_deref())
            .map(|state| state.marks)
            .ok_or_else(|| committer::corrupt_state(lock))
    }

    /// The current marks of `lock`, blocking until acknowledged. A lock
    /// never seen has marks 0: that is not an error.
    pub fn marks(&self, lock: &LockName) -> Result<Marks, StoreError> {
        self.submit_marks(lock)?.wait()
    }

    /// Like [`Store::marks`], returning a [`Pending`] to await.
    pub fn submit_marks(&self, lock: &LockName) -> Result<Pending<Marks>, StoreError> {
        self.check_health()?;
        let marks = self.read_marks(lock, &LockKeys::new(lock))?;
        Ok(self.observed(marks))
    }
}

/// Opens sled, retrying (bounded) while another handle in this process is
/// still releasing the directory lock. There is no event to wait for: sled
/// releases the lock when its IO threads drop their last file handle.
pub(crate) fn open_with_retry(config: &sled::Config) -> Result<sled::Db, StoreError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        match config.open() {
            Ok(db) => return Ok(db),
            Err(sled::Error::Io(error))
                if error.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(error) => return Err(error.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use palisade_core::{Generation, LockName, Mode, Sequencer};

    use super::*;

    #[test]
    fn submit_admit_raises_marks_without_touching_data() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        let lock = LockName::new("L").unwrap();
        let seq = |mode, generation| {
            Sequencer::new(lock.clone(), mode, Generation::new(generation).unwrap())
        };
        let admit = |sequencer: Sequencer| {
            let future = store.submit_admit(&sequencer).unwrap();
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(future)
                .unwrap()
        };
        let marks = |exclusive, shared| Marks { exclusive, shared };
        assert_eq!(admit(seq(Mode::Exclusive, 5)), Ok(marks(5, 0)));
        assert_eq!(admit(seq(Mode::Shared, 7)), Ok(marks(5, 7)));
        assert_eq!(admit(seq(Mode::Shared, 6)), Ok(marks(5, 7)));
        assert!(matches!(
            admit(seq(Mode::Exclusive, 6)),
            Err(Refused::Stale { marks: m, .. }) if m == marks(5, 7)
        ));
        assert!(matches!(
            admit(seq(Mode::Shared, 4)),
            Err(Refused::Stale { .. })
        ));
        assert_eq!(store.marks(&lock).unwrap(), marks(5, 7));
        assert_eq!(store.inner.data.len(), 0, "no data was written");
        drop(store);
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        assert_eq!(store.marks(&lock).unwrap(), marks(5, 7));
    }

    #[test]
    fn after_a_failed_flush_every_call_fails_until_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        let lock = LockName::new("L").unwrap();
        let sequencer = Sequencer::new(lock.clone(), Mode::Exclusive, Generation::MIN);
        store
            .apply(&sequencer, &[Op::put("k", "v")], None)
            .unwrap()
            .unwrap();

        // What the committer records when sled's flush returns an error.
        store.inner.epochs.fail("injected: fsync failed".into());

        let failed = |result: Result<(), StoreError>| matches!(result, Err(StoreError::FlushFailed { message }) if message.contains("injected"));
        assert!(failed(store.check_health()));
        assert!(failed(
            store
                .apply(&sequencer, &[Op::put("k", "w")], None)
                .map(|_| ())
        ));
        assert!(failed(store.get(&lock, b"k", None).map(|_| ())));
        assert!(failed(store.get(&lock, b"k", Some(&sequencer)).map(|_| ())));
        assert!(failed(store.marks(&lock).map(|_| ())));
        drop(store);

        // A restart recovers from sled's log: the acknowledged write is there.
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        let read = store.get(&lock, b"k", None).unwrap().unwrap();
        assert_eq!(read.value.as_deref(), Some(&b"v"[..]));
    }

    /// Makes the next sync of sled's files fail, as a dying disk would.
    fn fail_next_sync(store: &Store, kind: std::io::ErrorKind) {
        let files = store.inner.files.as_ref().expect("opened by path");
        files.lock().unwrap().fail_next = Some(kind);
    }

    #[test]
    fn a_failed_sync_of_the_data_files_is_never_acknowledged_and_fail_stops() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        let lock = LockName::new("L").unwrap();
        let holder = |generation| {
            Sequencer::new(
                lock.clone(),
                Mode::Exclusive,
                Generation::new(generation).unwrap(),
            )
        };
        store
            .apply(&holder(5), &[Op::put("k", "acknowledged")], None)
            .unwrap()
            .unwrap();

        // sled's flush succeeds, the fsync after it does not: the write is
        // answered with a failure, never with `Applied`.
        fail_next_sync(&store, std::io::ErrorKind::StorageFull);
        let outcome = store.apply(&holder(6), &[Op::put("k", "unsynced")], None);
        assert!(
            matches!(&outcome, Err(StoreError::FlushFailed { message }) if message.contains("syncing the data files failed")),
            "{outcome:?}"
        );
        // Fail-stop: nothing is answered any more, not even a read or the
        // marks that the unsynced write may have raised in memory, and a
        // later flush does not pretend to fix it.
        assert!(store.check_health().is_err());
        assert!(matches!(
            store.apply(&holder(6), &[Op::put("k2", "v")], None),
            Err(StoreError::FlushFailed { .. })
        ));
        assert!(matches!(
            store.marks(&lock),
            Err(StoreError::FlushFailed { .. })
        ));
        assert!(matches!(
            store.get(&lock, b"k", None),
            Err(StoreError::FlushFailed { .. })
        ));
        assert!(matches!(store.flush(), Err(StoreError::FlushFailed { .. })));
        drop(store);

        // After a restart the acknowledged state is there; the unsynced
        // write's outcome was unknown (it reached sled's log, so here it
        // survives), and the mark is the acknowledged one or the unknown
        // write's, never lower.
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        let read = store.get(&lock, b"k", None).unwrap().unwrap();
        let value = read.value.as_deref().unwrap();
        assert!(
            value == b"acknowledged" || value == b"unsynced",
            "{value:?}"
        );
        assert!(read.marks.exclusive == 5 || read.marks.exclusive == 6);
        assert!(matches!(
            store
                .apply(&holder(4), &[Op::put("k", "stale")], None)
                .unwrap(),
            Err(Refused::Stale { .. })
        ));
    }

    #[test]
    fn the_mutation_switch_acknowledges_without_syncing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        let sequencer = Sequencer::new(
            LockName::new("L").unwrap(),
            Mode::Exclusive,
            Generation::MIN,
        );
        store.skip_file_sync_unsafe_for_mutation_tests();
        // A sync that would fail is never attempted: the write is
        // acknowledged after sled's flush alone.
        fail_next_sync(&store, std::io::ErrorKind::Other);
        store
            .apply(&sequencer, &[Op::put("k", "unsynced")], None)
            .unwrap()
            .unwrap();
        assert!(store.check_health().is_ok());
        assert!(store.flush().is_ok());
    }

    #[test]
    fn a_failed_explicit_flush_fail_stops_too() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        fail_next_sync(&store, std::io::ErrorKind::Other);
        assert!(matches!(store.flush(), Err(StoreError::FlushFailed { .. })));
        assert!(store.check_health().is_err());
    }

    #[test]
    fn large_values_in_sled_blob_files_are_synced_before_the_acknowledgement() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        let lock = LockName::new("L").unwrap();
        let sequencer = Sequencer::new(lock.clone(), Mode::Exclusive, Generation::MIN);
        // sled keeps a page bigger than a quarter of its 512 KiB segment in
        // a blob file of its own, and writes blob files without any sync.
        let big = vec![7u8; 300 * 1024];
        store
            .apply(&sequencer, &[Op::put("big", big.clone())], None)
            .unwrap()
            .unwrap();
        let blobs = std::fs::read_dir(dir.path().join("blobs")).unwrap().count();
        assert!(
            blobs > 0,
            "sled wrote the value inline; the test needs a blob"
        );
        let files = store.inner.files.as_ref().unwrap().lock().unwrap();
        assert!(
            files.synced_blob_count() > 0,
            "the blob holding an acknowledged value was not synced"
        );
        drop(files);
        let read = store.get(&lock, b"big", None).unwrap().unwrap();
        assert_eq!(read.value.as_deref(), Some(&big[..]));
    }

    /// Polls `done` every few milliseconds for up to 30 s (the interval
    /// sync runs on its own thread; there is no event to wait for).
    fn eventually(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what} within 30 s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn buffered_every(period: Duration) -> StoreConfig {
        StoreConfig::default().with_durability(Durability::Buffered {
            flush_every: period,
        })
    }

    #[test]
    fn a_buffered_store_syncs_sleds_files_every_flush_every() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), buffered_every(Duration::from_millis(20))).unwrap();
        assert!(store.inner.files.is_some(), "the store syncs sled's files");
        let sequencer = Sequencer::new(
            LockName::new("L").unwrap(),
            Mode::Exclusive,
            Generation::MIN,
        );
        store
            .apply(&sequencer, &[Op::put("k", "v")], None)
            .unwrap()
            .unwrap();
        // Two more syncs: at least one began after the write was
        // acknowledged, so the write is on disk.
        let acknowledged_at = store.flush_stats().background_syncs;
        eventually("two interval syncs after the write", || {
            store.flush_stats().background_syncs >= acknowledged_at + 2
        });
        assert_eq!(store.flush_stats().flushes, 0, "no group-commit flushes");
        store.check_health().unwrap();
    }

    #[test]
    fn a_failed_interval_sync_fail_stops_a_buffered_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), buffered_every(Duration::from_millis(20))).unwrap();
        let lock = LockName::new("L").unwrap();
        let sequencer = Sequencer::new(lock.clone(), Mode::Exclusive, Generation::MIN);
        store
            .apply(&sequencer, &[Op::put("k", "v")], None)
            .unwrap()
            .unwrap();
        let acknowledged_at = store.flush_stats().background_syncs;
        eventually("two interval syncs after the write", || {
            store.flush_stats().background_syncs >= acknowledged_at + 2
        });

        // The disk dies: the next interval sync fails.
        store
            .inner
            .files
            .as_ref()
            .unwrap()
            .lock()
            .unwrap()
            .fail_next = Some(std::io::ErrorKind::Other);
        eventually("the store fail-stops", || store.check_health().is_err());
        let failed = |result: Result<(), StoreError>| matches!(result, Err(StoreError::FlushFailed { message }) if message.contains("injected"));
        assert!(failed(
            store
                .apply(&sequencer, &[Op::put("k", "w")], None)
                .map(|_| ())
        ));
        assert!(failed(store.get(&lock, b"k", None).map(|_| ())));
        assert!(failed(store.flush()));
        let syncs = store.flush_stats().background_syncs;
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            store.flush_stats().background_syncs,
            syncs,
            "no sync after the failure proves anything: the syncer stopped"
        );
        drop(store);

        // The write synced before the failure survives the restart.
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        let read = store.get(&lock, b"k", None).unwrap().unwrap();
        assert_eq!(read.value.as_deref(), Some(&b"v"[..]));
    }
}
