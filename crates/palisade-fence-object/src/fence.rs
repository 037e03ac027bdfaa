//! [`ObjectFence`]: fenced put, delete and copy of objects in place, and
//! the per-lock fence object they all check.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use object_store::ObjectStoreExt as _;
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore, PutMode, PutPayload, UpdateVersion};
use palisade_core::marks::Marks;
use palisade_core::{Mode, Refused, Sequencer, SequencerSource};
use tokio::time::Instant;

use crate::outcome::{Budget, Outcome, RetryBudget, conditional_put, store_error};
use crate::record::{self, FenceRecord, meta};
use crate::{FenceError, FencedLog};

/// A fenced write that landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The generation it was written under.
    pub generation: u64,
    /// The object's version after it: 1 for the first fenced write of the
    /// object, one more for each write after it (a delete included). Each
    /// write was conditional on the version before it, so versions are the
    /// object's commit order.
    pub version: u64,
    /// The store's ETag of the new version, when it gave one.
    pub e_tag: Option<String>,
}

/// An object as [`ObjectFence::get`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Its bytes.
    pub bytes: Bytes,
    /// The generation that wrote it (`None`: written without the fence).
    pub generation: Option<u64>,
    /// Its version (0: written without the fence).
    pub version: u64,
}

/// Counters of the fence's decisions and retries, for a metrics endpoint.
#[derive(Debug, Default)]
pub struct FenceStats {
    /// Writes (puts, deletes, log appends, fences that raised a mark) that
    /// landed.
    pub landed: AtomicU64,
    /// Calls refused (a newer generation fenced or wrote).
    pub refused: AtomicU64,
    /// `412 Precondition Failed` answers: the object had moved on.
    pub precondition_failed: AtomicU64,
    /// `409 ConditionalRequestConflict` answers.
    pub conflicts: AtomicU64,
    /// Writes sent without an answer, resolved by reading back.
    pub in_doubt: AtomicU64,
}

impl FenceStats {
    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The version of an object this fence last wrote or read, so a steady
/// writer does not read an object before every write: the next write is
/// conditional on it, and a 412 says it moved on.
#[derive(Debug, Clone)]
struct Known {
    e_tag: String,
    version: u64,
    generation: u64,
    /// The lock whose holder wrote it (`None`: written without the fence).
    lock: Option<String>,
}

/// At most this many objects' versions (and locks' fence records) are
/// remembered; beyond, the memory is dropped and they are read again.
const MAX_KNOWN: usize = 4096;

/// How long a read of a lock's fence object answers this fence's later
/// calls, counted from when the read was sent; and how long marks must
/// have stood before any call relies on them to write: a call that raised
/// a lock's marks waits this long after its raise landed (then writes the
/// record again, *settled*), and a call that reads marks not yet settled
/// waits this long after its read was answered.
///
/// Together they keep `put`'s guarantee while a steady holder reads the
/// fence object about once per this time instead of once per call: a
/// fence that reused a read from before a raise did so at most this long
/// after sending it, so by the time any call of the newer generation goes
/// on, no call that checks from then on can be answered from before the
/// raise. (Measured by each process's monotonic clock; a pause only makes
/// a read older and a wait longer.) Part of the fence object's format, v2:
/// every writer of a store must follow it.
pub const MARKS_REUSE: Duration = Duration::from_millis(250);

/// A lock's fence record as this fence last read or wrote it, and when
/// that request was sent.
#[derive(Debug, Clone, Copy)]
struct Seen {
    record: FenceRecord,
    sent_at: Instant,
}

/// The fence over one object store (already scoped to its prefix).
///
/// Made by [`ObjectFence::open`], which runs the start-up probe first
/// (see [`crate::probe`]): a store that does not enforce conditional
/// writes is refused, never used unfenced.
///
/// Every write goes through three steps, in [`ObjectFence::put`]'s words:
/// the lock's fence object (the marks, checked with
/// [`Marks::admit`] and raised if this generation is new), the object's
/// current version, and a write conditional on that version (`If-Match`,
/// or `If-None-Match: *` for a new object).
#[derive(Debug)]
pub struct ObjectFence {
    pub(crate) store: Arc<dyn ObjectStore>,
    /// The store as people read it in messages (secrets masked).
    pub(crate) name: String,
    pub(crate) retry: RetryBudget,
    known: Mutex<HashMap<Path, Known>>,
    /// Fence records by their path, reused for [`MARKS_REUSE`].
    seen: Mutex<HashMap<Path, Seen>>,
    pub(crate) stats: Arc<FenceStats>,
}

/// What the object holds now, as far as the next write is concerned.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    pub(crate) e_tag: Option<String>,
    pub(crate) version: u64,
    pub(crate) generation: Option<u64>,
    pub(crate) write_id: Option<String>,
    pub(crate) deleted: bool,
    pub(crate) marks: Option<Marks>,
    pub(crate) lock: Option<String>,
}

