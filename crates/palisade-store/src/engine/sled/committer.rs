//! The committer: one thread that applies every write (and every read that
//! carries a sequencer, since it may raise a mark) in groups.
//!
//! # Why one thread, and why groups
//!
//! sled serialises every transaction process-wide (its concurrency control
//! is one global reader-writer lock; a transaction takes it for writing),
//! and `flush()` holds the same lock for reading while it writes and fsyncs
//! the log. Two consequences shape this module:
//!
//! - transactions never run in parallel anyway, so one thread running them
//!   loses nothing, and keeps async worker threads from blocking on that
//!   lock for the length of an fsync;
//! - a transaction cannot commit while a flush runs, so "commit, then hand
//!   the flush to someone else" does not overlap the two. What does work is
//!   to let requests queue up *while* the flush runs, and then apply the
//!   whole queue in one transaction followed by one flush.
//!
//! So the loop is: take every queued job (up to a bound), decide them in
//! order as one group, make the group durable once, and answer (group
//! commit).
//!
//! # How a group becomes durable
//!
//! In flushed mode the group is decided on sled's state with its own
//! earlier effects on top ([`Pending`]), its effects are appended to the
//! group log and the log is `fdatasync`ed, and only then is the group
//! answered and its effects applied to sled with plain inserts, readers
//! held off by the apply gate meanwhile (`group_log.rs`: why, and why a
//! crash anywhere in between loses nothing acknowledged and half-applies
//! nothing). sled's own flush and the sync of its files run only at
//! checkpoints, on a thread of their own (`checkpoint.rs`): for every
//! [`group_log::SEGMENT_BYTES`] of log, and when the store closes.
//! Everything a reader finds in sled is therefore durable already, and
//! plain reads wait at most for one group's inserts.
//!
//! In buffered mode the group is one sled transaction, not synced; the
//! interval sync (`background_sync.rs`) makes it durable later. A log
//! written but not synced could not keep a group whole there: sled writes
//! its buffers to disk on its own, possibly before the log's pages.
//!
//! Groups are answered in the order they were decided. A second thread
//! that syncs one group while the committer decides the next was tried
//! and measured against one thread, in one run
//! (`scripts/bench-sled-trait.sh`, 8 to 128 clients, in-process and through
//! HTTP; docs/benchmarks.md, "sled before and after the engine trait"): it
//! cost up to 20 µs of CPU and 2.6 context switches more per write and won
//! no throughput, since the requests that queue during one sync make the
//! next group large anyway.
//!
//! Each job keeps its own all-or-nothing semantics inside the shared
//! group: it reads what it needs (the lock's state, its request id's
//! record, the keys its ops touch) through the group's trees
//! ([`GroupTrees`]), which see the earlier jobs of the group, and the
//! shared planner
//! ([`plan::plan_write`]) decides on that snapshot; only an admitted job
//! writes, and a refused one writes nothing, not even its mark.
//!
//! # Why sled's flush is not enough for a checkpoint
//!
//! On Linux, sled 0.34's `flush()` writes its log with `pwrite` and then
//! calls `sync_file_range`, never `fsync` (sled issues #1452 and #1351).
//! `sync_file_range` starts and waits for the write-back of the data pages
//! only: it does not commit the file's metadata (the new length of a log
//! that grew, the blocks allocated for it) and does not flush the disk's
//! volatile write cache. Large values go to `blobs/` files that sled
//! writes without any sync at all. The fault suite's "disk died" scenario
//! (ext4 shut down without flushing its journal, the nearest thing to a
//! power cut these machines can make) lost every acknowledged write and
//! every mark that way. So after sled's flush a checkpoint syncs sled's
//! files itself ([`DurableFiles`]): `fdatasync` of the log file, `fsync`
//! of every new blob and of the directories that name new files. Only
//! then is the group log emptied, and a failed sync fail-stops the store
//! exactly like a failed flush.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use palisade_core::{LockName, Sequencer};
use sled::Transactional as _;
use sled::transaction::{
    ConflictableTransactionError, TransactionError, UnabortableTransactionError,
};

