//! Fenced writes through the resource server, against the raw sled
//! transaction measured in the same run.
//!
//! Run with: `cargo bench -p palisade-server --bench fenced_writes`
//!
//! For each durability mode (`flushed`, `buffered`), 1, 8 and 32 concurrent
//! clients, one lock per client or all on one lock, 100-byte values: the
//! server runs in this process on 127.0.0.1:0 over a temporary directory,
//! and each client is a keep-alive HTTP/1.1 connection sending `PUT`s with
//! an exclusive sequencer. The baselines, at the same thread counts:
//!
//! - raw sled: the same check + mark + write transaction over a data tree
//!   and a mark tree, in-process, no HTTP, without and with a `flush()`
//!   after each transaction (sled's background flusher off, so the
//!   no-flush figure is the transaction alone);
//! - store: `palisade_store::Store::apply` in-process (the full fenced
//!   transaction, group commit in `flushed` mode), no HTTP.
//!
//! Plus the batch rows: 100 ops per request against 100 single requests.
//!
//! And the comparison with Redis (section `redis`): in interleaved rounds,
//! `wrk -t2 -c32` against the server's `/healthz` (the load generator's
//! ceiling), `wrk` sending fenced `PUT`s (one lock per connection, and
//! one lock) to the `palisade-server` binary itself, run as a child
//! process in `flushed` mode, `redis-benchmark` sending `SET`s of the same
//! size to a Redis with `appendfsync always` (started through
//! `palisade-testkit`) at 32 clients from its one thread, and raw sled
//! no-flush at 32 threads. Each round also prints the CPU the load
//! generators themselves spent per request.
//!
//! `PALISADE_BENCH_SECS` sets the seconds per HTTP cell (default 3; the
//! in-process baseline cells run half as long);
//! `PALISADE_BENCH_SECTIONS` (a comma-separated subset of `raw`, `store`,
//! `http`, `batch`, `redis`; default all) picks what to run, e.g. for
//! profiling; `PALISADE_BENCH_ROUNDS` sets the rounds of the `redis`
//! section (default 3).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_server::{AppState, run};
use palisade_store::{Durability, Op, Store, StoreConfig};
use palisade_testkit::redis::{Persistence, RedisOptions, RedisServer};
use support::{
    LoadFigures, ServerProcess, cycling_script, median, raw_request, redis_benchmark_set, wrk,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

const VALUE_BYTES: usize = 100;
const CLIENT_COUNTS: [usize; 3] = [1, 8, 32];
const KEYS_PER_CLIENT: usize = 4096;
const BATCH_OPS: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Layout {
    LockPerClient,
    OneLock,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::LockPerClient => "lock per client",
            Layout::OneLock => "one lock",
        }
    }

    fn lock(self, client: usize) -> String {
        match self {
            Layout::LockPerClient => format!("bench/c{client}"),
            Layout::OneLock => "bench/all".to_owned(),
        }
    }
}

/// The figures of one cell.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    per_second: f64,
    p50_us: f64,
    p99_us: f64,
}

/// Per-op records of a cell: (finished at, latency in µs).
type Samples = Vec<(Instant, u32)>;

/// Figures over the ops that finished by `deadline`, as a rate over
/// `duration`. An op still running at the deadline (a flush stuck behind
/// the disk) does not stretch the window.
fn figures_by_deadline(samples: Samples, deadline: Instant, duration: Duration) -> Figures {
    let latencies: Vec<u32> = samples
        .into_iter()
        .filter(|(finished, _)| *finished <= deadline)
        .map(|(_, latency)| latency)
        .collect();
    figures(latencies.len(), duration, latencies)
}

fn figures(count: usize, elapsed: Duration, mut latencies_us: Vec<u32>) -> Figures {
    latencies_us.sort_unstable();
    let pick = |q: f64| {
        if latencies_us.is_empty() {
            0.0
        } else {
            f64::from(latencies_us[((latencies_us.len() - 1) as f64 * q) as usize])
        }
    };
    Figures {
        per_second: count as f64 / elapsed.as_secs_f64(),
        p50_us: pick(0.50),
        p99_us: pick(0.99),
    }
}

