//! The engine: every request is one statement (a call of one of the
//! engine's SQL functions, or a plain statement), auto-committed, so no
//! transaction ever waits on a round trip to this process.

use std::sync::Arc;
use std::time::Duration;

use palisade_core::{LockName, Mode, RaiseCap, Sequencer};
use palisade_store::{
    Applied, Engine, EngineFuture, EngineInfo, Marks, Op, OpResult, Read, ReadRequest, Refused,
    RequestId, StoreError, StoredRecord, WriteRequest,
};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgDatabaseError, PgPoolOptions};
use sqlx::{Connection as _, PgConnection, PgPool, Postgres};

use crate::batch::{BatchedPuts, FastPuts, Outcome};
use crate::error::{Failure, Origin, Unreachable};
use crate::record;
use crate::schema;
use crate::{ENGINE, OpenError, PostgresConfig};

/// How many times a request is tried when PostgreSQL reports a
/// serialization failure or deadlock.
const ATTEMPTS: u32 = 3;

/// How long the engine's one extra connection attempt may take, after a
/// request got no connection within the acquire timeout, to tell "refused"
/// from "no answer" from "busy" (the pool only says it timed out).
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// The PostgreSQL engine. Cheap to clone; clones share one pool.
///
/// Any number of engines, in any number of processes, may serve one
/// database: every step locks its lock's mark row, so steps on one lock are
/// serialised by PostgreSQL whichever process they come through. No step
/// holds the row across a round trip to the process: a replica that stops
/// (paused, partitioned) delays no other.
#[derive(Clone)]
pub struct PostgresEngine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PostgresEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the connect options: they hold the password.
        f.debug_struct("PostgresEngine")
            .field("location", &self.inner.origin.location)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    pool: PgPool,
    /// For the probe after a failed acquire; holds the password.
    options: PgConnectOptions,
    window: i64,
    pub(crate) origin: Origin,
    max_connections: u32,
    acquire_timeout: Duration,
    /// The mutation check's switch
    /// ([`PostgresConfig::hold_transactions_unsafe_for_mutation_tests`]).
    held_transactions: bool,
    /// Holders' single puts, batched across locks.
    pub(crate) fast_puts: FastPuts,
    /// The longest a batch of puts waits for its statement's answer:
    /// `statement_timeout` and a second.
    pub(crate) batch_deadline: Duration,
}

impl PostgresEngine {
    /// Connects, forces the session settings durability and liveness rest
    /// on, checks the server's `fsync`, and creates or checks the tables.
    pub async fn open(config: PostgresConfig) -> Result<PostgresEngine, OpenError> {
        let config = config.resolved().map_err(|bad| OpenError::InvalidSetting {
            name: bad.name,
            reason: bad.reason,
        })?;
        let options: PgConnectOptions =
            config
                .url
                .parse()
                .map_err(|error: sqlx::Error| OpenError::InvalidUrl {
                    reason: palisade_core::redact::scrub(&error.to_string(), &config.url),
                })?;
        let location = format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or(options.get_username())
        );
        let origin = Origin::new(&config.url, location);
        // Startup options: every session of the pool has them from its
        // first statement, whatever the server's or role's defaults say.
        let options = options
            .options(session_settings(&config))
            .options(KEEPALIVES);
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections)
            .acquire_timeout(config.acquire_timeout)
            .connect_lazy_with(options.clone());
        let inner = Inner {
            pool,
            options,
            window: i64::from(config.idempotency_window.max(1)),
            origin,
            max_connections: config.max_connections,
            acquire_timeout: config.acquire_timeout,
            held_transactions: config.held_transactions,
            fast_puts: FastPuts::new(config.max_connections),
            batch_deadline: config.statement_timeout + Duration::from_secs(1),
        };
        let mut connection = inner.connection().await.map_err(|failure| match failure {
            Failure::Unreachable(why) => OpenError::Unavailable(why),
            Failure::Database { error, .. } => inner.origin.open_error(error),
            Failure::InDoubt(error) => OpenError::Database {
                message: inner.origin.scrub(&error),
            },
            Failure::Corrupt(what) => OpenError::Database { message: what },
        })?;
        check_session(&mut connection, &config)
            .await
            .map_err(|error| error.into_open_error(&inner.origin))?;
        schema::migrate(&mut connection)
            .await
            .map_err(|error| error.into_open_error(&inner.origin))?;
        drop(connection);
        if config.held_transactions {
            tracing::warn!(
                "fenced reads hold their lock's row across round trips (mutation test only)"
            );
        }
        Ok(PostgresEngine {
            inner: Arc::new(inner),
        })
    }

    /// How many statements have carried holders' single puts of
    /// concurrent requests together, and how many puts they carried: the
    /// puts per statement under load (1.0 when writes never overlap).
    pub fn batched_puts(&self) -> BatchedPuts {
        self.inner.fast_puts.counts()
    }

    /// The idempotency window this engine keeps per lock.
    pub fn idempotency_window(&self) -> u32 {
        u32::try_from(self.inner.window).unwrap_or(u32::MAX)
    }
}

