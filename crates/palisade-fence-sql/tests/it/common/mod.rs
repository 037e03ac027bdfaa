//! What the PostgreSQL and MariaDB suites share: a real server, a pool,
//! and the application statements of the tests, per dialect.

use futures::future::BoxFuture;
use palisade_core::{Generation, LockName, Mode, Sequencer, marks::Marks};
use palisade_fence_sql::FenceDatabase;
use palisade_testkit::sql::SqlServer;
use sqlx::{AssertSqlSafe, MySql, Pool, Postgres};

/// A database the suites run on.
pub(crate) trait TestDb: FenceDatabase {
    fn server() -> SqlServer;
    fn connect(url: &str, max: u32) -> BoxFuture<'_, Pool<Self>>;
    /// Runs one statement (values are spliced in by the test itself).
    fn exec(conn: &mut Self::Connection, sql: String) -> BoxFuture<'_, Result<u64, sqlx::Error>>;
    /// Runs a query of one BIGINT column.
    fn ints(
        conn: &mut Self::Connection,
        sql: String,
    ) -> BoxFuture<'_, Result<Vec<i64>, sqlx::Error>>;
    /// SQL counting sessions waiting for a row lock (or, on MariaDB, in the
    /// fence statement that waits for it).
    const LOCK_WAITERS: &'static str;
    /// An auto-numbered BIGINT primary key column.
    const SERIAL: &'static str;
}

impl TestDb for Postgres {
    fn server() -> SqlServer {
        SqlServer::postgres()
    }
    fn connect(url: &str, max: u32) -> BoxFuture<'_, Pool<Self>> {
        Box::pin(async move {
            sqlx::postgres::PgPoolOptions::new()
                .max_connections(max)
                .connect(url)
                .await
                .expect("connect to the test's PostgreSQL")
        })
    }
    fn exec(conn: &mut Self::Connection, sql: String) -> BoxFuture<'_, Result<u64, sqlx::Error>> {
        Box::pin(async move {
            Ok(sqlx::query(AssertSqlSafe(sql))
                .execute(conn)
                .await?
                .rows_affected())
        })
    }
    fn ints(
        conn: &mut Self::Connection,
        sql: String,
    ) -> BoxFuture<'_, Result<Vec<i64>, sqlx::Error>> {
        Box::pin(async move { sqlx::query_scalar(AssertSqlSafe(sql)).fetch_all(conn).await })
    }
    const LOCK_WAITERS: &'static str = "SELECT count(*) FROM pg_locks WHERE NOT granted";
    const SERIAL: &'static str = "BIGSERIAL PRIMARY KEY";
}

impl TestDb for MySql {
    fn server() -> SqlServer {
        SqlServer::mariadb()
    }
    fn connect(url: &str, max: u32) -> BoxFuture<'_, Pool<Self>> {
        Box::pin(async move {
            sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(max)
                .connect(url)
                .await
                .expect("connect to the test's MariaDB")
        })
    }
    fn exec(conn: &mut Self::Connection, sql: String) -> BoxFuture<'_, Result<u64, sqlx::Error>> {
        Box::pin(async move {
            Ok(sqlx::query(AssertSqlSafe(sql))
                .execute(conn)
                .await?
                .rows_affected())
        })
    }
    fn ints(
        conn: &mut Self::Connection,
        sql: String,
    ) -> BoxFuture<'_, Result<Vec<i64>, sqlx::Error>> {
        Box::pin(async move { sqlx::query_scalar(AssertSqlSafe(sql)).fetch_all(conn).await })
    }
    // INNODB_TRX was seen to miss a waiter under load (its view is a
    // cache); the process list shows the fence statement while it waits.
    const LOCK_WAITERS: &'static str = "SELECT count(*) FROM information_schema.PROCESSLIST \
         WHERE INFO LIKE 'INSERT INTO palisade\\_marks%'";
    const SERIAL: &'static str = "BIGINT AUTO_INCREMENT PRIMARY KEY";
}

/// A started server and a migrated pool on it.
pub(crate) struct Env<D: TestDb> {
    pub(crate) pool: Pool<D>,
    /// The observer's own connection, so watching never competes with the
    /// transactions under test for the pool.
    probe: Pool<D>,
    _server: SqlServer,
}

impl<D: TestDb> Env<D> {
    pub(crate) async fn start(max_connections: u32) -> Env<D> {
        let server = D::server();
        let pool = D::connect(&server.url(), max_connections).await;
        palisade_fence_sql::migrate(&pool).await.expect("migrate");
        let probe = D::connect(&server.url(), 1).await;
        Env {
            pool,
            probe,
            _server: server,
        }
    }

    pub(crate) async fn exec(&self, sql: impl Into<String>) -> u64 {
        let mut conn = self.pool.acquire().await.unwrap();
        D::exec(&mut conn, sql.into()).await.unwrap()
    }

    pub(crate) async fn ints(&self, sql: impl Into<String>) -> Vec<i64> {
        let mut conn = self.pool.acquire().await.unwrap();
        D::ints(&mut conn, sql.into()).await.unwrap()
    }

    /// The committed marks of `lock` (0, 0 when it has no row).
    pub(crate) async fn marks(&self, lock: &str) -> Marks {
        let row = self
            .ints(format!(
                "SELECT h_excl FROM palisade_marks WHERE lock_name = '{lock}' \
                 UNION ALL SELECT h_shared FROM palisade_marks WHERE lock_name = '{lock}'"
            ))
            .await;
        match row.as_slice() {
            [] => Marks::ZERO,
            [exclusive, shared] => Marks {
                exclusive: *exclusive as u64,
                shared: *shared as u64,
            },
            other => panic!("unexpected marks rows {other:?}"),
        }
    }

    /// Waits until some transaction waits for a row lock: the event the
    /// blocking tests need, polled with a generous bound.
    pub(crate) async fn until_a_transaction_waits_for_a_lock(&self) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut probe = self.probe.acquire().await.unwrap();
        while D::ints(&mut probe, D::LOCK_WAITERS.into()).await.unwrap() == [0] {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no transaction ever waited for the marks row"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

pub(crate) fn seq(lock: &str, mode: Mode, generation: u64) -> Sequencer {
    Sequencer::new(
        LockName::new(lock).unwrap(),
        mode,
        Generation::new(generation).unwrap(),
    )
}

pub(crate) fn excl(lock: &str, generation: u64) -> Sequencer {
    seq(lock, Mode::Exclusive, generation)
}