use super::checkpoint::Checkpoints;
use super::group_commit::{Health, Slot};
use super::group_log::{self, GroupLog};
use super::keys::{COMMIT_SEQ_KEY, LockKeys, decode_state};
use super::record;
use super::sled_error;
use super::syncer::Syncer;
use super::trees::{Effects, GroupTrees, InTransaction, Pending, Which};
use crate::plan::{self, Fingerprint, Prior, Remembered, Snapshot, WritePlan};
use crate::stored::LockState;
use crate::{Applied, Read, Refused, StoreError, WriteRequest};

/// The most jobs in one group.
const MAX_GROUP_JOBS: usize = 512;
/// The most ops in one group (a group always takes at least one job,
/// whatever its size).
const MAX_GROUP_OPS: usize = 8192;

/// A write request, as queued.
pub(crate) struct WriteJob {
    pub(crate) request: WriteRequest,
    pub(crate) keys: LockKeys,
    pub(crate) slot: Arc<Slot<Result<Applied, Refused>>>,
}

/// A read with a sequencer, as queued.
pub(crate) struct ReadJob {
    pub(crate) sequencer: Sequencer,
    pub(crate) keys: LockKeys,
    pub(crate) key: Vec<u8>,
    pub(crate) slot: Arc<Slot<Result<Read, Refused>>>,
}

pub(crate) enum Job {
    Write(WriteJob),
    Read(ReadJob),
}

impl Job {
    fn n_ops(&self) -> usize {
        match self {
            Job::Write(job) => job.request.ops.len().max(1),
            Job::Read(_) => 1,
        }
    }
}

/// A job's slot, kept aside so a panic cannot leave it unanswered.
enum AnySlot {
    Write(Arc<Slot<Result<Applied, Refused>>>),
    Read(Arc<Slot<Result<Read, Refused>>>),
}

impl AnySlot {
    fn of(job: &Job) -> AnySlot {
        match job {
            Job::Write(job) => AnySlot::Write(Arc::clone(&job.slot)),
            Job::Read(job) => AnySlot::Read(Arc::clone(&job.slot)),
        }
    }

    fn fill_error(&self, error: StoreError) {
        match self {
            AnySlot::Write(slot) => slot.fill(Err(error)),
            AnySlot::Read(slot) => slot.fill(Err(error)),
        }
    }
}

/// One job's decision inside its group.
enum Decision {
    Write(Result<Result<Applied, Refused>, StoreError>),
    Read(Result<Result<Read, Refused>, StoreError>),
}

/// sled's files, synced after every sled flush so that sled's state is
/// durable when a checkpoint removes the log it covers, or when the
/// interval sync of buffered mode says so (see the module docs for why
/// sled's own flush falls short on Linux).
///
/// Shared by everyone who makes sled durable ([`Syncer`]: the checkpoint
/// thread, the interval sync, the last checkpoint, an explicit
/// [`Store::flush`](crate::Store::flush)), behind a mutex: no two sync at
/// the same time, and the record of which blobs are already synced stays
/// whole.
#[derive(Debug)]
pub(crate) struct DurableFiles {
    /// sled's log file, `<dir>/db`: everything sled writes goes here except
    /// large values. Kept open so every sync is one `fdatasync`, which
    /// commits the pages *and* the metadata needed to read them back (the
    /// file's length) and flushes the disk's write cache.
    log: File,
    /// `<dir>/blobs`: one file per large value, written by sled with no
    /// sync at all. Every new one is fsynced, and then the directory, so
    /// that both its contents and its name survive.
    blobs_dir: PathBuf,
    /// The blobs already synced, with the length they had then. sled writes
    /// a blob once and never appends to it, but a blob still being written
    /// while the directory was listed would have a different length the
    /// next time, and is synced again.
    synced_blobs: HashMap<OsString, u64>,
    /// The fault suite's I-DUR mutation only
    /// ([`Store::skip_file_sync_unsafe_for_mutation_tests`](crate::Store::skip_file_sync_unsafe_for_mutation_tests)):
    /// every sync is a no-op, so a group is acknowledged after sled's flush
    /// alone, which does not survive a disk dying.
    skip_sync: bool,
    /// Test only: the next sync fails with this error, as a dying disk's
    /// would.
    #[cfg(test)]
    pub(crate) fail_next: Option<io::ErrorKind>,
}

