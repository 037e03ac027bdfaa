//! The fence: each call takes a sequencer (or a guard), applies the fencing
//! rule in Redis and does its write in the same function call, and answers
//! with the written value or core's `Refused`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use derive_setters::Setters;
use palisade_core::marks::Marks;
use palisade_core::op::Read;
use palisade_core::{LockName, Mode, OpResult, Refused, Sequencer, SequencerSource, Verifier};
use redis::Value;

use crate::connection::FenceConnection;
use crate::error::from_redis;
use crate::install::{MODULE_COMMAND, Target, ensure_everywhere, ensure_on, module_everywhere};
use crate::keys::LockKeys;
use crate::ops::{Batch, Op, Reply, Step, Steps, Token, Tokens, encode, pack};
use crate::{RedisFenceError, TRACE_TARGET};
use smallvec::smallvec;

mod group;
mod packed;

use group::{Fields, PROTOCOL, Prepared, Queue};

/// A call's outcome, in the store's shape: `Err` for a failure, `Ok(Err)`
/// for a refusal (nothing changed), `Ok(Ok)` for what was done.
pub type Outcome<T> = Result<Result<T, Refused>, RedisFenceError>;

/// An accepted write: its value, the lock's marks after it, and its place
/// in the lock's write sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written<T> {
    /// What the write did (`Created`, the counter's new value, one reply
    /// per op of a batch, ...).
    pub value: T,
    /// The lock's marks right after the write.
    pub marks: Marks,
    /// The lock's write sequence number: every accepted write of the lock
    /// takes the next one, so they order the lock's writes as Redis applied
    /// them. It starts again at 1 if Redis loses the marks record.
    pub seq: u64,
}

/// How a [`RedisFence`] behaves.
///
/// The plain setters are derived from the fields below and carry their
/// documentation.
#[derive(Debug, Clone, Setters)]
#[setters(prefix = "with_")]
pub struct FenceOptions {
    /// Prepended to every marks record (not to data keys; default
    /// [`FenceOptions::DEFAULT_KEY_PREFIX`]). Must not hold `{`, `}` or
    /// whitespace.
    #[setters(into)]
    key_prefix: String,
    /// Requires signed sequencers, verified by this verifier before
    /// anything is sent (the function itself does not verify: see
    /// `docs/redis-data.md`, "Signed sequencers").
    #[setters(strip_option)]
    verifier: Option<Verifier>,
    /// `WAIT replicas timeout` after every call that may change a mark.
    #[setters(skip)]
    replicas: Option<(u64, Duration)>,
    /// The bound on one call, `WAIT` included (default 5 s). A call that
    /// times out may still be applied.
    call_timeout: Duration,
    /// Replaces an older Palisade version of the library on connect
    /// (never a newer one, a modified one or someone else's).
    #[setters(rename = "with_library_upgrade")]
    upgrade_library: bool,
    /// Whether every call sends, as a floor, the highest marks this fence
    /// has been answered with for the lock (default on). The function then
    /// puts back marks Redis lost (a restart without persistence, a
    /// failover to a replica that missed a raise) before it applies the
    /// rule. Off, only what Redis holds decides.
    #[setters(rename = "with_remembered_marks")]
    remember_marks: bool,
    /// Whether fenced calls go through the module's `PALISADE.FENCE` when
    /// every primary has it loaded (default on): the same rule, answers
    /// and marks records as the function, at the cost of a native command
    /// (`docs/benchmarks.md`). Off, or without the module, the function.
    #[setters(rename = "with_module")]
    use_module: bool,
    /// The most calls in flight at once (default 2); the requests that
    /// come while that many are out queue and go together as the next
    /// call (group commit). 1 keeps one call in flight. Order between
    /// calls in flight cannot let a stale write through: Redis judges and
    /// applies each request atomically, whichever call carries it.
    #[setters(rename = "with_calls_in_flight")]
    calls_in_flight: usize,
}

