//! Redlock's cost: uncontended acquire+release cycles on 3 local masters,
//! against 3× a single-master cycle and against `rslock`'s Redlock on the
//! same 3 masters, all in one run.
//!
//! Run with: `cargo bench -p palisade-lock-redis --bench redlock` (starts
//! three `redis-server`s on free ports). `PALISADE_BENCH_SECS` (2) seconds
//! per system, in `PALISADE_BENCH_ROUNDS` (3) interleaved rounds.
//!
//! A Palisade Redlock grant is the single-master lock on every master in
//! parallel, then a floor read and a compare-and-set on every master (the
//! quorum-minted generation), then the release on every master: about
//! three single-master round trips, which is what the ratio shows.

use std::future::Future;
use std::time::Duration;

use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
use palisade_lock_redis::{RedisConfig, RedisLockClient, RedlockClient, RedlockConfig};
use palisade_testkit::bench::env_number;
use palisade_testkit::redis::{RedisOptions, RedisServer};
use tokio::time::Instant;

/// Cycles per second of `cycle`, run back to back for `duration`.
async fn rate<F, Fut>(duration: Duration, mut cycle: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let started = Instant::now();
    let mut cycles = 0u64;
    while started.elapsed() < duration {
        cycle().await;
        cycles += 1;
    }
    cycles as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run());
}

async fn run() {
    let duration = Duration::from_secs(env_number("PALISADE_BENCH_SECS", 2));
    let rounds = env_number("PALISADE_BENCH_ROUNDS", 3);
    let masters: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::spawn(RedisOptions::default()))
        .collect();
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let options = SessionOptions::default();
    let single = RedisLockClient::connect(RedisConfig::new(&urls[0]))
        .await
        .expect("connect to master 0")
        .session(options.clone())
        .expect("session");
    let redlock = RedlockClient::connect(RedlockConfig::new(urls.clone()))
        .await
        .expect("connect to the masters")
        .session(options)
        .expect("session");
    let rslock = rslock::LockManager::new(urls.clone());
    let name = LockName::new(format!("bench-redlock-{}", std::process::id())).expect("name");
    let resource = format!("bench-rslock-redlock-{}", std::process::id());

    let (mut single_rates, mut redlock_rates, mut rslock_rates) = (vec![], vec![], vec![]);
    for _ in 0..rounds {
        single_rates.push(
            rate(duration, || async {
                let guard = single
                    .acquire(&name, Mode::Exclusive)
                    .await
                    .expect("acquire");
                guard.release().await.expect("release");
            })
            .await,
        );
        redlock_rates.push(
            rate(duration, || async {
                let guard = redlock
                    .acquire(&name, Mode::Exclusive)
                    .await
                    .expect("acquire");
                guard.release().await.expect("release");
            })
            .await,
        );
        rslock_rates.push(
            rate(duration, || async {
                // Uncontended: the first attempt is granted.
                let lock = rslock
                    .lock(resource.as_bytes(), Duration::from_secs(10))
                    .await
                    .expect("rslock lock");
                rslock.unlock(&lock).await;
            })
            .await,
        );
    }
    let median = |rates: &mut Vec<f64>| {
        rates.sort_by(f64::total_cmp);
        rates[rates.len() / 2]
    };
    let (single, redlock, rslock) = (
        median(&mut single_rates),
        median(&mut redlock_rates),
        median(&mut rslock_rates),
    );
    println!(
        "uncontended acquire+release, 1 client, 3 local masters, median of {rounds} rounds of {duration:?}"
    );
    println!("| system | cycles/s | time per cycle |");
    println!("|---|---|---|");
    for (label, rate) in [
        ("single master (Palisade Redis)", single),
        ("Palisade Redlock, 3 masters", redlock),
        ("rslock Redlock, 3 masters", rslock),
    ] {
        println!("| {label} | {rate:.0} | {:.0} µs |", 1e6 / rate);
    }
    println!(
        "Palisade Redlock cycle / (3 × single-master cycle) = {:.2}",
        (1.0 / redlock) / (3.0 / single)
    );
    println!(
        "Palisade Redlock cycle / rslock Redlock cycle = {:.2}",
        (1.0 / redlock) / (1.0 / rslock)
    );
}
