//! A fenced transaction of one update against the same transaction
//! unfenced, 32 clients, on a local PostgreSQL and MariaDB, in the same run.
//!
//! Run with: `cargo bench -p palisade-fence-sql --bench fenced_transaction`
//! (starts its own servers on free ports). Each variant runs
//! `PALISADE_BENCH_ROUNDS` (3) interleaved rounds of `PALISADE_BENCH_SECS`
//! (3) seconds per database. Each client updates its own row; a fenced
//! client fences with its own lock (the holder's steady state: the same
//! generation again, so the marks row is locked and read, not rewritten).

use std::sync::Arc;
use std::time::Duration;

use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_testkit::bench::env_number;
use palisade_testkit::sql::SqlServer;
use tokio::time::Instant;

const CLIENTS: usize = 32;

fn sequencer(client: usize) -> Sequencer {
    Sequencer::new(
        LockName::new(format!("bench/{client}")).expect("a valid lock name"),
        Mode::Exclusive,
        Generation::new(1).expect("1 is a generation"),
    )
}

/// Runs `CLIENTS` loops of `one` for `secs` and returns transactions/s.
async fn measure<F, Fut>(secs: u64, one: F) -> f64
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let one = Arc::new(one);
    let end = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let one = Arc::clone(&one);
            tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < end {
                    one(client).await;
                    done += 1;
                }
                done
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("a bench client panicked");
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// One benchmark per database: the same transactions, only the pool type
/// and the placeholder syntax differ (sqlx's types are per database).
macro_rules! bench_database {
    ($name:ident, $server:expr, $options:expr, $insert:literal, $update:literal) => {
        async fn $name(rounds: u64, secs: u64) -> (f64, f64) {
            let server = $server;
            let pool = $options
                .max_connections(CLIENTS as u32)
                .connect(&server.url())
                .await
                .expect("connect");
            palisade_fence_sql::migrate(&pool).await.expect("migrate");
            sqlx::query("CREATE TABLE items (id BIGINT PRIMARY KEY, v BIGINT NOT NULL)")
                .execute(&pool)
                .await
                .expect("create");
            for client in 0..CLIENTS {
                sqlx::query($insert)
                    .bind(client as i64)
                    .execute(&pool)
                    .await
                    .expect("insert");
            }
            const UPDATE: &str = $update;
            let (mut plain, mut fenced) = (0.0, 0.0);
            for _ in 0..rounds {
                let p = pool.clone();
                plain += measure(secs, move |client| {
                    let p = p.clone();
                    async move {
                        let mut tx = p.begin().await.expect("begin");
                        sqlx::query(UPDATE)
                            .bind(client as i64)
                            .execute(&mut *tx)
                            .await
                            .expect("update");
                        tx.commit().await.expect("commit");
                    }
                })
                .await;
                let p = pool.clone();
                fenced += measure(secs, move |client| {
                    let p = p.clone();
                    async move {
                        let mut tx = palisade_fence_sql::begin_fenced(&p, &sequencer(client))
                            .await
                            .expect("fence");
                        sqlx::query(UPDATE)
                            .bind(client as i64)
                            .execute(&mut *tx)
                            .await
                            .expect("update");
                        tx.commit().await.expect("commit");
                    }
                })
                .await;
            }
            (plain / rounds as f64, fenced / rounds as f64)
        }
    };
}

bench_database!(
    postgres,
    SqlServer::postgres(),
    sqlx::postgres::PgPoolOptions::new(),
    "INSERT INTO items VALUES ($1, 0)",
    "UPDATE items SET v = v + 1 WHERE id = $1"
);
bench_database!(
    mariadb,
    SqlServer::mariadb(),
    sqlx::mysql::MySqlPoolOptions::new(),
    "INSERT INTO items VALUES (?, 0)",
    "UPDATE items SET v = v + 1 WHERE id = ?"
);

fn report(name: &str, (plain, fenced): (f64, f64)) {
    println!(
        "{name:<10} unfenced {plain:>8.0} tx/s   fenced {fenced:>8.0} tx/s   ratio {:.2}x",
        fenced / plain
    );
}

#[tokio::main]
async fn main() {
    let rounds = env_number("PALISADE_BENCH_ROUNDS", 3).max(1);
    let secs = env_number("PALISADE_BENCH_SECS", 3).max(1);
    println!("{CLIENTS} clients, 1 UPDATE per transaction, {rounds} rounds of {secs} s");
    report("postgres", postgres(rounds, secs).await);
    report("mariadb", mariadb(rounds, secs).await);
}
