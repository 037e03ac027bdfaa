//! The etcd storage engine against raw etcd Txns writing the same keys, in
//! one run against one etcd.
//!
//! Run with: `cargo bench -p palisade-store-etcd --bench etcd_engine`
//! (`PALISADE_BENCH_SECONDS` sets the time per system and shape, default 6;
//! `PALISADE_BENCH_CLIENTS` the clients of the concurrent shape, default
//! 16; `PALISADE_BENCH_ID_EVERY` how often a write carries a request id,
//! default every 4th, 0 never; `PALISADE_BENCH_WINDOW` the ids each lock
//! remembers, default 1024 as the engine's).
//!
//! It starts its own etcd on loopback through the testkit (or uses the one
//! named by `PALISADE_ETCD_ENDPOINTS`) and measures two systems:
//!
//! - **raw**: one etcd Txn per write that makes exactly the engine's
//!   changes, under the engine's key layout: the value, the lock's state
//!   key, and with a request id the idempotency record, its slot and, once
//!   the window is full, the deletion of the oldest id's slot and record;
//!   no compare and nothing read: the least those writes can cost in etcd;
//! - **engine**: `EtcdEngine::write` of one put under an exclusive
//!   sequencer (a new holder every 64 writes), fenced, with the same
//!   request ids;
//!
//! with 1 client, and with N clients each on its own lock. Every client
//! has its own connection, opened with the engine's options. The systems
//! take turns in short slices, so a noisy neighbour on the machine hits
//! both alike and the ratio stays meaningful. Besides rates and latencies
//! it prints the CPU time per write of etcd and of this process (from
//! `/proc`, over each system's slices), which say where a gap comes from.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, Txn, TxnOp};
use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_store::{Engine, Op, RequestId, WriteRequest};
use palisade_store_etcd::{EtcdEngine, EtcdEngineConfig};
use palisade_testkit::bench::{env_number, process_cpu};
use palisade_testkit::etcd::EtcdServer;
use tokio::time::Instant;

/// Each system's time per shape is cut into this many slices, taken in turn.
const SLICES: u32 = 12;
const VALUE: &[u8] = &[b'v'; 100];

fn main() {
    let seconds: u64 = env_number("PALISADE_BENCH_SECONDS", 6);
    let clients: usize = env_number("PALISADE_BENCH_CLIENTS", 16);
    let id_every: u64 = env_number("PALISADE_BENCH_ID_EVERY", 4);
    let etcd = EtcdServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let etcd_pid = etcd.pid();
    runtime.block_on(run(
        etcd_pid,
        etcd.endpoints(),
        Duration::from_secs(seconds),
        clients,
        id_every,
    ));
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum System {
    Raw,
    Engine,
}

/// Ids each lock remembers, as the engine's default window: from the
/// window's end on, every write with a request id also evicts the oldest.
static WINDOW: std::sync::LazyLock<u64> =
    std::sync::LazyLock::new(|| env_number("PALISADE_BENCH_WINDOW", 1024));
/// The engine's idempotency record of a one-put write: fingerprint length,
/// SHA-256 fingerprint, two marks, one op result.
const RECORD_BYTES: usize = 2 + 32 + 16 + 1;

/// One client of one system: its own connection, its own lock.
enum Worker {
    Raw {
        client: Box<Client>,
        /// `P/l/c<i>/`: the engine's layout for lock `c<i>`.
        base: Vec<u8>,
        written: u64,
    },
    Engine {
        engine: Arc<EtcdEngine>,
        lock: LockName,
        generation: u64,
        /// Writes so far, across slices: request ids never repeat.
        written: u64,
    },
}

/// The request id of write `n`, if it has one.
fn request_id(n: u64, id_every: u64) -> Option<String> {
    (id_every > 0 && n % id_every == 0).then(|| format!("w{n}"))
}

impl Worker {
    async fn new(system: System, endpoints: &[String], prefix: &str, index: usize) -> Worker {
        match system {
            System::Raw => {
                // The engine's connection options (see `EtcdEngineConfig`).
                let options = ConnectOptions::new()
                    .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
                    .with_require_leader(true);
                Worker::Raw {
                    client: Box::new(
                        Client::connect(endpoints, Some(options))
                            .await
                            .expect("connecting to etcd"),
                    ),
                    base: format!("{prefix}/raw/l/c{index}/").into_bytes(),
                    written: 0,
                }
            }
            System::Engine => {
                let config = EtcdEngineConfig::new(endpoints.to_vec())
                    .expect("endpoints")
                    .with_prefix(format!("{prefix}/eng"))
                    .expect("prefix")
                    .with_idempotency_window(*WINDOW as u32);
                Worker::Engine {
                    engine: Arc::new(EtcdEngine::connect(config).await.expect("connecting")),
                    lock: LockName::new(format!("c{index}")).expect("a lock name"),
                    generation: 1,
                    written: 0,
                }
            }
        }
    }

    async fn write(&mut self, id_every: u64) {
        match self {
            Worker::Raw {
                client,
                base,
                written,
            } => {
                let n = *written;
                *written += 1;
                let key = |suffix: &[u8]| [base.as_slice(), suffix].concat();
                let mut ops = vec![TxnOp::put(key(b"d/k"), VALUE, None)];
                // With a request id, the engine's record and slot; once
                // the window is full, the eviction of the oldest id.
                if let Some(id) = request_id(n, id_every) {
                    let recorded = n / id_every;
                    ops.push(TxnOp::put(
                        key(format!("r/{id}").as_bytes()),
                        [0u8; RECORD_BYTES],
                        None,
                    ));
                    ops.push(TxnOp::put(
                        key(&[b"s/".as_slice(), &recorded.to_be_bytes()].concat()),
                        id,
                        None,
                    ));
                    if let Some(oldest) = (recorded + 1).checked_sub(*WINDOW + 1) {
                        let evicted = format!("r/w{}", oldest * id_every);
                        ops.push(TxnOp::delete(
                            key(&[b"s/".as_slice(), &oldest.to_be_bytes()].concat()),
                            None,
                        ));
                        ops.push(TxnOp::delete(key(evicted.as_bytes()), None));
                    }
                }
                // The lock's state: two marks and the ids recorded.
                ops.push(TxnOp::put(key(b"m"), n.to_be_bytes().repeat(3), None));
                let txn = Txn::new().and_then(ops);
                client.txn(txn).await.expect("a raw txn");
            }
            Worker::Engine {
                engine,
                lock,
                generation,
                written,
            } => {
                let n = *written;
                *written += 1;
                // A new holder now and then, as in real use.
                if n % 64 == 0 {
                    *generation += 1;
                }
                let sequencer = Sequencer::new(
                    lock.clone(),
                    Mode::Exclusive,
                    Generation::new(*generation).expect("non-zero"),
                );
                let id =
                    request_id(n, id_every).map(|id| RequestId::new(id).expect("a request id"));
                let request = WriteRequest::new(sequencer, vec![Op::put("k", VALUE)], id);
                engine
                    .write(request)
                    .await
                    .expect("etcd answers")
                    .expect("admitted");
            }
        }
    }
}

/// Runs `workers` for `slice`, one task each; returns writes done and the
/// per-write latencies.
async fn slice(
    workers: Vec<Worker>,
    slice: Duration,
    id_every: u64,
) -> (Vec<Worker>, u64, Vec<Duration>) {
    let deadline = Instant::now() + slice;
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|mut worker| {
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while Instant::now() < deadline {
                    let started = Instant::now();
                    worker.write(id_every).await;
                    latencies.push(started.elapsed());
                }
                (worker, latencies)
            })
        })
        .collect();
    let mut workers = Vec::new();
    let mut latencies = Vec::new();
    for task in tasks {
        let (worker, mut l) = task.await.expect("a worker");
        workers.push(worker);
        latencies.append(&mut l);
    }
    (workers, latencies.len() as u64, latencies)
}

