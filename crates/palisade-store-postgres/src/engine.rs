//! The engine: one PostgreSQL transaction per fenced step.

use std::sync::Arc;
use std::time::Duration;

use palisade_core::{LockName, RaiseCap, Sequencer};
use palisade_store::plan::{fence, stale};
use palisade_store::{
    Applied, Engine, EngineFuture, EngineInfo, Marks, Op, OpResult, Read, Refused, RequestId,
    StoreError, StoredRecord, WriteRequest,
};
use sqlx::postgres::{PgConnectOptions, PgDatabaseError, PgPoolOptions};
use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::error::Failure;
use crate::record;
use crate::schema::{self, LOCK_MARKS};
use crate::{ENGINE, OpenError, PostgresConfig};

/// How many times a request is tried when PostgreSQL reports a
/// serialization failure or deadlock before COMMIT.
const ATTEMPTS: u32 = 3;

/// The PostgreSQL engine. Cheap to clone; clones share one pool.
///
/// Any number of engines, in any number of processes, may serve one
/// database: every step locks its lock's mark row, so steps on one lock are
/// serialised by PostgreSQL whichever process they come through.
#[derive(Debug, Clone)]
pub struct PostgresEngine {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: PgPool,
    window: i64,
    location: String,
}

impl PostgresEngine {
    /// Connects, forces the session settings durability rests on, checks
    /// the server's `fsync`, and creates or checks the tables.
    pub async fn open(config: PostgresConfig) -> Result<PostgresEngine, OpenError> {
        let options: PgConnectOptions =
            config
                .url
                .parse()
                .map_err(|error: sqlx::Error| OpenError::InvalidUrl {
                    // sqlx's message does not repeat the URL.
                    reason: error.to_string(),
                })?;
        let location = format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or(options.get_username())
        );
        let idle_ms = config.idle_in_transaction_timeout.as_millis().max(1);
        // Startup options: every session of the pool has them from its
        // first statement, whatever the server's or role's defaults say.
        let options = options.options([
            ("synchronous_commit", "on".to_owned()),
            ("default_transaction_isolation", "read committed".to_owned()),
            ("idle_in_transaction_session_timeout", idle_ms.to_string()),
        ]);
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections.max(1))
            .acquire_timeout(config.acquire_timeout)
            .connect_with(options)
            .await?;
        check_session(&pool, config.require_fsync).await?;
        schema::migrate(&pool).await?;
        Ok(PostgresEngine {
            inner: Arc::new(Inner {
                pool,
                window: i64::from(config.idempotency_window.max(1)),
                location,
            }),
        })
    }

    /// The idempotency window this engine keeps per lock.
    pub fn idempotency_window(&self) -> u32 {
        u32::try_from(self.inner.window).unwrap_or(u32::MAX)
    }
}

/// Checks what durability rests on, on a session of the pool.
async fn check_session(pool: &PgPool, require_fsync: bool) -> Result<(), OpenError> {
    let mut connection = pool.acquire().await?;
    for (name, expected) in [
        ("synchronous_commit", "on"),
        ("transaction_isolation", "read committed"),
    ] {
        let found: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SHOW {name}")))
            .fetch_one(&mut *connection)
            .await?;
        if found != expected {
            return Err(OpenError::SessionSetting {
                name,
                found,
                expected,
            });
        }
    }
    let fsync: String = sqlx::query_scalar("SHOW fsync")
        .fetch_one(&mut *connection)
        .await?;
    if require_fsync && fsync != "on" {
        return Err(OpenError::FsyncOff);
    }
    Ok(())
}

