//! The ZooKeeper lock backend's figures, in one command and one run:
//!
//! ```text
//! cargo bench -p palisade-lock-zookeeper --bench zookeeper_lock
//! ```
//!
//! Against a standalone ZooKeeper the testkit starts (or the one named by
//! `PALISADE_ZOOKEEPER`), in interleaved rounds so a busy machine hurts
//! each side alike:
//!
//! 1. uncontended acquire + release: Palisade, against the raw operations a
//!    lock needs (create an ephemeral sequential node, delete it) on the
//!    same client library, one cycle of each in turn, and against kazoo's
//!    `Lock` (Python, Debian's `python3-kazoo`, timed inside its own
//!    process); then the requests ZooKeeper received per cycle of each;
//! 2. 8 sessions contending for one name: the hand-off (one holder's
//!    release to the next grant) p50/p99, and fairness (grants per session,
//!    max/min);
//! 3. memory per waiter: the resident set before and after 200 sessions
//!    queue on one held lock.
//!
//! Set `BENCH_SECS` to change how long each timed part runs (default 3).

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
use palisade_lock_zookeeper::{ZkConfig, ZkLockClient, lock_path};
use palisade_testkit::zookeeper::ZooKeeperServer;
use zookeeper_client as zk;

const ROUNDS: usize = 5;

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let secs: u64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|secs| secs.parse().ok())
        .unwrap_or(3);
    let span = Duration::from_secs(secs);
    let server = ZooKeeperServer::start();
    let connect = server.connect_string();
    let prefix = format!("/palisade-bench/{}", std::process::id());
    let config = ZkConfig::parse(&connect)?.with_prefix(prefix.as_str())?;
    let client = ZkLockClient::connect(config.clone()).await?;
    let options = SessionOptions::default().with_ttl(Duration::from_secs(10));
    println!(
        "ZooKeeper at {connect}; {ROUNDS} interleaved rounds of {secs} s each, after a warm-up round\n"
    );

    // 1. Uncontended.
    let name = LockName::new("bench/uncontended")?;
    let path = lock_path(&config.root(), &name);
    let raw = zk::Client::connect(&connect).await?;
    let session = client.session(options.clone()).await?;
    // Warm up: directories exist, connections are hot.
    session
        .acquire(&name, Mode::Exclusive)
        .await?
        .release()
        .await?;
    // The raw baseline's own persistent directory, under the root the
    // warm-up created: a lock directory is a container, which the server
    // deletes once it is empty (every second on the testkit's servers),
    // under the raw loop's feet.
    let raw_dir = format!("{path}-raw");
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    match raw.create(&raw_dir, b"", &persistent).await {
        Ok(_) | Err(zk::Error::NodeExists) => {}
        Err(error) => return Err(error.into()),
    }
    // ZooKeeper is a JVM: its request path runs several times faster once
    // compiled, so a round of each, not counted, before the measured ones
    // (the first rounds otherwise favour whichever runs second).
    paired_cycles(&raw, &raw_dir, &session, &name, span).await?;
    let (mut palisade, mut bare, mut kazoo) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let (raw_rate, palisade_rate) =
            paired_cycles(&raw, &raw_dir, &session, &name, span).await?;
        bare.push(raw_rate);
        palisade.push(palisade_rate);
        kazoo.push(kazoo_cycles(&connect, &format!("{path}-kazoo"), span)?);
        println!(
            "round {round}: raw create+delete {:.0}/s, Palisade {:.0}/s ({:.2}x), kazoo Lock {:.0}/s",
            bare[round],
            palisade[round],
            palisade[round] / bare[round],
            kazoo[round]
        );
    }
    let ratios: Vec<f64> = palisade.iter().zip(&bare).map(|(p, b)| p / b).collect();
    let (palisade, bare, kazoo) = (median(palisade), median(bare), median(kazoo));
    println!(
        "uncontended acquire+release (medians): Palisade {palisade:.0}/s = {:.2}x raw create+delete ({bare:.0}/s; median of the rounds' ratios), {:.2}x kazoo's Lock ({kazoo:.0}/s)",
        median(ratios),
        palisade / kazoo
    );
    if let Some(addr) = server.client_addr() {
        let cycles = 1000;
        let before = packets_received(addr)?;
        palisade_cycle(&session, &name, cycles).await?;
        let between = packets_received(addr)?;
        raw_cycle(&raw, &raw_dir, cycles).await?;
        let after = packets_received(addr)?;
        // Each `mntr` is a request of its own.
        let per_cycle = |from: u64, to: u64| (to - from - 1) as f64 / cycles as f64;
        println!(
            "requests per cycle (ZooKeeper's zk_packets_received): Palisade {:.2}, raw {:.2}\n",
            per_cycle(before, between),
            per_cycle(between, after)
        );
    }

    // 2. Eight sessions on one name.
    let contended = LockName::new("bench/contended")?;
    let (handoffs, grants) = contention(&client, &options, &contended, 8, span * 2).await?;
    let mut sorted = handoffs.clone();
    sorted.sort();
    let percentile = |p: f64| sorted[((sorted.len() - 1) as f64 * p) as usize];
    let (most, least) = (
        *grants.iter().max().unwrap_or(&0),
        *grants.iter().min().unwrap_or(&0),
    );
    println!(
        "8 sessions on one name: {} hand-offs, p50 {:.2} ms, p99 {:.2} ms; grants per session {grants:?}, fairness max/min {:.2}\n",
        sorted.len(),
        percentile(0.5).as_secs_f64() * 1e3,
        percentile(0.99).as_secs_f64() * 1e3,
        most as f64 / least.max(1) as f64
    );

    // 3. Memory per waiter.
    let waiters = 200;
    let (per_waiter, total) = memory_per_waiter(&client, &options, waiters).await?;
    println!(
        "memory per waiter: {per_waiter} bytes of resident set ({waiters} waiting sessions: +{total} bytes)"
    );
    Ok(())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The raw operations a lock needs (create an ephemeral sequential node,
/// delete it: the least a lock costs ZooKeeper, on the same client
/// library) and Palisade's acquire + release, one cycle of each in turn
/// for `span`, each side timed on its own, so that both see the same
/// moments of a busy machine. Returns both rates (cycles per second of
/// each side's own time).
async fn paired_cycles(
    raw: &zk::Client,
    dir: &str,
    session: &palisade_lock_zookeeper::ZkLock,
    name: &LockName,
    span: Duration,
) -> anyhow::Result<(f64, f64)> {
    let (mut raw_time, mut palisade_time) = (Duration::ZERO, Duration::ZERO);
    let started = Instant::now();
    let mut cycles = 0u64;
    while started.elapsed() < span {
        let at = Instant::now();
        raw_cycle(raw, dir, 1).await?;
        let between = Instant::now();
        palisade_cycle(session, name, 1).await?;
        raw_time += between - at;
        palisade_time += between.elapsed();
        cycles += 1;
    }
    Ok((
        cycles as f64 / raw_time.as_secs_f64(),
        cycles as f64 / palisade_time.as_secs_f64(),
    ))
}

async fn raw_cycle(raw: &zk::Client, dir: &str, cycles: u64) -> anyhow::Result<()> {
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let prefix = format!("{dir}/raw__lock__");
    for _ in 0..cycles {
        let (_, sequence) = raw.create(&prefix, b"", &options).await?;
        raw.delete(&format!("{prefix}{sequence}"), None).await?;
    }
    Ok(())
}

async fn palisade_cycle(
    session: &palisade_lock_zookeeper::ZkLock,
    name: &LockName,
    cycles: u64,
) -> anyhow::Result<()> {
    for _ in 0..cycles {
        session
            .acquire(name, Mode::Exclusive)
            .await?
            .release()
            .await?;
    }
    Ok(())
}

/// ZooKeeper's count of requests received so far (`mntr`, itself one).
fn packets_received(addr: std::net::SocketAddr) -> anyhow::Result<u64> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.write_all(b"mntr")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    answer
        .lines()
        .find_map(|line| line.strip_prefix("zk_packets_received"))
        .and_then(|count| count.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no zk_packets_received in mntr's answer"))
}

/// kazoo's `Lock` acquire + release on one path, timed inside Python
/// (its start-up and connect are not counted).
fn kazoo_cycles(connect: &str, path: &str, span: Duration) -> anyhow::Result<f64> {
    let script = r#"
import sys, time
from kazoo.client import KazooClient
client = KazooClient(hosts=sys.argv[1]); client.start(timeout=30)
lock = client.Lock(sys.argv[2], "bench")
lock.acquire(); lock.release()
span = float(sys.argv[3]); cycles = 0; started = time.monotonic()
while time.monotonic() - started < span:
    lock.acquire(); lock.release(); cycles += 1
print(cycles / (time.monotonic() - started))
client.stop()
"#;
    let output = Command::new("/usr/bin/python3")
        .args(["-c", script, connect, path, &span.as_secs_f64().to_string()])
        .output()?;
    anyhow::ensure!(
        output.status.success(),
        "kazoo failed (is python3-kazoo installed?): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).trim().parse()?)
}

/// `sessions` sessions take `name` in turn for `span`; returns every
/// hand-off (a release to the next grant) and the grants per session.
async fn contention(
    client: &ZkLockClient,
    options: &SessionOptions,
    name: &LockName,
    sessions: usize,
    span: Duration,
) -> anyhow::Result<(Vec<Duration>, Vec<u64>)> {
    let released_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let handoffs = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..sessions {
        let session = client.session(options.clone()).await?;
        let (name, released_at, handoffs, stop) = (
            name.clone(),
            released_at.clone(),
            handoffs.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut grants = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let guard = session.acquire(&name, Mode::Exclusive).await?;
                let granted = Instant::now();
                if let Some(released) = released_at.lock().unwrap().take() {
                    handoffs.lock().unwrap().push(granted - released);
                }
                grants += 1;
                *released_at.lock().unwrap() = Some(Instant::now());
                guard.release().await?;
            }
            Ok::<u64, anyhow::Error>(grants)
        }));
    }
    tokio::time::sleep(span).await;
    stop.store(true, Ordering::Relaxed);
    let mut grants = Vec::new();
    for task in tasks {
        grants.push(task.await??);
    }
    let handoffs = handoffs.lock().unwrap().clone();
    Ok((handoffs, grants))
}

