//! The recipes' costs, in one run, on etcd, Redis and PostgreSQL started
//! by the testkit:
//!
//! - **election failover**: two `palisade elect` processes on one
//!   election, the standby queued; the leader's `palisade elect` is
//!   SIGKILLed, and the time runs until the standby's command has made its
//!   first fenced write (`palisade put` to a `palisade serve`, after
//!   `elect`'s fence on election). Nothing revokes the dead leader's
//!   lease: the failover is the lease running out plus one hand-off.
//! - **semaphore**: 16 clients (each its own session) acquire and release a
//!   permit of `palisade_recipes::Semaphore` with N = 4, against the same
//!   done by hand with N separate locks (each client takes a random one of
//!   the N and waits for it).
//!
//! Run with `cargo bench -p palisade-cli --bench recipes`.
//! `PALISADE_BENCH_FAILOVERS` (20) failovers per backend, `PALISADE_BENCH_TTL_S`
//! (2) the lease, `PALISADE_BENCH_OPS` (30) acquire+release per client,
//! `PALISADE_BENCH_BACKENDS` (`etcd,redis,postgres`).

use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
use palisade_lock_any::{AnyClient, AnyInspector, LockSpec};
use palisade_recipes::Semaphore;
use palisade_testkit::bench::env_number;
use palisade_testkit::etcd::EtcdServer;
use palisade_testkit::redis::RedisServer;
use palisade_testkit::sql::SqlServer;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const PALISADE: &str = env!("CARGO_BIN_EXE_palisade");
const CLIENTS: usize = 16;
const PERMITS: u32 = 4;
/// How long the standby is given to connect and queue before the leader is
/// killed: there is no event for "queued" outside the standby.
const QUEUE_SETTLE: Duration = Duration::from_millis(500);
const LIMIT: Duration = Duration::from_secs(60);

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run());
}

/// A started lock service: its `palisade` flags, its spec, and the server.
struct Service {
    name: &'static str,
    flags: Vec<String>,
    spec: LockSpec,
    _server: Box<dyn std::any::Any>,
}

fn service(name: &str) -> Service {
    match name {
        "etcd" => {
            let etcd = EtcdServer::start();
            let hosts = etcd.endpoint().trim_start_matches("http://").to_owned();
            Service {
                name: "etcd",
                flags: vec![
                    "--backend".into(),
                    "etcd".into(),
                    "--etcd-endpoints".into(),
                    hosts.clone(),
                ],
                spec: LockSpec::etcd(hosts),
                _server: Box::new(etcd),
            }
        }
        "redis" => {
            let redis = RedisServer::start();
            Service {
                name: "redis",
                flags: vec![
                    "--backend".into(),
                    "redis".into(),
                    "--redis-url".into(),
                    redis.url(),
                ],
                spec: LockSpec::redis(redis.url()),
                _server: Box::new(redis),
            }
        }
        "postgres" => {
            let postgres = SqlServer::postgres();
            Service {
                name: "postgres",
                flags: vec![
                    "--backend".into(),
                    "postgres".into(),
                    "--database-url".into(),
                    postgres.url(),
                ],
                spec: LockSpec::sql(postgres.url()).expect("a PostgreSQL URL"),
                _server: Box::new(postgres),
            }
        }
        other => panic!("unknown backend {other:?}: etcd, redis or postgres"),
    }
}

async fn run() {
    let backends =
        std::env::var("PALISADE_BENCH_BACKENDS").unwrap_or_else(|_| "etcd,redis,postgres".into());
    let failovers = env_number("PALISADE_BENCH_FAILOVERS", 20) as usize;
    let ttl = Duration::from_secs(env_number("PALISADE_BENCH_TTL_S", 2));
    let ops = env_number("PALISADE_BENCH_OPS", 30) as usize;
    let (server, server_url) = serve().await;
    let run_id = std::process::id();
    println!(
        "recipes benchmark: {failovers} failovers (lease {ttl:?}); {CLIENTS} clients x {ops} acquire+release, N = {PERMITS}"
    );
    println!(
        "| backend | failover p50 | failover p99 | failover max | semaphore ops/s | p50 | p99 | N locks by hand ops/s | p50 | p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for backend in backends.split(',') {
        let service = service(backend);
        let mut failover = Vec::new();
        for round in 0..failovers {
            let name = format!("bench/{run_id}/{}/failover-{round}", service.name);
            failover.push(one_failover(&service, &server_url, &name, ttl).await);
        }
        let semaphore = pool(&service, ops, true, run_id).await;
        let by_hand = pool(&service, ops, false, run_id).await;
        println!(
            "| {} | {} | {} | {} | {:.0} | {} | {} | {:.0} | {} | {} |",
            service.name,
            ms(quantile(&mut failover, 0.5)),
            ms(quantile(&mut failover, 0.99)),
            ms(failover.iter().max().copied().unwrap_or_default()),
            semaphore.0,
            ms(semaphore.1),
            ms(semaphore.2),
            by_hand.0,
            ms(by_hand.1),
            ms(by_hand.2),
        );
    }
    drop(server);
}

fn ms(duration: Duration) -> String {
    format!("{:.0} ms", duration.as_secs_f64() * 1000.0)
}

