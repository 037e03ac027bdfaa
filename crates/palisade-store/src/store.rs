//! The fenced store: its public face over an [`Engine`]. Validation that
//! is the same for every engine and the tracing of fencing decisions live
//! here; the fenced step itself is the engine's.

use std::path::Path;
use std::sync::Arc;

use palisade_core::{LockName, Mode, RaiseCap, Sequencer};

use crate::engine::sled::SledEngine;
use crate::{
    Applied, Durability, Engine, EngineFuture, EngineInfo, FlushStats, LimitKind, Limits, Marks,
    Op, Pending, RaiseLimit, Read, ReadRequest, Refused, RequestId, StoreConfig, StoreError,
    StoredRecord, WriteRequest,
};

/// The fenced store. Cheap to clone (an `Arc` inside); every clone is the
/// same store.
///
/// The store checks what is the same for every engine (sizes, empty keys,
/// a shared sequencer on a write, a read whose sequencer names another
/// lock, idempotency keys), traces every fencing decision, and hands the
/// fenced step to its [`Engine`]. [`Store::open`] opens the sled engine,
/// [`Store::with_engine`] takes any engine.
///
/// The `submit*` methods hand a request to the engine and return a
/// [`Pending`] to `.await`; [`Store::apply`], [`Store::get`] and
/// [`Store::marks`] are blocking conveniences over them. With sled,
/// requests are applied by one background thread, the committer, in
/// groups: one sled transaction and (in [`Durability::Flushed`] mode) one
/// flush per group, and a `submit*` call never blocks on sled's locks.
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
    engine: Arc<dyn Engine>,
    /// The same engine when it is sled, for what only sled has (group
    /// commit counters, the fault suite's mutation switch).
    sled: Option<Arc<SledEngine>>,
    /// The configuration, with the limits the store enforces: the tighter
    /// of the configured ones and the engine's own.
    config: StoreConfig,
}

impl Store {
    /// Opens (or creates) the store in directory `path`, on the sled engine.
    ///
    /// sled locks the directory. When a store in this same process closed
    /// it a moment ago, sled's IO threads may hold that lock for a few more
    /// milliseconds after the last handle is dropped; `open` retries such a
    /// lock error for up to two seconds before giving up.
    pub fn open(path: impl AsRef<Path>, config: StoreConfig) -> Result<Store, StoreError> {
        let sled = Arc::new(SledEngine::open(path.as_ref(), &config)?);
        Ok(Store::build(
            Arc::clone(&sled) as Arc<dyn Engine>,
            Some(sled),
            config,
        ))
    }

    /// A store over any engine. The limits enforced are the tighter of
    /// `config.limits` and [`Engine::limits`]; `config.durability` and
    /// `config.cache_capacity_bytes` are the sled engine's settings and
    /// mean nothing to another engine, which acknowledges only what it has
    /// made durable (obligation 4 of [`Engine`]): [`Store::durability`] is
    /// the engine's ([`Engine::durability`]). (The resource server refuses
    /// sled's settings with another engine.)
    pub fn with_engine(engine: Arc<dyn Engine>, config: StoreConfig) -> Store {
        Store::build(engine, None, config)
    }

    fn build(engine: Arc<dyn Engine>, sled: Option<Arc<SledEngine>>, config: StoreConfig) -> Store {
        let theirs = engine.limits();
        let limits = Limits {
            max_key_bytes: config.limits.max_key_bytes.min(theirs.max_key_bytes),
            max_value_bytes: config.limits.max_value_bytes.min(theirs.max_value_bytes),
            max_batch_ops: config.limits.max_batch_ops.min(theirs.max_batch_ops),
        };
        let config = StoreConfig {
            limits,
            idempotency_window: config.idempotency_window.max(1),
            durability: engine.durability(),
            ..config
        };
        Store {
            inner: Arc::new(Inner {
                engine,
                sled,
                config,
            }),
        }
    }

    /// The configuration the store was opened with, with the limits it
    /// enforces (the tighter of the configured ones and the engine's).
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// What an acknowledgement means ([`Engine::durability`]): the sled
    /// engine's setting, [`Durability::Flushed`] for every other engine.
    pub fn durability(&self) -> Durability {
        self.inner.config.durability
    }

    /// The engine's name, durability and location.
    pub fn engine_info(&self) -> EngineInfo {
        self.inner.engine.info()
    }

    /// Group-commit counters of the sled engine (`flushes` and `tickets` in
    /// [`Durability::Flushed`] mode, `background_syncs` in
    /// [`Durability::Buffered`] mode); all zero for other engines.
    pub fn flush_stats(&self) -> FlushStats {
        self.inner
            .sled
            .as_ref()
            .map(|sled| sled.flush_stats())
            .unwrap_or_default()
    }