impl ObjectFence {
    /// Probes `store` (see [`crate::probe`]) and returns the fence over
    /// it, or the probe's refusal. `name` names the store in every message
    /// and must carry no secret (use `palisade_core::redact`).
    ///
    /// `store` must not retry on its own: an in-doubt conditional write is
    /// resolved here by reading back (build S3 stores with
    /// [`S3Config`](crate::S3Config), which sets `max_retries = 0`).
    pub async fn open(
        store: Arc<dyn ObjectStore>,
        name: impl Into<String>,
    ) -> Result<ObjectFence, FenceError> {
        let fence = ObjectFence::without_probe_unsafe_for_mutation_tests(store, name);
        crate::probe::probe(&fence).await?;
        Ok(fence)
    }

    /// The fence without the start-up probe: for the mutation check, which
    /// shows what a store that ignores conditions lets through. Never use
    /// it otherwise: over such a store nothing is fenced.
    #[doc(hidden)]
    pub fn without_probe_unsafe_for_mutation_tests(
        store: Arc<dyn ObjectStore>,
        name: impl Into<String>,
    ) -> ObjectFence {
        ObjectFence {
            store,
            name: name.into(),
            retry: RetryBudget::default(),
            known: Mutex::new(HashMap::new()),
            seen: Mutex::new(HashMap::new()),
            stats: Arc::default(),
        }
    }

    /// Sets how long one call keeps trying, and its pauses.
    pub fn with_retry(mut self, retry: RetryBudget) -> Self {
        self.retry = retry;
        self
    }

    /// The store's name, as messages show it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The counters of this fence's decisions.
    pub fn stats(&self) -> &FenceStats {
        &self.stats
    }

    /// The store underneath (for reads the fence does not wrap).
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// A fenced log under `prefix` (see [`FencedLog`]).
    pub fn log(self: &Arc<Self>, prefix: Path) -> Result<FencedLog, FenceError> {
        FencedLog::new(Arc::clone(self), prefix)
    }

    /// Fences the lock at the store: raises its fence object's marks to
    /// the sequencer's generation, by [`Marks::admit`], and when it raised
    /// them waits [`MARKS_REUSE`] before it returns. A new holder calls
    /// this right after acquiring, so every older holder's call that
    /// checks after it returned is refused, whatever object it writes.
    /// Returns the marks after it, or [`Refused::Stale`] if a newer
    /// generation got there first.
    pub async fn fence(
        &self,
        source: &impl SequencerSource,
    ) -> Result<Result<Marks, Refused>, FenceError> {
        let sequencer = source.sequencer_now()?.into_owned();
        let mut budget = Budget::start(&self.retry);
        self.admit_lock(&sequencer, &mut budget).await
    }