impl Default for FenceOptions {
    fn default() -> Self {
        FenceOptions {
            key_prefix: Self::DEFAULT_KEY_PREFIX.to_owned(),
            verifier: None,
            replicas: None,
            call_timeout: Duration::from_secs(5),
            upgrade_library: false,
            remember_marks: true,
            use_module: true,
            calls_in_flight: 2,
        }
    }
}

impl FenceOptions {
    /// The prefix unless set: `palisade:`, the Redis lock backend's, so a
    /// lock's marks record sits beside its lock keys.
    pub const DEFAULT_KEY_PREFIX: &'static str = "palisade:";

    /// After every call that may raise a mark, waits until `replicas`
    /// replicas have it (`WAIT`), at most `timeout`; fewer is
    /// [`RedisFenceError::NotReplicated`].
    pub fn with_replicas(mut self, replicas: u64, timeout: Duration) -> Self {
        self.replicas = Some((replicas, timeout));
        self
    }

    fn validate(&self) -> Result<(), RedisFenceError> {
        let invalid = |reason: String| Err(RedisFenceError::Invalid { reason });
        if self.key_prefix.contains(['{', '}']) || self.key_prefix.contains(char::is_whitespace) {
            return invalid(format!(
                "key prefix {:?} must not contain `{{`, `}}` or whitespace (the hash tag is the lock name)",
                self.key_prefix
            ));
        }
        if self.call_timeout.is_zero() {
            return invalid("the call timeout must be positive".into());
        }
        if self.calls_in_flight == 0 {
            return invalid("at least one call must be allowed in flight".into());
        }
        if let Some((replicas, timeout)) = self.replicas {
            if replicas == 0 || timeout.is_zero() {
                return invalid("WAIT needs at least one replica and a positive timeout".into());
            }
            if timeout >= self.call_timeout {
                return invalid(format!(
                    "the replica timeout ({timeout:?}) must be shorter than the call timeout ({:?})",
                    self.call_timeout
                ));
            }
        }
        Ok(())
    }
}

/// What the fence has done since it was made: counters a service can
/// export.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FenceStats {
    /// Calls accepted (writes, fenced reads, admits).
    pub accepted: u64,
    /// Calls refused as stale.
    pub stale: u64,
    /// Calls whose marks Redis had lost and this client put back from what
    /// it had seen (a restart or failover lost a mark raise).
    pub marks_restored: u64,
    /// Times the library was missing from a node at call time and was
    /// loaded again (Redis lost its functions: a restart without
    /// persistence, `FUNCTION FLUSH`, an empty node).
    pub library_reloads: u64,
    /// `FCALL`s that carried requests: below the requests answered when
    /// concurrent requests were grouped into one call.
    pub calls: u64,
}

#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    stale: AtomicU64,
    marks_restored: AtomicU64,
    library_reloads: AtomicU64,
    calls: AtomicU64,
}

/// What a fence keeps of a lock it has fenced: its keys, worked out once,
/// and the highest marks Redis answered for it (sent as the floor of the
/// lock's next requests), raised without taking the map's lock again.
#[derive(Debug)]
struct Seen {
    keys: Arc<LockKeys>,
    exclusive: AtomicU64,
    shared: AtomicU64,
}

impl Seen {
    fn new(keys: LockKeys) -> Self {
        Seen {
            keys: Arc::new(keys),
            exclusive: AtomicU64::new(0),
            shared: AtomicU64::new(0),
        }
    }

    fn marks(&self) -> Marks {
        Marks {
            exclusive: self.exclusive.load(Ordering::Relaxed),
            shared: self.shared.load(Ordering::Relaxed),
        }
    }

    fn raise(&self, marks: Marks) {
        self.exclusive.fetch_max(marks.exclusive, Ordering::Relaxed);
        self.shared.fetch_max(marks.shared, Ordering::Relaxed);
    }
}

/// The most locks whose marks one fence remembers. Past it the memory is
/// cleared: forgetting loses only the restoring of lost marks, never
/// safety against what Redis still holds.
const REMEMBERED_LOCKS: usize = 65_536;

