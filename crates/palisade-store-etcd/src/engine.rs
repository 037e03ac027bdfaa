//! [`EtcdEngine`]: the [`Engine`] trait over an etcd cluster.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use palisade_core::{LockName, Mode, Sequencer};
use palisade_etcd::KvHandles;
use palisade_store::{
    Applied, Engine, EngineFuture, EngineInfo, LimitKind, Limits, Marks, Op, Read, ReadRequest,
    Refused, StoreError, WriteRequest,
};
use tokio::sync::Mutex;

use crate::config::EtcdEngineConfig;
use crate::errors::{self, ENGINE};
use crate::keys::revision_seq;
use crate::keys::{FORMAT_VERSION, PrefixKeys};
use crate::memory::LockMemory;
use crate::plan::{self, Cached, Commit, Found, Range, ReadPlan, ReadSet, Snapshot, WritePlan};
use crate::txn::{self, Outcome};

/// How many stripes of in-process turn-taking: requests on locks that hash
/// to one stripe take turns, so writers on one lock in this process never
/// make each other's commits fail; writers in other processes still can,
/// and are retried.
const STRIPES: usize = 256;

/// The largest answer the engine accepts from etcd: a read Txn returns the
/// current value of every compare-and-swap key of a request.
const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// The etcd storage engine: every lock's marks, data and idempotency
/// records are keys under one prefix, and each request is decided on one
/// linearizable read and applied by one Txn that compares the
/// `mod_revision` of every key read (see the crate docs).
///
/// Cheap to clone; every clone shares the connection. Any number of
/// engines, in any number of processes, may serve one prefix of one
/// cluster: that is what makes the resource servers above them stateless.
#[derive(Clone)]
pub struct EtcdEngine {
    inner: Arc<Inner>,
}

struct Inner {
    /// KV handles kept between requests.
    kv: KvHandles,
    config: EtcdEngineConfig,
    keys: PrefixKeys,
    stripes: Box<[Mutex<()>]>,
    memory: LockMemory,
}

impl std::fmt::Debug for EtcdEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdEngine")
            .field("endpoints", &self.inner.config.endpoints())
            .field("prefix", &self.inner.config.prefix())
            .finish_non_exhaustive()
    }
}

impl EtcdEngine {
    /// Connects, and checks (or, on an empty prefix, writes) the layout
    /// version under the prefix, so an unreachable cluster, a wrong
    /// password or a prefix holding another version's data is reported
    /// here rather than at the first request.
    pub async fn connect(config: EtcdEngineConfig) -> Result<EtcdEngine, StoreError> {
        if let Some(refused) = config.connection().every_endpoint_refuses().await {
            return Err(StoreError::Unavailable {
                engine: crate::errors::ENGINE,
                message: format!("connect: {refused}"),
            });
        }
        let within = config.connection().connect_timeout() + config.connection().request_timeout();
        let client = match tokio::time::timeout(
            within,
            Client::connect(config.endpoints(), Some(config.connect_options())),
        )
        .await
        {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return Err(errors::unavailable("connect", &error)),
            Err(_elapsed) => return Err(errors::timed_out("connect", within)),
        };
        let kv = KvHandles::new(
            client
                .kv_client()
                .max_decoding_message_size(MAX_RESPONSE_BYTES),
        );
        let keys = PrefixKeys::new(config.prefix());
        let engine = EtcdEngine {
            inner: Arc::new(Inner {
                kv,
                config,
                keys,
                stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
                memory: LockMemory::default(),
            }),
        };
        engine.inner.check_format().await?;
        tracing::debug!(
            endpoints = ?engine.inner.config.endpoints(),
            prefix = engine.inner.config.prefix(),
            "etcd engine connected"
        );
        Ok(engine)
    }

    /// The configuration.
    pub fn config(&self) -> &EtcdEngineConfig {
        &self.inner.config
    }

