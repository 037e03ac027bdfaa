//! Lock-side memory per waiting client, on every lock backend.
//!
//! Run with: `cargo bench -p palisade-tests --bench waiter_memory`
//! (starts Redis, etcd, PostgreSQL and MariaDB on free loopback ports
//! through the testkit).
//!
//! For each backend, in a fresh child process (so that one backend's freed
//! memory cannot hide the next one's growth): one session takes a lock,
//! then `PALISADE_WAITERS` (default 1000) more sessions of one client each
//! call `acquire` on it and wait. Once the backend's inspection API shows
//! all of them queued, the process's RSS growth divided by the number of
//! waiters is the client side's cost of one waiting client (its session,
//! keep-alive and pending acquire). Where the server's side can be read, its
//! growth too: Redis `INFO memory` (`used_memory`) and etcd's RSS. On the
//! SQL backends a waiter is a few rows and no connection of its own (the
//! client's pool is shared), so the database side is not measured.
//!
//! `PALISADE_WAITER_BACKENDS` (comma-separated) picks the backends.

use std::future::Future;
use std::time::Duration;

use palisade::{Inspect, Lock, LockName, Mode, SessionOptions};
use palisade_testkit::etcd::EtcdServer;
use palisade_testkit::redis::RedisServer;
use palisade_testkit::sql::SqlServer;

const BACKENDS: [&str; 5] = ["embedded", "redis", "etcd", "postgres", "mariadb"];

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn options() -> SessionOptions {
    SessionOptions::default().with_ttl(Duration::from_secs(30))
}

/// What one backend's child process reports.
struct Measured {
    client_bytes_per_waiter: f64,
    /// The server side's growth per waiter and what it counts.
    server: Option<(f64, &'static str)>,
}

/// Takes the lock with one session, queues `waiters` more sessions behind
/// it, waits until `inspector` shows them all, and returns this process's
/// RSS growth per waiter. `server_side` is read before and after.
async fn measure<L, I, S, F>(
    inspector: &I,
    waiters: usize,
    open: impl Fn() -> S,
    server_side: impl Fn() -> F,
) -> (f64, f64)
where
    L: Lock,
    I: Inspect,
    S: Future<Output = L>,
    F: Future<Output = f64>,
{
    let name = LockName::new("bench/waiters").unwrap();
    let holder = open().await;
    let _held = holder.acquire(&name, Mode::Exclusive).await.unwrap();
    let pid = std::process::id();
    let server_before = server_side().await;
    let before = rss_kib(pid);
    let mut tasks = Vec::with_capacity(waiters);
    for _ in 0..waiters {
        let session = open().await;
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            let _guard = session.acquire(&name, Mode::Exclusive).await;
            // Held until the process ends: only the queue is measured.
            std::future::pending::<()>().await;
        }));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let info = inspector.inspect(&name).await.unwrap();
        let queued = info.waiters.as_ref().map_or(0, Vec::len);
        if queued >= waiters {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {queued} of {waiters} waiters queued after 120 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = rss_kib(pid);
    let server_after = server_side().await;
    (
        (after.saturating_sub(before) * 1024) as f64 / waiters as f64,
        (server_after - server_before) / waiters as f64,
    )
}

async fn no_server_side() -> f64 {
    0.0
}