    /// Writes `bytes` to `path` if no holder of a newer generation of the
    /// sequencer's lock has fenced the lock or written this object.
    ///
    /// 1. Reads the lock's fence object (or reuses this fence's read of it
    ///    sent less than [`MARKS_REUSE`] ago) and applies [`Marks::admit`];
    ///    raises the marks if this generation is new (a conditional write
    ///    of the fence object, on a fresh read), then waits
    ///    [`MARKS_REUSE`]. Refused if a newer holder fenced or wrote
    ///    anything under the lock.
    /// 2. Takes the object's current version (remembered from this
    ///    fence's last write of it, or read). Refused if a newer generation
    ///    wrote it.
    /// 3. Writes with `If-Match` on that version's ETag (`If-None-Match: *`
    ///    if there is none), stamping the lock, generation, version and a
    ///    write id into the object's metadata. A 412 (the object moved on)
    ///    goes back to step 1; a 409 pauses first; a write without an
    ///    answer is read back (its write id) before anything is sent again.
    ///
    /// What is and is not guaranteed between step 1 and the write reaching
    /// the store is in `docs/object-storage.md`.
    pub async fn put(
        &self,
        source: &impl SequencerSource,
        path: &Path,
        bytes: impl Into<Bytes>,
    ) -> Result<Result<Written, Refused>, FenceError> {
        self.write(source, path, Some(bytes.into())).await
    }

    /// Deletes `path`, fenced like [`ObjectFence::put`]: a tombstone (an
    /// empty object whose metadata says deleted, with the generation)
    /// written under the same conditions. A real delete would let an older
    /// holder's `If-None-Match: *` create the object again; the tombstone
    /// keeps the generation that deleted it. [`ObjectFence::get`] reads a
    /// tombstone as absent.
    pub async fn delete(
        &self,
        source: &impl SequencerSource,
        path: &Path,
    ) -> Result<Result<Written, Refused>, FenceError> {
        self.write(source, path, None).await
    }

    /// Copies `from` to `to`, the write fenced like [`ObjectFence::put`]:
    /// a read of `from` and a fenced put of its bytes. (S3's server-side
    /// copy cannot carry the destination's condition through
    /// `object_store`.) [`FenceError::NotFound`] if `from` is absent.
    pub async fn copy(
        &self,
        source: &impl SequencerSource,
        from: &Path,
        to: &Path,
    ) -> Result<Result<Written, Refused>, FenceError> {
        let Some(object) = self.get(from).await? else {
            return Err(FenceError::NotFound {
                path: from.to_string(),
            });
        };
        self.put(source, to, object.bytes).await
    }

