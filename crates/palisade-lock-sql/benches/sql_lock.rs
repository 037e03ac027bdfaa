//! Acquire+release on a local PostgreSQL and MariaDB, next to the raw SQL
//! transactions the algorithm needs, all measured in the same run.
//!
//! Run with: `cargo bench -p palisade-lock-sql --bench sql_lock` (starts
//! its own PostgreSQL and MariaDB on free loopback ports through the
//! testkit). Each scenario runs `PALISADE_BENCH_ROUNDS` (3) interleaved
//! rounds of `PALISADE_BENCH_SECS` (2) seconds per system.
//!
//! Scenarios per database:
//! - **1 client**: `raw` (the grant and release transactions written out
//!   here and sent straight through sqlx on one dedicated connection) and
//!   `palisade` (`SqlLock::acquire` + `LockGuard::release`); cycles/s. On
//!   MariaDB also the requests per cycle the server counted (statements
//!   and pings), raw and palisade.
//! - **8 clients, one name**: eight separate `SqlLockClient`s (each its own
//!   pool and, on PostgreSQL, its own `LISTEN` connection, as eight
//!   processes would have), exclusive. The hand-off is from the holder's
//!   `release()` returning (its transaction committed) to the next holder's
//!   `acquire()` returning; fairness is max/min grants per client; failed
//!   attempts are acquire calls that returned an error; re-checks are
//!   grant transactions of a queued waiter that did not grant
//!   (`SqlLockClient::stats`).

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
use palisade_lock_sql::{SqlConfig, SqlLockClient};
use palisade_testkit::sql::{Dialect, SqlServer};
use sqlx::AnyConnection;
use sqlx::{AssertSqlSafe, Connection, Executor, Row};
use tokio::time::Instant;

const CLIENTS: usize = 8;
/// Alternating slices per round of the uncontended scenario.
const SLICES: u32 = 10;

fn session_options() -> SessionOptions {
    SessionOptions::default().with_ttl(Duration::from_secs(10))
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// The transactions of one uncontended cycle, written independently of the
/// crate: what a grant must read (lock row locked, clock, sessions,
/// holders, queue) and write, and what a release must do.
struct RawSql {
    lock_row: &'static str,
    /// The grant's first read: the lock row, and on MariaDB the clock with
    /// it (its select list is evaluated after the row lock is granted).
    grant_lock_row: &'static str,
    /// The clock, where `grant_lock_row` does not read it.
    now: Option<&'static str>,
    sessions: &'static str,
    holders: &'static str,
    waiters: &'static str,
    grant_writes: &'static [&'static str],
    release: &'static [&'static str],
}

const RAW_POSTGRES: RawSql = RawSql {
    lock_row: "SELECT generation, delay_until_us FROM palisade_locks WHERE name = $1 FOR UPDATE",
    grant_lock_row: "SELECT generation, delay_until_us FROM palisade_locks WHERE name = $1 FOR UPDATE",
    now: Some("SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)"),
    sessions: "SELECT id, expires_at_us, lock_delay_us, ended FROM palisade_sessions \
               WHERE id = $1 OR id IN (SELECT session_id FROM palisade_holders WHERE name = $2) \
               ORDER BY id FOR UPDATE",
    holders: "SELECT session_id, mode, generation FROM palisade_holders WHERE name = $1",
    waiters: "SELECT w.id, w.session_id, w.mode, s.expires_at_us, s.ended \
              FROM palisade_waiters w LEFT JOIN palisade_sessions s ON s.id = w.session_id \
              WHERE w.name = $1 ORDER BY w.id",
    grant_writes: &[
        "WITH g AS (UPDATE palisade_locks SET generation = generation + 1 WHERE name = $1), \
         h AS (INSERT INTO palisade_holders (name, session_id, mode, generation, token) \
               VALUES ($1, $2, 'exclusive', 1, 7)), \
         s AS (UPDATE palisade_sessions SET expires_at_us = \
               CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT) + 10000000 WHERE id = $2) \
         SELECT 1",
    ],
    release: &[
        "WITH d AS (DELETE FROM palisade_holders WHERE name = $1 AND session_id = $2 AND token = 7 \
                RETURNING 1), n AS (SELECT pg_notify('palisade_lock', $1)) \
         SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM n)",
    ],
};