/// The fence over the application's Redis. Cheap to clone (one `Arc`).
///
/// ```no_run
/// use palisade_core::{Generation, LockName, Mode, Sequencer};
/// use palisade_fence_redis::RedisFence;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let fence = RedisFence::connect("redis://127.0.0.1:6379").await?;
/// let lock = LockName::new("flash-sale/sku-42")?;
/// let stock = fence.data_key(&lock, "stock");
/// # let guard = Sequencer::new(lock.clone(), Mode::Exclusive, Generation::new(7).unwrap());
/// match fence.decr_by_keeping(&guard, stock, 1, 0).await? {
///     Ok(written) => println!("sold one, {} left", written.value),
///     Err(refused) => println!("not sold: {refused}"), // stale, or sold out
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisFence {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    connection: FenceConnection,
    options: FenceOptions,
    /// Per lock: its keys (worked out once), and the highest marks it has
    /// been answered with here. The marks go with every call as a floor:
    /// if Redis lost a mark raise (restart without persistence, failover
    /// to a replica that missed it), the function puts back what this
    /// process saw before applying the rule.
    seen: RwLock<HashMap<LockName, Arc<Seen>>>,
    counters: Counters,
    /// Requests waiting for the call in flight (group commit).
    queue: Queue,
    /// Fenced calls go through the module (found on every primary at
    /// connect, and allowed by the options).
    module: bool,
}

/// A request's answer (the function's or the module's), or its own
/// failure.
type Answered = Result<Answer, RedisFenceError>;

/// An accepted request's results, one per op: most have one, kept inline.
type Results = smallvec::SmallVec<[Value; 1]>;

/// What the function answered to an apply call.
#[derive(Debug)]
enum Answer {
    Ok {
        marks: Marks,
        seq: u64,
        restored: bool,
        results: Results,
    },
    Stale {
        marks: Marks,
        restored: bool,
    },
    Short {
        op_index: usize,
        current: i64,
    },
    SharedOnWrite,
}

impl RedisFence {
    /// A fence over `connection` with default options: loads the library
    /// on every primary, or checks the one there.
    pub async fn new(connection: impl Into<FenceConnection>) -> Result<Self, RedisFenceError> {
        Self::with_options(connection, FenceOptions::default()).await
    }

    /// A fence over `connection`: validates `options`, then loads the
    /// library on every primary where it is absent and checks it where it
    /// is ([`RedisFenceError::Library`] if it is not this crate's).
    pub async fn with_options(
        connection: impl Into<FenceConnection>,
        options: FenceOptions,
    ) -> Result<Self, RedisFenceError> {
        options.validate()?;
        let connection = connection.into();
        let bound = options.call_timeout * 4;
        tokio::time::timeout(
            bound,
            ensure_everywhere(&connection, options.upgrade_library),
        )
        .await
        .map_err(|_| RedisFenceError::Timeout {
            operation: "load the library",
            after: bound,
        })??;
        let module = options.use_module
            && tokio::time::timeout(options.call_timeout, module_everywhere(&connection))
                .await
                .map_err(|_| RedisFenceError::Timeout {
                    operation: "look for the module",
                    after: options.call_timeout,
                })??;
        tracing::info!(
            target: TRACE_TARGET,
            module,
            "fenced calls go through {}",
            if module { MODULE_COMMAND } else { "the palisade_fence function" }
        );
        Ok(RedisFence {
            inner: Arc::new(Inner {
                connection,
                options,
                seen: RwLock::new(HashMap::new()),
                counters: Counters::default(),
                queue: Queue::default(),
                module,
            }),
        })
    }