/// TCP keepalives on PostgreSQL's side of each connection (10 s idle, then
/// 3 probes 5 s apart): a replica whose network died in the middle of
/// sending a statement (PostgreSQL got the statement but not the `Sync`
/// that ends it, so its transaction stays open and no idle timeout runs)
/// is found dead, and its row released, about 25 s later. A stopped
/// process needs none of this: its kernel delivers what it wrote.
/// Not checked on open: over a Unix socket they do not apply.
const KEEPALIVES: [(&str, &str); 3] = [
    ("tcp_keepalives_idle", "10"),
    ("tcp_keepalives_interval", "5"),
    ("tcp_keepalives_count", "3"),
];

/// The settings every session starts with (startup options, stronger than
/// any server or role default), as PostgreSQL reports them in
/// `pg_settings` (durations in milliseconds).
fn session_settings(config: &PostgresConfig) -> [(&'static str, String); 5] {
    let ms = |duration: Duration| duration.as_millis().max(1).to_string();
    [
        ("synchronous_commit", "on".to_owned()),
        ("default_transaction_isolation", "read committed".to_owned()),
        ("lock_timeout", ms(config.lock_timeout)),
        ("statement_timeout", ms(config.statement_timeout)),
        (
            "idle_in_transaction_session_timeout",
            ms(config.idle_in_transaction_timeout),
        ),
    ]
}

/// Why opening failed on a connection that works.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenFailure {
    /// The engine's own refusal.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The database's.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

impl OpenFailure {
    fn into_open_error(self, origin: &Origin) -> OpenError {
        match self {
            OpenFailure::Open(error) => error,
            OpenFailure::Database(error) => origin.open_error(error),
        }
    }
}

/// Checks, on a session of the pool, the settings durability and the
/// bounds rest on (a pooler in between could drop startup options), and
/// the server's `fsync`.
async fn check_session(
    connection: &mut PgConnection,
    config: &PostgresConfig,
) -> Result<(), OpenFailure> {
    for (name, expected) in session_settings(config) {
        let found: String = sqlx::query_scalar("SELECT setting FROM pg_settings WHERE name = $1")
            .bind(name)
            .fetch_one(&mut *connection)
            .await?;
        if found != expected {
            return Err(OpenError::SessionSetting {
                name,
                found,
                expected,
            }
            .into());
        }
    }
    let fsync: String = sqlx::query_scalar("SHOW fsync")
        .fetch_one(&mut *connection)
        .await?;
    if config.require_fsync && fsync != "on" {
        return Err(OpenError::FsyncOff.into());
    }
    Ok(())
}

impl Engine for PostgresEngine {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            name: ENGINE,
            durability: "committed by PostgreSQL with synchronous_commit on".to_owned(),
            location: self.inner.origin.location.clone(),
        }
    }

    fn write(&self, request: WriteRequest) -> EngineFuture<Result<Applied, Refused>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            inner
                .retrying(|| {
                    let inner = &inner;
                    let request = &request;
                    async move { inner.write(request).await }
                })
                .await
        })
    }

    fn read(&self, request: ReadRequest<'_>) -> EngineFuture<Result<Read, Refused>> {
        let inner = Arc::clone(&self.inner);
        let (lock, key) = (request.lock.clone(), request.key.to_vec());
        let sequencer = request.sequencer.cloned();
        Box::pin(async move {
            match sequencer {
                None => inner
                    .plain_read(&lock, &key)
                    .await
                    .map(Ok)
                    .map_err(|failure| failure.into_store_error(&inner.origin)),
                Some(sequencer) => {
                    inner
                        .retrying(|| {
                            let (inner, key, sequencer) = (&inner, &key, &sequencer);
                            async move {
                                let fenced = inner.fence(sequencer, Some(key)).await?;
                                Ok(fenced.map(|(marks, value)| Read {
                                    value: value.map(Into::into),
                                    marks,
                                }))
                            }
                        })
                        .await
                }
            }
        })
    }

    fn admit(&self, sequencer: &Sequencer) -> EngineFuture<Result<Marks, Refused>> {
        let inner = Arc::clone(&self.inner);
        let sequencer = sequencer.clone();
        Box::pin(async move {
            inner
                .retrying(|| {
                    let (inner, sequencer) = (&inner, &sequencer);
                    async move {
                        let fenced = inner.fence(sequencer, None).await?;
                        Ok(fenced.map(|(marks, _)| marks))
                    }
                })
                .await
        })
    }

    fn marks(&self, lock: &LockName) -> EngineFuture<Marks> {
        let inner = Arc::clone(&self.inner);
        let lock = lock.clone();
        Box::pin(async move {
            let marks = async {
                let mut connection = inner.connection().await?;
                let row: Option<(i64, i64)> = sqlx::query_as(schema::SELECT_MARKS)
                    .bind(lock.as_str())
                    .fetch_optional(&mut *connection)
                    .await?;
                Ok::<_, Failure>(row.map(record::marks_from_db).unwrap_or(Marks::ZERO))
            };
            marks
                .await
                .map_err(|failure| failure.into_store_error(&inner.origin))
        })
    }

    fn health(&self) -> EngineFuture<()> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let health = async {
                let mut connection = inner.connection().await?;
                sqlx::query("SELECT 1").execute(&mut *connection).await?;
                Ok::<_, Failure>(())
            };
            health
                .await
                .map_err(|failure| failure.into_store_error(&inner.origin))
        })
    }

    fn dump(&self) -> EngineFuture<Vec<StoredRecord>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let rows = async {
                let mut connection = inner.connection().await?;
                let rows: Vec<(String, Vec<u8>, Vec<u8>)> = sqlx::query_as(schema::DUMP)
                    .fetch_all(&mut *connection)
                    .await?;
                Ok::<_, Failure>(rows)
            };
            let rows = rows
                .await
                .map_err(|failure| failure.into_store_error(&inner.origin))?;
            let mut records: Vec<StoredRecord> = rows
                .into_iter()
                .map(|(place, key, value)| StoredRecord { place, key, value })
                .collect();
            records.sort();
            Ok(records)
        })
    }

    fn close(&self) -> EngineFuture<()> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            // Every acknowledged write is committed already; this only
            // closes the connections.
            inner.pool.close().await;
            Ok(())
        })
    }
}

