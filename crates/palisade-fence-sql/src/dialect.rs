//! The SQL each database runs, one place per dialect.
//!
//! Every statement here is quoted verbatim in `docs/own-database.md`; keep
//! the two in step.

use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use sqlx::{MySql, Pool, Postgres};

use crate::SchemaError;

/// The schema version [`migrate`](crate::migrate) installs.
pub const SCHEMA_VERSION: i64 = 1;

/// A database the fence speaks: PostgreSQL ([`Postgres`]) or
/// MariaDB/MySQL ([`MySql`]). Sealed: the fence's safety rests on the exact
/// locking behaviour of each statement.
pub trait FenceDatabase: sqlx::Database + sealed::Sealed {
    /// Locks the lock's marks row until the transaction ends and returns
    /// the marks as last committed, creating the row (marks 0) if needed.
    #[doc(hidden)]
    fn lock_marks<'a>(
        conn: &'a mut Self::Connection,
        lock: &'a str,
    ) -> BoxFuture<'a, Result<Option<(i64, i64)>, sqlx::Error>>;

    /// Writes raised marks into the (already locked) row.
    #[doc(hidden)]
    fn store_marks<'a>(
        conn: &'a mut Self::Connection,
        lock: &'a str,
        exclusive: i64,
        shared: i64,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>>;

    /// Creates the tables if missing and records the schema version.
    #[doc(hidden)]
    fn migrate(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), SchemaError>>;

    /// The fenced row update: `UPDATE {table} SET {set}, fence_generation =
    /// <g> WHERE {key_column} = <key> AND fence_generation <= <g>`; then,
    /// when no row matched, the row's `fence_generation` if it exists.
    #[doc(hidden)]
    fn update_row<'a>(
        conn: &'a mut Self::Connection,
        update: &'a crate::row::ValidRowUpdate<'a>,
        generation: i64,
    ) -> BoxFuture<'a, Result<RowOutcome, sqlx::Error>>;
}

/// What a fenced row update found.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowOutcome {
    Updated,
    NoSuchRow,
    Newer(i64),
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for sqlx::Postgres {}
    impl Sealed for sqlx::MySql {}
}

/// PostgreSQL statements.
pub mod postgres {
    /// The marks table.
    pub const CREATE_MARKS: &str = "CREATE TABLE IF NOT EXISTS palisade_marks (\
        lock_name TEXT PRIMARY KEY, \
        h_excl BIGINT NOT NULL CHECK (h_excl >= 0), \
        h_shared BIGINT NOT NULL CHECK (h_shared >= 0))";
    /// The schema version table.
    pub const CREATE_VERSION: &str =
        "CREATE TABLE IF NOT EXISTS palisade_sql_schema (version BIGINT NOT NULL)";
    /// Locks and reads the marks row (first statement of the fence).
    pub const LOCK_MARKS: &str =
        "SELECT h_excl, h_shared FROM palisade_marks WHERE lock_name = $1 FOR UPDATE";
    /// Creates the row of a lock never seen; a concurrent creator wins.
    pub const INSERT_MARKS: &str = "INSERT INTO palisade_marks (lock_name, h_excl, h_shared) \
        VALUES ($1, 0, 0) ON CONFLICT (lock_name) DO NOTHING";
    /// Raises the marks (only when the rule raised them).
    pub const STORE_MARKS: &str =
        "UPDATE palisade_marks SET h_excl = $2, h_shared = $3 WHERE lock_name = $1";
}