    /// Reads `path`: `None` if absent or deleted through the fence.
    pub async fn get(&self, path: &Path) -> Result<Option<Object>, FenceError> {
        let result = match self.store.get(path).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(error) => return Err(store_error(&self.name, error)),
        };
        let head = Head::from_attributes(&result.attributes, result.meta.e_tag.clone());
        if head.deleted {
            return Ok(None);
        }
        let bytes = result
            .bytes()
            .await
            .map_err(|error| store_error(&self.name, error))?;
        Ok(Some(Object {
            bytes,
            generation: head.generation,
            version: head.version,
        }))
    }

    async fn write(
        &self,
        source: &impl SequencerSource,
        path: &Path,
        body: Option<Bytes>,
    ) -> Result<Result<Written, Refused>, FenceError> {
        record::check_user_path(path)?;
        let sequencer = source.sequencer_now()?.into_owned();
        if sequencer.mode() != Mode::Exclusive {
            FenceStats::count(&self.stats.refused);
            return Ok(Err(Refused::SharedOnWrite {
                lock: sequencer.lock().clone(),
                presented: sequencer.generation(),
            }));
        }
        let generation = sequencer.generation().get();
        let write_id = record::new_write_id();
        let mut budget = Budget::start(&self.retry);
        // Set once a write went without an answer: from then on, every try
        // first reads the object back for this write id.
        let mut in_doubt: Option<String> = None;
        loop {
            if in_doubt.is_some() {
                match self.head(path).await {
                    Ok(Some(head)) if head.write_id.as_deref() == Some(write_id.as_str()) => {
                        tracing::info!(target: "palisade_fence_object", lock = %sequencer.lock(), generation, %path, version = head.version, "in-doubt write found landed");
                        self.remember(path, &head, generation);
                        FenceStats::count(&self.stats.landed);
                        return Ok(Ok(Written {
                            generation,
                            version: head.version,
                            e_tag: head.e_tag,
                        }));
                    }
                    Ok(_) => {}
                    Err(error) => {
                        if budget.pause().await {
                            continue;
                        }
                        return Err(self.in_doubt_error(path, &write_id, error));
                    }
                }
            }
            let marks = match self.admit_lock(&sequencer, &mut budget).await {
                Ok(Ok(marks)) => marks,
                Ok(Err(refused)) => return Ok(Err(refused)),
                Err(error) => return Err(self.or_in_doubt(error, &in_doubt, path, &write_id)),
            };
            let current = match self.current(path).await {
                Ok(current) => current,
                Err(error) => {
                    if budget.pause().await {
                        continue;
                    }
                    return Err(self.or_in_doubt(error, &in_doubt, path, &write_id));
                }
            };
            // Generations of different locks do not compare: an object is
            // guarded by one lock.
            if let Some(other) = current.as_ref().and_then(|c| c.lock.as_deref())
                && other != sequencer.lock().as_str()
            {
                let requested =
                    palisade_core::LockName::new(other).map_err(|error| FenceError::Corrupt {
                        path: path.to_string(),
                        detail: error.to_string(),
                    })?;
                FenceStats::count(&self.stats.refused);
                return Ok(Err(Refused::LockMismatch {
                    requested,
                    presented: sequencer.lock().clone(),
                }));
            }
            if let Some(written_by) = current.as_ref().map(|c| c.generation)
                && written_by > generation
            {
                return Ok(Err(self.refuse(
                    &sequencer,
                    Marks {
                        exclusive: marks.exclusive.max(written_by),
                        shared: marks.shared,
                    },
                    path,
                )));
            }
            let (mode, version) = match &current {
                Some(Known { e_tag, version, .. }) => (if_match(e_tag.clone()), version + 1),
                None => (PutMode::Create, 1),
            };
            let mut pairs = vec![
                (meta::LOCK, sequencer.lock().to_string()),
                (meta::GENERATION, generation.to_string()),
                (meta::VERSION, version.to_string()),
                (meta::WRITE, write_id.clone()),
            ];
            if body.is_none() {
                pairs.push((meta::DELETED, "1".to_owned()));
            }
            let payload = PutPayload::from(body.clone().unwrap_or_default());
            match conditional_put(
                self.store.as_ref(),
                path,
                payload,
                mode,
                record::attributes(pairs),
            )
            .await
            {
                Outcome::Landed(result) => {
                    FenceStats::count(&self.stats.landed);
                    tracing::debug!(target: "palisade_fence_object", lock = %sequencer.lock(), generation, %path, version, "fenced write landed");
                    if let Some(e_tag) = &result.e_tag {
                        self.remember_known(
                            path,
                            Known {
                                e_tag: e_tag.clone(),
                                version,
                                generation,
                                lock: Some(sequencer.lock().to_string()),
                            },
                        );
                    }
                    return Ok(Ok(Written {
                        generation,
                        version,
                        e_tag: result.e_tag,
                    }));
                }
                Outcome::ConditionFailed => {
                    FenceStats::count(&self.stats.precondition_failed);
                    self.forget(path);
                    if budget.expired() {
                        return Err(self.or_in_doubt(
                            store_error(
                                &self.name,
                                "the object kept changing until the retry budget ran out",
                            ),
                            &in_doubt,
                            path,
                            &write_id,
                        ));
                    }
                }
                Outcome::Conflict => {
                    FenceStats::count(&self.stats.conflicts);
                    self.forget(path);
                    if !budget.pause().await {
                        return Err(self.or_in_doubt(
                            store_error(&self.name, "409 conflicts until the retry budget ran out"),
                            &in_doubt,
                            path,
                            &write_id,
                        ));
                    }
                }
                Outcome::InDoubt(message) => {
                    FenceStats::count(&self.stats.in_doubt);
                    tracing::warn!(target: "palisade_fence_object", lock = %sequencer.lock(), generation, %path, %message, "write in doubt; reading back");
                    self.forget(path);
                    in_doubt = Some(message.clone());
                    if !budget.pause().await {
                        return Err(self.in_doubt_error(path, &write_id, message));
                    }
                }
                Outcome::Fatal(error) => {
                    return Err(self.or_in_doubt(
                        store_error(&self.name, error),
                        &in_doubt,
                        path,
                        &write_id,
                    ));
                }
            }
        }
    }

    /// The lock's marks after admitting `sequencer`: reads its fence
    /// object (or reuses a read of settled marks sent less than
    /// [`MARKS_REUSE`] ago), applies [`Marks::admit`], and writes the
    /// raised marks conditionally (a 412 means another holder wrote it
    /// first: read again). Marks raised, or read unsettled, are relied on
    /// only after [`MARKS_REUSE`], then settled.
    pub(crate) async fn admit_lock(
        &self,
        sequencer: &Sequencer,
        budget: &mut Budget,
    ) -> Result<Result<Marks, Refused>, FenceError> {
        let path = record::fence_path(sequencer.lock());
        if let Some(record) = self.recently_seen(&path) {
            match record.marks.admit(sequencer.mode(), sequencer.generation()) {
                // Marks only grow: a refusal by an older read stands.
                None => return Ok(Err(self.refuse(sequencer, record.marks, &path))),
                Some(after) if after == record.marks && record.settled => return Ok(Ok(after)),
                // A raise, or marks not yet settled: read the object itself.
                Some(_) => {}
            }
        }
        loop {
            let sent_at = Instant::now();
            let found = self.read_fence(&path, sequencer).await;
            if let Ok((record, Some(_))) = &found {
                self.saw(&path, *record, sent_at);
            }
            let (record, e_tag) = match found {
                Ok(found) => found,
                Err(error) => {
                    if budget.pause().await {
                        continue;
                    }
                    return Err(error);
                }
            };
            let Some(after) = record.marks.admit(sequencer.mode(), sequencer.generation()) else {
                return Ok(Err(self.refuse(sequencer, record.marks, &path)));
            };
            if after == record.marks {
                if !record.settled
                    && let Some(e_tag) = e_tag
                {
                    // Raised less than MARKS_REUSE ago, perhaps (by a
                    // holder whose answer was lost, or another process of
                    // this generation): the raise had landed by the time
                    // this read was answered.
                    tokio::time::sleep(MARKS_REUSE).await;
                    self.settle(&path, sequencer, record, e_tag).await;
                }
                return Ok(Ok(after));
            }
            let next = FenceRecord {
                marks: after,
                version: record.version + 1,
                settled: false,
            };
            let mode = e_tag.map_or(PutMode::Create, if_match);
            let payload = PutPayload::from(next.encode(sequencer.lock()));
            let sent_at = Instant::now();
            let outcome = conditional_put(
                self.store.as_ref(),
                &path,
                payload,
                mode,
                Default::default(),
            )
            .await;
            match outcome {
                Outcome::Landed(result) => {
                    FenceStats::count(&self.stats.landed);
                    self.saw(&path, next, sent_at);
                    tracing::info!(target: "palisade_fence_object", lock = %sequencer.lock(), generation = sequencer.generation().get(), marks = %after, "lock fenced at the store");
                    // Any fence may still answer from a read sent before
                    // this raise, for up to MARKS_REUSE: once that has
                    // passed, every call that checks sees the raise.
                    tokio::time::sleep(MARKS_REUSE).await;
                    if let Some(e_tag) = result.e_tag {
                        self.settle(&path, sequencer, next, e_tag).await;
                    }
                    return Ok(Ok(after));
                }
                Outcome::ConditionFailed => {
                    FenceStats::count(&self.stats.precondition_failed);
                    if budget.expired() {
                        return Err(store_error(
                            &self.name,
                            format!(
                                "the fence object `{path}` kept changing until the retry budget ran out"
                            ),
                        ));
                    }
                }
                // Reading again resolves both: the marks are there or not.
                Outcome::Conflict | Outcome::InDoubt(_) => {
                    FenceStats::count(if matches!(outcome, Outcome::Conflict) {
                        &self.stats.conflicts
                    } else {
                        &self.stats.in_doubt
                    });
                    if !budget.pause().await {
                        return Err(store_error(
                            &self.name,
                            format!(
                                "the fence object `{path}` could not be written in the retry budget"
                            ),
                        ));
                    }
                }
                Outcome::Fatal(error) => return Err(store_error(&self.name, error)),
            }
        }
    }

    /// Writes `raised` again as settled, once [`MARKS_REUSE`] has passed
    /// since it landed, so readers rely on it at once. Conditional on the
    /// version raised: anything written since stands. Best effort: if it
    /// fails, each reader waits once by itself.
    async fn settle(&self, path: &Path, sequencer: &Sequencer, raised: FenceRecord, e_tag: String) {
        let settled = FenceRecord {
            version: raised.version + 1,
            settled: true,
            ..raised
        };
        let payload = PutPayload::from(settled.encode(sequencer.lock()));
        let sent_at = Instant::now();
        let mode = if_match(e_tag);
        match conditional_put(self.store.as_ref(), path, payload, mode, Default::default()).await {
            Outcome::Landed(_) => self.saw(path, settled, sent_at),
            outcome => {
                tracing::debug!(target: "palisade_fence_object", lock = %sequencer.lock(), ?outcome, "the raise was not marked settled; readers wait once each")
            }
        }
    }

    /// A fence record read or written by a request sent less than
    /// [`MARKS_REUSE`] ago.
    fn recently_seen(&self, path: &Path) -> Option<FenceRecord> {
        let seen = self.seen.lock().expect("not poisoned");
        let seen = seen.get(path)?;
        (seen.sent_at.elapsed() < MARKS_REUSE).then_some(seen.record)
    }

    /// Remembers a fence record, unless one from a later request is there.
    fn saw(&self, path: &Path, record: FenceRecord, sent_at: Instant) {
        let mut seen = self.seen.lock().expect("not poisoned");
        if seen.get(path).is_some_and(|known| known.sent_at > sent_at) {
            return;
        }
        if seen.len() >= MAX_KNOWN {
            seen.clear();
        }
        seen.insert(path.clone(), Seen { record, sent_at });
    }

    /// The lock's fence record and its ETag (`None`: no fence object yet).
    async fn read_fence(
        &self,
        path: &Path,
        sequencer: &Sequencer,
    ) -> Result<(FenceRecord, Option<String>), FenceError> {
        let result = match self.store.get(path).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => {
                return Ok((FenceRecord::default(), None));
            }
            Err(error) => return Err(store_error(&self.name, error)),
        };
        let e_tag = result.meta.e_tag.clone();
        let bytes = result
            .bytes()
            .await
            .map_err(|error| store_error(&self.name, error))?;
        let record = FenceRecord::decode(path, sequencer.lock(), &bytes)?;
        if e_tag.is_none() {
            return Err(FenceError::Unsupported {
                store: self.name.clone(),
                detail: "it gives no ETag, which conditional writes need".into(),
            });
        }
        Ok((record, e_tag))
    }

    /// The object's current version: remembered, or read.
    async fn current(&self, path: &Path) -> Result<Option<Known>, FenceError> {
        if let Some(known) = self.known.lock().expect("not poisoned").get(path) {
            return Ok(Some(known.clone()));
        }
        Ok(self.head(path).await?.and_then(|head| {
            Some(Known {
                e_tag: head.e_tag?,
                version: head.version,
                generation: head.generation.unwrap_or(0),
                lock: head.lock,
            })
        }))
    }

    /// Reads an object's metadata (`None`: absent).
    pub(crate) async fn head(&self, path: &Path) -> Result<Option<Head>, FenceError> {
        let options = GetOptions {
            head: true,
            ..GetOptions::default()
        };
        match self.store.get_opts(path, options).await {
            Ok(result) => Ok(Some(Head::from_attributes(
                &result.attributes,
                result.meta.e_tag.clone(),
            ))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(error) => Err(store_error(&self.name, error)),
        }
    }

    /// A stale refusal, counted and traced; `at` names the object or slot.
    pub(crate) fn refuse(
        &self,
        sequencer: &Sequencer,
        marks: Marks,
        at: &dyn std::fmt::Display,
    ) -> Refused {
        FenceStats::count(&self.stats.refused);
        tracing::info!(target: "palisade_fence_object", lock = %sequencer.lock(), mode = %sequencer.mode(), generation = sequencer.generation().get(), %marks, %at, "stale write refused");
        Refused::stale(sequencer, marks)
    }

    fn remember(&self, path: &Path, head: &Head, generation: u64) {
        if let Some(e_tag) = &head.e_tag {
            self.remember_known(
                path,
                Known {
                    e_tag: e_tag.clone(),
                    version: head.version,
                    generation,
                    lock: head.lock.clone(),
                },
            );
        }
    }

    fn remember_known(&self, path: &Path, known: Known) {
        let mut map = self.known.lock().expect("not poisoned");
        if map.len() >= MAX_KNOWN {
            map.clear();
        }
        map.insert(path.clone(), known);
    }

    fn forget(&self, path: &Path) {
        self.known.lock().expect("not poisoned").remove(path);
    }

    fn in_doubt_error(
        &self,
        path: &Path,
        write_id: &str,
        message: impl std::fmt::Display,
    ) -> FenceError {
        FenceError::InDoubt {
            store: self.name.clone(),
            path: path.to_string(),
            write_id: write_id.to_owned(),
            message: message.to_string(),
        }
    }

    /// `error`, or [`FenceError::InDoubt`] if a write of this call went
    /// without an answer (the caller must not take "failed" for "did not
    /// land").
    fn or_in_doubt(
        &self,
        error: FenceError,
        in_doubt: &Option<String>,
        path: &Path,
        write_id: &str,
    ) -> FenceError {
        match in_doubt {
            Some(_) => self.in_doubt_error(path, write_id, error),
            None => error,
        }
    }
}

/// A write conditional on the version with `e_tag` (`If-Match`).
fn if_match(e_tag: String) -> PutMode {
    PutMode::Update(UpdateVersion {
        e_tag: Some(e_tag),
        version: None,
    })
}

impl Head {
    pub(crate) fn from_attributes(
        attributes: &object_store::Attributes,
        e_tag: Option<String>,
    ) -> Head {
        let number = |name| record::metadata(attributes, name).and_then(|v| v.parse::<u64>().ok());
        Head {
            e_tag,
            version: number(meta::VERSION).unwrap_or(0),
            generation: number(meta::GENERATION),
            write_id: record::metadata(attributes, meta::WRITE).map(str::to_owned),
            deleted: record::metadata(attributes, meta::DELETED) == Some("1"),
            marks: record::metadata(attributes, meta::MARKS).and_then(record::decode_marks),
            lock: record::metadata(attributes, meta::LOCK).map(str::to_owned),
        }
    }
}