/// `p_kinds` of `palisade_store_write`.
const KIND_PUT: i16 = 1;
const KIND_DELETE: i16 = 2;
const KIND_CAS: i16 = 3;

/// What an error of the write call means. The function's own SQLSTATEs are
/// refusals (its transaction rolled back). Anything else came after the
/// call was sent, so the write may or may not have committed (an error
/// reported after the commit, a connection lost): in doubt, except for
/// what PostgreSQL reports only for a statement it rolled back or never
/// ran ([`Failure::of_call`]).
fn refusal(error: sqlx::Error, request: &WriteRequest) -> Result<Refused, Failure> {
    let Some(database) = error.as_database_error() else {
        return Err(Failure::during_commit(error));
    };
    let detail = database
        .try_downcast_ref::<PgDatabaseError>()
        .and_then(PgDatabaseError::detail)
        .unwrap_or_default();
    let corrupt = || Failure::Corrupt(format!("the write function's refusal detail `{detail}`"));
    match database.code().as_deref() {
        Some(STALE) => Ok(Refused::stale(
            &request.sequencer,
            marks_in(detail).ok_or_else(corrupt)?,
        )),
        Some(RAISE_TOO_LARGE) => {
            let limit = request.raise_limit.as_ref().ok_or_else(corrupt)?;
            Ok(limit.refusal(&request.sequencer, marks_in(detail).ok_or_else(corrupt)?))
        }
        Some(CAS_MISMATCH) => {
            let (index, current) = detail.split_once(' ').ok_or_else(corrupt)?;
            let op_index = index.parse().map_err(|_| corrupt())?;
            let current = match current {
                "-" => None,
                hex => Some(hex::decode(hex).map_err(|_| corrupt())?.into()),
            };
            Ok(Refused::CasMismatch { op_index, current })
        }
        Some(KEY_REUSED) => match &request.request_id {
            Some(id) => Ok(Refused::IdempotencyKeyReused {
                request_id: id.clone(),
            }),
            None => Err(corrupt()),
        },
        _ => Err(Failure::of_call(error)),
    }
}