/// The resident set grown by `count` sessions queued on one held lock.
async fn memory_per_waiter(
    client: &ZkLockClient,
    options: &SessionOptions,
    count: usize,
) -> anyhow::Result<(u64, u64)> {
    let name = LockName::new("bench/waiters")?;
    let holder = client.session(options.clone()).await?;
    let guard = holder.acquire(&name, Mode::Exclusive).await?;
    let before = resident_bytes();
    let mut sessions = Vec::new();
    let mut waiting = Vec::new();
    for _ in 0..count {
        let session = client.session(options.clone()).await?;
        let (task_session, name) = (session.clone(), name.clone());
        waiting.push(tokio::spawn(async move {
            task_session.acquire(&name, Mode::Exclusive).await
        }));
        sessions.push(session);
    }
    // Every waiter has queued once the directory lists them all.
    let inspect = palisade_core::Inspect::inspect(client, &name);
    let mut info = inspect.await?;
    while info.waiters.as_ref().map_or(0, Vec::len) < count {
        tokio::time::sleep(Duration::from_millis(50)).await;
        info = palisade_core::Inspect::inspect(client, &name).await?;
    }
    let after = resident_bytes();
    for task in &waiting {
        task.abort();
    }
    guard.release().await?;
    let total = after.saturating_sub(before);
    Ok((total / count as u64, total))
}

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|pages| pages.parse().ok())
        .unwrap_or(0);
    pages * 4096
}