impl DurableFiles {
    /// Opens sled's files in `dir` (after sled has opened the database
    /// there) and makes what sled created durable: the configuration, the
    /// log, the blob directory, and the entries naming them in `dir` and in
    /// `dir`'s parent.
    pub(crate) fn open(dir: &Path) -> io::Result<DurableFiles> {
        // fsync and fdatasync work on a descriptor opened for reading (on
        // Linux and every other Unix sled runs on): the log is never
        // written through this handle.
        let log = File::open(dir.join("db"))?;
        log.sync_all()?;
        match File::open(dir.join("conf")) {
            Ok(conf) => conf.sync_all()?,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        let mut files = DurableFiles {
            log,
            blobs_dir: dir.join("blobs"),
            synced_blobs: HashMap::new(),
            skip_sync: false,
            #[cfg(test)]
            fail_next: None,
        };
        files.sync_new_blobs()?;
        sync_directory(&files.blobs_dir).or_else(ignore_missing)?;
        sync_directory(dir)?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            // The entry naming `dir` itself, for a directory sled just
            // created. The parent may belong to someone else (a read-only
            // mount point's parent, say): that is worth a warning, not a
            // refusal to start.
            if let Err(error) = sync_directory(parent) {
                tracing::warn!(%error, parent = %parent.display(), "cannot fsync the data directory's parent");
            }
        }
        Ok(files)
    }

    /// Makes everything sled has written so far durable: `fdatasync` of the
    /// log, then every blob not synced yet and the blob directory.
    pub(crate) fn sync(&mut self) -> io::Result<()> {
        if self.skip_sync {
            return Ok(());
        }
        #[cfg(test)]
        if let Some(kind) = self.fail_next.take() {
            return Err(io::Error::new(kind, "injected sync failure"));
        }
        self.log.sync_data()?;
        self.sync_new_blobs()
    }

    /// From now on [`DurableFiles::sync`] does nothing: the I-DUR mutation
    /// of the fault suite, never anything else.
    pub(crate) fn skip_sync(&mut self) {
        self.skip_sync = true;
    }

    fn sync_new_blobs(&mut self) -> io::Result<()> {
        let entries = match std::fs::read_dir(&self.blobs_dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(error),
        };
        let mut present = HashMap::with_capacity(self.synced_blobs.len());
        let mut synced_any = false;
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            // sled removes blobs it no longer needs at any time: a blob gone
            // between the listing and the open needs no sync.
            let file = match File::open(entry.path()) {
                Ok(file) => file,
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error),
            };
            let length = file.metadata()?.len();
            if self.synced_blobs.get(&name) != Some(&length) {
                file.sync_all()?;
                synced_any = true;
            }
            present.insert(name, length);
        }
        if synced_any {
            sync_directory(&self.blobs_dir)?;
        }
        self.synced_blobs = present;
        Ok(())
    }

    /// How many blob files have been synced and still exist (for tests).
    #[cfg(test)]
    pub(crate) fn synced_blob_count(&self) -> usize {
        self.synced_blobs.len()
    }
}

