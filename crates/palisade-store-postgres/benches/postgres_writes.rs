//! Fenced writes through the resource server over the PostgreSQL engine,
//! against the same data writes sent straight to PostgreSQL, in one run.
//!
//! Run with: `cargo bench -p palisade-store-postgres --bench postgres_writes`
//!
//! One PostgreSQL (started by the testkit: `fsync` and `synchronous_commit`
//! on), 32 clients (`PALISADE_BENCH_CLIENTS`), one lock per client, 100-byte values, each client
//! cycling over its own 4096 keys. Cells, one after the other:
//!
//! - **raw transaction**: `BEGIN; INSERT INTO palisade_store_data ... ON
//!   CONFLICT DO UPDATE; COMMIT` per write, over a pool of 32 sessions with
//!   `synchronous_commit = on`: the same table, the same durability, no
//!   fence;
//! - **raw statement**: the same upsert as one auto-committed statement
//!   (one round trip: the cheapest durable write there is);
//! - **engine**: `Engine::write` in-process, no HTTP;
//! - **HTTP**: `palisade serve`'s router over `Store::with_engine`, the
//!   clients keep-alive HTTP/1.1 connections sending `PUT`s with an
//!   exclusive sequencer.
//!
//! `PALISADE_BENCH_CLIENTS` sets the number of clients (default 32);
//! `PALISADE_BENCH_SECS` the seconds per cell (default 5);
//! `PALISADE_BENCH_ROUNDS` how many times the cells are run, interleaved
//! (default 2; the report gives the best of each); `PALISADE_BENCH_CELLS`
//! a comma-separated subset of `pgbench,raw-tx,raw-stmt,engine,http`
//! (default all),
//! e.g. to profile one cell alone. The server shares the load generator's
//! runtime (two workers on this machine), so every cell runs on the same
//! threads; `PALISADE_BENCH_SERVER_RUNTIME=own` gives the server a runtime
//! and a pool of its own instead, as `palisade serve` has in its own
//! process.
//!
//! `PALISADE_BENCH_PG_SETTINGS` (`name=value,...`, e.g.
//! `commit_delay=100,commit_siblings=5`) sets server settings with `ALTER
//! SYSTEM` and a reload before the first cell, for every cell alike: how
//! PostgreSQL's own group commit advice changes both sides.
//!
//! Each cell also prints where the CPU went, per write: the load generator
//! (this process, plus the server in the HTTP cell, shown apart on its own
//! runtime; pgbench's own process in its cell) and PostgreSQL (the
//! postmaster and its backends), both from `/proc/<pid>/schedstat`; how
//! often the load generator's threads were switched in; how many writes
//! each WAL flush made durable (`pg_stat_wal.wal_sync`); and how many puts
//! each of the engine's batch statements carried
//! (`PostgresEngine::batched_puts`, the shared runtime's engine).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_server::{AppState, run};
use palisade_store::{Engine, Op, Store, StoreConfig, WriteRequest};
use palisade_store_postgres::{PostgresConfig, PostgresEngine};
use palisade_testkit::bench::{env_number, process_usage, thread_usage};
use palisade_testkit::sql::SqlServer;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// `PALISADE_BENCH_CLIENTS`, default 32.
fn clients() -> usize {
    static CLIENTS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CLIENTS.get_or_init(|| env_number("PALISADE_BENCH_CLIENTS", 32).max(1) as usize)
}

/// The engine's pool: a connection per client, and never fewer than the
/// engine's default of 16 (with one connection it batches nothing).
fn engine_connections() -> u32 {
    clients().max(16) as u32
}
const VALUE_BYTES: usize = 100;
const KEYS_PER_CLIENT: usize = 4096;

const UPSERT: &str = "INSERT INTO palisade_store_data (lock_name, key, value) VALUES ($1, $2, $3) \
    ON CONFLICT (lock_name, key) DO UPDATE SET value = EXCLUDED.value";