fn cell_duration() -> Duration {
    let secs = std::env::var("PALISADE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(3.0);
    Duration::from_secs_f64(secs)
}

fn section(name: &str) -> bool {
    match std::env::var("PALISADE_BENCH_SECTIONS") {
        Ok(sections) => sections.split(',').any(|s| s.trim() == name),
        Err(_) => true,
    }
}

fn value() -> Vec<u8> {
    (0..VALUE_BYTES).map(|i| b'a' + (i % 26) as u8).collect()
}

/// The raw baseline: the same check + mark + write transaction in sled,
/// no store, no HTTP, `threads` threads.
fn raw_sled(threads: usize, layout: Layout, flush_each: bool, duration: Duration) -> Figures {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::Config::new()
        .path(dir.path())
        .flush_every_ms(None)
        .open()
        .unwrap();
    let data = db.open_tree("data").unwrap();
    let marks = db.open_tree("marks").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|client| {
            let (db, data, marks, stop) =
                (db.clone(), data.clone(), marks.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                use sled::Transactional as _;
                let lock = layout.lock(client);
                let generation: u64 = 1;
                let value = value();
                let mut latencies: Samples = Vec::with_capacity(1 << 16);
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("{lock}/k{client}-{}", i % KEYS_PER_CLIENT);
                    i += 1;
                    let t0 = Instant::now();
                    let accepted = (&data, &marks)
                        .transaction(|(data, marks)| {
                            let current = marks
                                .get(lock.as_bytes())?
                                .map(|v| u64::from_be_bytes(v.as_ref().try_into().unwrap()))
                                .unwrap_or(0);
                            if generation < current {
                                return Ok(false);
                            }
                            marks.insert(lock.as_bytes(), &generation.to_be_bytes())?;
                            data.insert(key.as_bytes(), value.as_slice())?;
                            Ok::<_, sled::transaction::ConflictableTransactionError<()>>(true)
                        })
                        .unwrap();
                    assert!(accepted);
                    if flush_each {
                        db.flush().unwrap();
                    }
                    latencies.push((Instant::now(), t0.elapsed().as_micros() as u32));
                }
                latencies
            })
        })
        .collect();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for handle in handles {
        latencies.extend(handle.join().unwrap());
    }
    let result = figures_by_deadline(latencies, started + duration, duration);
    // Pay the IO this cell deferred before the next cell starts, untimed.
    db.flush().unwrap();
    leak_after_measuring(db);
    result
}

/// Dropping a sled database flushes its whole cache again, which takes
/// seconds after a burst of writes and is not what a cell measures. Each
/// cell flushes once (untimed, so its deferred IO does not slow the next
/// cell) and then leaks the handle; the temporary directory is still
/// removed.
fn leak_after_measuring<T>(handle: T) {
    std::mem::forget(handle);
}

fn exclusive(lock: &str, generation: u64) -> Sequencer {
    Sequencer::new(
        LockName::new(lock).unwrap(),
        Mode::Exclusive,
        Generation::new(generation).unwrap(),
    )
}

/// The store in-process: `Store::apply` from `threads` threads.
fn store_direct(
    threads: usize,
    layout: Layout,
    durability: Durability,
    duration: Duration,
) -> (Figures, f64) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        StoreConfig {
            durability,
            ..StoreConfig::default()
        },
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|client| {
            let (store, stop) = (store.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let sequencer = exclusive(&layout.lock(client), 1);
                let value = value();
                let mut latencies: Samples = Vec::with_capacity(1 << 16);
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("k{client}-{}", i % KEYS_PER_CLIENT);
                    i += 1;
                    let t0 = Instant::now();
                    store
                        .apply(&sequencer, &[Op::put(key, value.clone())], None)
                        .unwrap()
                        .unwrap();
                    latencies.push((Instant::now(), t0.elapsed().as_micros() as u32));
                }
                latencies
            })
        })
        .collect();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for handle in handles {
        latencies.extend(handle.join().unwrap());
    }
    let stats = store.flush_stats();
    let group = if stats.flushes > 0 {
        stats.tickets as f64 / stats.flushes as f64
    } else {
        0.0
    };
    let result = figures_by_deadline(latencies, started + duration, duration);
    store.flush().unwrap();
    leak_after_measuring(store);
    (result, group)
}