    /// Connects to one server at `url` (`redis://[user:password@]host:port`)
    /// with a `ConnectionManager` and default options. For TLS with a
    /// private CA, a cluster, or other settings, build the connection
    /// yourself and use [`RedisFence::with_options`].
    pub async fn connect(url: &str) -> Result<Self, RedisFenceError> {
        let scrubbed = |error: redis::RedisError| RedisFenceError::Redis {
            operation: "connect",
            message: palisade_core::redact::scrub(&error.to_string(), url),
            may_have_applied: false,
        };
        let client = redis::Client::open(url).map_err(scrubbed)?;
        let connection = client.get_connection_manager().await.map_err(scrubbed)?;
        Self::new(connection).await
    }

    /// The connection, for the application's own (unfenced) commands.
    pub fn connection(&self) -> &FenceConnection {
        &self.inner.connection
    }

    /// Where `lock`'s fence lives.
    pub fn keys(&self, lock: &LockName) -> LockKeys {
        LockKeys::new(&self.inner.options.key_prefix, lock)
    }

    /// A data key of `lock`, in its slot: `{<segment>}:<name>`.
    pub fn data_key(&self, lock: &LockName, name: &str) -> String {
        self.keys(lock).data_key(name)
    }

    /// Whether fenced calls go through the module's `PALISADE.FENCE`
    /// (else through the function).
    pub fn uses_module(&self) -> bool {
        self.inner.module
    }

    /// The counters so far.
    pub fn stats(&self) -> FenceStats {
        let counters = &self.inner.counters;
        FenceStats {
            accepted: counters.accepted.load(Ordering::Relaxed),
            stale: counters.stale.load(Ordering::Relaxed),
            marks_restored: counters.marks_restored.load(Ordering::Relaxed),
            library_reloads: counters.library_reloads.load(Ordering::Relaxed),
            calls: counters.calls.load(Ordering::Relaxed),
        }
    }

    /// `SET key value` under `holder`'s exclusive sequencer.
    pub async fn set(
        &self,
        holder: &impl SequencerSource,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
    ) -> Outcome<Written<OpResult>> {
        self.one(holder, Op::set(key, value), done).await
    }

    /// `DEL key` under `holder`'s exclusive sequencer.
    pub async fn del(
        &self,
        holder: &impl SequencerSource,
        key: impl Into<Bytes>,
    ) -> Outcome<Written<OpResult>> {
        self.one(holder, Op::del(key), done).await
    }

    /// `INCRBY key by`; the new value.
    pub async fn incr_by(
        &self,
        holder: &impl SequencerSource,
        key: impl Into<Bytes>,
        by: i64,
    ) -> Outcome<Written<i64>> {
        self.one(holder, Op::incr_by(key, by), counter).await
    }

    /// `DECRBY key by`; the new value.
    pub async fn decr_by(
        &self,
        holder: &impl SequencerSource,
        key: impl Into<Bytes>,
        by: i64,
    ) -> Outcome<Written<i64>> {
        self.one(holder, Op::decr_by(key, by), counter).await
    }

    /// `DECRBY key by` only if at least `keep` stay (the stock case); the
    /// new value. When fewer would stay, nothing changes and the answer is
    /// `Refused::CasMismatch` with the current value.
    pub async fn decr_by_keeping(
        &self,
        holder: &impl SequencerSource,
        key: impl Into<Bytes>,
        by: i64,
        keep: i64,
    ) -> Outcome<Written<i64>> {
        let op = Op::decr_by_keeping(key, by, keep);
        self.one(holder, op, counter).await
    }

    /// `HSET key field value`.
    pub async fn hset(
        &self,
        holder: &impl SequencerSource,
        key: impl Into<Bytes>,
        field: impl Into<Bytes>,
        value: impl Into<Bytes>,
    ) -> Outcome<Written<OpResult>> {
        self.one(holder, Op::hset(key, field, value), done).await
    }

    /// `HDEL key field`.
    pub async fn hdel(
        &self,
        holder: &impl SequencerSource,
        key: impl Into<Bytes>,
        field: impl Into<Bytes>,
    ) -> Outcome<Written<OpResult>> {
        self.one(holder, Op::hdel(key, field), done).await
    }