/// MariaDB / MySQL statements.
pub mod mysql {
    /// The marks table. `VARBINARY` so lock names compare byte for byte: a
    /// case-insensitive collation would make `Orders` and `orders` one lock.
    pub const CREATE_MARKS: &str = "CREATE TABLE IF NOT EXISTS palisade_marks (\
        lock_name VARBINARY(512) NOT NULL PRIMARY KEY, \
        h_excl BIGINT NOT NULL, \
        h_shared BIGINT NOT NULL) ENGINE=InnoDB";
    /// The schema version table.
    pub const CREATE_VERSION: &str =
        "CREATE TABLE IF NOT EXISTS palisade_sql_schema (version BIGINT NOT NULL) ENGINE=InnoDB";
    /// The whole fence read in one statement (its first): creates the row
    /// if missing, takes its exclusive lock, and returns the marks as last
    /// committed (the duplicate-key path reads the row with a locking read,
    /// after waiting for its holder; `RETURNING` needs MariaDB 10.5+).
    ///
    /// Not `SELECT .. FOR UPDATE` first: on a missing row that takes a gap
    /// lock, and first fences of two *different* new locks in the same gap
    /// then each wait, to insert, for the other's gap lock: a deadlock. An
    /// insert takes only an insert-intention lock on the gap, which does
    /// not conflict with another insert's.
    pub const LOCK_MARKS: &str = "INSERT INTO palisade_marks (lock_name, h_excl, h_shared) \
        VALUES (?, 0, 0) ON DUPLICATE KEY UPDATE lock_name = lock_name \
        RETURNING h_excl, h_shared";
    /// MySQL, which has no `RETURNING`: the same upsert, then
    /// [`LOCK_MARKS_READ`].
    pub const UPSERT_MARKS: &str = "INSERT INTO palisade_marks (lock_name, h_excl, h_shared) \
        VALUES (?, 0, 0) ON DUPLICATE KEY UPDATE lock_name = lock_name";
    /// MySQL: reads the row the upsert locked. A locking read: it sees the
    /// newest committed marks, not the transaction's snapshot.
    pub const LOCK_MARKS_READ: &str =
        "SELECT h_excl, h_shared FROM palisade_marks WHERE lock_name = ? FOR UPDATE";
    /// Raises the marks (only when the rule raised them).
    pub const STORE_MARKS: &str =
        "UPDATE palisade_marks SET h_excl = ?, h_shared = ? WHERE lock_name = ?";
}

const SELECT_VERSION: &str = "SELECT MAX(version) FROM palisade_sql_schema";

/// Set once a server refused `INSERT ... RETURNING` as a syntax error
/// (MySQL): from then on this process fences with the two statements.
static NO_RETURNING: AtomicBool = AtomicBool::new(false);

/// MySQL's `ER_PARSE_ERROR`: the statement was not run at all, so the
/// transaction goes on unchanged.
fn is_parse_error(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .is_some_and(|db| db.number() == 1064),
        _ => false,
    }
}

impl FenceDatabase for Postgres {
    fn lock_marks<'a>(
        conn: &'a mut Self::Connection,
        lock: &'a str,
    ) -> BoxFuture<'a, Result<Option<(i64, i64)>, sqlx::Error>> {
        Box::pin(async move {
            let select = || sqlx::query_as::<_, (i64, i64)>(postgres::LOCK_MARKS).bind(lock);
            if let Some(marks) = select().fetch_optional(&mut *conn).await? {
                return Ok(Some(marks));
            }
            sqlx::query(postgres::INSERT_MARKS)
                .bind(lock)
                .execute(&mut *conn)
                .await?;
            select().fetch_optional(&mut *conn).await
        })
    }

    fn store_marks<'a>(
        conn: &'a mut Self::Connection,
        lock: &'a str,
        exclusive: i64,
        shared: i64,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            sqlx::query(postgres::STORE_MARKS)
                .bind(lock)
                .bind(exclusive)
                .bind(shared)
                .execute(conn)
                .await
                .map(drop)
        })
    }

    fn migrate(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), SchemaError>> {
        Box::pin(async move {
            let mut tx = pool.begin().await?;
            // Two first-time migrations at once: one waits for the other.
            sqlx::query("SELECT pg_advisory_xact_lock(7070707)")
                .execute(&mut *tx)
                .await?;
            sqlx::query(postgres::CREATE_MARKS)
                .execute(&mut *tx)
                .await?;
            sqlx::query(postgres::CREATE_VERSION)
                .execute(&mut *tx)
                .await?;
            let found: Option<i64> = sqlx::query_scalar(SELECT_VERSION)
                .fetch_one(&mut *tx)
                .await?;
            if check_version(found)? {
                sqlx::query("INSERT INTO palisade_sql_schema (version) VALUES ($1)")
                    .bind(SCHEMA_VERSION)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    fn update_row<'a>(
        conn: &'a mut Self::Connection,
        update: &'a crate::row::ValidRowUpdate<'a>,
        generation: i64,
    ) -> BoxFuture<'a, Result<RowOutcome, sqlx::Error>> {
        Box::pin(async move {
            let sql = update.update_sql(true);
            // Identifiers were checked by `RowUpdate::validate`; data is bound.
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for value in &update.values {
                query = query.bind(*value);
            }
            let done = query
                .bind(generation)
                .bind(update.key)
                .execute(&mut *conn)
                .await?;
            if done.rows_affected() > 0 {
                return Ok(RowOutcome::Updated);
            }
            let read = update.read_sql("$1");
            let stored: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(read))
                .bind(update.key)
                .fetch_optional(&mut *conn)
                .await?;
            Ok(stored.map_or(RowOutcome::NoSuchRow, RowOutcome::Newer))
        })
    }
}