/// fsync of a directory: makes the names of the files in it durable.
pub(crate) fn sync_directory(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn ignore_missing(error: io::Error) -> io::Result<()> {
    if error.kind() == io::ErrorKind::NotFound {
        Ok(())
    } else {
        Err(error)
    }
}

/// Flushes sled (its log write and `sync_file_range`) and then syncs
/// sled's files ([`DurableFiles`]). The error is the text a fail-stopped
/// store reports.
pub(crate) fn flush_durably(db: &sled::Db, files: &Mutex<DurableFiles>) -> Result<(), String> {
    db.flush().map_err(|error| error.to_string())?;
    let mut files = files.lock().unwrap_or_else(|e| e.into_inner());
    files
        .sync()
        .map_err(|error| format!("syncing the data files failed: {error}"))
}

/// Flushed mode's group log, with the thread that checkpoints its full
/// segments.
pub(crate) struct Logged {
    pub(crate) log: GroupLog,
    pub(crate) checkpoints: Checkpoints,
}

pub(crate) struct Committer {
    pub(crate) data: sled::Tree,
    pub(crate) meta: sled::Tree,
    pub(crate) idempotency_window: u64,
    pub(crate) health: Arc<Health>,
    pub(crate) stats: Arc<Mutex<crate::FlushStats>>,
    /// Makes sled durable, for the last checkpoint on close.
    pub(crate) syncer: Syncer,
    /// The group log and its checkpoint thread, in flushed mode; `None` in
    /// buffered mode, where each group is one sled transaction.
    pub(crate) log: Option<Logged>,
    /// Held for writing while a group's effects are applied to sled, and
    /// for reading by every read outside the committer: no reader sees
    /// half a group.
    pub(crate) apply_gate: Arc<RwLock<()>>,
    /// The last commit sequence number given out ([`last_commit_seq`]).
    pub(crate) last_seq: u64,
}

impl Committer {
    pub(crate) fn run(mut self, jobs: Receiver<Job>) {
        let mut pending: Option<Job> = None;
        loop {
            // Block for the first job, then take what else is queued.
            let first = match pending.take() {
                Some(job) => job,
                None => match jobs.recv() {
                    Ok(job) => job,
                    Err(_) => break,
                },
            };
            let mut n_ops = first.n_ops();
            let mut group = vec![first];
            while group.len() < MAX_GROUP_JOBS && n_ops < MAX_GROUP_OPS {
                match jobs.try_recv() {
                    Ok(job) => {
                        if n_ops + job.n_ops() > MAX_GROUP_OPS {
                            pending = Some(job);
                            break;
                        }
                        n_ops += job.n_ops();
                        group.push(job);
                    }
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            // A panic here would be a bug (in sled or in this module). Do
            // not leave callers waiting forever: answer every job of the
            // group that has no outcome yet, and fail-stop the store.
            let slots: Vec<AnySlot> = group.iter().map(AnySlot::of).collect();
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let committed = self.commit_group(group);
                self.answer_and_apply(committed);
                self.rotate_if_full();
            }));
            if outcome.is_err() {
                let message = "the store's committer failed unexpectedly".to_owned();
                tracing::error!("{message}; the store refuses further requests");
                self.health.fail(message.clone());
                for slot in slots {
                    slot.fill_error(StoreError::FlushFailed {
                        message: message.clone(),
                    });
                }
            }
        }
        self.finish();
    }

    /// Starts the next log segment once the current one is full, and hands
    /// the full one to the checkpoint thread.
    fn rotate_if_full(&mut self) {
        let Some(logged) = &mut self.log else { return };
        if logged.log.len() < group_log::SEGMENT_BYTES {
            return;
        }
        match logged.log.rotate() {
            Ok(finished) => logged.checkpoints.checkpoint(finished),
            Err(error) => {
                let message = format!("starting a group log segment failed: {error}");
                tracing::error!(error = %message, "the store refuses further requests");
                self.health.fail(message);
            }
        }
    }

    /// The store is closing: the checkpoint thread finishes what it was
    /// given, then one last checkpoint covers everything, and the log is
    /// left empty (an older version, which knows no log, may open the
    /// directory after a clean close).
    fn finish(&mut self) {
        let log = self.log.take().map(|logged| {
            drop(logged.checkpoints);
            logged.log
        });
        // A failure is logged and recorded by the syncer; nobody is left
        // to answer.
        let _ = self.syncer.sync("the last checkpoint", || match log {
            Some(log) => log
                .remove()
                .map_err(|error| format!("removing a group log segment failed: {error}")),
            None => Ok(()),
        });
    }

    /// Decides `group` and makes it durable: through the group log in
    /// flushed mode, in one sled transaction in buffered mode. Returns the
    /// group for [`Committer::answer_and_apply`], every job failed if the
    /// store is (or becomes) fail-stopped.
    fn commit_group(&mut self, group: Vec<Job>) -> Committed {
        if let Some(message) = self.health.failure() {
            return Committed::failed(group, &StoreError::FlushFailed { message });
        }
        let decided = if self.log.is_some() {
            self.decide_logged(&group)
        } else {
            self.decide_in_transaction(&group)
        };
        match decided {
            Ok((decisions, logged, last_seq)) => {
                self.last_seq = last_seq;
                Committed {
                    logged,
                    outcomes: group.into_iter().zip(decisions).collect(),
                }
            }
            Err(error) => {
                tracing::error!(%error, "group commit failed");
                Committed::failed(group, &error)
            }
        }
    }

    /// Every job's decision, read and written through `trees`, and the
    /// last commit sequence number given out, written with them.
    fn decide(
        &self,
        trees: &impl GroupTrees,
        group: &[Job],
    ) -> Result<(Vec<Decision>, u64), UnabortableTransactionError> {
        let mut seq = self.last_seq;
        let mut decisions = Vec::with_capacity(group.len());
        for job in group {
            decisions.push(match job {
                Job::Write(job) => Decision::Write(self.apply_write(trees, job, &mut seq)?),
                Job::Read(job) => Decision::Read(apply_read(trees, job)?),
            });
        }
        if seq != self.last_seq {
            trees.insert(Which::Meta, COMMIT_SEQ_KEY, &seq.to_be_bytes())?;
        }
        Ok((decisions, seq))
    }

    /// Flushed mode: decides the group on sled's state plus its own
    /// effects and logs and syncs the effects (see `group_log.rs`).
    /// Returns the decisions, the effects if a record was logged (to be
    /// applied once the group is answered), and the last commit sequence
    /// number given out.
    fn decide_logged(
        &mut self,
        group: &[Job],
    ) -> Result<(Vec<Decision>, Option<Effects>, u64), StoreError> {
        let pending = Pending::new(&self.data, &self.meta);
        let (decisions, last_seq) = match self.decide(&pending, group) {
            Ok(decided) => decided,
            Err(error) => {
                // sled failed to read (nothing was written): as after any
                // storage error, only a restart is trustworthy again.
                let message = format!("sled failed while a group was decided: {error}");
                self.health.fail(message.clone());
                return Err(StoreError::Storage {
                    engine: super::NAME,
                    message,
                });
            }
        };
        let effects = pending.into_effects();
        if effects.is_empty() {
            return Ok((decisions, None, last_seq));
        }
        let logged = self.log.as_mut().expect("a logged group has a log");
        if let Err(error) = logged.log.append(&effects) {
            let message = format!("syncing the group log failed: {error}");
            self.health.fail(message.clone());
            return Err(StoreError::FlushFailed { message });
        }
        Ok((decisions, Some(effects), last_seq))
    }

    /// Buffered mode: the group in one sled transaction.
    fn decide_in_transaction(
        &self,
        group: &[Job],
    ) -> Result<(Vec<Decision>, Option<Effects>, u64), StoreError> {
        let result = (&self.data, &self.meta).transaction(|(data, meta)| {
            let decided = self.decide(&InTransaction { data, meta }, group)?;
            Ok::<_, ConflictableTransactionError<()>>(decided)
        });
        match result {
            Ok((decisions, last_seq)) => Ok((decisions, None, last_seq)),
            Err(TransactionError::Storage(error)) => {
                // sled hit an I/O error in the middle of a transaction (a
                // full disk while writing a large value, say): its memory
                // may now hold what its log never got, and only a restart,
                // recovering from the log, is trustworthy again. Fail-stop,
                // as after a failed flush.
                self.health
                    .fail(format!("sled failed in a transaction: {error}"));
                Err(sled_error(error))
            }
            Err(TransactionError::Abort(())) => Err(StoreError::Corrupt {
                what: "a group transaction aborted".into(),
            }),
        }
    }

    fn apply_write(
        &self,
        trees: &impl GroupTrees,
        job: &WriteJob,
        seq: &mut u64,
    ) -> Result<Result<Result<Applied, Refused>, StoreError>, UnabortableTransactionError> {
        let (request, keys) = (&job.request, &job.keys);
        let lock = request.sequencer.lock();
        let Some(state) = read_state(trees, keys)? else {
            return Ok(Err(corrupt_state(lock)));
        };
        let mut snapshot = Snapshot {
            state,
            ..Snapshot::default()
        };
        if let Some(request_id) = &request.request_id {
            if let Some(raw) = trees.get(Which::Meta, &keys.request(request_id.as_str()))? {
                let Some(remembered) = record::decode(&raw) else {
                    return Ok(Err(StoreError::Corrupt {
                        what: format!(
                            "the idempotency record `{request_id}` of lock `{lock}` does not decode"
                        ),
                    }));
                };
                snapshot.remembered = Some(remembered);
            }
        }
        // A replay needs no data.
        if snapshot.remembered.is_none() {
            for (key, _) in plan::keys_to_read(&request.ops) {
                // sled's value, shared rather than copied.
                let prior = match trees.get(Which::Data, &keys.data(&key))? {
                    Some(value) => Prior::Present(Bytes::from_owner(value)),
                    None => Prior::Absent,
                };
                snapshot.data.insert(key, prior);
            }
        }
        let admitted = match plan::plan_write(request, &snapshot) {
            WritePlan::Replay(applied) => return Ok(Ok(Ok(applied))),
            WritePlan::Refuse(refused) => return Ok(Ok(Err(refused))),
            WritePlan::Apply(admitted) => admitted,
        };
        for (key, value) in &admitted.writes {
            match value {
                Some(value) => {
                    trees.insert(Which::Data, &keys.data(key), &value[..])?;
                }
                None => {
                    trees.remove(Which::Data, &keys.data(key))?;
                }
            }
        }
        let applied = Applied {
            results: admitted
                .known_results()
                .expect("the sled engine reads every key a write touches"),
            marks: admitted.marks,
            // Numbers start at 1; 0 stays free to mean "none".
            commit_seq: {
                *seq += 1;
                *seq
            },
            replayed: false,
        };
        if let (Some(request_id), Some(number)) = (&request.request_id, admitted.recorded_as) {
            // A ring of `window` slots: the id recorded `window` ids ago
            // leaves with its slot.
            let slot_key = keys.slot(number % self.idempotency_window);
            if let Some(evicted) =
                trees.replace(Which::Meta, &slot_key, request_id.as_str().as_bytes())?
            {
                if let Ok(evicted) = std::str::from_utf8(&evicted) {
                    trees.remove(Which::Meta, &keys.request(evicted))?;
                }
            }
            let remembered = Remembered {
                fingerprint: Fingerprint::Digest(request.fingerprint.clone()),
                applied: Applied {
                    replayed: true,
                    ..applied.clone()
                },
            };
            trees.insert(
                Which::Meta,
                &keys.request(request_id.as_str()),
                &record::encode(&remembered, number),
            )?;
        }
        if admitted.after != state {
            trees.insert(Which::Meta, keys.state(), &admitted.after.encode())?;
        }
        Ok(Ok(Ok(applied)))
    }
}