    /// Every op of `batch`, or none; one reply per op. An empty batch is
    /// refused ([`RedisFenceError::Invalid`]): fence with
    /// [`RedisFence::admit`].
    pub async fn batch(
        &self,
        holder: &impl SequencerSource,
        batch: &Batch,
    ) -> Outcome<Written<Vec<Reply>>> {
        if batch.is_empty() {
            return Err(RedisFenceError::Invalid {
                reason: "an empty batch writes nothing; fence with `admit`".into(),
            });
        }
        let steps = batch.ops().iter().cloned().map(Step::Write).collect();
        Ok(match self.apply(holder, steps).await? {
            Ok((marks, seq, results)) => Ok(Written {
                value: results
                    .iter()
                    .zip(batch.ops())
                    .map(|(value, op)| reply(op, value))
                    .collect::<Result<_, _>>()?,
                marks,
                seq,
            }),
            Err(refused) => Err(refused),
        })
    }

    /// Fence on acquire: raises the lock's marks to `holder`'s generation
    /// without writing, so an older holder is refused from now on, even
    /// before this one writes. Exclusive or shared.
    pub async fn admit(&self, holder: &impl SequencerSource) -> Outcome<Marks> {
        Ok(self
            .apply(holder, Steps::new())
            .await?
            .map(|(marks, _, _)| marks))
    }

    /// A fenced `GET key`: under a shared sequencer it raises `H_shared`
    /// (so writers granted before this reader are refused from now on),
    /// under an exclusive one `H_excl`; a stale sequencer reads nothing.
    pub async fn get(&self, holder: &impl SequencerSource, key: impl Into<Bytes>) -> Outcome<Read> {
        self.read(holder, Step::Get { key: key.into() }).await
    }

    /// A fenced `HGET key field`, as [`RedisFence::get`].
    pub async fn hget(
        &self,
        holder: &impl SequencerSource,
        key: impl Into<Bytes>,
        field: impl Into<Bytes>,
    ) -> Outcome<Read> {
        self.read(
            holder,
            Step::HGet {
                key: key.into(),
                field: field.into(),
            },
        )
        .await
    }

    /// The lock's marks and write sequence as Redis holds them (changes
    /// nothing; runs on a replica too).
    pub async fn marks(&self, lock: &LockName) -> Result<(Marks, u64), RedisFenceError> {
        let keys = self.keys(lock);
        let mut command = redis::cmd("FCALL_RO");
        command.arg("palisade_fence_marks").arg(1).arg(keys.marks());
        let value = self.send(&keys, command, false).await?;
        let (marks, seq) = parse_marks(&value)?;
        self.remember(lock, marks);
        Ok((marks, seq))
    }

    /// The floor-raise form of the Redis fence: `H_excl = max(H_excl,
    /// floor)`, for recovery after Redis lost marks (a restart without
    /// persistence, a failover to a replica that missed a raise). Raise it
    /// to the lock side's newest generation (every holder granted before
    /// it is then refused, the newest one still passes). Returns the marks
    /// after.
    pub async fn raise_floor(&self, lock: &LockName, floor: u64) -> Result<Marks, RedisFenceError> {
        if floor == 0 {
            return Err(RedisFenceError::Invalid {
                reason: "a floor of 0 raises nothing".into(),
            });
        }
        let keys = self.keys(lock);
        let mut command = redis::cmd("FCALL");
        command
            .arg("palisade_fence_raise_floor")
            .arg(1)
            .arg(keys.marks())
            .arg(PROTOCOL)
            .arg(floor.to_string());
        let value = self.send(&keys, command, true).await?;
        let (marks, _) = parse_marks(&value)?;
        tracing::info!(target: TRACE_TARGET, lock = %lock, floor, %marks, "raised the fence's floor");
        self.remember(lock, marks);
        Ok(marks)
    }

