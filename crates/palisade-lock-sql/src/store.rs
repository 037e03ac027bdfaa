//! The transactions on the lock tables. Every change to a lock's holders or
//! waiters runs with that lock's row locked (`SELECT ... FOR UPDATE`), so
//! changes to one lock are serialised by the database and two sessions can
//! never both be granted.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use palisade_core::{LockError, LockName, Mode};
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::{Any, AnyPool, AssertSqlSafe, Row, Transaction};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::decide::{self, Decision, HolderRow, LockView, Outcome, SessionRow, WaiterRow};
use crate::dialect::{SCHEMA_VERSION, Statements};
use crate::error::{from_sqlx, is_retryable, timed_out};
use crate::{Dialect, SqlLockError};

/// How often a transaction the database aborted to break a deadlock is
/// retried before the error is returned.
const RETRIES: usize = 5;

/// The database side of a client: pool, statements, and the in-process
/// wake-up channel.
#[derive(Debug)]
pub(crate) struct Store {
    pub(crate) pool: AnyPool,
    pub(crate) dialect: Dialect,
    pub(crate) sql: Statements,
    pub(crate) timeout: Duration,
    /// Lock names whose state changed; `*` wakes every waiter.
    pub(crate) wake: broadcast::Sender<Arc<str>>,
    pub(crate) counters: Counters,
}

/// What a client has asked the database, for benchmarks and metrics.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    grant_transactions: AtomicU64,
    pub(crate) rechecks: AtomicU64,
    pub(crate) rechecks_skipped: AtomicU64,
}

/// A snapshot of a client's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Grant transactions run (first attempts, re-checks, try-acquires).
    pub grant_transactions: u64,
    /// Grant transactions by a waiter already queued that did not grant:
    /// the wasted work of waking a waiter whose turn had not come.
    pub rechecks: u64,
    /// Wake-ups where one unlocked read showed a live waiter still ahead,
    /// so no grant transaction (and no wait for the lock row) was needed.
    pub rechecks_skipped: u64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> ClientStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ClientStats {
            grant_transactions: load(&self.grant_transactions),
            rechecks: load(&self.rechecks),
            rechecks_skipped: load(&self.rechecks_skipped),
        }
    }

    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// What a grant attempt did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    Granted {
        generation: i64,
    },
    /// Not granted; `waiter` is the queue entry (if queuing was asked) and
    /// `recheck_after` how long nothing can change by expiry alone.
    Waiting {
        waiter: Option<i64>,
        recheck_after: Option<Duration>,
    },
    /// The requesting session is no longer alive on the database.
    SessionEnded,
}

/// One grant request.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(crate) name: LockName,
    pub(crate) session: Arc<str>,
    pub(crate) mode: Mode,
    /// The requester's queue entry from an earlier attempt.
    pub(crate) waiter: Option<i64>,
    /// Whether to queue when the lock cannot be granted now.
    pub(crate) enqueue: bool,
    /// Identifies this acquire call's holder row (for cleanup and release).
    pub(crate) token: i64,
    pub(crate) ttl_us: i64,
}

/// Every statement is rendered from constants in `dialect.rs`; values are
/// always bound, never spliced in.
pub(crate) fn safe(text: &str) -> AssertSqlSafe<&str> {
    AssertSqlSafe(text)
}

pub(crate) fn mode_text(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "exclusive",
        Mode::Shared => "shared",
    }
}

pub(crate) fn parse_mode(text: &str) -> Mode {
    // Anything but "shared" is treated as the stricter mode.
    if text == "shared" {
        Mode::Shared
    } else {
        Mode::Exclusive
    }
}

/// A transaction running on a task of its own ([`Store::detach`]): its
/// answer, once it ends.
#[derive(Debug)]
pub(crate) struct Detached<T> {
    backend: &'static str,
    task: JoinHandle<Result<T, LockError>>,
}

impl<T> Future for Detached<T> {
    type Output = Result<T, LockError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let backend = self.backend;
        Pin::new(&mut self.task).poll(cx).map(|joined| {
            joined.unwrap_or_else(|error| {
                Err(LockError::Backend {
                    backend,
                    source: format!("the task running a transaction ended: {error}").into(),
                })
            })
        })
    }
}