impl FenceDatabase for MySql {
    fn lock_marks<'a>(
        conn: &'a mut Self::Connection,
        lock: &'a str,
    ) -> BoxFuture<'a, Result<Option<(i64, i64)>, sqlx::Error>> {
        Box::pin(async move {
            if !NO_RETURNING.load(Ordering::Relaxed) {
                match sqlx::query_as::<_, (i64, i64)>(mysql::LOCK_MARKS)
                    .bind(lock)
                    .fetch_optional(&mut *conn)
                    .await
                {
                    Err(error) if is_parse_error(&error) => {
                        NO_RETURNING.store(true, Ordering::Relaxed);
                    }
                    done => return done,
                }
            }
            sqlx::query(mysql::UPSERT_MARKS)
                .bind(lock)
                .execute(&mut *conn)
                .await?;
            sqlx::query_as::<_, (i64, i64)>(mysql::LOCK_MARKS_READ)
                .bind(lock)
                .fetch_optional(&mut *conn)
                .await
        })
    }

    fn store_marks<'a>(
        conn: &'a mut Self::Connection,
        lock: &'a str,
        exclusive: i64,
        shared: i64,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            sqlx::query(mysql::STORE_MARKS)
                .bind(exclusive)
                .bind(shared)
                .bind(lock)
                .execute(conn)
                .await
                .map(drop)
        })
    }

    fn migrate(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), SchemaError>> {
        Box::pin(async move {
            // DDL commits implicitly in MySQL; `IF NOT EXISTS` makes a
            // repeated or concurrent run harmless.
            sqlx::query(mysql::CREATE_MARKS).execute(pool).await?;
            sqlx::query(mysql::CREATE_VERSION).execute(pool).await?;
            let mut tx = pool.begin().await?;
            // Serialise concurrent first runs on a named lock.
            sqlx::query("SELECT GET_LOCK('palisade_sql_migrate', 60)")
                .execute(&mut *tx)
                .await?;
            let found: Option<i64> = sqlx::query_scalar(SELECT_VERSION)
                .fetch_one(&mut *tx)
                .await?;
            if check_version(found)? {
                sqlx::query("INSERT INTO palisade_sql_schema (version) VALUES (?)")
                    .bind(SCHEMA_VERSION)
                    .execute(&mut *tx)
                    .await?;
            }
            sqlx::query("SELECT RELEASE_LOCK('palisade_sql_migrate')")
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn update_row<'a>(
        conn: &'a mut Self::Connection,
        update: &'a crate::row::ValidRowUpdate<'a>,
        generation: i64,
    ) -> BoxFuture<'a, Result<RowOutcome, sqlx::Error>> {
        Box::pin(async move {
            let sql = update.update_sql(false);
            // Identifiers were checked by `RowUpdate::validate`; data is bound.
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for value in &update.values {
                query = query.bind(*value);
            }
            let done = query
                .bind(generation)
                .bind(update.key)
                .bind(generation)
                .execute(&mut *conn)
                .await?;
            if done.rows_affected() > 0 {
                return Ok(RowOutcome::Updated);
            }
            // MySQL reports rows *changed*: a row already at this exact
            // generation and values counts 0, so read back in any case. A
            // locking read sees the newest committed row, not the snapshot.
            let read = update.read_sql("?");
            let stored: Option<i64> =
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!("{read} FOR UPDATE")))
                    .bind(update.key)
                    .fetch_optional(&mut *conn)
                    .await?;
            Ok(match stored {
                None => RowOutcome::NoSuchRow,
                Some(stored) if stored <= generation => RowOutcome::Updated,
                Some(stored) => RowOutcome::Newer(stored),
            })
        })
    }
}

/// Records [`SCHEMA_VERSION`] unless a version is there; refuses a newer one.
fn check_version(found: Option<i64>) -> Result<bool, SchemaError> {
    match found {
        Some(found) if found > SCHEMA_VERSION => Err(SchemaError::TooNew {
            found,
            known: SCHEMA_VERSION,
        }),
        Some(_) => Ok(false),
        None => Ok(true),
    }
}