/// A minimal keep-alive HTTP/1.1 client: one connection, one request at a
/// time. Lean on purpose, so the load generator takes as little of the two
/// cores as it can from the server it measures.
struct Connection {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl Connection {
    async fn open(addr: std::net::SocketAddr) -> Connection {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Connection {
            stream,
            buffer: Vec::with_capacity(4096),
        }
    }

    /// Sends one request and returns (status, body).
    async fn request(&mut self, head: &str, body: &[u8]) -> (u16, Vec<u8>) {
        let mut request = Vec::with_capacity(head.len() + body.len() + 64);
        request.extend_from_slice(head.as_bytes());
        request.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
        request.extend_from_slice(body);
        self.stream.write_all(&request).await.unwrap();
        loop {
            if let Some(end) = find(&self.buffer, b"\r\n\r\n") {
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
                let body = self.buffer[end + 4..total].to_vec();
                self.buffer.drain(..total);
                return (status, body);
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

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn segment(text: &str) -> String {
    text.replace('/', "%2F")
}

/// `clients` connections sending single PUTs for `duration`.
async fn http_puts(
    addr: std::net::SocketAddr,
    clients: usize,
    layout: Layout,
    duration: Duration,
) -> Figures {
    let deadline = Instant::now() + duration;
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            tokio::spawn(async move {
                let lock = layout.lock(client);
                let sequencer = exclusive(&lock, 1).to_string();
                let value = value();
                let mut connection = Connection::open(addr).await;
                let mut latencies: Samples = Vec::with_capacity(1 << 16);
                let mut i = 0usize;
                while Instant::now() < deadline {
                    let head = format!(
                        "PUT /v1/locks/{}/keys/k{client}-{} HTTP/1.1\r\nhost: bench\r\npalisade-sequencer: {sequencer}\r\n",
                        segment(&lock),
                        i % KEYS_PER_CLIENT
                    );
                    i += 1;
                    let t0 = Instant::now();
                    let (status, body) = connection.request(&head, &value).await;
                    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
                    latencies.push((Instant::now(), t0.elapsed().as_micros() as u32));
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    figures_by_deadline(latencies, started + duration, duration)
}

/// `clients` connections sending batches of `BATCH_OPS` puts; figures are
/// per op.
async fn http_batches(addr: std::net::SocketAddr, clients: usize, duration: Duration) -> Figures {
    let deadline = Instant::now() + duration;
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            tokio::spawn(async move {
                let lock = Layout::LockPerClient.lock(client);
                let sequencer = exclusive(&lock, 1).to_string();
                let value = String::from_utf8(value()).unwrap();
                let mut connection = Connection::open(addr).await;
                let mut latencies: Samples = Vec::new();
                let mut i = 0usize;
                while Instant::now() < deadline {
                    let ops: Vec<serde_json::Value> = (0..BATCH_OPS)
                        .map(|n| {
                            serde_json::json!({"op": "put", "key": format!("k{client}-{}", (i + n) % KEYS_PER_CLIENT), "value": value})
                        })
                        .collect();
                    i += BATCH_OPS;
                    let body = serde_json::json!({ "ops": ops }).to_string();
                    let head = format!(
                        "POST /v1/locks/{}/batch HTTP/1.1\r\nhost: bench\r\npalisade-sequencer: {sequencer}\r\ncontent-type: application/json\r\n",
                        segment(&lock)
                    );
                    let t0 = Instant::now();
                    let (status, body) = connection.request(&head, body.as_bytes()).await;
                    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
                    latencies.push((Instant::now(), t0.elapsed().as_micros() as u32));
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let mut per_request = figures_by_deadline(latencies, started + duration, duration);
    per_request.per_second *= BATCH_OPS as f64;
    per_request
}

/// A server running on the bench's runtime.
struct RunningServer {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningServer {
    /// Stops the server and waits for its final flush.
    async fn shut_down(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap();
    }
}

async fn start_server(
    durability: Durability,
) -> (
    tempfile::TempDir,
    std::net::SocketAddr,
    Store,
    RunningServer,
) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        StoreConfig {
            durability,
            ..StoreConfig::default()
        },
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let state = AppState::new(store.clone());
    let task = tokio::spawn(async move {
        run(listener, state, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    (dir, addr, store, RunningServer { stop, task })
}

/// Connections and threads of the comparison with Redis.
const VERSUS_CLIENTS: usize = 32;
const VERSUS_THREADS: usize = 2;

/// `wrk` requests for `layout`: thread `t` of [`VERSUS_THREADS`] cycles
/// through its share of the locks (lock per client: 16 names per thread,
/// one per connection on average; `wrk` hands a request to whichever of
/// its connections is free, so a name is not pinned to one connection),
/// 16 keys each, always generation 1.
fn versus_requests(layout: Layout) -> Vec<Vec<String>> {
    let per_thread = VERSUS_CLIENTS / VERSUS_THREADS;
    let value = value();
    (0..VERSUS_THREADS)
        .map(|thread| {
            let mut requests = Vec::new();
            for key in 0..16 {
                for connection in 0..per_thread {
                    let client = thread * per_thread + connection;
                    let lock = layout.lock(client);
                    let sequencer = exclusive(&lock, 1).to_string();
                    let path = format!("/v1/locks/{}/keys/k{client}-{key}", segment(&lock));
                    requests.push(raw_request(
                        "PUT",
                        &path,
                        &[(Sequencer::HTTP_HEADER, &sequencer)],
                        &value,
                    ));
                }
            }
            requests
        })
        .collect()
}

/// One round of the comparison with Redis.
#[derive(Debug, Clone, Copy)]
struct VersusRound {
    healthz: LoadFigures,
    lock_per_client: LoadFigures,
    lock_per_client_group: f64,
    lock_per_client_cost: Cost,
    one_lock: LoadFigures,
    one_lock_group: f64,
    one_lock_cost: Cost,
    redis: LoadFigures,
    redis_cost: Cost,
    raw_lock_per_client: Figures,
    raw_one_lock: Figures,
}

/// The server's threads whose cost per write is shown apart, by the
/// start of their names (Linux keeps 15 bytes of a thread's name): the
/// async workers (HTTP, routing, the store's front), the store's
/// committer, its checkpoint thread, sled's I/O pool.
const SERVER_THREADS: [&str; 4] = [
    "tokio-rt-worker",
    "palisade-commit",
    "palisade-checkp",
    "sled-io",
];

/// What one request cost the process that served it: CPU µs and
/// switches-in (its threads woken) per request.
#[derive(Debug, Clone, Copy)]
struct Cost {
    cpu_us: f64,
    switches: f64,
}

impl Cost {
    /// Between two readings of [`palisade_testkit::bench::process_usage`],
    /// over `requests`.
    fn between(before: (Duration, u64), after: (Duration, u64), requests: f64) -> Cost {
        let requests = requests.max(1.0);
        Cost {
            cpu_us: after.0.saturating_sub(before.0).as_secs_f64() * 1e6 / requests,
            switches: after.1.saturating_sub(before.1) as f64 / requests,
        }
    }
}

/// Durable fenced writes through HTTP against Redis `SET` with
/// `appendfsync always`, in interleaved rounds (section `redis`).
fn versus_redis(duration: Duration) {
    let rounds: usize = std::env::var("PALISADE_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    println!(
        "durable writes against Redis `appendfsync always`: {VERSUS_CLIENTS} connections, {VERSUS_THREADS} wrk threads, redis-benchmark single-threaded, {rounds} interleaved rounds; load average at the start {}",
        support::load_average()
    );
    let redis = RedisServer::spawn(RedisOptions::persistence(Persistence::AofAlways));
    let redis_port = redis.port().expect("a spawned Redis has a port");
    let scripts = tempfile::tempdir().unwrap();
    let script = |name: &str, layout: Layout| {
        let path = scripts.path().join(name);
        std::fs::write(&path, cycling_script(&versus_requests(layout))).unwrap();
        path
    };
    let lock_per_client_script = script("lock-per-client.lua", Layout::LockPerClient);
    let one_lock_script = script("one-lock.lua", Layout::OneLock);
    // About as many SETs as Redis does in `duration` on these machines.
    let redis_requests = ((duration.as_secs_f64() * 60_000.0) as usize).max(10_000);

    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data_dir.path());
    let base = format!("http://{}", server.addr);
    let redis_pid = redis.pid().expect("a spawned Redis has a pid");
    // A `wrk` cell: its figures, writes per fsync, and the server's cost
    // per write (the writes the cell counted, over its duration).
    let server_cell = |run: &dyn Fn() -> LoadFigures| {
        let (flushes_before, tickets_before) = server.flush_counters();
        let usage_before = server.usage();
        let threads_before = SERVER_THREADS.map(|prefix| server.thread_usage(prefix));
        let figures = run();
        let usage_after = server.usage();
        let threads_after = SERVER_THREADS.map(|prefix| server.thread_usage(prefix));
        let (flushes_after, tickets_after) = server.flush_counters();
        let flushes = (flushes_after - flushes_before).max(1);
        let writes = figures.per_second * duration.as_secs_f64();
        let threads: [Cost; SERVER_THREADS.len()] =
            std::array::from_fn(|i| Cost::between(threads_before[i], threads_after[i], writes));
        (
            figures,
            (tickets_after - tickets_before) as f64 / flushes as f64,
            Cost::between(usage_before, usage_after, writes),
            threads,
        )
    };
    println!(
        "{:<6} {:>10} | {:>10} {:>7} {:>7} | {:>10} {:>7} {:>7} | {:>10} {:>7} | {:>10} {:>10} | {:>7} {:>7} {:>7} {:>7}",
        "round",
        "healthz/s",
        "per-lock/s",
        "p99 µs",
        "w/fsync",
        "one-lock/s",
        "p99 µs",
        "w/fsync",
        "redis/s",
        "p99 µs",
        "raw per/s",
        "raw one/s",
        "per÷rds",
        "one÷rds",
        "per÷raw",
        "one÷raw"
    );
    let mut results = Vec::new();
    for round in 1..=rounds {
        let healthz = wrk(
            &format!("{base}/healthz"),
            None,
            VERSUS_THREADS,
            VERSUS_CLIENTS,
            duration,
        );
        let (lock_per_client, lock_per_client_group, lock_per_client_cost, threads) =
            server_cell(&|| {
                wrk(
                    &base,
                    Some(&lock_per_client_script),
                    VERSUS_THREADS,
                    VERSUS_CLIENTS,
                    duration,
                )
            });
        let (one_lock, one_lock_group, one_lock_cost, _) = server_cell(&|| {
            wrk(
                &base,
                Some(&one_lock_script),
                VERSUS_THREADS,
                VERSUS_CLIENTS,
                duration,
            )
        });
        let redis_before = palisade_testkit::bench::process_usage(redis_pid);
        let redis = redis_benchmark_set(redis_port, VERSUS_CLIENTS, redis_requests, VALUE_BYTES);
        let redis_cost = Cost::between(
            redis_before,
            palisade_testkit::bench::process_usage(redis_pid),
            redis_requests as f64,
        );
        let raw_lock_per_client = raw_sled(VERSUS_CLIENTS, Layout::LockPerClient, false, duration);
        let raw_one_lock = raw_sled(VERSUS_CLIENTS, Layout::OneLock, false, duration);
        let r = VersusRound {
            healthz,
            lock_per_client,
            lock_per_client_group,
            lock_per_client_cost,
            one_lock,
            one_lock_group,
            one_lock_cost,
            redis,
            redis_cost,
            raw_lock_per_client,
            raw_one_lock,
        };
        println!(
            "{round:<6} {:>10.0} | {:>10.0} {:>7.0} {:>7.1} | {:>10.0} {:>7.0} {:>7.1} | {:>10.0} {:>7.0} | {:>10.0} {:>10.0} | {:>7.2} {:>7.2} {:>7.2} {:>7.2}",
            r.healthz.per_second,
            r.lock_per_client.per_second,
            r.lock_per_client.p99_us,
            r.lock_per_client_group,
            r.one_lock.per_second,
            r.one_lock.p99_us,
            r.one_lock_group,
            r.redis.per_second,
            r.redis.p99_us,
            r.raw_lock_per_client.per_second,
            r.raw_one_lock.per_second,
            r.lock_per_client.per_second / r.redis.per_second,
            r.one_lock.per_second / r.redis.per_second,
            r.lock_per_client.per_second / r.raw_lock_per_client.per_second,
            r.one_lock.per_second / r.raw_one_lock.per_second,
        );
        println!(
            "       CPU µs / switches-in per write: server, lock per client {:.1} / {:.2}; server, one lock {:.1} / {:.2}; Redis {:.1} / {:.2}",
            r.lock_per_client_cost.cpu_us,
            r.lock_per_client_cost.switches,
            r.one_lock_cost.cpu_us,
            r.one_lock_cost.switches,
            r.redis_cost.cpu_us,
            r.redis_cost.switches,
        );
        println!(
            "       load generator CPU µs per request: wrk /healthz {:.1}, lock per client {:.1}, one lock {:.1}; redis-benchmark {:.1}",
            r.healthz.generator_cpu_us,
            r.lock_per_client.generator_cpu_us,
            r.one_lock.generator_cpu_us,
            r.redis.generator_cpu_us,
        );
        println!(
            "       of the server's, lock per client: {}",
            SERVER_THREADS
                .iter()
                .zip(threads)
                .map(|(name, cost)| format!("{name} {:.1} / {:.2}", cost.cpu_us, cost.switches))
                .collect::<Vec<_>>()
                .join("; ")
        );
        results.push(r);
    }
    server.stop();
    drop(redis);

    let ratio =
        |f: &dyn Fn(&VersusRound) -> f64| median(&mut results.iter().map(f).collect::<Vec<_>>());
    let verdict = |value: f64, target: f64| if value >= target { "met" } else { "missed" };
    println!(
        "medians over {rounds} rounds (ratios taken per round); load average at the end {}:",
        support::load_average()
    );
    println!(
        "  wrk's ceiling (/healthz) = {:.2} x the durable lock-per-client rate",
        ratio(&|r| r.healthz.per_second / r.lock_per_client.per_second)
    );
    let cpu = ratio(&|r| r.lock_per_client_cost.cpu_us);
    let switches = ratio(&|r| r.lock_per_client_cost.switches);
    println!(
        "  server per durable write, lock per client: {cpu:.1} µs CPU (target <= 30): {}; {switches:.2} switches-in (target <= 0.5): {}; Redis per SET: {:.1} µs, {:.2} switches-in",
        // At most the target: the verdict of the target against the figure.
        verdict(30.0, cpu),
        verdict(0.5, switches),
        ratio(&|r| r.redis_cost.cpu_us),
        ratio(&|r| r.redis_cost.switches),
    );
    for (name, of_redis, of_raw) in [
        (
            "lock per client",
            ratio(&|r| r.lock_per_client.per_second / r.redis.per_second),
            ratio(&|r| r.lock_per_client.per_second / r.raw_lock_per_client.per_second),
        ),
        (
            "one lock",
            ratio(&|r| r.one_lock.per_second / r.redis.per_second),
            ratio(&|r| r.one_lock.per_second / r.raw_one_lock.per_second),
        ),
    ] {
        println!(
            "  flushed, {name:<15}: {of_redis:.2} x Redis appendfsync always (target >= 1.0): {}; {of_raw:.2} x raw sled no-flush (target >= 0.6): {}",
            verdict(of_redis, 1.0),
            verdict(of_raw, 0.6)
        );
    }
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split(':').nth(1))
        })
        .unwrap_or("unknown CPU")
        .trim()
        .to_owned();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("{cores} cores, {model}")
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument is a filter we
    // do not support, so ignore arguments.
    let duration = cell_duration();
    let raw_duration = duration.mul_f64(0.5);
    println!(
        "fenced_writes: {} per HTTP cell, {} per in-process cell, {VALUE_BYTES}-byte values, machine: {}",
        humantime(duration),
        humantime(raw_duration),
        machine()
    );
    println!();

    // Baselines first, before the server has written anything.
    println!("raw sled transaction (check + mark + write over two trees), in-process, no HTTP");
    println!(
        "{:<16} {:>8} {:>11} {:>9} {:>9} | {:>11} {:>9} {:>9}",
        "layout", "threads", "no flush/s", "p50 µs", "p99 µs", "flush each/s", "p50 µs", "p99 µs"
    );
    let mut raw = std::collections::HashMap::new();
    for layout in [Layout::LockPerClient, Layout::OneLock] {
        for threads in CLIENT_COUNTS {
            if !section("raw") {
                raw.insert(
                    (layout, threads),
                    (
                        Figures {
                            per_second: f64::NAN,
                            ..Figures::default()
                        },
                        Figures {
                            per_second: f64::NAN,
                            ..Figures::default()
                        },
                    ),
                );
                continue;
            }
            let no_flush = raw_sled(threads, layout, false, raw_duration);
            let flush = raw_sled(threads, layout, true, raw_duration);
            println!(
                "{:<16} {:>8} {:>11.0} {:>9.0} {:>9.0} | {:>11.0} {:>9.0} {:>9.0}",
                layout.name(),
                threads,
                no_flush.per_second,
                no_flush.p50_us,
                no_flush.p99_us,
                flush.per_second,
                flush.p50_us,
                flush.p99_us
            );
            raw.insert((layout, threads), (no_flush, flush));
        }
    }
    println!();

    println!(
        "palisade_store::Store::apply in-process (full fenced transaction), no HTTP, lock per client"
    );
    println!(
        "{:<10} {:>8} {:>10} {:>9} {:>9} {:>12}",
        "mode", "threads", "writes/s", "p50 µs", "p99 µs", "writes/flush"
    );
    for durability in [Durability::Flushed, Durability::buffered()] {
        for threads in CLIENT_COUNTS {
            if !section("store") {
                continue;
            }
            let (figures, group) =
                store_direct(threads, Layout::LockPerClient, durability, raw_duration);
            println!(
                "{:<10} {:>8} {:>10.0} {:>9.0} {:>9.0} {:>12}",
                durability.name(),
                threads,
                figures.per_second,
                figures.p50_us,
                figures.p99_us,
                if group > 0.0 {
                    format!("{group:.1}")
                } else {
                    "-".into()
                }
            );
        }
    }
    println!();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut single_put_rows = Vec::new();
    println!("HTTP: PUT through palisade-server (in-process, 127.0.0.1), keep-alive connections");
    println!(
        "{:<10} {:<16} {:>8} {:>10} {:>9} {:>9} {:>12} {:>14} {:>14}",
        "mode",
        "layout",
        "clients",
        "writes/s",
        "p50 µs",
        "p99 µs",
        "writes/flush",
        "÷ raw no-flush",
        "÷ raw flush-each"
    );
    for durability in [Durability::Flushed, Durability::buffered()] {
        if !section("http") {
            continue;
        }
        runtime.block_on(async {
            let (_dir, addr, store, server) = start_server(durability).await;
            for layout in [Layout::LockPerClient, Layout::OneLock] {
                for clients in CLIENT_COUNTS {
                    let before = store.flush_stats();
                    let figures = http_puts(addr, clients, layout, duration).await;
                    let after = store.flush_stats();
                    let flushes = after.flushes - before.flushes;
                    let group = if flushes > 0 {
                        format!(
                            "{:.1}",
                            (after.tickets - before.tickets) as f64 / flushes as f64
                        )
                    } else {
                        "-".into()
                    };
                    let (raw_no_flush, raw_flush) = raw[&(layout, clients)];
                    println!(
                        "{:<10} {:<16} {:>8} {:>10.0} {:>9.0} {:>9.0} {:>12} {:>14.2} {:>14.2}",
                        durability.name(),
                        layout.name(),
                        clients,
                        figures.per_second,
                        figures.p50_us,
                        figures.p99_us,
                        group,
                        figures.per_second / raw_no_flush.per_second,
                        figures.per_second / raw_flush.per_second,
                    );
                    single_put_rows.push((durability.name(), layout, clients, figures));
                }
            }
            server.shut_down().await;
        });
    }
    println!();

    println!(
        "HTTP: batch of {BATCH_OPS} puts per request vs single PUTs (lock per client), per op"
    );
    println!(
        "{:<10} {:>8} {:>13} {:>15} {:>15} {:>10}",
        "mode", "clients", "batch ops/s", "µs/op (batch)", "µs/op (single)", "speed-up"
    );
    for durability in [Durability::Flushed, Durability::buffered()] {
        if !section("batch") {
            continue;
        }
        runtime.block_on(async {
            let (_dir, addr, _store, server) = start_server(durability).await;
            for clients in [1usize, 8] {
                let batch = http_batches(addr, clients, duration).await;
                let single = single_put_rows
                    .iter()
                    .find(|(mode, layout, c, _)| {
                        *mode == durability.name()
                            && *layout == Layout::LockPerClient
                            && *c == clients
                    })
                    .map(|row| row.3)
                    .unwrap_or(Figures {
                        per_second: f64::NAN,
                        ..Figures::default()
                    });
                println!(
                    "{:<10} {:>8} {:>13.0} {:>15.2} {:>15.2} {:>9.1}x",
                    durability.name(),
                    clients,
                    batch.per_second,
                    1e6 / batch.per_second,
                    1e6 / single.per_second,
                    batch.per_second / single.per_second
                );
            }
            server.shut_down().await;
        });
    }
    println!();

    if section("redis") {
        versus_redis(duration);
        println!();
    }

    if !(section("raw") && section("http")) {
        return;
    }
    let raw32 = raw[&(Layout::LockPerClient, 32)].0.per_second;
    println!(
        "targets (lock per client, 32 clients, against raw no-flush at 32 threads = {raw32:.0}/s):"
    );
    for (mode, layout, clients, figures) in &single_put_rows {
        if *clients == 32 && *layout == Layout::LockPerClient {
            let ratio = figures.per_second / raw32;
            println!(
                "  {mode:<9} {:.0}/s = {ratio:.2} x raw (target >= 0.50): {}",
                figures.per_second,
                if ratio >= 0.5 { "met" } else { "missed" }
            );
        }
    }
}

fn humantime(duration: Duration) -> String {
    format!("{:.1} s", duration.as_secs_f64())
}
