//! The etcd lock backend against its baselines, in one run against one etcd.
//!
//! Run with: `cargo bench -p palisade-lock-etcd --bench etcd_lock`
//! (`PALISADE_BENCH_ONLY=one|names|one-name` runs one shape,
//! `PALISADE_BENCH_SECONDS` sets the time per system and shape, default 8;
//! `PALISADE_BENCH_SYSTEMS=raw,lock,palisade` runs only the systems listed,
//! for a profile of one;
//! a full run takes about a minute and a half).
//!
//! It starts its own etcd on loopback through the testkit (or uses the one
//! named by `PALISADE_ETCD_ENDPOINTS`) and measures three systems:
//!
//! - **raw**: the etcd round trips the algorithm needs, with nothing
//!   around them: a transaction that puts a key with a reused lease if it
//!   is absent and reads the first-created key, then a delete;
//! - **etcd Lock**: etcd's own server-side lock service (`Lock`/`Unlock`
//!   RPCs) through etcd-client;
//! - **palisade**: `EtcdLock` acquire + release;
//!
//! each with 1 client, 8 clients on 8 names, and 8 clients on one name
//! (where a cycle's speed is the hand-off: from the holder starting its
//! release to the next holder being granted). Every client has its own
//! connection. The three systems take turns in short slices, so a noisy
//! neighbour on the machine hits all three alike and the ratios stay
//! meaningful. It prints one table, the ratios against the targets, and for
//! the contended case per-client fairness and the requests per hand-off.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, LockOptions, PutOptions, SortOrder,
    SortTarget, Txn, TxnOp,
};
use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
use palisade_lock_etcd::{EtcdConfig, EtcdLock, EtcdLockClient, RpcCounts};
use palisade_testkit::bench::process_usage;
use palisade_testkit::etcd::EtcdServer;
use tokio::time::Instant;

const CLIENTS: usize = 8;
/// Each system's time per shape is cut into this many slices, taken in turn.
const SLICES: u32 = 20;

fn main() {
    let seconds: u64 = std::env::var("PALISADE_BENCH_SECONDS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(8);
    let etcd = EtcdServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(run(
        etcd.endpoints(),
        etcd.pid(),
        Duration::from_secs(seconds),
    ));
}

/// A scenario's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    One,
    ManyNames,
    OneName,
}

impl Shape {
    fn clients(self) -> usize {
        match self {
            Shape::One => 1,
            Shape::ManyNames | Shape::OneName => CLIENTS,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Shape::One => "1 client",
            Shape::ManyNames => "8 clients, 8 names",
            Shape::OneName => "8 clients, one name",
        }
    }

    /// The value of `PALISADE_BENCH_ONLY` that runs only this shape.
    fn key(self) -> &'static str {
        match self {
            Shape::One => "one",
            Shape::ManyNames => "names",
            Shape::OneName => "one-name",
        }
    }

    fn name(self, client: usize) -> String {
        match self {
            Shape::One | Shape::OneName => "bench".to_owned(),
            Shape::ManyNames => format!("bench-{client}"),
        }
    }
}

/// The baselines' connection options: etcd-client's defaults, or with
/// `PALISADE_BENCH_BASELINE=palisade` the ones Palisade's connections use
/// (HTTP/2 keep-alive pings, etcd's require-leader flag), so the lock
/// algorithms are compared over equal connections (and leases, see
/// [`baseline_lease`]).
fn baseline_options() -> Option<ConnectOptions> {
    match like_palisade() {
        true => Some(
            ConnectOptions::new()
                .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
                .with_require_leader(true),
        ),
        false => None,
    }
}

fn like_palisade() -> bool {
    std::env::var("PALISADE_BENCH_BASELINE").as_deref() == Ok("palisade")
}

/// A baseline client's lease: 600 s and never renewed, or with
/// `PALISADE_BENCH_BASELINE=palisade` a 10 s lease kept alive every third
/// of its TTL on a keep-alive stream, as a Palisade session's is (and an
/// etcd `concurrency.Session`'s).
async fn baseline_lease(client: &mut Client) -> i64 {
    if !like_palisade() {
        return client.lease_grant(600, None).await.expect("lease").id();
    }
    let lease = client.lease_grant(10, None).await.expect("lease").id();
    let (mut keeper, mut answers) = client.lease_keep_alive(lease).await.expect("keep-alive");
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(10) / 3).await;
            if keeper.keep_alive().await.is_err() || answers.message().await.is_err() {
                return;
            }
        }
    });
    lease
}