    /// `Ok` while the engine can serve requests (for sled: unless a flush
    /// has failed and the store is fail-stopped). Blocking; see
    /// [`Store::health`] for async code.
    pub fn check_health(&self) -> Result<(), StoreError> {
        futures::executor::block_on(self.inner.engine.health())
    }

    /// Like [`Store::check_health`], to await.
    pub fn health(&self) -> Pending<()> {
        Pending::new(self.inner.engine.health())
    }

    /// Makes everything acknowledged so far durable now (blocking), e.g. at
    /// shutdown. For sled: sled's flush, then a sync of sled's files.
    ///
    /// For sled, a failure here fail-stops the store like a failed flush of
    /// the committer, and a fail-stopped store refuses to flush: after a
    /// failed fsync the kernel may have dropped the pages it could not
    /// write, so a later flush that succeeds proves nothing about them.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.close().wait()
    }

    /// Makes everything acknowledged so far durable and releases what the
    /// engine can release, at shutdown ([`Engine::close`]). The sled engine
    /// flushes on the thread that polls this (keep it off async worker
    /// threads) and keeps serving afterwards.
    pub fn close(&self) -> Pending<()> {
        Pending::new(self.inner.engine.close())
    }

    /// Every record the engine holds, sorted ([`Engine::dump`]): for tests
    /// that check that a refusal changed nothing at all.
    pub fn dump(&self) -> Pending<Vec<StoredRecord>> {
        Pending::new(self.inner.engine.dump())
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
    /// that is not on sled, and in `Buffered` mode it only affects the
    /// interval sync.
    #[doc(hidden)]
    pub fn skip_file_sync_unsafe_for_mutation_tests(&self) {
        if let Some(sled) = &self.inner.sled {
            sled.skip_file_sync();
        }
    }

    /// The sled engine, for this crate's tests of it.
    #[cfg(test)]
    pub(crate) fn sled(&self) -> &SledEngine {
        self.inner.sled.as_deref().expect("a store on sled")
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
            let values = match op {
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

    /// Applies `ops` under `sequencer`, blocking until the outcome is
    /// acknowledged (see [`Durability`]). The lock is `sequencer.lock()`.
    ///
    /// In one atomic step of the engine: if `request_id` was seen on this
    /// lock, the remembered outcome is returned and nothing is applied;
    /// otherwise the fencing rule is checked ([`Marks::admit`]), every op is
    /// applied in order, the mark is raised and the request id is recorded.
    /// Any refusal (stale generation, shared sequencer, failed
    /// compare-and-swap) leaves everything as it was, the mark included.
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
    /// async code: `store.submit(..)?.await`. A request that is invalid
    /// whatever the engine (too large, an empty key) is the outer `Err`.
    pub fn submit(
        &self,
        sequencer: &Sequencer,
        ops: &[Op],
        request_id: Option<&RequestId>,
    ) -> Result<Pending<Result<Applied, Refused>>, StoreError> {
        self.submit_capped(sequencer, ops, request_id, None)
    }

    /// Like [`Store::submit`], refusing ([`Refused::RaiseTooLarge`]) a
    /// generation further above the lock's marks than `cap` allows, judged
    /// against this machine's clock now. The engine checks the cap against
    /// the marks of the write's own atomic step, so a capped write costs
    /// no read of the marks first.
    pub fn submit_capped(
        &self,
        sequencer: &Sequencer,
        ops: &[Op],
        request_id: Option<&RequestId>,
        cap: Option<RaiseCap>,
    ) -> Result<Pending<Result<Applied, Refused>>, StoreError> {
        self.check_ops(ops)?;
        if sequencer.mode() != Mode::Exclusive {
            let refused = Refused::SharedOnWrite {
                lock: sequencer.lock().clone(),
                presented: sequencer.generation(),
            };
            trace_refusal(sequencer, &refused);
            return Ok(Pending::new(Box::pin(std::future::ready(Ok(Err(refused))))));
        }
        let n_ops = ops.len();
        let mut request = WriteRequest::new(sequencer.clone(), ops.to_vec(), request_id.cloned());
        request.raise_limit = cap.map(RaiseLimit::now);
        let outcome = self.inner.engine.write(request);
        Ok(traced(sequencer, outcome, move |sequencer, applied| {
            tracing::debug!(
                target: "palisade_store::fence",
                lock = %sequencer.lock(),
                mode = %sequencer.mode(),
                generation = sequencer.generation().get(),
                h_excl = applied.marks.exclusive,
                h_shared = applied.marks.shared,
                n_ops,
                replayed = applied.replayed,
                "accepted write"
            );
        }))
    }

    /// Reads `key` in `lock`'s keyspace, blocking until acknowledged.
    ///
    /// Without a sequencer this is a plain read. With one (shared or
    /// exclusive), the fencing rule is checked and the mark raised in the
    /// same step as the read: a reader with a new generation fences older
    /// writers. The sequencer must be for `lock`.
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
        self.check_key(key)?;
        let Some(sequencer) = sequencer else {
            let plain = ReadRequest::new(lock, key, None);
            return Ok(Pending::new(self.inner.engine.read(plain)));
        };
        if sequencer.lock() != lock {
            let refused = Refused::LockMismatch {
                requested: lock.clone(),
                presented: sequencer.lock().clone(),
            };
            trace_refusal(sequencer, &refused);
            return Ok(Pending::new(Box::pin(std::future::ready(Ok(Err(refused))))));
        }
        let fenced = ReadRequest::new(lock, key, Some(sequencer));
        let outcome = self.inner.engine.read(fenced);
        Ok(traced(sequencer, outcome, |sequencer, read| {
            tracing::debug!(
                target: "palisade_store::fence",
                lock = %sequencer.lock(),
                mode = %sequencer.mode(),
                generation = sequencer.generation().get(),
                h_excl = read.marks.exclusive,
                h_shared = read.marks.shared,
                "accepted read"
            );
        }))
    }

    /// Checks `sequencer` against its lock's marks and raises them, touching
    /// no data: the fencing step alone, for a service that keeps its data
    /// elsewhere and uses this store only for its marks.
    ///
    /// Exclusive and shared sequencers are both accepted (an exclusive one
    /// is an empty write, a shared one a read of nothing), so the rules and
    /// the durability are exactly those of [`Store::submit`] and
    /// [`Store::submit_get`]: the returned future resolves once the new
    /// mark is acknowledged, and a refusal changes nothing.
    ///
    /// On sled the request is queued when this method is called, not when
    /// the future is first polled, so calls made one after another are
    /// decided in that order. Other engines promise only that each call is
    /// decided atomically; two calls in flight at once may be decided in
    /// either order (each against the marks it found).
    ///
    /// The outcome is the lock's marks after the request, or the refusal
    /// ([`Refused::Stale`] with the current marks).
    pub fn submit_admit(
        &self,
        sequencer: &Sequencer,
    ) -> Result<Pending<Result<Marks, Refused>>, StoreError> {
        let outcome = self.inner.engine.admit(sequencer);
        Ok(traced(sequencer, outcome, |sequencer, marks| {
            tracing::debug!(
                target: "palisade_store::fence",
                lock = %sequencer.lock(),
                mode = %sequencer.mode(),
                generation = sequencer.generation().get(),
                h_excl = marks.exclusive,
                h_shared = marks.shared,
                "accepted admission"
            );
        }))
    }

    /// The current marks of `lock`, blocking until acknowledged. A lock
    /// never seen has marks 0: that is not an error.
    pub fn marks(&self, lock: &LockName) -> Result<Marks, StoreError> {
        self.submit_marks(lock)?.wait()
    }

    /// Like [`Store::marks`], returning a [`Pending`] to await.
    pub fn submit_marks(&self, lock: &LockName) -> Result<Pending<Marks>, StoreError> {
        Ok(Pending::new(self.inner.engine.marks(lock)))
    }
}

/// The engine's outcome, traced when it resolves: accepted requests by
/// `accepted` at DEBUG, refusals at INFO, failures at ERROR, all with the
/// sequencer's fields.
fn traced<T: Send + 'static>(
    sequencer: &Sequencer,
    outcome: EngineFuture<Result<T, Refused>>,
    accepted: impl FnOnce(&Sequencer, &T) + Send + 'static,
) -> Pending<Result<T, Refused>> {
    let sequencer = sequencer.clone();
    Pending::new(Box::pin(async move {
        let outcome = outcome.await;
        match &outcome {
            Ok(Ok(value)) => accepted(&sequencer, value),
            Ok(Err(refused)) => trace_refusal(&sequencer, refused),
            Err(error) => tracing::error!(lock = %sequencer.lock(), %error, "request failed"),
        }
        outcome
    }))
}

fn trace_refusal(sequencer: &Sequencer, refused: &Refused) {
    let marks = refused.marks();
    tracing::info!(
        target: "palisade_store::fence",
        lock = %sequencer.lock(),
        mode = %sequencer.mode(),
        generation = sequencer.generation().get(),
        h_excl = marks.map(|m| m.exclusive),
        h_shared = marks.map(|m| m.shared),
        reason = refused.reason(),
        "refused: {refused}"
    );
}