fn value() -> Vec<u8> {
    (0..VALUE_BYTES).map(|i| b'a' + (i % 26) as u8).collect()
}

fn lock(client: usize, cell: &str) -> String {
    format!("bench/{cell}/c{client}")
}

fn exclusive(lock: &str) -> Sequencer {
    Sequencer::new(
        LockName::new(lock).unwrap(),
        Mode::Exclusive,
        Generation::new(1).unwrap(),
    )
}

/// Writes per second and the median latency of a cell, and its CPU cost
/// per write.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    writes: usize,
    per_second: f64,
    p50_us: u32,
    /// CPU µs per write of this process (load generator, and the server
    /// in the HTTP cell).
    process_us: f64,
    /// Of which the server's own runtime (`PALISADE_BENCH_SERVER_RUNTIME=own`:
    /// its threads are named `server`); 0 on the shared runtime.
    server_us: f64,
    /// CPU µs per write of PostgreSQL (postmaster and backends).
    postgres_us: f64,
    /// Times this process's threads were switched in, per write.
    switches: f64,
    /// Writes per WAL flush (`pg_stat_wal.wal_sync`).
    per_flush: f64,
    /// The engine's puts per batch statement (`PostgresEngine::batched_puts`;
    /// 0 when the cell sent none through the engine this process sees).
    per_batch: f64,
}

/// CPU nanoseconds and switches-in so far (`palisade_testkit::bench`'s
/// readings of `/proc/<pid>/task/*/schedstat`).
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    process_ns: u64,
    server_ns: u64,
    process_switches: u64,
    postgres_ns: u64,
}

/// CPU nanoseconds and switches-in of every thread of `pid` so far.
fn usage_ns(pid: u32) -> (u64, u64) {
    let (on_cpu, runs) = process_usage(pid);
    (on_cpu.as_nanos() as u64, runs)
}

/// The parent pid in `/proc/<pid>/stat` (the field after the state, after
/// the command name in parentheses).
fn parent_pid(pid: &str) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

impl Usage {
    /// This process's threads, and the postmaster `postgres` with its
    /// children (each backend is one single-threaded process).
    fn now(postgres: u32) -> Usage {
        let (process_ns, process_switches) = usage_ns(std::process::id());
        let server_ns = thread_usage(std::process::id(), |name| name.starts_with("server"))
            .0
            .as_nanos() as u64;
        let mut usage = Usage {
            process_ns,
            server_ns,
            process_switches,
            postgres_ns: 0,
        };
        for entry in std::fs::read_dir("/proc").into_iter().flatten() {
            let name = entry.expect("a /proc entry").file_name();
            let Some(pid) = name
                .to_str()
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            let Ok(number) = pid.parse::<u32>() else {
                continue;
            };
            if number == postgres || parent_pid(pid) == Some(postgres) {
                usage.postgres_ns += usage_ns(number).0;
            }
        }
        usage
    }
}

/// WAL flushes so far (`pg_stat_wal.wal_sync`).
async fn wal_syncs(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT wal_sync FROM pg_stat_wal")
        .fetch_one(pool)
        .await
        .expect("pg_stat_wal (PostgreSQL 14 or later)")
}