const RAW_MARIADB: RawSql = RawSql {
    lock_row: "SELECT generation, delay_until_us FROM palisade_locks WHERE name = ? FOR UPDATE",
    grant_lock_row: "SELECT generation, delay_until_us, \
                     CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED) \
                     FROM palisade_locks WHERE name = ? FOR UPDATE",
    now: None,
    sessions: "SELECT id, expires_at_us, lock_delay_us, ended FROM palisade_sessions \
               WHERE id = ? OR id IN (SELECT session_id FROM palisade_holders WHERE name = ?) \
               ORDER BY id FOR UPDATE",
    holders: "SELECT session_id, mode, generation FROM palisade_holders WHERE name = ?",
    waiters: "SELECT w.id, w.session_id, w.mode, s.expires_at_us, s.ended \
              FROM palisade_waiters w LEFT JOIN palisade_sessions s ON s.id = w.session_id \
              WHERE w.name = ? ORDER BY w.id",
    grant_writes: &[
        "UPDATE palisade_locks SET generation = generation + 1 WHERE name = ?",
        "INSERT INTO palisade_holders (name, session_id, mode, generation, token) \
         VALUES (?, ?, 'exclusive', 1, 7)",
        "UPDATE palisade_sessions SET expires_at_us = \
         CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED) + 10000000 WHERE id = ?",
    ],
    release: &["DELETE FROM palisade_holders WHERE name = ? AND session_id = ? AND token = 7"],
};

/// One raw cycle: the grant transaction, then the release transaction.
async fn raw_cycle(connection: &mut AnyConnection, sql: &RawSql, name: &str, session: &str) {
    let mut tx = connection.begin().await.expect("begin");
    sqlx::query(sql.grant_lock_row)
        .bind(name)
        .fetch_one(&mut *tx)
        .await
        .expect("lock row");
    if let Some(now) = sql.now {
        let _now: i64 = sqlx::query(now)
            .fetch_one(&mut *tx)
            .await
            .expect("now")
            .get(0);
    }
    sqlx::query(sql.sessions)
        .bind(session)
        .bind(name)
        .fetch_all(&mut *tx)
        .await
        .expect("sessions");
    sqlx::query(sql.holders)
        .bind(name)
        .fetch_all(&mut *tx)
        .await
        .expect("holders");
    sqlx::query(sql.waiters)
        .bind(name)
        .fetch_all(&mut *tx)
        .await
        .expect("waiters");
    for (index, statement) in sql.grant_writes.iter().enumerate() {
        let query = sqlx::query(*statement);
        // The MariaDB statements take (name), (name, session), (session).
        let query = match (sql.grant_writes.len(), index) {
            (1, _) | (_, 1) => query.bind(name).bind(session),
            (_, 0) => query.bind(name),
            _ => query.bind(session),
        };
        query.execute(&mut *tx).await.expect("grant writes");
    }
    tx.commit().await.expect("commit grant");

    let mut tx = connection.begin().await.expect("begin");
    sqlx::query(sql.lock_row)
        .bind(name)
        .fetch_one(&mut *tx)
        .await
        .expect("lock row");
    for statement in sql.release {
        sqlx::query(*statement)
            .bind(name)
            .bind(session)
            .execute(&mut *tx)
            .await
            .expect("release");
    }
    tx.commit().await.expect("commit release");
}