/// A group the committer has decided (and, in flushed mode, logged), on
/// its way to [`Committer::answer_and_apply`].
struct Committed {
    /// Flushed mode: the group's effects, logged and synced (counted as a
    /// flush in the store's statistics), to be applied to sled once the
    /// group is answered.
    logged: Option<Effects>,
    outcomes: Vec<(Job, Decision)>,
}

impl Committed {
    /// A group whose every job gets `error`.
    fn failed(group: Vec<Job>, error: &StoreError) -> Committed {
        let outcomes = group
            .into_iter()
            .map(|job| {
                let decision = match &job {
                    Job::Write(_) => Decision::Write(Err(error.clone())),
                    Job::Read(_) => Decision::Read(Err(error.clone())),
                };
                (job, decision)
            })
            .collect();
        Committed {
            logged: None,
            outcomes,
        }
    }
}

impl Committer {
    /// Answers `group` and then, in flushed mode, applies its logged
    /// effects to sled, readers held off by the apply gate from before the
    /// first answer to the end of the apply: the answered clients go on
    /// while sled is written, and none of them can read sled without its
    /// write. A failed apply fail-stops the store; the answers stand, since
    /// the group is durable in the log (a restart replays it).
    fn answer_and_apply(&self, group: Committed) {
        let Some(effects) = group.logged else {
            return self.answer(group.outcomes, false);
        };
        let _gate = self.apply_gate.write().unwrap_or_else(|e| e.into_inner());
        self.answer(group.outcomes, true);
        if let Err(error) = effects.apply(&self.data, &self.meta) {
            let message = format!("sled failed applying a logged group: {error}");
            tracing::error!(error = %message, "the store refuses further requests");
            self.health.fail(message);
        }
    }