/// One benchmark client of one system.
enum Worker {
    Raw {
        client: Client,
        lease: i64,
        dir: String,
        key: String,
    },
    Service {
        client: Client,
        lease: i64,
        name: String,
    },
    Palisade {
        session: EtcdLock,
        name: LockName,
    },
}

impl Worker {
    /// One cycle: take the lock (or the raw equivalent), let go.
    async fn cycle(&mut self, recorder: &Recorder) {
        let started = Instant::now();
        match self {
            Worker::Raw {
                client,
                lease,
                dir,
                key,
            } => {
                let txn = Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then([
                        TxnOp::put(key.clone(), "", Some(PutOptions::new().with_lease(*lease))),
                        TxnOp::get(
                            dir.clone(),
                            Some(
                                GetOptions::new()
                                    .with_prefix()
                                    .with_sort(SortTarget::Create, SortOrder::Ascend)
                                    .with_limit(1),
                            ),
                        ),
                    ])
                    .or_else([TxnOp::get(key.clone(), None)]);
                client.txn(txn).await.expect("txn");
                client.delete(key.clone(), None).await.expect("delete");
            }
            Worker::Service {
                client,
                lease,
                name,
            } => {
                let locked = client
                    .lock(name.clone(), Some(LockOptions::new().with_lease(*lease)))
                    .await
                    .expect("Lock");
                recorder.granted();
                client.unlock(locked.key().to_vec()).await.expect("Unlock");
            }
            Worker::Palisade { session, name } => {
                let guard = session
                    .acquire(name, Mode::Exclusive)
                    .await
                    .expect("acquire");
                recorder.granted();
                guard.release().await.expect("release");
            }
        }
        recorder.cycle(started.elapsed());
    }
}

/// Bookkeeping of one slice.
struct Recorder {
    deadline: Instant,
    one_name: bool,
    latencies: Mutex<Vec<Duration>>,
    /// When the current holder started to release (one-name shape).
    release_started: Mutex<Option<Instant>>,
}

impl Recorder {
    fn running(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// The holder is granted: the hand-off that ends here is measured, and
    /// the holder releases at once, which starts the next.
    fn granted(&self) {
        if !self.one_name {
            return;
        }
        let mut release_started = self.release_started.lock().unwrap();
        if let Some(started) = release_started.take() {
            self.latencies.lock().unwrap().push(started.elapsed());
        }
        *release_started = Some(Instant::now());
    }

    fn cycle(&self, latency: Duration) {
        if !self.one_name {
            self.latencies.lock().unwrap().push(latency);
        }
    }
}

/// What one system measured over all its slices of one shape.
#[derive(Default)]
struct Measured {
    cycles: usize,
    elapsed: Duration,
    /// Cycle latency, or hand-off latency for the one-name shape.
    latencies: Vec<Duration>,
    per_client: Vec<usize>,
    /// CPU used by this benchmark process and by etcd during the slices.
    client_cpu: Duration,
    etcd_cpu: Duration,
    /// Switches-in (threads woken) of this process and of etcd.
    client_switches: u64,
    etcd_switches: u64,
}

impl Measured {
    /// CPU per cycle, in microseconds.
    fn cpu_per_cycle(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() * 1e6 / self.cycles.max(1) as f64
    }

    /// Switches-in per cycle.
    fn switches_per_cycle(&self, switches: u64) -> f64 {
        switches as f64 / self.cycles.max(1) as f64
    }