async fn raw_connection(server: &SqlServer) -> AnyConnection {
    let mut connection = AnyConnection::connect(&server.url())
        .await
        .expect("connect");
    let isolation = match server.dialect() {
        Dialect::Postgres => {
            "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED"
        }
        Dialect::MariaDb => "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    };
    connection.execute(isolation).await.expect("isolation");
    connection
}

/// The raw client: one dedicated connection, its own session and lock rows.
struct Raw {
    connection: AnyConnection,
    sql: &'static RawSql,
    session: String,
}

impl Raw {
    async fn new(server: &SqlServer) -> Raw {
        let sql = match server.dialect() {
            Dialect::Postgres => &RAW_POSTGRES,
            Dialect::MariaDb => &RAW_MARIADB,
        };
        let mut connection = raw_connection(server).await;
        let session = format!("bench-raw-{}", std::process::id());
        let insert_lock = match server.dialect() {
            Dialect::Postgres => {
                "INSERT INTO palisade_locks (name, generation, delay_until_us) \
                 VALUES ('bench-raw', 0, 0) ON CONFLICT (name) DO NOTHING"
            }
            Dialect::MariaDb => {
                "INSERT IGNORE INTO palisade_locks (name, generation, delay_until_us) \
                 VALUES ('bench-raw', 0, 0)"
            }
        };
        connection.execute(insert_lock).await.expect("lock row");
        let insert_session = format!(
            "INSERT INTO palisade_sessions (id, expires_at_us, lock_delay_us, ended) \
             VALUES ('{session}', 0, 0, 0)"
        );
        connection
            .execute(AssertSqlSafe(insert_session))
            .await
            .expect("session row");
        let mut raw = Raw {
            connection,
            sql,
            session,
        };
        raw.cycle().await; // warm up
        raw
    }

    async fn cycle(&mut self) {
        raw_cycle(&mut self.connection, self.sql, "bench-raw", &self.session).await;
    }

    /// Cycles run in `duration`.
    async fn run(&mut self, duration: Duration) -> (u64, Duration) {
        let started = Instant::now();
        let mut cycles = 0;
        while started.elapsed() < duration {
            self.cycle().await;
            cycles += 1;
        }
        (cycles, started.elapsed())
    }
}

/// MariaDB's count of what clients asked of it: statements (`Questions`)
/// and pings (`Com_admin_commands`). `None` on PostgreSQL, which keeps no
/// such counter without an extension.
async fn server_requests(counter: &mut AnyConnection, dialect: Dialect) -> Option<f64> {
    if dialect != Dialect::MariaDb {
        return None;
    }
    let row = sqlx::query(
        "SELECT CAST(SUM(VARIABLE_VALUE) AS DOUBLE) FROM information_schema.GLOBAL_STATUS \
         WHERE VARIABLE_NAME IN ('QUESTIONS', 'COM_ADMIN_COMMANDS')",
    )
    .fetch_one(&mut *counter)
    .await
    .expect("server counters");
    Some(row.get::<f64, _>(0))
}

/// Requests the server saw per uncontended cycle, raw and palisade, over
/// `cycles` cycles each (MariaDB only). Each reading of the counter is one
/// statement itself, subtracted.
async fn requests_per_cycle(
    server: &SqlServer,
    raw: &mut Raw,
    locks: &palisade_lock_sql::SqlLock,
    cycles: u32,
) -> Option<(f64, f64)> {
    let mut counter = AnyConnection::connect(&server.url())
        .await
        .expect("connect");
    let name = LockName::new("bench-palisade").expect("name");
    // sqlx pings a connection in the background as it returns to the pool:
    // let the last one land before reading.
    let settle = Duration::from_millis(200);
    let start = server_requests(&mut counter, server.dialect()).await?;
    for _ in 0..cycles {
        raw.cycle().await;
    }
    tokio::time::sleep(settle).await;
    let after_raw = server_requests(&mut counter, server.dialect()).await?;
    for _ in 0..cycles {
        let guard = locks
            .acquire(&name, Mode::Exclusive)
            .await
            .expect("acquire");
        guard.release().await.expect("release");
    }
    tokio::time::sleep(settle).await;
    let after_ours = server_requests(&mut counter, server.dialect()).await?;
    let per_cycle = |from: f64, to: f64| (to - from - 1.0) / f64::from(cycles);
    Some((
        per_cycle(start, after_raw),
        per_cycle(after_raw, after_ours),
    ))
}

async fn client(server: &SqlServer) -> SqlLockClient {
    SqlLockClient::connect(SqlConfig::new(server.url()))
        .await
        .expect("connect")
}

/// Cycles per second of `SqlLock` acquire+release on one client.
async fn palisade_rate(locks: &palisade_lock_sql::SqlLock, duration: Duration) -> (u64, Duration) {
    let name = LockName::new("bench-palisade").expect("name");
    let cycle = || async {
        locks
            .acquire(&name, Mode::Exclusive)
            .await
            .expect("acquire")
            .release()
            .await
            .expect("release");
    };
    let started = Instant::now();
    let mut cycles = 0;
    while started.elapsed() < duration {
        cycle().await;
        cycles += 1;
    }
    (cycles, started.elapsed())
}

/// What the contended scenario saw.
#[derive(Default)]
struct Contended {
    grants: Vec<u64>,
    /// Release returned → next holder's acquire returned.
    hand_offs: Vec<Duration>,
    /// Whole acquire calls.
    waits: Vec<Duration>,
    failed: u64,
    elapsed: Duration,
}

/// Per generation: when its acquire returned and when its release returned.
type Timeline = Arc<Mutex<Vec<(u64, Instant, Instant)>>>;

async fn contended(
    server: &SqlServer,
    locks: &[palisade_lock_sql::SqlLock],
    duration: Duration,
    round: usize,
) -> Contended {
    let _ = server;
    let name = LockName::new(format!("bench-one-name-{round}")).expect("name");
    let timeline: Timeline = Arc::default();
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for session in locks {
        let (session, name, timeline) = (session.clone(), name.clone(), timeline.clone());
        tasks.push(tokio::spawn(async move {
            let (mut grants, mut failed, mut waits) = (0, 0, Vec::new());
            while Instant::now() < deadline {
                let asked = Instant::now();
                let guard = match session.acquire(&name, Mode::Exclusive).await {
                    Ok(guard) => guard,
                    Err(error) => {
                        eprintln!("acquire failed: {error}");
                        failed += 1;
                        continue;
                    }
                };
                let granted = Instant::now();
                waits.push(granted - asked);
                let generation = guard.sequencer().expect("sequencer").generation().get();
                guard.release().await.expect("release");
                timeline
                    .lock()
                    .expect("timeline")
                    .push((generation, granted, Instant::now()));
                grants += 1;
            }
            (grants, failed, waits)
        }));
    }
    let mut outcome = Contended::default();
    for task in tasks {
        let (grants, failed, waits) = task.await.expect("bench task");
        outcome.grants.push(grants);
        outcome.failed += failed;
        outcome.waits.extend(waits);
    }
    outcome.elapsed = started.elapsed();
    let mut events = timeline.lock().expect("timeline").clone();
    events.sort_by_key(|event| event.0);
    for pair in events.windows(2) {
        let (previous, next) = (&pair[0], &pair[1]);
        if next.0 == previous.0 + 1 {
            // The next grant can land before the releasing client saw its
            // commit acknowledged: that hand-off counts as 0.
            outcome
                .hand_offs
                .push(next.1.saturating_duration_since(previous.2));
        }
    }
    outcome.hand_offs.sort();
    outcome.waits.sort();
    outcome
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1000.0)
}