    /// One op; its reply read by `read`.
    async fn one<T>(
        &self,
        holder: &impl SequencerSource,
        op: Op,
        read: fn(&Value) -> Option<T>,
    ) -> Outcome<Written<T>> {
        let what = op.code();
        Ok(
            match self.apply(holder, smallvec![Step::Write(op)]).await? {
                Ok((marks, seq, results)) => {
                    let value = results.first().unwrap_or(&Value::Nil);
                    Ok(Written {
                        value: read(value).ok_or_else(|| unexpected_reply(what, value))?,
                        marks,
                        seq,
                    })
                }
                Err(refused) => Err(refused),
            },
        )
    }

    async fn read(&self, holder: &impl SequencerSource, step: Step) -> Outcome<Read> {
        Ok(match self.apply(holder, smallvec![step]).await? {
            Ok((marks, _, results)) => Ok(Read {
                value: match results.first() {
                    Some(Value::BulkString(bytes)) => Some(Bytes::from(bytes.clone())),
                    Some(Value::Nil) | None => None,
                    Some(other) => {
                        return Err(RedisFenceError::Protocol(format!(
                            "a read answered {other:?}"
                        )));
                    }
                },
                marks,
            }),
            Err(refused) => Err(refused),
        })
    }

    /// The one path every fenced call takes.
    async fn apply(
        &self,
        holder: &impl SequencerSource,
        steps: Steps,
    ) -> Outcome<(Marks, u64, Results)> {
        let sequencer = holder.sequencer_now()?;
        let sequencer: &Sequencer = &sequencer;
        let lock = sequencer.lock();
        if let Some(verifier) = &self.inner.options.verifier {
            verifier
                .verify(sequencer)
                .map_err(|source| RedisFenceError::Signature {
                    lock: lock.clone(),
                    source,
                })?;
        }
        let writes = steps.iter().any(|step| matches!(step, Step::Write(_)));
        if writes && sequencer.mode() != Mode::Exclusive {
            return Ok(Err(Refused::SharedOnWrite {
                lock: lock.clone(),
                presented: sequencer.generation(),
            }));
        }
        let seen = self.remembered(lock);
        let keys = Arc::clone(&seen.keys);
        let floor = if self.inner.options.remember_marks {
            seen.marks()
        } else {
            Marks::ZERO
        };
        for step in &steps {
            keys.check(step.key())?;
        }
        let ops = steps.len();
        let mut tokens = Tokens::new();
        tokens.extend([
            Token::Word("1"),
            Token::Word(match sequencer.mode() {
                Mode::Exclusive => "x",
                Mode::Shared => "s",
            }),
            Token::Number(sequencer.generation().get().into()),
            Token::Number(floor.exclusive.into()),
            Token::Number(floor.shared.into()),
        ]);
        let call_keys = encode(keys.marks_key(), steps, &mut tokens)?;
        let size = tokens.len();
        let fields = if self.inner.module {
            Fields::Packed(pack(&tokens))
        } else {
            Fields::Arguments(tokens.into_vec())
        };
        let answer = self
            .submit(Prepared {
                keys,
                call_keys,
                fields,
                size,
                ops,
            })
            .await?;
        let generation = sequencer.generation().get();
        let mode = sequencer.mode();
        match answer {
            Answer::Ok {
                marks,
                seq,
                restored,
                results,
            } => {
                self.after(&seen, marks, restored);
                self.inner.counters.accepted.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(target: TRACE_TARGET, lock = %lock, %mode, generation, %marks, seq, "accepted");
                Ok(Ok((marks, seq, results)))
            }
            Answer::Stale { marks, restored } => {
                self.after(&seen, marks, restored);
                self.inner.counters.stale.fetch_add(1, Ordering::Relaxed);
                tracing::info!(target: TRACE_TARGET, lock = %lock, %mode, generation, %marks, "refused: stale sequencer");
                Ok(Err(Refused::stale(sequencer, marks)))
            }
            Answer::Short { op_index, current } => Ok(Err(Refused::CasMismatch {
                op_index,
                current: Some(Bytes::from(current.to_string())),
            })),
            Answer::SharedOnWrite => Ok(Err(Refused::SharedOnWrite {
                lock: lock.clone(),
                presented: sequencer.generation(),
            })),
        }
    }

