//! The Redis backend on one server and on a Redis Cluster with a replica
//! per master, measured in the same run: hand-off on one name (8 clients
//! contending, every grant a hand-off from the release script) and
//! throughput on 8 names (8 clients, one name each, spread over the
//! masters). The cluster with both wake-up paths: a `PUBLISH` to the
//! waiter's client inbox, which a cluster copies to every node, and a
//! `SPUBLISH` on the lock's shard channel, which only the lock's shard
//! carries (the default). Redis CPU per cycle is summed over every node
//! (`INFO cpu`).
//!
//! Run with: `cargo bench -p palisade-lock-redis --bench redis_cluster`
//! (starts its own server and cluster). `PALISADE_BENCH_ROUNDS` (3)
//! interleaved rounds of `PALISADE_BENCH_SECS` (2) seconds per shape and
//! system; under a minute in all.

use std::sync::Arc;
use std::time::Duration;

use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
use palisade_lock_redis::{RedisConfig, RedisLockClient, WakeUps};
use palisade_testkit::bench::env_number;
use palisade_testkit::redis::{RedisCluster, RedisServer, command_at};
use tokio::time::Instant;

const CLIENTS: usize = 8;

/// Cycles and acquire latencies of one run.
#[derive(Default)]
struct Outcome {
    cycles: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
    rechecks: u64,
    /// Redis CPU over every node, seconds.
    redis_cpu: f64,
}

impl Outcome {
    fn add(&mut self, other: Outcome) {
        self.cycles += other.cycles;
        self.elapsed += other.elapsed;
        self.latencies.extend(other.latencies);
        self.rechecks += other.rechecks;
        self.redis_cpu += other.redis_cpu;
    }

    fn percentile(&mut self, fraction: f64) -> Duration {
        self.latencies.sort_unstable();
        let index = ((self.latencies.len() as f64 - 1.0) * fraction).round() as usize;
        self.latencies.get(index).copied().unwrap_or_default()
    }
}

/// `CLIENTS` clients, each with its own connection, cycling acquire and
/// release for `duration` on one name or on a name each.
async fn run(
    config: &RedisConfig,
    nodes: &[String],
    tag: &str,
    one_name: bool,
    duration: Duration,
) -> Outcome {
    let prefix = format!("bench-cluster-{}-{tag}:", std::process::id());
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let client = RedisLockClient::connect(config.clone().with_key_prefix(prefix.clone()))
            .await
            .expect("connect");
        clients.push(client);
    }
    let cpu_before = redis_cpu(nodes);
    let started = Instant::now();
    let until = started + duration;
    let mut tasks = Vec::new();
    for (index, client) in clients.iter().enumerate() {
        let session = client
            .session(SessionOptions::default().with_ttl(Duration::from_secs(10)))
            .expect("session");
        let name = LockName::new(if one_name {
            "one".to_owned()
        } else {
            format!("name/{index}")
        })
        .expect("name");
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < until {
                let asked = Instant::now();
                let guard = session
                    .acquire(&name, Mode::Exclusive)
                    .await
                    .expect("acquire");
                latencies.push(asked.elapsed());
                guard.release().await.expect("release");
            }
            latencies
        }));
    }
    let mut outcome = Outcome::default();
    for task in tasks {
        let latencies = task.await.expect("task");
        outcome.cycles += latencies.len() as u64;
        outcome.latencies.extend(latencies);
    }
    outcome.elapsed = started.elapsed();
    outcome.redis_cpu = redis_cpu(nodes) - cpu_before;
    outcome.rechecks = clients.iter().map(|client| client.stats().rechecks).sum();
    outcome
}

/// User + system CPU seconds of every node in `nodes`.
fn redis_cpu(nodes: &[String]) -> f64 {
    nodes
        .iter()
        .map(|url| {
            let info = command_at(url, &["INFO", "cpu"]).expect("INFO cpu");
            info.lines()
                .filter_map(|line| {
                    let (field, value) = line.split_once(':')?;
                    matches!(field, "used_cpu_sys" | "used_cpu_user")
                        .then(|| value.trim().parse::<f64>().ok())
                        .flatten()
                })
                .sum::<f64>()
        })
        .sum()
}

fn main() {
    let rounds = env_number("PALISADE_BENCH_ROUNDS", 3);
    let duration = Duration::from_secs(env_number("PALISADE_BENCH_SECS", 2));
    let server = RedisServer::spawn(Default::default());
    let cluster = Arc::new(RedisCluster::start_with_replicas());
    let cluster_config = RedisConfig::cluster(cluster.urls().iter().cloned());
    let systems = [
        (
            "single master",
            RedisConfig::new(server.url()),
            vec![server.url().to_owned()],
        ),
        (
            "cluster+replicas, PUBLISH inbox",
            cluster_config.clone().with_wake_ups(WakeUps::ClientChannel),
            cluster.urls().to_vec(),
        ),
        (
            "cluster+replicas, shard channels",
            cluster_config.with_wake_ups(WakeUps::ShardChannels),
            cluster.urls().to_vec(),
        ),
    ];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("{CLIENTS} clients, {rounds} interleaved rounds of {duration:?}");
    println!(
        "{:<34} {:<22} {:>10} {:>10} {:>10} {:>9} {:>16}",
        "system", "shape", "cycles/s", "p50", "p99", "rechecks", "Redis µs/cycle"
    );
    for (shape, one_name) in [
        ("hand-off on one name", true),
        ("throughput on 8 names", false),
    ] {
        let mut outcomes: Vec<Outcome> = systems.iter().map(|_| Outcome::default()).collect();
        for round in 0..rounds {
            for (index, (_, config, nodes)) in systems.iter().enumerate() {
                let tag = format!("{one_name}-{round}-{index}");
                outcomes[index].add(runtime.block_on(run(config, nodes, &tag, one_name, duration)));
            }
        }
        for ((system, _, _), outcome) in systems.iter().zip(&mut outcomes) {
            let rate = outcome.cycles as f64 / outcome.elapsed.as_secs_f64();
            let (p50, p99) = (outcome.percentile(0.5), outcome.percentile(0.99));
            let cpu_per_cycle = outcome.redis_cpu * 1e6 / outcome.cycles.max(1) as f64;
            println!(
                "{system:<34} {shape:<22} {rate:>10.0} {:>10} {:>10} {:>9} {cpu_per_cycle:>16.1}",
                format!("{:.2?}", p50),
                format!("{:.2?}", p99),
                outcome.rechecks
            );
        }
    }
}