impl Engine for PostgresEngine {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            name: ENGINE,
            durability: "committed by PostgreSQL with synchronous_commit on".to_owned(),
            location: self.inner.location.clone(),
        }
    }

    fn write(&self, request: WriteRequest) -> EngineFuture<Result<Applied, Refused>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            retrying(|| {
                let inner = &inner;
                let request = &request;
                async move { inner.write(request).await }
            })
            .await
        })
    }

    fn read(
        &self,
        lock: &LockName,
        key: &[u8],
        sequencer: Option<&Sequencer>,
    ) -> EngineFuture<Result<Read, Refused>> {
        let inner = Arc::clone(&self.inner);
        let (lock, key, sequencer) = (lock.clone(), key.to_vec(), sequencer.cloned());
        Box::pin(async move {
            match sequencer {
                None => inner
                    .plain_read(&lock, &key)
                    .await
                    .map(Ok)
                    .map_err(Failure::into_store_error),
                Some(sequencer) => {
                    retrying(|| {
                        let (inner, lock, key, sequencer) = (&inner, &lock, &key, &sequencer);
                        async move { inner.fenced_read(lock, key, sequencer).await }
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
            retrying(|| {
                let (inner, sequencer) = (&inner, &sequencer);
                async move { inner.admit(sequencer).await }
            })
            .await
        })
    }

    fn marks(&self, lock: &LockName) -> EngineFuture<Marks> {
        let inner = Arc::clone(&self.inner);
        let lock = lock.clone();
        Box::pin(async move {
            let row: Option<(i64, i64)> = sqlx::query_as(schema::SELECT_MARKS)
                .bind(lock.as_str())
                .fetch_optional(&inner.pool)
                .await
                .map_err(|error| Failure::before(error).into_store_error())?;
            Ok(row.map(record::marks_from_db).unwrap_or(Marks::ZERO))
        })
    }

    fn health(&self) -> EngineFuture<()> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            sqlx::query("SELECT 1")
                .execute(&inner.pool)
                .await
                .map(drop)
                .map_err(|error| Failure::before(error).into_store_error())
        })
    }

    fn dump(&self) -> EngineFuture<Vec<StoredRecord>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let rows: Vec<(String, Vec<u8>, Vec<u8>)> = sqlx::query_as(schema::DUMP)
                .fetch_all(&inner.pool)
                .await
                .map_err(|error| Failure::before(error).into_store_error())?;
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

/// Runs `attempt` until it succeeds, fails for good, or has been tried
/// [`ATTEMPTS`] times, pausing between tries (`retry_pauses`: two
/// transactions that deadlocked do not meet again in step).
async fn retrying<T, Fut>(mut attempt: impl FnMut() -> Fut) -> Result<T, StoreError>
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
                tracing::debug!(error = %failure, ?pause, "PostgreSQL asked for a retry");
                tokio::time::sleep(pause).await;
            }
            Err(failure) => return Err(failure.into_store_error()),
        }
    }
}

/// Locks `lock`'s mark row for the rest of `tx`, creating it (marks 0) if
/// the lock was never seen. Returns the committed marks.
async fn lock_marks(tx: &mut PgConnection, lock: &LockName) -> Result<Marks, Failure> {
    let select = || sqlx::query_as::<_, (i64, i64)>(LOCK_MARKS).bind(lock.as_str());
    let mut row = select().fetch_optional(&mut *tx).await?;
    if row.is_none() {
        sqlx::query(schema::INSERT_MARKS)
            .bind(lock.as_str())
            .execute(&mut *tx)
            .await?;
        row = select().fetch_optional(&mut *tx).await?;
    }
    // READ COMMITTED: the insert either created the row or waited for the
    // transaction that did, so the second select sees it.
    Ok(record::marks_from_db(row.ok_or(sqlx::Error::RowNotFound)?))
}

/// Ends a transaction that changed nothing. A failed rollback changes no
/// answer: nothing was committed, and the server rolls the transaction
/// back when the connection goes.
async fn roll_back(tx: Transaction<'_, Postgres>) {
    if let Err(error) = tx.rollback().await {
        tracing::debug!(%error, "rollback of an unchanged transaction failed");
    }
}

/// Commits, marking a failure as in doubt.
async fn commit(tx: Transaction<'_, Postgres>) -> Result<(), Failure> {
    tx.commit().await.map_err(Failure::during_commit)
}

/// `p_kinds` of `palisade_store_write`.
const KIND_PUT: i16 = 1;
const KIND_DELETE: i16 = 2;
const KIND_CAS: i16 = 3;