async fn bench(server: SqlServer, label: &str, rounds: usize, duration: Duration) {
    let mut raw = (0, Duration::ZERO);
    let mut ours = (0, Duration::ZERO);
    let single = client(&server).await;
    let single = single.session(session_options()).await.expect("session");
    let mut clients = Vec::new();
    let mut sessions = Vec::new();
    for _ in 0..CLIENTS {
        let client = client(&server).await;
        sessions.push(client.session(session_options()).await.expect("session"));
        clients.push(client);
    }
    let mut raw_client = Raw::new(&server).await;
    let requests = requests_per_cycle(&server, &mut raw_client, &single, 200).await;
    let mut total = Contended {
        grants: vec![0; CLIENTS],
        ..Contended::default()
    };
    let stats = |clients: &[SqlLockClient]| {
        clients.iter().fold((0, 0), |(rechecks, skipped), client| {
            let stats = client.stats();
            (rechecks + stats.rechecks, skipped + stats.rechecks_skipped)
        })
    };
    let stats_before = stats(&clients);
    for round in 0..rounds {
        // Uncontended: raw and palisade in alternating slices, so load from
        // elsewhere (and the database's own background work after the
        // contended scenario) hits both alike.
        for _ in 0..SLICES {
            let (cycles, elapsed) = raw_client.run(duration / SLICES).await;
            raw = (raw.0 + cycles, raw.1 + elapsed);
            let (cycles, elapsed) = palisade_rate(&single, duration / SLICES).await;
            ours = (ours.0 + cycles, ours.1 + elapsed);
        }
        let outcome = contended(&server, &sessions, duration, round).await;
        for (sum, grants) in total.grants.iter_mut().zip(&outcome.grants) {
            *sum += grants;
        }
        total.hand_offs.extend(outcome.hand_offs);
        total.waits.extend(outcome.waits);
        total.failed += outcome.failed;
        total.elapsed += outcome.elapsed;
    }
    let stats_after = stats(&clients);
    total.hand_offs.sort();
    total.waits.sort();
    let raw_rate = raw.0 as f64 / raw.1.as_secs_f64();
    let our_rate = ours.0 as f64 / ours.1.as_secs_f64();
    let max = *total.grants.iter().max().unwrap_or(&0) as f64;
    let min = *total.grants.iter().min().unwrap_or(&0) as f64;
    println!();
    println!(
        "{label}, 1 client: raw {raw_rate:.0} cycles/s, palisade {our_rate:.0} cycles/s ({:.2}x raw)",
        our_rate / raw_rate
    );
    if let Some((raw, ours)) = requests {
        println!(
            "{label}, 1 client: requests per cycle (statements and pings, server counters): \
             raw {raw:.1}, palisade {ours:.1}"
        );
    }
    println!(
        "{label}, 8 clients on one name: {:.0} grants/s; hand-off p50 {} p90 {} p99 {} max {}; \
         wait p50 {} max {}; grants per client {}..{} (max/min {:.2}); failed attempts {}; \
         re-checks that did not grant {}, wake-ups skipped by the queue read {}",
        total.grants.iter().sum::<u64>() as f64 / total.elapsed.as_secs_f64(),
        ms(percentile(&total.hand_offs, 0.5)),
        ms(percentile(&total.hand_offs, 0.9)),
        ms(percentile(&total.hand_offs, 0.99)),
        ms(total.hand_offs.last().copied().unwrap_or_default()),
        ms(percentile(&total.waits, 0.5)),
        ms(total.waits.last().copied().unwrap_or_default()),
        min,
        max,
        if min == 0.0 { f64::INFINITY } else { max / min },
        total.failed,
        stats_after.0 - stats_before.0,
        stats_after.1 - stats_before.1,
    );
    drop(sessions);
    drop(clients);
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let seconds: f64 = env_or("PALISADE_BENCH_SECS", 2.0);
    let rounds: usize = env_or("PALISADE_BENCH_ROUNDS", 3);
    let duration = Duration::from_secs_f64(seconds);
    println!("{rounds} interleaved rounds of {seconds} s per scenario and system");
    runtime.block_on(async {
        sqlx::any::install_default_drivers();
        bench(SqlServer::postgres(), "PostgreSQL", rounds, duration).await;
        bench(SqlServer::mariadb(), "MariaDB", rounds, duration).await;
    });
}