fn quantile(samples: &mut [Duration], quantile: f64) -> Duration {
    samples.sort();
    let rank = ((samples.len() as f64 * quantile).ceil() as usize).clamp(1, samples.len());
    samples[rank - 1]
}

fn palisade(args: &[&str]) -> Command {
    let mut command = Command::new(PALISADE);
    command
        .env("PALISADE_BIN", PALISADE)
        .env_remove("RUST_LOG")
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// A `palisade serve` on a free port with a temporary directory.
async fn serve() -> ((tokio::process::Child, tempfile::TempDir), String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = palisade(&["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .spawn()
        .expect("palisade serve starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(LIMIT, lines.next_line())
        .await
        .expect("serve's first line in time")
        .expect("read")
        .expect("a line");
    let address = line
        .strip_prefix("palisade-server listening on ")
        .expect("the listening line")
        .to_owned();
    ((child, dir), format!("http://{address}"))
}

/// Leader elected, standby queued, leader SIGKILLed: the time until the
/// standby's command has written.
async fn one_failover(service: &Service, server: &str, name: &str, ttl: Duration) -> Duration {
    let ttl = format!("{}s", ttl.as_secs());
    let elect = |value: &str, script: &str| {
        let mut command = palisade(&["elect", "--quiet", "--ttl", &ttl, "--value", value]);
        command
            .args(&service.flags)
            .args(["--server", server, name, "--", "sh", "-c", script]);
        command.spawn().expect("palisade elect starts")
    };
    let mut leader = elect("a", "echo up; exec sleep 600");
    let mut leader_out = BufReader::new(leader.stdout.take().expect("stdout")).lines();
    let up = tokio::time::timeout(LIMIT, leader_out.next_line()).await;
    assert!(
        matches!(up, Ok(Ok(Some(ref line))) if line == "up"),
        "the leader's command starts: {up:?}"
    );
    let mut standby = elect(
        "b",
        r#""$PALISADE_BIN" put "$PALISADE_LOCK" k b > /dev/null 2>&1; echo "$?"; exec sleep 600"#,
    );
    let mut standby_out = BufReader::new(standby.stdout.take().expect("stdout")).lines();
    tokio::time::sleep(QUEUE_SETTLE).await;
    let pid = Pid::from_raw(i32::try_from(leader.id().expect("runs")).expect("pid"));
    kill(pid, Signal::SIGKILL).expect("SIGKILL the leader");
    let killed = Instant::now();
    let wrote = tokio::time::timeout(LIMIT, standby_out.next_line()).await;
    let took = killed.elapsed();
    assert!(
        matches!(wrote, Ok(Ok(Some(ref code))) if code == "0"),
        "the standby's first write: {wrote:?}"
    );
    let _ = leader.wait().await;
    let pid = Pid::from_raw(i32::try_from(standby.id().expect("runs")).expect("pid"));
    let _ = kill(pid, Signal::SIGKILL);
    let _ = standby.wait().await;
    took
}

/// `CLIENTS` sessions doing `ops` acquire+release each: through the
/// semaphore, or by hand on one of N locks chosen at random. Returns the
/// operations per second and the p50 and p99 of one acquire+release.
async fn pool(
    service: &Service,
    ops: usize,
    semaphore: bool,
    run_id: u32,
) -> (f64, Duration, Duration) {
    let client = AnyClient::connect(&service.spec).await.expect("connect");
    let inspector = AnyInspector::connect(&service.spec)
        .await
        .expect("inspector");
    let kind = if semaphore { "semaphore" } else { "by-hand" };
    let base = LockName::new(format!("bench/{run_id}/{}/{kind}", service.name)).expect("a name");
    let pool = Semaphore::new(base.clone(), PERMITS).expect("a semaphore");
    let locks: Vec<LockName> = (0..PERMITS)
        .map(|index| LockName::new(format!("{base}/lock-{index}")).expect("a name"))
        .collect();
    let mut sessions = Vec::new();
    for _ in 0..CLIENTS {
        sessions.push(
            client
                .session(SessionOptions::default().with_ttl(Duration::from_secs(10)))
                .await
                .expect("a session"),
        );
    }
    let started = Instant::now();
    let tasks = sessions.into_iter().map(|session| {
        let (pool, locks, inspector) = (pool.clone(), locks.clone(), inspector.clone());
        tokio::spawn(async move {
            let mut times = Vec::with_capacity(ops);
            for _ in 0..ops {
                let one = Instant::now();
                if semaphore {
                    let permit = pool.acquire(&session, &inspector).await.expect("a permit");
                    permit.release().await.expect("release");
                } else {
                    let lock = &locks[rand::random_range(0..locks.len())];
                    let guard = session
                        .acquire(lock, Mode::Exclusive)
                        .await
                        .expect("a lock");
                    guard.release().await.expect("release");
                }
                times.push(one.elapsed());
            }
            times
        })
    });
    let mut times = Vec::new();
    for task in futures::future::join_all(tasks).await {
        times.extend(task.expect("a client"));
    }
    let elapsed = started.elapsed();
    let rate = times.len() as f64 / elapsed.as_secs_f64();
    (rate, quantile(&mut times, 0.5), quantile(&mut times, 0.99))
}