    /// Delivers every outcome of `group`, in the order groups were
    /// decided; an error to all of them if the store is fail-stopped (by
    /// this group or by a flush on another thread).
    fn answer(&self, outcomes: Vec<(Job, Decision)>, logged: bool) {
        if let Some(message) = self.health.failure() {
            for (job, _) in outcomes {
                deliver_error(
                    job,
                    &StoreError::FlushFailed {
                        message: message.clone(),
                    },
                );
            }
            return;
        }
        if logged {
            let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
            stats.flushes += 1;
            stats.tickets += outcomes.len() as u64;
        }
        for (job, decision) in outcomes {
            match (job, decision) {
                (Job::Write(job), Decision::Write(outcome)) => job.slot.fill(outcome),
                (Job::Read(job), Decision::Read(outcome)) => job.slot.fill(outcome),
                (job, _) => deliver_error(
                    job,
                    &StoreError::Corrupt {
                        what: "a decision did not match its job".into(),
                    },
                ),
            }
        }
    }
}

type ReadDecision = Result<Result<Read, Refused>, StoreError>;

fn apply_read(
    trees: &impl GroupTrees,
    job: &ReadJob,
) -> Result<ReadDecision, UnabortableTransactionError> {
    let Some(before) = read_state(trees, &job.keys)? else {
        return Ok(Err(corrupt_state(job.sequencer.lock())));
    };
    let marks = match plan::fence(before.marks, &job.sequencer) {
        Ok(marks) => marks,
        Err(refused) => return Ok(Ok(Err(refused))),
    };
    let value = trees
        .get(Which::Data, &job.keys.data(&job.key))?
        .map(Bytes::from_owner);
    if marks != before.marks {
        let after = LockState { marks, ..before };
        trees.insert(Which::Meta, job.keys.state(), &after.encode())?;
    }
    Ok(Ok(Ok(Read { value, marks })))
}