    /// Sends `command` (with `WAIT` after it when configured and `wait`),
    /// bounded by the call timeout; loads the library again and resends
    /// once if the node has lost it.
    async fn send(
        &self,
        keys: &LockKeys,
        command: redis::Cmd,
        wait: bool,
    ) -> Result<Value, RedisFenceError> {
        let options = &self.inner.options;
        let call = async {
            match self.send_once(keys, &command, wait).await {
                Err(RedisFenceError::Redis { message, .. })
                    if message.contains("Function not found") =>
                {
                    // The node lost its functions, and most likely the data
                    // and marks with them: say so loudly, load, send again.
                    self.inner
                        .counters
                        .library_reloads
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        target: TRACE_TARGET,
                        lock = %keys.lock(),
                        slot = keys.slot(),
                        "the palisade_fence library was missing: Redis lost its functions (a restart without persistence, FUNCTION FLUSH or an empty node), and likely the marks with them; loading it again"
                    );
                    ensure_on(
                        &self.inner.connection,
                        Target::Slot(keys.slot()),
                        &format!("the primary of slot {}", keys.slot()),
                        options.upgrade_library,
                    )
                    .await?;
                    self.send_once(keys, &command, wait).await
                }
                other => other,
            }
        };
        tokio::time::timeout(options.call_timeout, call)
            .await
            .map_err(|_| RedisFenceError::Timeout {
                operation: "fcall",
                after: options.call_timeout,
            })?
    }

    async fn send_once(
        &self,
        keys: &LockKeys,
        command: &redis::Cmd,
        wait: bool,
    ) -> Result<Value, RedisFenceError> {
        let connection = &self.inner.connection;
        let Some((replicas, timeout)) = self.inner.options.replicas.filter(|_| wait) else {
            return connection
                .query_in_slot(keys.slot(), command)
                .await
                .map_err(|error| from_redis("fcall", error));
        };
        let mut pipeline = redis::pipe();
        pipeline
            .add_command(command.clone())
            .cmd("WAIT")
            .arg(replicas)
            .arg(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        let mut answers = connection
            .pipeline_in_slot(keys.slot(), &pipeline)
            .await
            .map_err(|error| from_redis("fcall", error))?;
        let acknowledged = match answers.pop() {
            Some(Value::Int(count)) => u64::try_from(count).unwrap_or(0),
            other => {
                return Err(RedisFenceError::Protocol(format!(
                    "WAIT answered {other:?}"
                )));
            }
        };
        if acknowledged < replicas {
            return Err(RedisFenceError::NotReplicated {
                lock: keys.lock().clone(),
                acknowledged,
                wanted: replicas,
            });
        }
        Ok(answers.pop().unwrap_or(Value::Nil))
    }

    /// What this fence keeps of `lock` (kept from now on if it was not).
    fn remembered(&self, lock: &LockName) -> Arc<Seen> {
        // Callers of known locks only read the map, and never wait for
        // each other.
        let known = self
            .inner
            .seen
            .read()
            .expect("the marks memory is never poisoned")
            .get(lock)
            .map(Arc::clone);
        if let Some(known) = known {
            return known;
        }
        let mut seen = self
            .inner
            .seen
            .write()
            .expect("the marks memory is never poisoned");
        if let Some(known) = seen.get(lock) {
            return Arc::clone(known);
        }
        if seen.len() >= REMEMBERED_LOCKS {
            seen.clear();
        }
        let known = Arc::new(Seen::new(self.keys(lock)));
        seen.insert(lock.clone(), Arc::clone(&known));
        known
    }

    fn remember(&self, lock: &LockName, marks: Marks) {
        self.remembered(lock).raise(marks);
    }

    fn after(&self, seen: &Seen, marks: Marks, restored: bool) {
        let lock = seen.keys.lock();
        if restored {
            self.inner
                .counters
                .marks_restored
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                target: TRACE_TARGET,
                lock = %lock,
                %marks,
                "Redis had lost this lock's marks (a restart or failover lost a raise); restored what this process saw"
            );
        }
        seen.raise(marks);
    }
}