/// Runs one cell between two readings of [`Usage`] and of the WAL
/// flushes. A cell whose load generator is another process (pgbench)
/// reports that process's CPU and switches, and PostgreSQL's (its
/// backends exit with it), itself.
async fn metered(
    postgres: u32,
    pool: &PgPool,
    engine: &PostgresEngine,
    cell: impl Future<Output = Figures>,
) -> Figures {
    let (before, syncs_before) = (Usage::now(postgres), wal_syncs(pool).await);
    let batched_before = engine.batched_puts();
    let figures = cell.await;
    let (after, syncs_after) = (Usage::now(postgres), wal_syncs(pool).await);
    let batched_after = engine.batched_puts();
    let writes = figures.writes.max(1) as f64;
    let per_write = |delta: u64, scale: f64| delta as f64 / scale / writes;
    let external = figures.process_us > 0.0;
    Figures {
        process_us: if external {
            figures.process_us
        } else {
            per_write(after.process_ns - before.process_ns, 1e3)
        },
        server_us: if external {
            0.0
        } else {
            per_write(after.server_ns - before.server_ns, 1e3)
        },
        postgres_us: if external {
            figures.postgres_us
        } else {
            per_write(after.postgres_ns.saturating_sub(before.postgres_ns), 1e3)
        },
        switches: if external {
            figures.switches
        } else {
            per_write(after.process_switches - before.process_switches, 1.0)
        },
        per_flush: writes / (syncs_after - syncs_before).max(1) as f64,
        per_batch: (batched_after.puts - batched_before.puts) as f64
            / (batched_after.statements - batched_before.statements).max(1) as f64,
        ..figures
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin/pgbench` (Debian's
/// `postgresql` packages ship it).
fn pgbench_path() -> std::path::PathBuf {
    let mut found: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let path = entry.ok()?.path().join("bin/pgbench");
            path.exists().then_some(path)
        })
        .collect();
    found.sort_by_key(|path| {
        path.components()
            .nth(4)
            .and_then(|version| version.as_os_str().to_str()?.parse::<u32>().ok())
    });
    found.pop().expect(
        "pgbench is not installed: `apt-get install postgresql` (it ships /usr/lib/postgresql/<version>/bin/pgbench)",
    )
}

/// pgbench running the upsert in `BEGIN; ...; END` from [`clients`], each
/// on its own lock (`client_id`) and a random one of its keys.
async fn pgbench(url: &str, postgres: u32, duration: Duration) -> Figures {
    let postgres_before = Usage::now(postgres).postgres_ns;
    let script = std::env::temp_dir().join(format!("palisade-pgbench-{}.sql", std::process::id()));
    std::fs::write(
        &script,
        format!(
            "\\set k random(0, {})\n\
             BEGIN;\n\
             INSERT INTO palisade_store_data (lock_name, key, value) \
             VALUES ('bench/pgbench/c' || :client_id, convert_to('k' || :k, 'UTF8'), convert_to(:v, 'UTF8')) \
             ON CONFLICT (lock_name, key) DO UPDATE SET value = EXCLUDED.value;\n\
             END;\n",
            KEYS_PER_CLIENT - 1
        ),
    )
    .expect("write the pgbench script");
    let value = String::from_utf8(value()).expect("an ASCII value");
    let mut child = tokio::process::Command::new(pgbench_path())
        .args([
            "-n",
            "-c",
            &clients().to_string(),
            "-j",
            &clients().min(2).to_string(),
            "-M",
            "prepared",
        ])
        .args(["-T", &duration.as_secs().to_string()])
        .arg("-D")
        .arg(format!("v={value}"))
        .arg("-f")
        .arg(&script)
        .arg(url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start pgbench");
    let pid = child.id().expect("pgbench's pid");
    // Its CPU and switches, and PostgreSQL's, read while it runs (its
    // backends and its /proc entries are gone once it exits).
    let read = || usage_ns(pid);
    let mut last = read();
    let mut postgres_last = postgres_before;
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    let output = loop {
        tokio::select! {
            output = child.wait() => break output.expect("pgbench ran"),
            _ = ticks.tick() => {
                let now = read();
                if now.0 > 0 {
                    last = now;
                    postgres_last = postgres_last.max(Usage::now(postgres).postgres_ns);
                }
            }
        }
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_string(&mut stdout)
            .await
            .expect("pgbench's output");
    }
    if let Some(mut err) = child.stderr.take() {
        err.read_to_string(&mut stderr)
            .await
            .expect("pgbench's errors");
    }
    let _ = std::fs::remove_file(&script);
    assert!(output.success(), "pgbench failed: {stdout}{stderr}");
    let number = |prefix: &str| -> f64 {
        stdout
            .lines()
            .find_map(|line| line.trim().strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no `{prefix}` in pgbench's output:\n{stdout}"))
    };
    let writes = number("number of transactions actually processed:") as usize;
    Figures {
        writes,
        per_second: number("tps ="),
        // pgbench gives the mean, not the median.
        p50_us: (number("latency average =") * 1000.0) as u32,
        process_us: last.0 as f64 / 1e3 / writes.max(1) as f64,
        postgres_us: postgres_last.saturating_sub(postgres_before) as f64
            / 1e3
            / writes.max(1) as f64,
        switches: last.1 as f64 / writes.max(1) as f64,
        ..Figures::default()
    }
}

/// Runs `write(client, i)` in a loop on [`clients`] tasks for `duration`.
async fn measure<W, Fut>(duration: Duration, write: W) -> Figures
where
    W: Fn(usize, usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..clients())
        .map(|client| {
            let write = write.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(1 << 14);
                let mut i = 0;
                while Instant::now() < deadline {
                    let t0 = Instant::now();
                    write(client, i).await;
                    let done = Instant::now();
                    if done <= deadline {
                        latencies.push((done - t0).as_micros() as u32);
                    }
                    i += 1;
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    latencies.sort_unstable();
    Figures {
        writes: latencies.len(),
        per_second: latencies.len() as f64 / duration.as_secs_f64(),
        p50_us: latencies.get(latencies.len() / 2).copied().unwrap_or(0),
        ..Figures::default()
    }
}

async fn raw_pool(url: &str) -> PgPool {
    let options: PgConnectOptions = url.parse().unwrap();
    PgPoolOptions::new()
        .max_connections(clients() as u32)
        .min_connections(clients() as u32)
        .connect_with(options.options([("synchronous_commit", "on")]))
        .await
        .unwrap()
}

/// Applies `PALISADE_BENCH_PG_SETTINGS` to the server (`ALTER SYSTEM`,
/// then a reload) and prints each setting as the server reports it.
async fn server_settings(pool: &PgPool) {
    let Ok(settings) = std::env::var("PALISADE_BENCH_PG_SETTINGS") else {
        return;
    };
    for setting in settings
        .split(',')
        .filter(|setting| !setting.trim().is_empty())
    {
        let (name, value) = setting
            .split_once('=')
            .unwrap_or_else(|| panic!("`{setting}`: settings are name=value"));
        let name = name.trim();
        assert!(
            !name.is_empty()
                && name
                    .bytes()
                    .all(|byte| byte.is_ascii_lowercase() || byte == b'_'),
            "`{name}` is not a setting's name"
        );
        let value = value.trim().replace('\'', "''");
        // The name is checked above and the value quoted as a literal.
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER SYSTEM SET {name} = '{value}'"
        )))
        .execute(pool)
        .await
        .unwrap();
        sqlx::query("SELECT pg_reload_conf()")
            .execute(pool)
            .await
            .unwrap();
        let shown: String = sqlx::query_scalar("SELECT current_setting($1)")
            .bind(name)
            .fetch_one(pool)
            .await
            .unwrap();
        println!("PostgreSQL setting {name} = {shown}");
    }
}

async fn raw_transactions(pool: &PgPool, duration: Duration) -> Figures {
    let pool = pool.clone();
    measure(duration, move |client, i| {
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            sqlx::query(UPSERT)
                .bind(lock(client, "raw"))
                .bind(format!("k{}", i % KEYS_PER_CLIENT).into_bytes())
                .bind(value())
                .execute(&mut *tx)
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
    })
    .await
}

async fn raw_statements(pool: &PgPool, duration: Duration) -> Figures {
    let pool = pool.clone();
    measure(duration, move |client, i| {
        let pool = pool.clone();
        async move {
            sqlx::query(UPSERT)
                .bind(lock(client, "raw"))
                .bind(format!("k{}", i % KEYS_PER_CLIENT).into_bytes())
                .bind(value())
                .execute(&pool)
                .await
                .unwrap();
        }
    })
    .await
}

async fn engine_writes(engine: &Arc<PostgresEngine>, duration: Duration) -> Figures {
    let engine = Arc::clone(engine);
    measure(duration, move |client, i| {
        let engine = Arc::clone(&engine);
        async move {
            let request = WriteRequest::new(
                exclusive(&lock(client, "engine")),
                vec![Op::put(
                    format!("k{}", i % KEYS_PER_CLIENT).into_bytes(),
                    value(),
                )],
                None,
            );
            engine.write(request).await.unwrap().unwrap();
        }
    })
    .await
}

/// A minimal keep-alive HTTP/1.1 client: one connection, one request at a
/// time, so the load generator takes little of the CPU it measures.
struct Connection {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl Connection {
    async fn open(addr: SocketAddr) -> Connection {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Connection {
            stream,
            buffer: Vec::with_capacity(4096),
        }
    }

    async fn put(&mut self, head: &str, body: &[u8]) -> u16 {
        let mut request = Vec::with_capacity(head.len() + body.len() + 64);
        request.extend_from_slice(head.as_bytes());
        request.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
        request.extend_from_slice(body);
        self.stream.write_all(&request).await.unwrap();
        loop {
            if let Some(end) = self.buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = std::str::from_utf8(&self.buffer[..end]).unwrap().to_owned();
                let status: u16 = head[9..12].parse().unwrap();
                let length: usize = head
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                let total = end + 4 + length;
                while self.buffer.len() < total {
                    self.fill().await;
                }
                self.buffer.drain(..total);
                return status;
            }
            self.fill().await;
        }
    }

    async fn fill(&mut self) {
        let mut chunk = [0u8; 4096];
        let n = self.stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the server closed the connection");
        self.buffer.extend_from_slice(&chunk[..n]);
    }
}

async fn http_puts(addr: SocketAddr, duration: Duration) -> Figures {
    let connections: Vec<_> = {
        let mut connections = Vec::new();
        for _ in 0..clients() {
            connections.push(Arc::new(tokio::sync::Mutex::new(
                Connection::open(addr).await,
            )));
        }
        connections
    };
    let connections = Arc::new(connections);
    measure(duration, move |client, i| {
        let connections = Arc::clone(&connections);
        async move {
            let lock = lock(client, "http");
            let head = format!(
                "PUT /v1/locks/{}/keys/k{} HTTP/1.1\r\nhost: bench\r\npalisade-sequencer: {}\r\n",
                lock.replace('/', "%2F"),
                i % KEYS_PER_CLIENT,
                exclusive(&lock)
            );
            let status = connections[client].lock().await.put(&head, &value()).await;
            assert_eq!(status, 200);
        }
    })
    .await
}

/// The cells, by the name `PALISADE_BENCH_CELLS` knows them by.
const CELLS: [(&str, &str); 5] = [
    ("pgbench", "pgbench (BEGIN; upsert; END), the baseline"),
    (
        "raw-tx",
        "raw transaction (BEGIN; upsert; COMMIT), in-repo client",
    ),
    ("raw-stmt", "raw statement (auto-committed upsert)"),
    ("engine", "engine in-process (Engine::write)"),
    ("http", "engine through HTTP (PUT)"),
];

fn name(cell: &str) -> &'static str {
    CELLS
        .iter()
        .find(|(known, _)| *known == cell)
        .map_or("?", |(_, name)| name)
}

/// The server on a runtime of its own (on a thread of its own) with its
/// own engine: the layout of a separate `palisade serve` process.
fn serve_on_own_runtime(
    url: String,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ready, addr) = std::sync::mpsc::channel();
    let serving = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("server")
            .build()
            .unwrap();
        runtime.block_on(async move {
            let engine = PostgresEngine::open(
                PostgresConfig::new(&url).with_max_connections(engine_connections()),
            )
            .await
            .unwrap();
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            ready.send(listener.local_addr().unwrap()).unwrap();
            let store = Store::with_engine(Arc::new(engine), StoreConfig::default());
            run(listener, AppState::new(store), async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
    });
    let serving = tokio::task::spawn_blocking(move || serving.join().unwrap());
    (addr.recv().unwrap(), stop, serving)
}

#[tokio::main]
async fn main() {
    let secs = env_number("PALISADE_BENCH_SECS", 5).max(1);
    let rounds = env_number("PALISADE_BENCH_ROUNDS", 2).max(1);
    let duration = Duration::from_secs(secs);
    let server = SqlServer::postgres();
    let url = server.url();
    let engine = Arc::new(
        PostgresEngine::open(PostgresConfig::new(&url).with_max_connections(engine_connections()))
            .await
            .unwrap(),
    );
    let pool = raw_pool(&url).await;
    server_settings(&pool).await;
    let own_runtime = std::env::var("PALISADE_BENCH_SERVER_RUNTIME").as_deref() == Ok("own");
    let (addr, stop, serving) = if own_runtime {
        serve_on_own_runtime(url.clone())
    } else {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let store = Store::with_engine(
            Arc::clone(&engine) as Arc<dyn Engine>,
            StoreConfig::default(),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(async move {
            run(listener, AppState::new(store), async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        (addr, stop, serving)
    };

    let postgres = server.pid().expect("the testkit's PostgreSQL runs");
    let cells: Vec<&str> = std::env::var("PALISADE_BENCH_CELLS")
        .unwrap_or_else(|_| CELLS.map(|(cell, _)| cell).join(","))
        .split(',')
        .map(str::trim)
        .filter(|cell| !cell.is_empty())
        .map(|cell| {
            CELLS
                .iter()
                .find(|(known, _)| *known == cell)
                .unwrap_or_else(|| panic!("unknown cell `{cell}`; known: {CELLS:?}"))
                .0
        })
        .collect();
    println!(
        "postgres_writes: {} clients, lock per client, {VALUE_BYTES}-byte values, {rounds} rounds of {secs} s per cell",
        clients()
    );
    let mut best = vec![Figures::default(); cells.len()];
    for round in 1..=rounds {
        for (index, cell) in cells.iter().enumerate() {
            let figures = metered(postgres, &pool, &engine, async {
                match *cell {
                    "pgbench" => pgbench(&url, postgres, duration).await,
                    "raw-tx" => raw_transactions(&pool, duration).await,
                    "raw-stmt" => raw_statements(&pool, duration).await,
                    "engine" => engine_writes(&engine, duration).await,
                    _ => http_puts(addr, duration).await,
                }
            })
            .await;
            let ours = if figures.server_us > 0.0 {
                format!(
                    "load generator {:>4.0} µs + server {:>4.0} µs",
                    figures.process_us - figures.server_us,
                    figures.server_us
                )
            } else {
                format!("load generator {:>4.0} µs", figures.process_us)
            };
            println!(
                "round {round}  {:<52} {:>8.0} writes/s  p50 {:>6} µs  CPU/write: {ours}, PostgreSQL {:>4.0} µs; switches/write {:.1}; writes/WAL flush {:.1}; puts/batch {:.1}",
                name(cell),
                figures.per_second,
                figures.p50_us,
                figures.postgres_us,
                figures.switches,
                figures.per_flush,
                figures.per_batch,
            );
            if figures.per_second > best[index].per_second {
                best[index] = figures;
            }
        }
    }
    println!();
    let baseline = cells
        .iter()
        .position(|cell| *cell == "pgbench")
        .map(|index| best[index].per_second);
    for (cell, figure) in cells.iter().zip(&best) {
        let ratio = baseline.map_or_else(String::new, |baseline| {
            format!("  = {:.2} × pgbench", figure.per_second / baseline)
        });
        println!(
            "best  {:<52} {:>8.0} writes/s  p50 {:>6} µs{ratio}",
            name(cell),
            figure.per_second,
            figure.p50_us,
        );
    }
    let _ = stop.send(());
    serving.await.unwrap();
}