/// An [`Applied`] from the columns a write statement returned.
fn applied(
    lock: &LockName,
    results: Vec<OpResult>,
    marks: (i64, i64),
    commit_seq: i64,
    replayed: bool,
) -> Result<Applied, Failure> {
    let commit_seq = u64::try_from(commit_seq)
        .map_err(|_| Failure::Corrupt(format!("commit_seq {commit_seq} of lock `{lock}`")))?;
    Ok(Applied {
        results,
        marks: record::marks_from_db(marks),
        commit_seq,
        replayed,
    })
}

/// A put's result: `created` when the key was absent.
fn put_result(created: bool) -> OpResult {
    if created {
        OpResult::Created
    } else {
        OpResult::Replaced
    }
}

/// The write function's SQLSTATEs.
const STALE: &str = "PS001";
const CAS_MISMATCH: &str = "PS002";
const KEY_REUSED: &str = "PS003";
const RAISE_TOO_LARGE: &str = "PS004";

/// The marks in a refusal's detail, `h_excl h_shared`.
fn marks_in(detail: &str) -> Option<Marks> {
    let (exclusive, shared) = detail.split_once(' ')?;
    Some(record::marks_from_db((
        exclusive.parse().ok()?,
        shared.parse().ok()?,
    )))
}

impl Inner {
    /// A connection from the pool, or why there is none in words an
    /// operator can act on. The pool only says it timed out (it retries a
    /// refused connection until its deadline), so one more attempt, of at
    /// most [`PROBE_TIMEOUT`], finds out what it met.
    pub(crate) async fn connection(&self) -> Result<PoolConnection<Postgres>, Failure> {
        match self.pool.acquire().await {
            Ok(connection) => Ok(connection),
            Err(sqlx::Error::PoolTimedOut) => Err(self.diagnose().await.into()),
            Err(error) => Err(Failure::before(error)),
        }
    }

    /// Why the pool gave no connection within its acquire timeout.
    async fn diagnose(&self) -> Unreachable {
        let location = self.origin.location.clone();
        match tokio::time::timeout(PROBE_TIMEOUT, PgConnection::connect_with(&self.options)).await {
            Err(_elapsed) => Unreachable::NoAnswer {
                location,
                waited: PROBE_TIMEOUT,
            },
            Ok(Err(sqlx::Error::Io(error)))
                if error.kind() == std::io::ErrorKind::ConnectionRefused =>
            {
                Unreachable::Refused { location }
            }
            Ok(Err(error)) => Unreachable::Failed {
                location,
                message: self.origin.scrub(&error),
            },
            Ok(Ok(connection)) => {
                // It answers: the pool's connections were all in use.
                let _ = connection.close().await;
                Unreachable::Busy {
                    location,
                    connections: self.max_connections,
                    waited: self.acquire_timeout,
                }
            }
        }
    }

    /// Runs `attempt` until it succeeds, fails for good, or has been tried
    /// [`ATTEMPTS`] times, pausing between tries (`retry_pauses`: two
    /// statements that deadlocked do not meet again in step).
    async fn retrying<T, Fut>(&self, mut attempt: impl FnMut() -> Fut) -> Result<T, StoreError>
    where
        Fut: Future<Output = Result<T, Failure>>,
    {
        let mut pauses =
            palisade_core::retry_pauses(Duration::from_millis(1), Duration::from_millis(20));
        let mut tries = 0;
        loop {
            tries += 1;
            match attempt().await {
                Ok(outcome) => return Ok(outcome),
                Err(failure) if failure.is_retryable() && tries < ATTEMPTS => {
                    let pause = pauses.next().unwrap_or(Duration::from_millis(20));
                    tracing::debug!(
                        error = %self.origin.scrub(&failure),
                        ?pause,
                        "PostgreSQL asked for a retry"
                    );
                    tokio::time::sleep(pause).await;
                }
                Err(failure) => return Err(failure.into_store_error(&self.origin)),
            }
        }
    }