/// The lock's state, or `None` if the stored record does not decode.
fn read_state(
    trees: &impl GroupTrees,
    keys: &LockKeys,
) -> Result<Option<LockState>, UnabortableTransactionError> {
    let raw = trees.get(Which::Meta, keys.state())?;
    Ok(decode_state(raw.as_deref()))
}

pub(crate) fn corrupt_state(lock: &LockName) -> StoreError {
    StoreError::Corrupt {
        what: format!("the state record of lock `{lock}` has the wrong length"),
    }
}

fn deliver_error(job: Job, error: &StoreError) {
    match job {
        Job::Write(job) => job.slot.fill(Err(error.clone())),
        Job::Read(job) => job.slot.fill(Err(error.clone())),
    }
}

/// The last commit sequence number given out in the engine's directory:
/// the one its groups recorded, or, in a directory written before they
/// recorded it, past every number sled's id generator gave out then (it
/// comes back from a restart beyond them).
pub(crate) fn last_commit_seq(db: &sled::Db, meta: &sled::Tree) -> Result<u64, StoreError> {
    let recorded = match meta.get(COMMIT_SEQ_KEY).map_err(sled_error)? {
        None => 0,
        Some(raw) => {
            let bytes: [u8; 8] = raw.as_ref().try_into().map_err(|_| StoreError::Corrupt {
                what: "the last commit sequence number has the wrong length".into(),
            })?;
            u64::from_be_bytes(bytes)
        }
    };
    Ok(recorded.max(db.generate_id().map_err(sled_error)?))
}