async fn child(backend: &str, waiters: usize) -> Measured {
    match backend {
        "embedded" => {
            use palisade::embedded::EmbeddedLockClient;
            let service = EmbeddedLockClient::new();
            let (client, _) = measure(
                &service,
                waiters,
                || {
                    let session = service.session(options()).unwrap();
                    async move { session }
                },
                no_server_side,
            )
            .await;
            Measured {
                client_bytes_per_waiter: client,
                server: None,
            }
        }
        "redis" => {
            use palisade::redis::{RedisConfig, RedisLockClient};
            let redis = RedisServer::start();
            let client = RedisLockClient::connect(RedisConfig::new(redis.url()))
                .await
                .unwrap();
            let used_memory = || {
                let info = redis.command(&["INFO", "memory"]).unwrap();
                let bytes = info
                    .lines()
                    .find_map(|line| line.strip_prefix("used_memory:"))
                    .and_then(|value| value.trim().parse::<f64>().ok())
                    .unwrap_or(f64::NAN);
                async move { bytes }
            };
            let (client_side, server_side) = measure(
                &client,
                waiters,
                || {
                    let session = client.session(options()).unwrap();
                    async move { session }
                },
                used_memory,
            )
            .await;
            Measured {
                client_bytes_per_waiter: client_side,
                server: Some((server_side, "Redis used_memory")),
            }
        }
        "etcd" => {
            use palisade::etcd::{EtcdConfig, EtcdLockClient};
            let etcd = EtcdServer::start();
            let connection = EtcdLockClient::connect(EtcdConfig::new(etcd.endpoints()).unwrap())
                .await
                .unwrap();
            let etcd_pid = etcd.pid().expect("a spawned etcd");
            let (client_side, server_side) = measure(
                &connection,
                waiters,
                || {
                    let connection = connection.clone();
                    async move { connection.session(options()).await.unwrap() }
                },
                || async move { (rss_kib(etcd_pid) * 1024) as f64 },
            )
            .await;
            Measured {
                client_bytes_per_waiter: client_side,
                server: Some((server_side, "etcd RSS")),
            }
        }
        "postgres" | "mariadb" => {
            use palisade_lock_sql::{SqlConfig, SqlLockClient};
            let server = if backend == "postgres" {
                SqlServer::postgres()
            } else {
                SqlServer::mariadb()
            };
            let client = SqlLockClient::connect(SqlConfig::new(server.url()))
                .await
                .unwrap();
            let (client_side, _) = measure(
                &client,
                waiters,
                || {
                    let client = client.clone();
                    async move { client.session(options()).await.unwrap() }
                },
                no_server_side,
            )
            .await;
            Measured {
                client_bytes_per_waiter: client_side,
                server: None,
            }
        }
        other => panic!("unknown backend {other}"),
    }
}

fn main() {
    let waiters: usize = std::env::var("PALISADE_WAITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let args: Vec<String> = std::env::args().collect();
    if let Some(position) = args.iter().position(|arg| arg == "--child") {
        let backend = &args[position + 1];
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let measured = runtime.block_on(child(backend, waiters));
        let (server, what) = measured.server.unwrap_or((f64::NAN, "-"));
        println!(
            "RESULT {} {} {}",
            measured.client_bytes_per_waiter, server, what
        );
        // The waiters never end by themselves.
        std::process::exit(0);
    }

    println!(
        "waiter_memory: {waiters} waiting clients per backend, each backend in its own process; load average {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!(
        "{:<10} {:>22} {:>26}",
        "backend", "client bytes/waiter", "server bytes/waiter"
    );
    let selected = std::env::var("PALISADE_WAITER_BACKENDS").ok();
    for backend in BACKENDS {
        if let Some(selected) = &selected {
            if !selected.split(',').any(|s| s.trim() == backend) {
                continue;
            }
        }
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--child", backend])
            .stderr(std::process::Stdio::inherit())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let Some(result) = stdout.lines().find_map(|line| line.strip_prefix("RESULT ")) else {
            println!("{backend:<10} failed: {stdout}");
            continue;
        };
        let fields: Vec<&str> = result.splitn(3, ' ').collect();
        let client: f64 = fields[0].parse().unwrap_or(f64::NAN);
        let server: f64 = fields[1].parse().unwrap_or(f64::NAN);
        let server_text = if server.is_nan() {
            "not measured".to_owned()
        } else {
            format!("{server:.0} ({})", fields[2])
        };
        println!("{backend:<10} {client:>22.0} {server_text:>26}");
    }
}