/// Per-system totals over the slices.
#[derive(Default)]
struct Totals {
    writes: u64,
    latencies: Vec<Duration>,
    etcd_cpu: Duration,
    client_cpu: Duration,
}

impl Totals {
    fn cpu_per_write(cpu: Duration, writes: u64) -> String {
        format!("{:.0} µs", cpu.as_secs_f64() * 1e6 / writes.max(1) as f64)
    }
}

fn percentile(latencies: &mut [Duration], p: f64) -> Duration {
    if latencies.is_empty() {
        return Duration::ZERO;
    }
    latencies.sort();
    let index = ((latencies.len() as f64 - 1.0) * p).round() as usize;
    latencies[index]
}

async fn run(
    etcd_pid: Option<u32>,
    endpoints: Vec<String>,
    per_system: Duration,
    clients: usize,
    id_every: u64,
) {
    let prefix = format!("/palisade-bench/engine-{}", std::process::id());
    println!(
        "etcd engine vs raw etcd Txns, {per_system:?} per system and shape, {SLICES} slices, endpoints {endpoints:?}"
    );
    println!(
        "| clients | raw writes/s | engine writes/s | engine / raw | raw p50 | engine p50 | engine p99 | etcd CPU per write, raw / engine | client CPU per write, raw / engine |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (shape, n) in [1, clients].into_iter().enumerate() {
        let mut raw = Vec::new();
        let mut engine = Vec::new();
        let prefix = format!("{prefix}/{shape}");
        for i in 0..n {
            raw.push(Worker::new(System::Raw, &endpoints, &prefix, i).await);
            engine.push(Worker::new(System::Engine, &endpoints, &prefix, i).await);
        }
        let each = per_system / SLICES;
        let (mut raw_totals, mut engine_totals) = (Totals::default(), Totals::default());
        for _ in 0..SLICES {
            for (system, totals) in [
                (&mut raw, &mut raw_totals),
                (&mut engine, &mut engine_totals),
            ] {
                let (etcd_before, client_before) = (
                    etcd_pid.map_or(Duration::ZERO, process_cpu),
                    process_cpu(std::process::id()),
                );
                let (back, count, mut latencies) =
                    slice(std::mem::take(system), each, id_every).await;
                totals.etcd_cpu += etcd_pid
                    .map_or(Duration::ZERO, process_cpu)
                    .saturating_sub(etcd_before);
                totals.client_cpu += process_cpu(std::process::id()).saturating_sub(client_before);
                *system = back;
                totals.writes += count;
                totals.latencies.append(&mut latencies);
            }
        }
        let seconds = (each * SLICES).as_secs_f64();
        let raw_rate = raw_totals.writes as f64 / seconds;
        let engine_rate = engine_totals.writes as f64 / seconds;
        println!(
            "| {n} | {raw_rate:.0} | {engine_rate:.0} | **{:.2} ×** | {:?} | {:?} | {:?} | {} / {} | {} / {} |",
            engine_rate / raw_rate,
            percentile(&mut raw_totals.latencies, 0.5),
            percentile(&mut engine_totals.latencies, 0.5),
            percentile(&mut engine_totals.latencies, 0.99),
            Totals::cpu_per_write(raw_totals.etcd_cpu, raw_totals.writes),
            Totals::cpu_per_write(engine_totals.etcd_cpu, engine_totals.writes),
            Totals::cpu_per_write(raw_totals.client_cpu, raw_totals.writes),
            Totals::cpu_per_write(engine_totals.client_cpu, engine_totals.writes),
        );
    }
}