impl Store {
    fn backend(&self) -> &'static str {
        self.dialect.backend()
    }

    fn err(&self, error: sqlx::Error) -> LockError {
        from_sqlx(self.backend(), error)
    }

    /// Runs `body` within the operation timeout.
    pub(crate) async fn bounded<T>(
        &self,
        operation: &'static str,
        body: impl Future<Output = Result<T, LockError>>,
    ) -> Result<T, LockError> {
        tokio::time::timeout(self.timeout, body)
            .await
            .unwrap_or_else(|_| Err(timed_out(self.backend(), operation, self.timeout)))
    }

    /// Runs `transaction` on a task of its own, within the time bound of
    /// `operation`. The caller's future may stop being polled at any point
    /// (its task paused, a `select!` busy with another branch) or be
    /// dropped: the transaction still runs to its end at once, and lets go
    /// of its row locks, instead of holding every other session of the
    /// lock back until the caller is polled again.
    pub(crate) fn detach<T, F>(
        self: &Arc<Self>,
        operation: &'static str,
        transaction: impl FnOnce(Arc<Store>) -> F,
    ) -> Detached<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, LockError>> + Send + 'static,
    {
        let body = transaction(self.clone());
        let store = self.clone();
        Detached {
            backend: self.backend(),
            task: tokio::spawn(async move { store.bounded(operation, body).await }),
        }
    }

    /// Runs one statement on the pool within the time bound of
    /// `operation`; the rows it affected.
    async fn execute<'q>(
        &self,
        operation: &'static str,
        statement: Query<'q, Any, AnyArguments>,
    ) -> Result<u64, LockError> {
        self.bounded(operation, async {
            let done = statement.execute(&self.pool).await;
            Ok(done.map_err(|e| self.err(e))?.rows_affected())
        })
        .await
    }

    /// Refuses a PostgreSQL that runs with `fsync = off` (a generation
    /// bumped by a commit it never wrote would be issued again after a
    /// crash), as the PostgreSQL storage engine does. MariaDB has no such
    /// switch for one server.
    pub(crate) async fn ensure_durable(&self) -> Result<(), SqlLockError> {
        if self.dialect != Dialect::Postgres {
            return Ok(());
        }
        let fsync: String = self
            .bounded("check fsync", async {
                sqlx::query_scalar("SHOW fsync")
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|e| self.err(e))
            })
            .await?;
        if fsync != "on" {
            tracing::error!(
                backend = self.backend(),
                fsync,
                "refused: the PostgreSQL server runs with fsync off"
            );
            return Err(SqlLockError::FsyncOff);
        }
        Ok(())
    }

    /// Creates the tables if missing and checks the schema version, in
    /// one transaction that clients starting together take in turn (within
    /// the operation timeout: a client paused mid-migration holds the
    /// others back only until its transaction is cut).
    pub(crate) async fn ensure_schema(self: &Arc<Self>) -> Result<(), SqlLockError> {
        let found = self
            .detach("create tables", |store| async move {
                let err = |e| store.err(e);
                let mut tx = store.pool.begin().await.map_err(err)?;
                let statements = store.sql.serialise_migration.iter();
                for statement in statements.chain(&store.sql.create_tables) {
                    sqlx::query(safe(statement))
                        .execute(&mut *tx)
                        .await
                        .map_err(err)?;
                }
                sqlx::query(safe(&store.sql.insert_schema_version))
                    .bind(SCHEMA_VERSION)
                    .execute(&mut *tx)
                    .await
                    .map_err(err)?;
                let found: i64 = sqlx::query(safe(&store.sql.schema_version))
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(err)?
                    .try_get(0)
                    .map_err(err)?;
                tx.commit().await.map_err(err)?;
                Ok(found)
            })
            .await?;
        if found > SCHEMA_VERSION {
            return Err(SqlLockError::SchemaTooNew {
                found,
                known: SCHEMA_VERSION,
            });
        }
        Ok(())
    }

    /// Tries to grant `request` in one transaction, retrying a transaction
    /// the database aborted to break a deadlock. Detached
    /// ([`Store::detach`]).
    pub(crate) fn grant(self: &Arc<Self>, request: Request) -> Detached<Attempt> {
        self.detach("grant", |store| async move {
            loop {
                match retrying_deadlocks(|| store.grant_once(&request)).await {
                    Err(error) => return Err(store.err(error)),
                    Ok(Some(result)) => return Ok(result),
                    Ok(None) => {
                        // The lock row did not exist yet: create it outside
                        // the transaction (so its insert lock is not held
                        // while others queue), then try again.
                        sqlx::query(safe(&store.sql.insert_lock))
                            .bind(request.name.as_str())
                            .execute(&store.pool)
                            .await
                            .map_err(|e| store.err(e))?;
                    }
                }
            }
        })
    }

    /// `None` when the lock row does not exist yet.
    async fn grant_once(&self, request: &Request) -> Result<Option<Attempt>, sqlx::Error> {
        let name = request.name.as_str();
        Counters::count(&self.counters.grant_transactions);
        let mut tx = self.pool.begin().await?;
        let lock_row = self.sql.lock_row_now.as_ref().unwrap_or(&self.sql.lock_row);
        let Some(lock_row) = sqlx::query(safe(lock_row))
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?
        else {
            tx.rollback().await?;
            return Ok(None);
        };
        let view = self
            .read_view(&mut tx, &lock_row, name, &request.session)
            .await?;
        let decision = decide::decide(&view, &request.session, request.mode, request.waiter);
        self.apply_cleanup(&mut tx, name, &view, &decision).await?;

        let attempt = match decision.outcome {
            Outcome::Grant { generation } => {
                self.write_grant(&mut tx, request, generation, decision.delay_until_us)
                    .await?;
                if request.mode == Mode::Shared {
                    // The next shared waiter may join.
                    self.notify(&mut tx, name).await?;
                }
                Attempt::Granted { generation }
            }
            Outcome::Wait { recheck_at_us } => {
                let waiter = match (request.waiter, request.enqueue) {
                    (Some(waiter), _) => Some(waiter),
                    (None, true) => Some(
                        sqlx::query(safe(&self.sql.insert_waiter))
                            .bind(name)
                            .bind(&*request.session)
                            .bind(mode_text(request.mode))
                            .fetch_one(&mut *tx)
                            .await?
                            .try_get::<i64, _>(0)?,
                    ),
                    (None, false) => None,
                };
                Attempt::Waiting {
                    waiter,
                    recheck_after: recheck_at_us.map(|at| {
                        Duration::from_micros(
                            u64::try_from(at.saturating_sub(view.now_us)).unwrap_or(0),
                        )
                    }),
                }
            }
            Outcome::RequesterEnded => Attempt::SessionEnded,
        };
        tx.commit().await?;
        if matches!(attempt, Attempt::Granted { .. }) && request.mode == Mode::Shared {
            self.wake_local(name);
        }
        Ok(Some(attempt))
    }

    /// The writes of a grant: bump the generation, insert the holder row,
    /// drop the requester's queue entry, restart its lease. One statement
    /// on PostgreSQL; four on MariaDB.
    async fn write_grant(
        &self,
        tx: &mut Transaction<'static, Any>,
        request: &Request,
        generation: i64,
        delay_until_us: i64,
    ) -> Result<(), sqlx::Error> {
        let name = request.name.as_str();
        if let Some(grant_writes) = &self.sql.grant_writes {
            sqlx::query(safe(grant_writes))
                .bind(generation)
                .bind(delay_until_us)
                .bind(name)
                .bind(name)
                .bind(&*request.session)
                .bind(mode_text(request.mode))
                .bind(generation)
                .bind(request.token)
                .bind(request.waiter)
                .bind(request.ttl_us)
                .bind(&*request.session)
                .execute(&mut **tx)
                .await?;
            return Ok(());
        }
        sqlx::query(safe(&self.sql.update_lock))
            .bind(generation)
            .bind(delay_until_us)
            .bind(name)
            .execute(&mut **tx)
            .await?;
        sqlx::query(safe(&self.sql.insert_holder))
            .bind(name)
            .bind(&*request.session)
            .bind(mode_text(request.mode))
            .bind(generation)
            .bind(request.token)
            .execute(&mut **tx)
            .await?;
        if let Some(waiter) = request.waiter {
            sqlx::query(safe(&self.sql.delete_waiter))
                .bind(waiter)
                .execute(&mut **tx)
                .await?;
        }
        // The hold stands on the session's lease: start it afresh.
        sqlx::query(safe(&self.sql.extend_own_session))
            .bind(request.ttl_us)
            .bind(&*request.session)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    async fn read_view(
        &self,
        tx: &mut Transaction<'static, Any>,
        lock_row: &AnyRow,
        name: &str,
        session: &str,
    ) -> Result<LockView, sqlx::Error> {
        // Read with the lock row where the dialect can (`lock_row_now`).
        let now_us: i64 = match self.sql.lock_row_now {
            Some(_) => lock_row.try_get(2)?,
            None => sqlx::query(safe(&self.sql.now))
                .fetch_one(&mut **tx)
                .await?
                .try_get(0)?,
        };
        let sessions = rows(tx, &self.sql.lock_sessions, &[session, name], |row| {
            Ok(SessionRow {
                id: row.try_get(0)?,
                expires_at_us: row.try_get(1)?,
                lock_delay_us: row.try_get(2)?,
                ended: row.try_get::<i64, _>(3)? != 0,
            })
        })
        .await?;
        let holders = rows(tx, &self.sql.holders, &[name], |row| {
            Ok(HolderRow {
                session_id: row.try_get(0)?,
                mode: parse_mode(&row.try_get::<String, _>(1)?),
            })
        })
        .await?;
        let waiters = rows(tx, &self.sql.waiters, &[name], |row| {
            Ok(WaiterRow {
                id: row.try_get(0)?,
                mode: parse_mode(&row.try_get::<String, _>(2)?),
                session_expires_at_us: row.try_get(3)?,
                session_ended: row.try_get::<Option<i64>, _>(4)?.is_some_and(|e| e != 0),
            })
        })
        .await?;
        Ok(LockView {
            now_us,
            generation: lock_row.try_get(0)?,
            delay_until_us: lock_row.try_get(1)?,
            sessions,
            holders,
            waiters,
        })
    }

    /// Removes dead holders and waiters the decision found, and records a
    /// lock-delay they started.
    async fn apply_cleanup(
        &self,
        tx: &mut Transaction<'static, Any>,
        name: &str,
        view: &LockView,
        decision: &Decision,
    ) -> Result<(), sqlx::Error> {
        for session in &decision.dead_holders {
            sqlx::query(safe(&self.sql.delete_holder))
                .bind(name)
                .bind(session)
                .execute(&mut **tx)
                .await?;
            // Ended for good: a renewal racing with this grant waits for
            // the session row lock and then finds it ended.
            sqlx::query(safe(&self.sql.end_session))
                .bind(session)
                .execute(&mut **tx)
                .await?;
        }
        for waiter in &decision.dead_waiters {
            sqlx::query(safe(&self.sql.delete_waiter))
                .bind(waiter)
                .execute(&mut **tx)
                .await?;
        }
        if decision.delay_until_us != view.delay_until_us {
            sqlx::query(safe(&self.sql.update_lock))
                .bind(view.generation)
                .bind(decision.delay_until_us)
                .bind(name)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// Compare-and-delete of a hold by its session and acquire token, and,
    /// when `waiter` is set, of that queue entry. Returns whether the hold
    /// was there. Waiters of the lock are woken. Detached
    /// ([`Store::detach`]).
    pub(crate) fn release(
        self: &Arc<Self>,
        name: &LockName,
        session: &str,
        token: i64,
        waiter: Option<i64>,
    ) -> Detached<bool> {
        let (name, session) = (name.clone(), session.to_owned());
        self.detach("release", move |store| async move {
            let found =
                retrying_deadlocks(|| store.release_once(name.as_str(), &session, token, waiter))
                    .await
                    .map_err(|error| store.err(error))?;
            store.wake_local(name.as_str());
            Ok(found)
        })
    }

    async fn release_once(
        &self,
        name: &str,
        session: &str,
        token: i64,
        waiter: Option<i64>,
    ) -> Result<bool, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        // Same lock order as a grant: the lock row first.
        sqlx::query(safe(&self.sql.lock_row))
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        let deleted = match &self.sql.release_notify {
            Some(release_notify) => sqlx::query(safe(release_notify))
                .bind(name)
                .bind(session)
                .bind(token)
                .bind(waiter)
                .bind(name)
                .fetch_one(&mut *tx)
                .await?
                .try_get::<i64, _>(0)?
                .unsigned_abs(),
            None => {
                let deleted = sqlx::query(safe(&self.sql.delete_holder_by_token))
                    .bind(name)
                    .bind(session)
                    .bind(token)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if let Some(waiter) = waiter {
                    sqlx::query(safe(&self.sql.delete_waiter))
                        .bind(waiter)
                        .execute(&mut *tx)
                        .await?;
                }
                self.notify(&mut tx, name).await?;
                deleted
            }
        };
        tx.commit().await?;
        Ok(deleted > 0)
    }

    /// Queues a PostgreSQL notification for `name`, delivered at commit.
    async fn notify(
        &self,
        tx: &mut Transaction<'static, Any>,
        name: &str,
    ) -> Result<(), sqlx::Error> {
        if let Some(notify) = &self.sql.notify {
            sqlx::query(safe(notify))
                .bind(name)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// Wakes this process's waiters on `name` (`*`: all of them).
    pub(crate) fn wake_local(&self, name: &str) {
        let _ = self.wake.send(Arc::from(name));
    }

    /// Registers a new session whose lease runs `ttl_us` from now by the
    /// database's clock.
    pub(crate) async fn open_session(
        &self,
        id: &str,
        ttl_us: i64,
        lock_delay_us: i64,
    ) -> Result<(), LockError> {
        let open = sqlx::query(safe(&self.sql.open_session))
            .bind(id)
            .bind(ttl_us)
            .bind(lock_delay_us);
        self.execute("open session", open).await.map(drop)
    }

    /// Extends a live session's lease; `false` when the database says the
    /// session already ended or expired.
    pub(crate) async fn renew_session(&self, id: &str, ttl_us: i64) -> Result<bool, LockError> {
        let renew = sqlx::query(safe(&self.sql.renew_session))
            .bind(ttl_us)
            .bind(id);
        Ok(self.execute("renew", renew).await? > 0)
    }

    /// Ends a session's lease now. `clean` (a closed session) waives its
    /// lock-delay; otherwise it applies, as after a crash.
    pub(crate) async fn end_session(&self, id: &str, clean: bool) -> Result<(), LockError> {
        let statement = if clean {
            &self.sql.close_session
        } else {
            &self.sql.expire_session
        };
        let end = sqlx::query(safe(statement)).bind(id);
        self.execute("end session", end).await.map(drop)
    }

    /// Deletes session rows that ended more than `age` ago and have no
    /// holder or waiter rows left.
    pub(crate) async fn forget_old_sessions(&self, age: Duration) -> Result<u64, LockError> {
        let forget = sqlx::query(safe(&self.sql.forget_sessions))
            .bind(i64::try_from(age.as_micros()).unwrap_or(i64::MAX));
        self.execute("forget sessions", forget).await
    }

    /// Whether a live waiter queued before `waiter` must be granted before
    /// a requester in `mode` can be. One statement, no row locks: only an
    /// answer of `true` is acted on (the waiter sleeps on), and whatever
    /// removes that waiter later wakes this one again (its grant is
    /// followed by a release, a cancelled waiter notifies, and a waiter
    /// whose session dies is covered by the re-check at its expiry).
    pub(crate) async fn queued_ahead(
        &self,
        name: &LockName,
        waiter: i64,
        mode: Mode,
    ) -> Result<bool, LockError> {
        self.bounded("queue check", async {
            let ahead: i64 = sqlx::query(safe(&self.sql.queued_ahead))
                .bind(name.as_str())
                .bind(waiter)
                .bind(mode_text(mode))
                .fetch_one(&self.pool)
                .await
                .and_then(|row| row.try_get(0))
                .map_err(|e| self.err(e))?;
            Ok(ahead > 0)
        })
        .await
    }

    /// Whether a live session holds `name` with `generation` in `mode`,
    /// read from the primary in one statement.
    pub(crate) async fn is_held(
        &self,
        name: &LockName,
        generation: i64,
        mode: Mode,
    ) -> Result<bool, LockError> {
        self.bounded("live check", async {
            let row = sqlx::query(safe(&self.sql.live_check))
                .bind(name.as_str())
                .bind(generation)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| self.err(e))?;
            let Some(row) = row else { return Ok(false) };
            let read = || -> Result<bool, sqlx::Error> {
                let held_mode = parse_mode(&row.try_get::<String, _>(0)?);
                let expires: i64 = row.try_get(1)?;
                let ended: i64 = row.try_get(2)?;
                let now: i64 = row.try_get(3)?;
                Ok(held_mode == mode && ended == 0 && expires > now)
            };
            read().map_err(|e| self.err(e))
        })
        .await
    }
}

/// Runs `once` again, up to [`RETRIES`] times with pauses from
/// [`palisade_core::retry_pauses`], when the database aborted it to break a
/// deadlock or a serialization conflict (it changed nothing then).
async fn retrying_deadlocks<T, F>(mut once: impl FnMut() -> F) -> Result<T, sqlx::Error>
where
    F: Future<Output = Result<T, sqlx::Error>>,
{
    let mut pauses =
        palisade_core::retry_pauses(Duration::from_millis(5), Duration::from_millis(100));
    let mut retries = 0;
    loop {
        match once().await {
            Err(error) if is_retryable(&error) && retries < RETRIES => {
                retries += 1;
                tokio::time::sleep(pauses.next().unwrap_or(Duration::from_millis(100))).await;
            }
            outcome => return outcome,
        }
    }
}

/// Every row `sql` selects with `binds`, each read by `read`.
async fn rows<T>(
    tx: &mut Transaction<'static, Any>,
    sql: &str,
    binds: &[&str],
    read: impl Fn(&AnyRow) -> Result<T, sqlx::Error>,
) -> Result<Vec<T>, sqlx::Error> {
    let mut query = sqlx::query(safe(sql));
    for bind in binds {
        query = query.bind(*bind);
    }
    query.fetch_all(&mut **tx).await?.iter().map(read).collect()
}