/// A write's reply: what it did.
fn done(value: &Value) -> Option<OpResult> {
    text(value)?.parse().ok()
}

/// A counter's reply: its new value.
fn counter(value: &Value) -> Option<i64> {
    number(value)
}

fn unexpected_reply(what: &str, value: &Value) -> RedisFenceError {
    RedisFenceError::Protocol(format!("{what} answered {value:?}"))
}

fn reply(op: &Op, value: &Value) -> Result<Reply, RedisFenceError> {
    match op {
        Op::IncrBy { .. } => counter(value).map(Reply::Counter),
        _ => done(value).map(Reply::Done),
    }
    .ok_or_else(|| unexpected_reply(op.code(), value))
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

fn number(value: &Value) -> Option<i64> {
    match value {
        Value::Int(number) => Some(*number),
        other => text(other)?.parse().ok(),
    }
}

fn mark(value: &Value) -> Option<u64> {
    match value {
        Value::Int(number) => u64::try_from(*number).ok(),
        other => text(other)?.parse().ok(),
    }
}

fn parse_marks(value: &Value) -> Result<(Marks, u64), RedisFenceError> {
    let unexpected = || RedisFenceError::Protocol(format!("the marks answer {value:?}"));
    let Value::Array(items) = value else {
        return Err(unexpected());
    };
    match &items[..] {
        [x, s, n] => Ok((
            Marks {
                exclusive: mark(x).ok_or_else(unexpected)?,
                shared: mark(s).ok_or_else(unexpected)?,
            },
            mark(n).ok_or_else(unexpected)?,
        )),
        _ => Err(unexpected()),
    }
}

fn parse_answer(value: &Value) -> Result<Answer, RedisFenceError> {
    let unexpected =
        || RedisFenceError::Protocol(format!("palisade_fence_apply answered {value:?}"));
    let Value::Array(items) = value else {
        return Err(unexpected());
    };
    let status = items.first().and_then(text).ok_or_else(unexpected)?;
    let marks = |at: usize| -> Result<Marks, RedisFenceError> {
        Ok(Marks {
            exclusive: items.get(at).and_then(mark).ok_or_else(unexpected)?,
            shared: items.get(at + 1).and_then(mark).ok_or_else(unexpected)?,
        })
    };
    let index = |at: usize| -> Result<usize, RedisFenceError> {
        items
            .get(at)
            .and_then(mark)
            .and_then(|index| usize::try_from(index).ok())
            .ok_or_else(unexpected)
    };
    let flag = |at: usize| items.get(at).and_then(mark) == Some(1);
    Ok(match status.as_str() {
        "ok" => Answer::Ok {
            marks: marks(1)?,
            seq: items.get(3).and_then(mark).ok_or_else(unexpected)?,
            restored: flag(4),
            results: items.get(5..).unwrap_or_default().iter().cloned().collect(),
        },
        "stale" => Answer::Stale {
            marks: marks(1)?,
            restored: flag(3),
        },
        "short" => Answer::Short {
            op_index: index(1)?,
            current: items.get(2).and_then(number).ok_or_else(unexpected)?,
        },
        "shared_on_write" => Answer::SharedOnWrite,
        "wrongtype" => {
            return Err(RedisFenceError::WrongType {
                op_index: index(1)?,
            });
        }
        "notinteger" => {
            return Err(RedisFenceError::NotInteger {
                op_index: index(1)?,
            });
        }
        "error" => {
            return Err(RedisFenceError::Protocol(
                items.get(1).and_then(text).ok_or_else(unexpected)?,
            ));
        }
        _ => return Err(unexpected()),
    })
}
