//! The etcd storage engine against raw etcd Txns writing the same keys, in
//! one run against one etcd.
//!
//! Run with: `cargo bench -p palisade-store-etcd --bench etcd_engine`
//! (`PALISADE_BENCH_SECONDS` sets the time per system and shape, default 6;
//! `PALISADE_BENCH_CLIENTS` the clients of the concurrent shape, default
//! 16).
//!
//! It starts its own etcd on loopback through the testkit (or uses the one
//! named by `PALISADE_ETCD_ENDPOINTS`) and measures two systems:
//!
//! - **raw**: one etcd Txn per write that puts the keys the engine
//!   writes (the value and the lock's marks key; every fourth write also an
//!   idempotency record and its slot) with no compare and nothing read:
//!   the least those writes can cost in etcd;
//! - **engine**: `EtcdEngine::write` of one put under an exclusive
//!   sequencer, fenced, with a request id every fourth write;
//!
//! with 1 client, and with N clients each on its own lock. Every client
//! has its own connection. The systems take turns in short slices, so a
//! noisy neighbour on the machine hits both alike and the ratio stays
//! meaningful.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Txn, TxnOp};
use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_store::{Engine, Op, RequestId, WriteRequest};
use palisade_store_etcd::{EtcdEngine, EtcdEngineConfig};
use palisade_testkit::etcd::EtcdServer;
use tokio::time::Instant;

/// Each system's time per shape is cut into this many slices, taken in turn.
const SLICES: u32 = 12;
const VALUE: &[u8] = &[b'v'; 100];

fn main() {
    let seconds: u64 = env_number("PALISADE_BENCH_SECONDS", 6);
    let clients: usize = env_number("PALISADE_BENCH_CLIENTS", 16);
    let etcd = EtcdServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(run(etcd.endpoints(), Duration::from_secs(seconds), clients));
}

fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum System {
    Raw,
    Engine,
}

/// One client of one system: its own connection, its own lock.
enum Worker {
    Raw {
        client: Box<Client>,
        data_key: Vec<u8>,
        marks_key: Vec<u8>,
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

impl Worker {
    async fn new(system: System, endpoints: &[String], prefix: &str, index: usize) -> Worker {
        match system {
            System::Raw => Worker::Raw {
                client: Box::new(
                    Client::connect(endpoints, None)
                        .await
                        .expect("connecting to etcd"),
                ),
                data_key: format!("{prefix}/raw/l/c{index}/d/k").into_bytes(),
                marks_key: format!("{prefix}/raw/l/c{index}/m").into_bytes(),
                written: 0,
            },
            System::Engine => {
                let config = EtcdEngineConfig::new(endpoints.to_vec())
                    .expect("endpoints")
                    .with_prefix(format!("{prefix}/engine"))
                    .expect("prefix");
                Worker::Engine {
                    engine: Arc::new(EtcdEngine::connect(config).await.expect("connecting")),
                    lock: LockName::new(format!("c{index}")).expect("a lock name"),
                    generation: 1,
                    written: 0,
                }
            }
        }
    }

    async fn write(&mut self) {
        match self {
            Worker::Raw {
                client,
                data_key,
                marks_key,
                written,
            } => {
                let n = *written;
                *written += 1;
                let mut ops = vec![
                    TxnOp::put(data_key.clone(), VALUE, None),
                    TxnOp::put(marks_key.clone(), n.to_be_bytes().repeat(3), None),
                ];
                // The engine's idempotency record and slot, every fourth.
                if n % 4 == 0 {
                    ops.push(TxnOp::put(
                        [marks_key.as_slice(), format!("/r/w{n}").as_bytes()].concat(),
                        [0u8; 27],
                        None,
                    ));
                    ops.push(TxnOp::put(
                        [marks_key.as_slice(), b"/s/", &n.to_be_bytes()].concat(),
                        format!("w{n}"),
                        None,
                    ));
                }
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
                    (n % 4 == 0).then(|| RequestId::new(format!("w{n}")).expect("a request id"));
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
async fn slice(workers: Vec<Worker>, slice: Duration) -> (Vec<Worker>, u64, Vec<Duration>) {
    let deadline = Instant::now() + slice;
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|mut worker| {
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while Instant::now() < deadline {
                    let started = Instant::now();
                    worker.write().await;
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

fn percentile(latencies: &mut [Duration], p: f64) -> Duration {
    if latencies.is_empty() {
        return Duration::ZERO;
    }
    latencies.sort();
    let index = ((latencies.len() as f64 - 1.0) * p).round() as usize;
    latencies[index]
}

async fn run(endpoints: Vec<String>, per_system: Duration, clients: usize) {
    let prefix = format!("/palisade-bench/engine-{}", std::process::id());
    println!(
        "etcd engine vs raw etcd Txns, {per_system:?} per system and shape, {SLICES} slices, endpoints {endpoints:?}"
    );
    println!(
        "| clients | raw writes/s | engine writes/s | engine / raw | raw p50 | engine p50 | engine p99 |"
    );
    println!("|---|---|---|---|---|---|---|");
    for n in [1, clients] {
        let mut raw = Vec::new();
        let mut engine = Vec::new();
        let prefix = format!("{prefix}/{n}");
        for i in 0..n {
            raw.push(Worker::new(System::Raw, &endpoints, &prefix, i).await);
            engine.push(Worker::new(System::Engine, &endpoints, &prefix, i).await);
        }
        let each = per_system / SLICES;
        let (mut raw_count, mut engine_count) = (0, 0);
        let (mut raw_lat, mut engine_lat) = (Vec::new(), Vec::new());
        for _ in 0..SLICES {
            let (back, count, mut lat) = slice(raw, each).await;
            raw = back;
            raw_count += count;
            raw_lat.append(&mut lat);
            let (back, count, mut lat) = slice(engine, each).await;
            engine = back;
            engine_count += count;
            engine_lat.append(&mut lat);
        }
        let seconds = (each * SLICES).as_secs_f64();
        let raw_rate = raw_count as f64 / seconds;
        let engine_rate = engine_count as f64 / seconds;
        println!(
            "| {n} | {raw_rate:.0} | {engine_rate:.0} | **{:.2} ×** | {:?} | {:?} | {:?} |",
            engine_rate / raw_rate,
            percentile(&mut raw_lat, 0.5),
            percentile(&mut engine_lat, 0.5),
            percentile(&mut engine_lat, 0.99),
        );
    }
}