    fn rate(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile(&self, fraction: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        sorted[((sorted.len() - 1) as f64 * fraction).round() as usize]
    }

    fn fairness(&self) -> f64 {
        let max = *self.per_client.iter().max().unwrap_or(&0) as f64;
        let min = *self.per_client.iter().min().unwrap_or(&0) as f64;
        if min == 0.0 { f64::INFINITY } else { max / min }
    }
}

/// Runs `workers` for one slice; returns them with their cycle counts.
async fn slice(
    workers: Vec<Worker>,
    shape: Shape,
    length: Duration,
    etcd_pid: Option<u32>,
    into: &mut Measured,
) -> Vec<Worker> {
    let usage = || {
        (
            process_usage(std::process::id()),
            etcd_pid.map_or((Duration::ZERO, 0), process_usage),
        )
    };
    let before = usage();
    let recorder = Arc::new(Recorder {
        deadline: Instant::now() + length,
        one_name: shape == Shape::OneName,
        latencies: Mutex::new(Vec::new()),
        release_started: Mutex::new(None),
    });
    let started = Instant::now();
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|mut worker| {
            let recorder = recorder.clone();
            tokio::spawn(async move {
                let mut cycles = 0usize;
                while recorder.running() {
                    worker.cycle(&recorder).await;
                    cycles += 1;
                }
                (worker, cycles)
            })
        })
        .collect();
    let mut workers = Vec::new();
    into.per_client.resize(tasks.len(), 0);
    for (index, task) in tasks.into_iter().enumerate() {
        let (worker, cycles) = task.await.expect("a benchmark client");
        into.per_client[index] += cycles;
        into.cycles += cycles;
        workers.push(worker);
    }
    into.elapsed += started.elapsed();
    let after = usage();
    into.client_cpu += after.0.0.saturating_sub(before.0.0);
    into.etcd_cpu += after.1.0.saturating_sub(before.1.0);
    into.client_switches += after.0.1.saturating_sub(before.0.1);
    into.etcd_switches += after.1.1.saturating_sub(before.1.1);
    into.latencies
        .extend(recorder.latencies.lock().unwrap().iter().copied());
    workers
}

async fn run(endpoints: Vec<String>, etcd_pid: Option<u32>, duration: Duration) {
    println!(
        "etcd lock benchmark: {duration:?} per system and shape, in {SLICES} interleaved slices; etcd at {endpoints:?}"
    );
    let only = std::env::var("PALISADE_BENCH_ONLY").ok();
    // For profiling one system alone: `PALISADE_BENCH_SYSTEMS=palisade`
    // (any of raw, lock, palisade, comma-separated); the others' rows stay
    // empty.
    let systems = std::env::var("PALISADE_BENCH_SYSTEMS").ok();
    let runs = |system: &str| {
        systems
            .as_deref()
            .is_none_or(|list| list.split(',').any(|s| s.trim() == system))
    };
    let mut rows = Vec::new();
    for shape in [Shape::One, Shape::ManyNames, Shape::OneName] {
        if only.as_deref().is_some_and(|only| only != shape.key()) {
            continue;
        }
        let mut raw = raw_workers(&endpoints, shape).await;
        let mut service = service_workers(&endpoints, shape).await;
        let (mut ours, connections) = palisade_workers(&endpoints, shape).await;
        let before: RpcCounts = connections.iter().map(EtcdLockClient::rpc_counts).sum();
        let (mut raw_measured, mut service_measured, mut ours_measured) = (
            Measured::default(),
            Measured::default(),
            Measured::default(),
        );
        let length = duration / SLICES;
        for _ in 0..SLICES {
            if runs("raw") {
                raw = slice(raw, shape, length, etcd_pid, &mut raw_measured).await;
            }
            if runs("lock") {
                service = slice(service, shape, length, etcd_pid, &mut service_measured).await;
            }
            if runs("palisade") {
                ours = slice(ours, shape, length, etcd_pid, &mut ours_measured).await;
            }
        }
        let requests = connections
            .iter()
            .map(EtcdLockClient::rpc_counts)
            .sum::<RpcCounts>()
            - before;
        rows.push((
            shape,
            raw_measured,
            service_measured,
            ours_measured,
            requests,
        ));
    }

    println!();
    println!(
        "| shape | system | cycles/s | p50 | p99 | vs raw | vs etcd Lock | CPU/cycle client, etcd | switches-in/cycle client, etcd |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for (shape, raw, service, ours, _) in &rows {
        for (system, measured) in [
            ("raw txn + delete", raw),
            ("etcd Lock/Unlock", service),
            ("palisade", ours),
        ] {
            let ratios = if system == "palisade" {
                format!(
                    "{:.2}x | {:.2}x",
                    measured.rate() / raw.rate(),
                    measured.rate() / service.rate()
                )
            } else {
                " | ".to_owned()
            };
            let latency = |fraction| {
                if measured.latencies.is_empty() {
                    "-".to_owned()
                } else {
                    format!(
                        "{:.2} ms",
                        measured.percentile(fraction).as_secs_f64() * 1000.0
                    )
                }
            };
            println!(
                "| {} | {system} | {:.0} | {} | {} | {ratios} | {:.0} µs, {:.0} µs | {:.2}, {:.2} |",
                shape.label(),
                measured.rate(),
                latency(0.5),
                latency(0.99),
                measured.cpu_per_cycle(measured.client_cpu),
                measured.cpu_per_cycle(measured.etcd_cpu),
                measured.switches_per_cycle(measured.client_switches),
                measured.switches_per_cycle(measured.etcd_switches),
            );
        }
    }
    println!();
    println!(
        "(latency: per cycle; for one name, per hand-off: release started -> next holder granted)"
    );

    println!();
    println!("targets:");
    if let Some((_, raw, service, ours, _)) = rows.iter().find(|row| row.0 == Shape::One) {
        println!(
            "- uncontended: palisade / raw = {:.2} (target >= 0.90); palisade / etcd Lock = {:.2} (target >= 1.00)",
            ours.rate() / raw.rate(),
            ours.rate() / service.rate()
        );
    }
    if let Some((_, _, service, ours, requests)) = rows.iter().find(|row| row.0 == Shape::OneName) {
        println!(
            "- one name: median hand-off {:.2} ms (target <= 10 ms; etcd Lock {:.2} ms); mean hand-off (1 / cycles per s) {:.2} ms (etcd Lock {:.2} ms)",
            ours.percentile(0.5).as_secs_f64() * 1000.0,
            service.percentile(0.5).as_secs_f64() * 1000.0,
            1000.0 / ours.rate(),
            1000.0 / service.rate()
        );
        println!(
            "- one name: throughput palisade / etcd Lock = {:.1}x (target >= 5x)",
            ours.rate() / service.rate()
        );
        println!(
            "- one name: fairness max/min cycles per client: palisade {:.2} {:?}; etcd Lock {:.2} {:?} (target <= 1.5)",
            ours.fairness(),
            ours.per_client,
            service.fairness(),
            service.per_client
        );
        let per = |count: u64| count as f64 / ours.cycles as f64;
        println!(
            "- one name: requests per hand-off (palisade): {:.2} txns, {:.2} watch creates, {:.3} watch streams opened, {:.3} keep-alives; fallback re-reads: {} (polling: target 0)",
            per(requests.txns),
            per(requests.watch_creates),
            per(requests.watch_streams),
            per(requests.keepalives),
            requests.fallback_rechecks,
        );
    }
}

async fn raw_workers(endpoints: &[String], shape: Shape) -> Vec<Worker> {
    let prefix = unique("raw");
    let mut workers = Vec::new();
    for index in 0..shape.clients() {
        let mut client = Client::connect(endpoints, baseline_options())
            .await
            .expect("etcd client");
        let lease = baseline_lease(&mut client).await;
        let dir = format!("{prefix}/{}/", shape.name(index));
        let key = format!("{dir}{lease:016x}");
        workers.push(Worker::Raw {
            client,
            lease,
            dir,
            key,
        });
    }
    workers
}

async fn service_workers(endpoints: &[String], shape: Shape) -> Vec<Worker> {
    let prefix = unique("etcd-lock");
    let mut workers = Vec::new();
    for index in 0..shape.clients() {
        let mut client = Client::connect(endpoints, baseline_options())
            .await
            .expect("etcd client");
        let lease = baseline_lease(&mut client).await;
        workers.push(Worker::Service {
            client,
            lease,
            name: format!("{prefix}/{}", shape.name(index)),
        });
    }
    workers
}

async fn palisade_workers(
    endpoints: &[String],
    shape: Shape,
) -> (Vec<Worker>, Vec<EtcdLockClient>) {
    let prefix = unique("palisade");
    let mut workers = Vec::new();
    let mut connections = Vec::new();
    for index in 0..shape.clients() {
        let config = EtcdConfig::new(endpoints.iter().cloned())
            .expect("endpoints")
            .with_prefix(prefix.clone())
            .expect("prefix");
        let connection = EtcdLockClient::connect(config).await.expect("connect");
        let session = connection
            .session(SessionOptions::default())
            .await
            .expect("session");
        workers.push(Worker::Palisade {
            session,
            name: LockName::new(shape.name(index)).expect("lock name"),
        });
        connections.push(connection);
    }
    (workers, connections)
}

fn unique(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("/palisade-bench/{what}-{nanos}")
}