/// What an error of the write call means. The function's own SQLSTATEs are
/// refusals (its transaction rolled back). Anything else came after the
/// call was sent, so the write may or may not have committed (an error
/// reported after the commit, a connection lost): in doubt, except for a
/// serialization failure or deadlock, which PostgreSQL reports only for
/// a statement it rolled back, and which is retried.
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
        Some(STALE) => Ok(stale(
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
        Some("40001" | "40P01") => Err(Failure::before(error)),
        _ => Err(Failure::during_commit(error)),
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
    /// One call of `palisade_store_write`, auto-committed: the function
    /// locks the mark row, answers a recorded id, applies the rule, the ops,
    /// the raise and the record; the statement's transaction commits when
    /// it returns. sqlx reads the answer up to PostgreSQL's ReadyForQuery,
    /// so a row comes back only once the commit is flushed.
    async fn write(&self, request: &WriteRequest) -> Result<Result<Applied, Refused>, Failure> {
        let sequencer = &request.sequencer;
        let lock = sequencer.lock();
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
        let (generation, _) = record::marks_to_db(Marks {
            exclusive: sequencer.generation().get(),
            shared: 0,
        });
        // Failing to get a connection: nothing was sent.
        let mut connection = self.pool.acquire().await?;
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
        if let (None, [Op::Put { key, value }], true) =
            (&request.request_id, &request.ops[..], fast_within_cap)
        {
            let fast = sqlx::query_as::<_, (i64, i64, Option<bool>, Option<i64>)>(schema::FAST_PUT)
                .bind(lock.as_str())
                .bind(generation)
                .bind(&key[..])
                .bind(&value[..])
                .fetch_optional(&mut *connection)
                .await;
            match fast {
                Ok(Some((exclusive, shared, Some(created), Some(commit_seq)))) => {
                    let result = if created {
                        OpResult::Created
                    } else {
                        OpResult::Replaced
                    };
                    return Ok(Ok(applied(
                        lock,
                        vec![result],
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
        let (exclusive, shared, value): (Option<i64>, Option<i64>, Option<Vec<u8>>) =
            sqlx::query_as(schema::PLAIN_READ)
                .bind(lock.as_str())
                .bind(key)
                .fetch_one(&self.pool)
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

    async fn fenced_read(
        &self,
        lock: &LockName,
        key: &[u8],
        sequencer: &Sequencer,
    ) -> Result<Result<Read, Refused>, Failure> {
        let mut tx = self.pool.begin().await?;
        let marks = match self.fence(&mut tx, sequencer).await? {
            Ok(marks) => marks,
            Err(refused) => {
                roll_back(tx).await;
                return Ok(Err(refused));
            }
        };
        let value: Option<Vec<u8>> = sqlx::query_scalar(schema::SELECT_VALUE)
            .bind(lock.as_str())
            .bind(key)
            .fetch_optional(&mut *tx)
            .await?;
        // The raised mark must be durable before the read is answered: a
        // reader told "H_shared is 7" relies on older writers being fenced.
        commit(tx).await?;
        Ok(Ok(Read {
            value: value.map(Into::into),
            marks,
        }))
    }

    async fn admit(&self, sequencer: &Sequencer) -> Result<Result<Marks, Refused>, Failure> {
        let mut tx = self.pool.begin().await?;
        let outcome = self.fence(&mut tx, sequencer).await?;
        match outcome {
            Ok(_) => commit(tx).await?,
            Err(_) => roll_back(tx).await,
        }
        Ok(outcome)
    }

    /// The fencing step inside `tx`: lock the mark row, apply the rule,
    /// raise the marks if they move.
    async fn fence(
        &self,
        tx: &mut PgConnection,
        sequencer: &Sequencer,
    ) -> Result<Result<Marks, Refused>, Failure> {
        let lock = sequencer.lock();
        let before = lock_marks(tx, lock).await?;
        let after = match fence(before, sequencer) {
            Ok(after) => after,
            Err(refused) => return Ok(Err(refused)),
        };
        if after != before {
            let (exclusive, shared) = record::marks_to_db(after);
            sqlx::query(schema::STORE_MARKS)
                .bind(lock.as_str())
                .bind(exclusive)
                .bind(shared)
                .execute(&mut *tx)
                .await?;
        }
        Ok(Ok(after))
    }
}