    /// One call of `palisade_store_write`, auto-committed: the function
    /// locks the mark row, answers a recorded id, applies the rule, the ops,
    /// the raise and the record; the statement's transaction commits when
    /// it returns. sqlx reads the answer up to PostgreSQL's ReadyForQuery,
    /// so a row comes back only once the commit is flushed.
    async fn write(
        self: &Arc<Self>,
        request: &WriteRequest,
    ) -> Result<Result<Applied, Refused>, Failure> {
        let sequencer = &request.sequencer;
        let lock = sequencer.lock();
        let generation = generation_to_db(sequencer);
        // The fast path moves no mark: under it the higher mark is the
        // generation itself, so the cap is a function of the generation
        // alone. A generation the cap refuses even there goes to the
        // function, which refuses it.
        let fast_within_cap = request.raise_limit.is_none_or(|limit| {
            let at_mark = Marks {
                exclusive: sequencer.generation().get(),
                shared: 0,
            };
            limit.check(sequencer, at_mark).is_ok()
        });
        let fast_put = match (&request.request_id, &request.ops[..], fast_within_cap) {
            (None, [Op::Put { key, value }], true) => Some((key, value)),
            _ => None,
        };
        // Alone when nothing else is in flight; otherwise batched with
        // other locks' puts first, and alone when the batch did not decide.
        let turn = fast_put.and_then(|_| self.fast_puts.lone_turn());
        let mut alone = fast_put;
        if let (Some((key, value)), None) = (fast_put, &turn) {
            match FastPuts::put(self, lock, generation, key, value).await {
                Outcome::Written {
                    created,
                    marks,
                    commit_seq,
                } => {
                    return Ok(Ok(applied(
                        lock,
                        vec![put_result(created)],
                        marks,
                        commit_seq,
                        false,
                    )?));
                }
                Outcome::NotAtMark => alone = None,
                Outcome::Alone => {}
                Outcome::Failed(failure) => return Err(failure),
            }
        }
        // Failing to get a connection: nothing was sent.
        let mut connection = self.connection().await?;
        if let Some((key, value)) = alone {
            let fast = sqlx::query_as::<_, (i64, i64, Option<bool>, Option<i64>)>(schema::FAST_PUT)
                .bind(lock.as_str())
                .bind(generation)
                .bind(&key[..])
                .bind(&value[..])
                .fetch_optional(&mut *connection)
                .await;
            match fast {
                Ok(Some((exclusive, shared, Some(created), Some(commit_seq)))) => {
                    return Ok(Ok(applied(
                        lock,
                        vec![put_result(created)],
                        (exclusive, shared),
                        commit_seq,
                        false,
                    )?));
                }
                // Not at the mark, or a lock never seen: nothing written.
                Ok(_) => {}
                Err(error) => return refusal(error, request).map(Err),
            }
        }
        // The function's arrays, built only for a write the fast paths did
        // not decide.
        let mut kinds: Vec<i16> = Vec::with_capacity(request.ops.len());
        let mut keys: Vec<&[u8]> = Vec::with_capacity(request.ops.len());
        let mut values: Vec<Option<&[u8]>> = Vec::with_capacity(request.ops.len());
        let mut expected: Vec<Option<&[u8]>> = Vec::with_capacity(request.ops.len());
        for op in &request.ops {
            let (kind, value, expect) = match op {
                Op::Put { value, .. } => (KIND_PUT, Some(&value[..]), None),
                Op::Delete { .. } => (KIND_DELETE, None, None),
                Op::Cas { expected, new, .. } => (KIND_CAS, new.as_deref(), expected.as_deref()),
            };
            kinds.push(kind);
            keys.push(op.key());
            values.push(value);
            expected.push(expect);
        }
        // As the function takes it: the u64 bit patterns of the count, the
        // clock floor and the request's clock limit.
        let cap = request.raise_limit.map(|limit| {
            (
                limit.cap().max_raise() as i64,
                RaiseCap::CLOCK_GENERATION_FLOOR as i64,
                limit.clock_limit() as i64,
            )
        });
        let answer = sqlx::query_as::<_, (Vec<u8>, i64, i64, i64, bool)>(schema::WRITE)
            .bind(lock.as_str())
            .bind(generation)
            .bind(&kinds)
            .bind(&keys)
            .bind(&values)
            .bind(&expected)
            .bind(request.request_id.as_ref().map(RequestId::as_str))
            .bind(&request.fingerprint)
            .bind(self.window)
            .bind(cap.map(|(max_raise, _, _)| max_raise))
            .bind(cap.map(|(_, clock_floor, _)| clock_floor))
            .bind(cap.map(|(_, _, clock_limit)| clock_limit))
            .fetch_one(&mut *connection)
            .await;
        let (results, exclusive, shared, commit_seq, replayed) = match answer {
            Ok(row) => row,
            Err(error) => return refusal(error, request).map(Err),
        };
        let results = palisade_store::stored::decode_results(&results)
            .filter(|results| results.len() == request.ops.len() || replayed)
            .ok_or_else(|| Failure::Corrupt(format!("op results {results:?} of lock `{lock}`")))?;
        Ok(Ok(applied(
            lock,
            results,
            (exclusive, shared),
            commit_seq,
            replayed,
        )?))
    }