    fn limits_of(config: &EtcdEngineConfig) -> Limits {
        let bytes = config.max_request_bytes();
        Limits {
            max_key_bytes: bytes / 4,
            // Room for the keys and framing beside one value; the whole
            // request is checked against `bytes` on each write.
            max_value_bytes: bytes.saturating_sub(4096),
            max_batch_ops: config.max_txn_ops() - crate::RESERVED_TXN_OPS,
        }
    }
}

impl Engine for EtcdEngine {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            name: ENGINE,
            durability: "committed by a Raft majority (etcd answers a Txn once a majority of \
                         members have it in their fsynced write-ahead log)"
                .to_owned(),
            location: format!(
                "{} under {}",
                self.inner.config.endpoints().join(","),
                self.inner.config.prefix()
            ),
        }
    }

    fn limits(&self) -> Limits {
        EtcdEngine::limits_of(&self.inner.config)
    }

    fn write(&self, request: WriteRequest) -> EngineFuture<Result<Applied, Refused>> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.write(request).await })
    }

    fn read(&self, request: ReadRequest<'_>) -> EngineFuture<Result<Read, Refused>> {
        let inner = self.inner.clone();
        let keys = inner.keys.lock(request.lock);
        let reads = ReadSet::for_read(&keys, request.key);
        let (lock, sequencer) = (request.lock.clone(), request.sequencer.cloned());
        Box::pin(async move { inner.read(&lock, reads, sequencer.as_ref()).await })
    }

    fn admit(&self, sequencer: &Sequencer) -> EngineFuture<Result<Marks, Refused>> {
        let inner = self.inner.clone();
        let sequencer = sequencer.clone();
        Box::pin(async move {
            match sequencer.mode() {
                Mode::Exclusive => {
                    let request = WriteRequest::new(sequencer, Vec::new(), None);
                    Ok(inner.write(request).await?.map(|applied| applied.marks))
                }
                Mode::Shared => {
                    let keys = inner.keys.lock(sequencer.lock());
                    let reads = ReadSet::for_marks(&keys);
                    let read = inner
                        .read(sequencer.lock(), reads, Some(&sequencer))
                        .await?;
                    Ok(read.map(|read| read.marks))
                }
            }
        })
    }

    fn marks(&self, lock: &LockName) -> EngineFuture<Marks> {
        let inner = self.inner.clone();
        let keys = inner.keys.lock(lock);
        Box::pin(async move {
            let reads = ReadSet::for_marks(&keys);
            let snapshot = inner.read_snapshot("read marks", &reads.ranges).await?;
            let (state, _) = snapshot.state().map_err(|e| errors::corrupt(e.0))?;
            Ok(state.marks)
        })
    }

    fn health(&self) -> EngineFuture<()> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let ranges = [Range::Key {
                key: inner.keys.format(),
                keys_only: true,
            }];
            inner.read_snapshot("health", &ranges).await.map(|_| ())
        })
    }

    /// Nothing to do: etcd acknowledged every write only once a majority
    /// had it, and holds nothing of this process's in memory.
    fn close(&self) -> EngineFuture<()> {
        Box::pin(async { Ok(()) })
    }
}