    /// A read without a sequencer: one statement, one snapshot, nothing
    /// locked. What it sees is committed, and so (synchronous_commit on)
    /// durable.
    async fn plain_read(&self, lock: &LockName, key: &[u8]) -> Result<Read, Failure> {
        let mut connection = self.connection().await?;
        let (exclusive, shared, value): (Option<i64>, Option<i64>, Option<Vec<u8>>) =
            sqlx::query_as(schema::PLAIN_READ)
                .bind(lock.as_str())
                .bind(key)
                .fetch_one(&mut *connection)
                .await?;
        let marks = match (exclusive, shared) {
            (Some(exclusive), Some(shared)) => record::marks_from_db((exclusive, shared)),
            _ => Marks::ZERO,
        };
        Ok(Read {
            value: value.map(Into::into),
            marks,
        })
    }

    /// A fenced read of `key` (`None`: an admit, no read): one call of
    /// `palisade_store_fence`, auto-committed, so the mark row is locked
    /// only while PostgreSQL runs it and a raised mark is durable before
    /// the answer comes back (a reader told "H_shared is 7" relies on older
    /// writers being fenced).
    async fn fence(
        &self,
        sequencer: &Sequencer,
        key: Option<&[u8]>,
    ) -> Result<Result<(Marks, Option<Vec<u8>>), Refused>, Failure> {
        let lock = sequencer.lock();
        let mut connection = self.connection().await?;
        let call = sqlx::query_as::<_, (bool, i64, i64, Option<Vec<u8>>)>(schema::FENCE)
            .bind(lock.as_str())
            .bind(sequencer.mode() == Mode::Shared)
            .bind(generation_to_db(sequencer))
            .bind(key);
        let answer = if self.held_transactions {
            // The mutation check: the row locked by a statement of its own
            // and kept across the round trips to this process until COMMIT.
            async {
                let mut tx = connection.begin().await?;
                sqlx::query(schema::LOCK_MARKS)
                    .bind(lock.as_str())
                    .execute(&mut *tx)
                    .await?;
                let answer = call.fetch_one(&mut *tx).await?;
                tx.commit().await?;
                Ok(answer)
            }
            .await
        } else {
            call.fetch_one(&mut *connection).await
        };
        let (admitted, exclusive, shared, value) = answer.map_err(Failure::of_call)?;
        let marks = record::marks_from_db((exclusive, shared));
        Ok(if admitted {
            Ok((marks, value))
        } else {
            Err(Refused::stale(sequencer, marks))
        })
    }
}

/// The presented generation as the `BIGINT` bit pattern the tables keep.
fn generation_to_db(sequencer: &Sequencer) -> i64 {
    record::marks_to_db(Marks {
        exclusive: sequencer.generation().get(),
        shared: 0,
    })
    .0
}