impl Inner {
    fn stripe(&self, lock: &LockName) -> &Mutex<()> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        lock.hash(&mut hasher);
        &self.stripes[(hasher.finish() % STRIPES as u64) as usize]
    }

    async fn write(&self, request: WriteRequest) -> Result<Result<Applied, Refused>, StoreError> {
        let lock = request.sequencer.lock().clone();
        let keys = self.keys.lock(&lock);
        // Refused whole before anything is sent: etcd would refuse it, and
        // splitting it into two Txns would break atomicity.
        self.check_limits(&request)?;
        let bound = plan::commit_bytes_bound(&keys, &request);
        if bound > self.config.max_request_bytes() {
            return Err(StoreError::TooLarge {
                kind: LimitKind::RequestBytes,
                actual: bound,
                max: self.config.max_request_bytes(),
            });
        }
        let reads = ReadSet::for_write(&keys, &request);
        let window = self.config.idempotency_window();
        let _turn = self.stripe(&lock).lock().await;
        // The snapshot a failed fresh commit's failure branch read, if any.
        let mut snapshot: Option<Snapshot> = None;
        let mut pauses = contention_pauses();
        // Cleared once a commit built on the memory has failed: from then
        // on every attempt decides on a read.
        let mut from_memory = true;
        for attempt in 1..=self.config.max_attempts() {
            let optimistic = if from_memory {
                self.memory
                    .recall(&lock)
                    .and_then(|cached| plan::plan_optimistic(&keys, &request, &cached, window))
            } else {
                None
            };
            let fresh = optimistic.is_none();
            let admitted = match optimistic {
                Some(admitted) => admitted,
                None => {
                    let snapshot = match snapshot.take() {
                        Some(snapshot) => snapshot,
                        None => {
                            self.read_snapshot("read before write", &reads.ranges)
                                .await?
                        }
                    };
                    self.note_snapshot(&lock, &snapshot, request.request_id.is_some())?;
                    let plan = plan::plan_write(&keys, &request, &reads, &snapshot, window)
                        .map_err(|e| errors::corrupt(format!("{} of lock `{lock}`", e.0)))?;
                    match plan {
                        WritePlan::Replay(applied) => return Ok(Ok(applied)),
                        WritePlan::Refuse(refused) => return Ok(Err(refused)),
                        WritePlan::Commit(admitted) => *admitted,
                    }
                }
            };
            match self.commit("write", &lock, &admitted.commit).await? {
                Outcome::Committed {
                    revision,
                    existed,
                    then_found,
                } => {
                    let results = admitted.results(&keys, &existed);
                    let oldest_slot = admitted
                        .oldest_after
                        .resolve(revision, then_found.into_iter().next().flatten());
                    self.memory.remember(
                        &lock,
                        Cached {
                            state: admitted.planned.after,
                            state_revision: revision,
                            oldest_slot,
                        },
                    );
                    return Ok(Ok(Applied {
                        results,
                        marks: admitted.planned.marks,
                        commit_seq: revision_seq(revision),
                        replayed: false,
                    }));
                }
                Outcome::Failed { else_found } => {
                    from_memory = false;
                    // A remembered state gone stale is no contention (the
                    // next attempt reads); a fresh reading overtaken is,
                    // and its failure branch read the next snapshot.
                    if fresh {
                        snapshot = Some(Snapshot { found: else_found });
                        contended(&lock, attempt, &mut pauses).await;
                    }
                }
            }
        }
        Err(errors::contended(self.config.max_attempts()))
    }

    /// Remembers the lock's state as `snapshot` shows it, with its oldest
    /// slot when the snapshot read it.
    fn note_snapshot(
        &self,
        lock: &LockName,
        snapshot: &Snapshot,
        read_oldest_slot: bool,
    ) -> Result<(), StoreError> {
        let (state, state_revision) = snapshot
            .state()
            .map_err(|e| errors::corrupt(format!("{} of lock `{lock}`", e.0)))?;
        let oldest_slot = if read_oldest_slot {
            Some(snapshot.found[2].clone())
        } else {
            self.oldest_slot_at(lock, state_revision)
        };
        self.memory.remember(
            lock,
            Cached {
                state,
                state_revision,
                oldest_slot,
            },
        );
        Ok(())
    }

    /// The remembered oldest slot, if it was remembered at `revision` of
    /// the lock's state (slots change only with the state).
    fn oldest_slot_at(&self, lock: &LockName, revision: i64) -> Option<Option<Found>> {
        self.memory
            .recall(lock)
            .filter(|cached| cached.state_revision == revision)
            .and_then(|cached| cached.oldest_slot)
    }

    /// The limits [`Engine::limits`] states, checked here too: the engine
    /// keeps its promise whoever calls it.
    fn check_limits(&self, request: &WriteRequest) -> Result<(), StoreError> {
        let limits = EtcdEngine::limits_of(&self.config);
        let too_large = |kind, actual, max| Err(StoreError::TooLarge { kind, actual, max });
        if request.ops.len() > limits.max_batch_ops {
            return too_large(LimitKind::BatchOps, request.ops.len(), limits.max_batch_ops);
        }
        for op in &request.ops {
            if op.key().len() > limits.max_key_bytes {
                return too_large(LimitKind::Key, op.key().len(), limits.max_key_bytes);
            }
            let value = match op {
                Op::Put { value, .. } => Some(value.len()),
                Op::Cas { expected, new, .. } => {
                    let expected = expected.as_ref().map_or(0, |v| v.len());
                    Some(expected.max(new.as_ref().map_or(0, |v| v.len())))
                }
                Op::Delete { .. } => None,
            };
            if let Some(value) = value.filter(|len| *len > limits.max_value_bytes) {
                return too_large(LimitKind::Value, value, limits.max_value_bytes);
            }
        }
        Ok(())
    }

    async fn read(
        &self,
        lock: &LockName,
        reads: ReadSet,
        sequencer: Option<&Sequencer>,
    ) -> Result<Result<Read, Refused>, StoreError> {
        let keys = self.keys.lock(lock);
        // Only a fenced read may commit (a raised mark), so only it takes
        // its lock's turn.
        let _turn = match sequencer {
            Some(_) => Some(self.stripe(lock).lock().await),
            None => None,
        };
        let mut snapshot: Option<Snapshot> = None;
        let mut pauses = contention_pauses();
        for attempt in 1..=self.config.max_attempts() {
            let snapshot_now = match snapshot.take() {
                Some(snapshot) => snapshot,
                None => self.read_snapshot("read", &reads.ranges).await?,
            };
            self.note_snapshot(lock, &snapshot_now, false)?;
            let plan = plan::plan_read(&keys, &reads, sequencer, &snapshot_now)
                .map_err(|e| errors::corrupt(format!("{} of lock `{lock}`", e.0)))?;
            match plan {
                ReadPlan::Answer(read) => return Ok(Ok(read)),
                ReadPlan::Refuse(refused) => return Ok(Err(refused)),
                ReadPlan::Commit {
                    commit,
                    read,
                    after,
                } => match self.commit("raise mark on read", lock, &commit).await? {
                    Outcome::Committed { revision, .. } => {
                        let (_, before) = snapshot_now.state().unwrap_or_default();
                        let oldest_slot = self.oldest_slot_at(lock, before);
                        self.memory.remember(
                            lock,
                            Cached {
                                state: after,
                                state_revision: revision,
                                oldest_slot,
                            },
                        );
                        return Ok(Ok(read));
                    }
                    Outcome::Failed { else_found } => {
                        snapshot = Some(Snapshot { found: else_found });
                        contended(lock, attempt, &mut pauses).await;
                    }
                },
            }
        }
        Err(errors::contended(self.config.max_attempts()))
    }

    /// One read-only Txn over `ranges`: a linearizable snapshot at one
    /// revision. Sent again after failures that applied nothing, until the
    /// request timeout.
    async fn read_snapshot(
        &self,
        operation: &'static str,
        ranges: &[Range],
    ) -> Result<Snapshot, StoreError> {
        let txn = txn::read_txn(ranges);
        let after = self.config.connection().request_timeout();
        let deadline = tokio::time::Instant::now() + after;
        let mut pauses = resend_pauses();
        let response = loop {
            let mut kv = self.kv.take();
            let error = match tokio::time::timeout_at(deadline, kv.txn(txn.clone())).await {
                Ok(Ok(response)) => break response,
                Ok(Err(error)) => error,
                Err(_elapsed) => return Err(errors::timed_out(operation, after)),
            };
            let again = errors::is_unsent(&error) || errors::is_transient(&error);
            let pause = pauses.next().unwrap_or(RESEND_PAUSE_CAP);
            if !again || tokio::time::Instant::now() + pause >= deadline {
                return Err(errors::unavailable(operation, &error));
            }
            tracing::debug!(
                operation,
                ?error,
                ?pause,
                "etcd engine: read failed; sending again"
            );
            tokio::time::sleep(pause).await;
        };
        Ok(Snapshot {
            found: txn::snapshot_of(&response),
        })
    }

    /// Sends a commit Txn. Sent again only when it never left; any other
    /// failure is in doubt, and the lock's remembered state is dropped.
    async fn commit(
        &self,
        operation: &'static str,
        lock: &LockName,
        commit: &Commit,
    ) -> Result<Outcome, StoreError> {
        let result = self.send_commit(operation, commit).await;
        if result.is_err() {
            self.memory.forget(lock);
        }
        result
    }

    async fn send_commit(
        &self,
        operation: &'static str,
        commit: &Commit,
    ) -> Result<Outcome, StoreError> {
        let txn = txn::commit_txn(commit);
        let after = self.config.connection().request_timeout();
        let deadline = tokio::time::Instant::now() + after;
        let mut pauses = resend_pauses();
        loop {
            let mut kv = self.kv.take();
            let error = match tokio::time::timeout_at(deadline, kv.txn(txn.clone())).await {
                Ok(Ok(response)) => return Ok(txn::outcome(commit, &response)),
                Ok(Err(error)) => error,
                Err(_elapsed) => {
                    return Err(errors::in_doubt(
                        operation,
                        &format!("no answer from etcd within {after:?}"),
                    ));
                }
            };
            if errors::is_over_cluster_limit(&error) {
                tracing::error!(
                    ?error,
                    "etcd refused a commit as over its limits: configure the engine's \
                     max request bytes and max txn ops to the cluster's"
                );
                return Err(errors::failed(operation, &error));
            }
            if errors::is_refused_outright(&error) {
                return Err(errors::failed(operation, &error));
            }
            if !errors::is_unsent(&error) {
                return Err(errors::in_doubt(operation, &format!("{error}")));
            }
            let pause = pauses.next().unwrap_or(RESEND_PAUSE_CAP);
            if tokio::time::Instant::now() + pause >= deadline {
                return Err(errors::unavailable(operation, &error));
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// Checks the layout version under the prefix, writing it when the
    /// prefix is new.
    async fn check_format(&self) -> Result<(), StoreError> {
        let key = self.keys.format();
        let txn = Txn::new()
            .when([Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), FORMAT_VERSION, None)])
            .or_else([TxnOp::get(key, None)]);
        let mut kv = self.kv.take();
        let after = self.config.connection().request_timeout();
        let response = match tokio::time::timeout(after, kv.txn(txn)).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => return Err(errors::unavailable("check layout version", &error)),
            Err(_elapsed) => return Err(errors::timed_out("check layout version", after)),
        };
        if response.succeeded() {
            return Ok(());
        }
        match txn::snapshot_of(&response).into_iter().next().flatten() {
            Some(found) if found.value == FORMAT_VERSION => Ok(()),
            Some(found) => Err(StoreError::Corrupt {
                what: format!(
                    "the etcd prefix `{}` holds layout `{}`; this version reads `{}` only",
                    self.config.prefix(),
                    String::from_utf8_lossy(&found.value),
                    String::from_utf8_lossy(FORMAT_VERSION),
                ),
            }),
            None => Err(errors::corrupt("the layout version key")),
        }
    }
}

/// The longest pause before a request that applied nothing is sent again.
const RESEND_PAUSE_CAP: Duration = Duration::from_millis(100);

/// Pauses before a request that applied nothing (it never left, or etcd
/// refused it for a passing reason) is sent again, within its timeout.
fn resend_pauses() -> impl Iterator<Item = Duration> {
    palisade_core::retry_pauses(Duration::from_millis(2), RESEND_PAUSE_CAP)
}

/// Pauses before the next attempt after another process committed on the
/// lock between a request's read and its commit: random and growing
/// (`retry_pauses`), so two replicas do not collide again in step.
fn contention_pauses() -> impl Iterator<Item = Duration> {
    palisade_core::retry_pauses(Duration::from_millis(1), Duration::from_millis(64))
}

async fn contended(lock: &LockName, attempt: u32, pauses: &mut impl Iterator<Item = Duration>) {
    let pause = pauses.next().unwrap_or(Duration::from_millis(64));
    tracing::debug!(%lock, attempt, ?pause, "etcd engine: the lock changed before commit; reading again");
    tokio::time::sleep(pause).await;
}
