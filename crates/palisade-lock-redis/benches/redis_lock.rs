//! Acquire+release cycles on one local Redis, next to a minimal fenced lock
//! written here (`SET NX PX` + `INCR`, compare-and-delete), Palisade's own
//! scripts called without its client, and the `rslock` crate, all measured
//! in the same run.
//!
//! Run with: `cargo bench -p palisade-lock-redis --bench redis_lock`
//! (starts its own `redis-server` on a free port, or uses
//! `PALISADE_REDIS_URL`). Each system runs each scenario in
//! `PALISADE_BENCH_ROUNDS` (3) interleaved rounds of `PALISADE_BENCH_SECS`
//! (2) seconds; a full run takes under two minutes.
//! `PALISADE_BENCH_ONLY=one|names|one-name` runs one shape.
//!
//! `PALISADE_BENCH_ONLY=handoff` runs the hand-off shape alone: two clients
//! taking turns on one lock, Palisade's hand-off time (from the holder
//! starting its release to the other client's grant) against the floor of
//! a fair hand-off on Redis, measured here: the release as one script
//! (`DEL`, then `PUBLISH` to the next client), its delivery, and the next
//! client's `SET NX` (two requests and one published message).
//!
//! Scenarios: 1 client; 8 clients on 8 names; 8 clients on one name. For
//! each: cycles per second, acquire latency p50/p99/max, per-client cycles
//! (fairness = max/min), and Redis requests per acquisition from
//! `INFO commandstats`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
use palisade_lock_redis::{LockKeys, RedisConfig, RedisLockClient, scripts};
use palisade_testkit::redis::{RedisServer, commandstat_calls};
use tokio::time::Instant;

const TASKS: usize = 8;

#[derive(Debug)]
struct Outcome {
    label: String,
    per_client: Vec<u64>,
    acquire_latencies: Vec<Duration>,
    elapsed: Duration,
    requests_per_acquisition: f64,
    /// Every command Redis executed, those run inside scripts included.
    commands_per_acquisition: f64,
    failed_attempts: Option<u64>,
}

impl Outcome {
    fn cycles(&self) -> u64 {
        self.per_client.iter().sum()
    }

    fn rate(&self) -> f64 {
        self.cycles() as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile(&self, fraction: f64) -> Duration {
        let index = ((self.acquire_latencies.len() as f64 - 1.0) * fraction).round() as usize;
        self.acquire_latencies
            .get(index)
            .copied()
            .unwrap_or_default()
    }

    fn fairness(&self) -> f64 {
        let max = *self.per_client.iter().max().unwrap_or(&0) as f64;
        let min = *self.per_client.iter().min().unwrap_or(&0) as f64;
        if min == 0.0 { f64::INFINITY } else { max / min }
    }
}

/// Runs `tasks` loops of `cycle(task)` for `duration`; each cycle returns
/// how long its acquire waited.
async fn measure<F, Fut>(
    server: &RedisServer,
    requests: fn(&RedisServer) -> u64,
    label: &str,
    tasks: usize,
    duration: Duration,
    cycle: F,
) -> Outcome
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Duration> + Send + 'static,
{
    let cycle = Arc::new(cycle);
    // Warm up (connections, script cache), then measure.
    for task in 0..tasks {
        cycle(task).await;
    }
    let requests_before = requests(server);
    let commands_before = all_commands(server);
    let started = Instant::now();
    let deadline = started + duration;
    let mut handles = Vec::new();
    for task in 0..tasks {
        let cycle = cycle.clone();
        handles.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                latencies.push(cycle(task).await);
            }
            latencies
        }));
    }
    let mut per_client = Vec::new();
    let mut acquire_latencies = Vec::new();
    for handle in handles {
        let latencies = handle.await.expect("bench task");
        per_client.push(latencies.len() as u64);
        acquire_latencies.extend(latencies);
    }
    let elapsed = started.elapsed();
    acquire_latencies.sort();
    let cycles: u64 = per_client.iter().sum();
    let requests_per_acquisition =
        (requests(server) - requests_before) as f64 / cycles.max(1) as f64;
    let commands_per_acquisition =
        (all_commands(server) - commands_before) as f64 / cycles.max(1) as f64;
    Outcome {
        label: label.to_owned(),
        per_client,
        acquire_latencies,
        elapsed,
        requests_per_acquisition,
        commands_per_acquisition,
        failed_attempts: None,
    }
}

/// Every command Redis executed (scripts' inner commands included), less
/// the `INFO` calls the benchmark makes itself.
fn all_commands(server: &RedisServer) -> u64 {
    let info = server
        .command(&["INFO", "commandstats"])
        .expect("INFO commandstats");
    info.lines()
        .filter(|line| line.starts_with("cmdstat_") && !line.starts_with("cmdstat_info:"))
        .filter_map(|line| line.split_once(":calls="))
        .filter_map(|(_, rest)| rest.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// Requests an rslock client sends: `SET NX PX` and its unlock script.
fn rslock_requests(server: &RedisServer) -> u64 {
    let info = server
        .command(&["INFO", "commandstats"])
        .expect("INFO commandstats");
    ["evalsha", "eval", "set"]
        .iter()
        .map(|command| commandstat_calls(&info, command))
        .sum()
}

/// Requests a Palisade client (or the raw bound) sends: every one is a
/// script call. (`SET` cannot be counted for them: the scripts' own `SET`s
/// show in `INFO commandstats` too.)
fn script_calls(server: &RedisServer) -> u64 {
    let info = server
        .command(&["INFO", "commandstats"])
        .expect("INFO commandstats");
    ["evalsha", "eval"]
        .iter()
        .map(|command| commandstat_calls(&info, command))
        .sum()
}

fn session_options() -> SessionOptions {
    SessionOptions::default().with_ttl(Duration::from_secs(10))
}

/// The minimal fenced lock, written here without anything from Palisade:
/// `SET NX PX` and, only if it took, `INCR` of a counter (the fencing
/// token), in one script; release is a compare-and-delete.
const MINIMAL_ACQUIRE: &str = r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
"#;
const MINIMAL_RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

/// Which scripts a raw cycle runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RawScripts {
    /// [`MINIMAL_ACQUIRE`] and [`MINIMAL_RELEASE`]: the honest baseline.
    Minimal,
    /// Palisade's own acquire and release scripts, without its client.
    Palisade,
}

async fn raw_scenario(
    server: &RedisServer,
    label: &str,
    which: RawScripts,
    clients: usize,
    duration: Duration,
) -> Outcome {
    let (acquire_source, release_source) = match which {
        RawScripts::Minimal => (MINIMAL_ACQUIRE.to_owned(), MINIMAL_RELEASE.to_owned()),
        RawScripts::Palisade => (scripts::acquire_source(), scripts::release_source()),
    };
    let acquire_sha = redis::Script::new(&acquire_source).get_hash().to_owned();
    let release_sha = redis::Script::new(&release_source).get_hash().to_owned();
    let mut connections = Vec::new();
    for _ in 0..clients {
        let client = redis::Client::open(server.url()).expect("url");
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        for source in [&acquire_source, &release_source] {
            let _: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(source)
                .query_async(&mut connection)
                .await
                .expect("script load");
        }
        connections.push(connection);
    }
    let connections = Arc::new(connections);
    let prefix = format!("bench-raw-{which:?}-{}:", std::process::id());
    let (acquire_sha, release_sha) = (Arc::new(acquire_sha), Arc::new(release_sha));
    measure(
        server,
        script_calls,
        label,
        clients,
        duration,
        move |task| {
            let mut connection = connections[task].clone();
            let name = LockName::new(format!("raw/{task}")).expect("name");
            let keys = LockKeys::new(&prefix, &name);
            let (acquire_sha, release_sha) = (acquire_sha.clone(), release_sha.clone());
            async move {
                let token = format!("{:032x}", task as u128 + 1);
                let started = Instant::now();
                loop {
                    let granted = match which {
                        RawScripts::Minimal => {
                            let generation: i64 = redis::cmd("EVALSHA")
                                .arg(acquire_sha.as_str())
                                .arg(2)
                                .arg(keys.lock())
                                .arg(keys.generation())
                                .arg(&token)
                                .arg(10_000)
                                .query_async(&mut connection)
                                .await
                                .expect("acquire script");
                            generation > 0
                        }
                        RawScripts::Palisade => {
                            let reply: Vec<i64> = redis::cmd("EVALSHA")
                                .arg(acquire_sha.as_str())
                                .arg(8)
                                .arg(keys.all())
                                .arg(&token)
                                .arg("x")
                                .arg(10_000)
                                .arg(0)
                                .arg("lease0000000000")
                                .arg("holder")
                                .arg("bench-inbox")
                                .arg(0)
                                .arg(5_000)
                                .arg(1)
                                .query_async(&mut connection)
                                .await
                                .expect("acquire script");
                            reply.first() == Some(&1)
                        }
                    };
                    if granted {
                        break;
                    }
                }
                let waited = started.elapsed();
                let mut release = redis::cmd("EVALSHA");
                release.arg(release_sha.as_str());
                match which {
                    RawScripts::Minimal => release.arg(1).arg(keys.lock()).arg(&token),
                    RawScripts::Palisade => release
                        .arg(8)
                        .arg(keys.all())
                        .arg(&token)
                        .arg("x")
                        .arg(1)
                        .arg(0),
                };
                let _: i64 = release
                    .query_async(&mut connection)
                    .await
                    .expect("release script");
                waited
            }
        },
    )
    .await
}

async fn palisade_scenario(
    server: &RedisServer,
    label: &str,
    clients: usize,
    one_name: bool,
    duration: Duration,
) -> Outcome {
    let prefix = format!(
        "bench-palisade-{}-{clients}-{one_name}:",
        std::process::id()
    );
    let mut lock_clients = Vec::new();
    let mut sessions = Vec::new();
    for _ in 0..clients {
        let client = RedisLockClient::connect(
            RedisConfig::new(server.url()).with_key_prefix(prefix.clone()),
        )
        .await
        .expect("connect");
        sessions.push(client.session(session_options()).expect("session"));
        lock_clients.push(client);
    }
    let sessions = Arc::new(sessions);
    let before: u64 = lock_clients.iter().map(|c| c.stats().rechecks).sum();
    let mut outcome = measure(
        server,
        script_calls,
        label,
        clients,
        duration,
        move |task| {
            let session = sessions[task].clone();
            let name = LockName::new(if one_name {
                "palisade".to_owned()
            } else {
                format!("palisade/{task}")
            })
            .expect("name");
            async move {
                let started = Instant::now();
                let guard = session
                    .acquire(&name, Mode::Exclusive)
                    .await
                    .expect("acquire");
                let waited = started.elapsed();
                guard.release().await.expect("release");
                waited
            }
        },
    )
    .await;
    let rechecks: u64 = lock_clients.iter().map(|c| c.stats().rechecks).sum::<u64>() - before;
    outcome.failed_attempts = Some(rechecks);
    outcome
}

async fn rslock_scenario(
    server: &RedisServer,
    label: &str,
    clients: usize,
    one_name: bool,
    duration: Duration,
) -> Outcome {
    let managers: Vec<rslock::LockManager> = (0..clients)
        .map(|_| rslock::LockManager::new(vec![server.url()]))
        .collect();
    let managers = Arc::new(managers);
    let failed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let failed_in_scenario = failed.clone();
    let pid = std::process::id();
    let mut outcome = measure(
        server,
        rslock_requests,
        label,
        clients,
        duration,
        move |task| {
            let manager = managers[task].clone();
            let failed = failed.clone();
            let resource = if one_name {
                format!("bench-rslock-{pid}")
            } else {
                format!("bench-rslock-{pid}/{task}")
            };
            async move {
                let started = Instant::now();
                // rslock's own loop (`acquire`) retries after a random delay of
                // up to 200 ms; count the attempts it makes.
                let lock = loop {
                    match manager
                        .lock(resource.as_bytes(), Duration::from_secs(10))
                        .await
                    {
                        Ok(lock) => break lock,
                        Err(_) => {
                            failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                };
                let waited = started.elapsed();
                manager.unlock(&lock).await;
                waited
            }
        },
    )
    .await;
    outcome.failed_attempts = Some(failed_in_scenario.load(std::sync::atomic::Ordering::Relaxed));
    outcome
}

fn print_table(outcomes: &[Outcome], raw_one: f64, raw_eight: f64, rslock: &[Outcome]) {
    println!();
    println!(
        "| scenario | cycles/s | vs raw | vs rslock | acquire p50 | p99 | max | per-client min..max (max/min) | requests/acq | Redis cmds/acq | failed attempts |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for outcome in outcomes {
        let raw = if outcome.label.contains("8 clients") {
            raw_eight
        } else {
            raw_one
        };
        let peer = rslock
            .iter()
            .find(|peer| peer.label.split(':').nth(1) == outcome.label.split(':').nth(1));
        let vs_rslock = peer
            .map(|peer| format!("{:.2}x", outcome.rate() / peer.rate()))
            .unwrap_or_else(|| "-".into());
        println!(
            "| {} | {:.0} | {:.2}x | {} | {:?} | {:?} | {:?} | {}..{} ({:.2}) | {:.2} | {:.1} | {} |",
            outcome.label,
            outcome.rate(),
            outcome.rate() / raw,
            vs_rslock,
            outcome.percentile(0.50),
            outcome.percentile(0.99),
            outcome
                .acquire_latencies
                .last()
                .copied()
                .unwrap_or_default(),
            outcome.per_client.iter().min().unwrap_or(&0),
            outcome.per_client.iter().max().unwrap_or(&0),
            outcome.fairness(),
            outcome.requests_per_acquisition,
            outcome.commands_per_acquisition,
            outcome
                .failed_attempts
                .map_or_else(|| "-".to_owned(), |failed| failed.to_string()),
        );
    }
}

/// Merges the rounds of one scenario: summed cycles and latencies, summed
/// time, so the rate is over all rounds.
fn merge(rounds: Vec<Outcome>) -> Outcome {
    let mut rounds = rounds.into_iter();
    let mut merged = rounds.next().expect("at least one round");
    let mut requests = merged.requests_per_acquisition * merged.cycles() as f64;
    let mut commands = merged.commands_per_acquisition * merged.cycles() as f64;
    for round in rounds {
        requests += round.requests_per_acquisition * round.cycles() as f64;
        commands += round.commands_per_acquisition * round.cycles() as f64;
        for (total, cycles) in merged.per_client.iter_mut().zip(&round.per_client) {
            *total += cycles;
        }
        merged.acquire_latencies.extend(round.acquire_latencies);
        merged.elapsed += round.elapsed;
        merged.failed_attempts = match (merged.failed_attempts, round.failed_attempts) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }
    merged.acquire_latencies.sort();
    merged.requests_per_acquisition = requests / merged.cycles().max(1) as f64;
    merged.commands_per_acquisition = commands / merged.cycles().max(1) as f64;
    merged
}

/// The floor of a fair hand-off: two clients take turns on one key, each
/// told its turn by a message on its own channel, published by the
/// holder's release script. Returns each hand-off's time, from the
/// holder sending its release to the other's `SET NX` answered.
async fn handoff_floor(server: &RedisServer, duration: Duration) -> Vec<Duration> {
    const RELEASE: &str =
        "redis.call('DEL', KEYS[1]) return redis.call('PUBLISH', KEYS[2], ARGV[1])";
    // A key of its own per call: the last holder of a call keeps it.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let key = format!("bench-floor-{}-{call}", std::process::id());
    let channels = [format!("{key}:turn:0"), format!("{key}:turn:1")];
    let released_at: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    // Both subscribed before either takes a turn: a message published
    // before its reader subscribed would be lost.
    let mut clients = Vec::new();
    for channel in &channels {
        let client = redis::Client::open(server.url()).expect("url");
        let connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
        pubsub.subscribe(channel).await.expect("subscribe");
        clients.push((connection, pubsub));
    }
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for (me, (mut connection, pubsub)) in clients.into_iter().enumerate() {
        let (key, other_channel) = (key.clone(), channels[1 - me].clone());
        let released_at = Arc::clone(&released_at);
        tasks.push(tokio::spawn(async move {
            use futures::StreamExt as _;
            let mut turns = pubsub.into_on_message();
            let mut handoffs = Vec::new();
            let release = redis::Script::new(RELEASE);
            let mut first = me == 0;
            loop {
                if !first {
                    let wait =
                        deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(1);
                    match tokio::time::timeout(wait, turns.next()).await {
                        Ok(Some(_)) => {}
                        _ => break,
                    }
                }
                first = false;
                let granted: Option<String> = redis::cmd("SET")
                    .arg(&key)
                    .arg(me)
                    .arg("NX")
                    .arg("PX")
                    .arg(10_000)
                    .query_async(&mut connection)
                    .await
                    .expect("SET NX");
                assert!(granted.is_some(), "a turn that found the key held");
                if let Some(released) = released_at.lock().expect("lock").take() {
                    handoffs.push(released.elapsed());
                }
                if Instant::now() >= deadline {
                    break;
                }
                *released_at.lock().expect("lock") = Some(Instant::now());
                let _: i64 = release
                    .key(&key)
                    .key(&other_channel)
                    .arg("go")
                    .invoke_async(&mut connection)
                    .await
                    .expect("release");
            }
            handoffs
        }));
    }
    sorted_handoffs(tasks).await
}

/// Palisade's hand-offs between two clients on one lock: from the holder
/// starting its release to the other client's acquire returning.
async fn handoff_palisade(server: &RedisServer, duration: Duration) -> Vec<Duration> {
    let prefix = format!("bench-handoff-{}:", std::process::id());
    let released_at: Arc<std::sync::Mutex<Option<(usize, Instant)>>> = Arc::default();
    let deadline = Instant::now() + duration;
    let name = LockName::new("handoff").expect("name");
    let mut tasks = Vec::new();
    for me in 0..2 {
        let client = RedisLockClient::connect(
            RedisConfig::new(server.url()).with_key_prefix(prefix.clone()),
        )
        .await
        .expect("connect");
        let session = client.session(session_options()).expect("session");
        let (name, released_at) = (name.clone(), Arc::clone(&released_at));
        tasks.push(tokio::spawn(async move {
            let _client = client;
            let mut handoffs = Vec::new();
            while Instant::now() < deadline {
                let guard = session
                    .acquire(&name, Mode::Exclusive)
                    .await
                    .expect("acquire");
                if let Some((from, released)) = released_at.lock().expect("lock").take() {
                    if from != me {
                        handoffs.push(released.elapsed());
                    }
                }
                *released_at.lock().expect("lock") = Some((me, Instant::now()));
                guard.release().await.expect("release");
            }
            handoffs
        }));
    }
    sorted_handoffs(tasks).await
}

/// Every hand-off time the tasks measured, sorted.
async fn sorted_handoffs(tasks: Vec<tokio::task::JoinHandle<Vec<Duration>>>) -> Vec<Duration> {
    let mut handoffs = Vec::new();
    for task in tasks {
        handoffs.extend(task.await.expect("a hand-off task"));
    }
    handoffs.sort();
    handoffs
}

/// The `handoff` shape: both, in interleaved rounds, and the ratio of the
/// medians against the target (within 1.5 × the floor).
async fn handoff_shape(server: &RedisServer, rounds: usize, duration: Duration) {
    let quantile = |sorted: &[Duration], q: f64| {
        sorted
            .get(((sorted.len() as f64 * q) as usize).min(sorted.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    let mut ratios = Vec::new();
    println!("hand-off between two clients on one lock, {rounds} rounds of {duration:?}:");
    for round in 1..=rounds {
        let floor = handoff_floor(server, duration).await;
        let palisade = handoff_palisade(server, duration).await;
        let ratio = quantile(&palisade, 0.5).as_secs_f64() / quantile(&floor, 0.5).as_secs_f64();
        println!(
            "round {round}: floor (DEL + PUBLISH, delivery, SET NX) {} hand-offs, p50 {:?}, p99 {:?}; palisade {} hand-offs, p50 {:?}, p99 {:?}; p50 ratio {ratio:.2}",
            floor.len(),
            quantile(&floor, 0.5),
            quantile(&floor, 0.99),
            palisade.len(),
            quantile(&palisade, 0.5),
            quantile(&palisade, 0.99),
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    println!(
        "hand-off p50, palisade / floor: median {median:.2} (target <= 1.5): {}",
        if median <= 1.5 { "met" } else { "missed" }
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let server = RedisServer::start();
        let seconds: f64 = std::env::var("PALISADE_BENCH_SECS")
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(2.0);
        let rounds: usize = std::env::var("PALISADE_BENCH_ROUNDS")
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(3);
        let duration = Duration::from_secs_f64(seconds);
        println!(
            "Redis at {}; {rounds} interleaved rounds of {seconds} s per scenario and system",
            server.url()
        );

        let only = std::env::var("PALISADE_BENCH_ONLY").ok();
        if only.as_deref() == Some("handoff") {
            handoff_shape(&server, rounds, duration).await;
            return;
        }
        let shapes = [
            ("one", "1 client", 1, false),
            ("names", "8 clients, 8 names", TASKS, false),
            ("one-name", "8 clients, one name", TASKS, true),
        ];
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        for (key, shape, clients, one_name) in shapes {
            if only.as_deref().is_some_and(|only| only != key) {
                continue;
            }
            let (mut raw, mut raw_palisade, mut palisade, mut rslock) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            // Interleave the systems so that load from elsewhere on the
            // machine hits all of them alike.
            for _ in 0..rounds {
                if !one_name {
                    raw.push(
                        raw_scenario(
                            &server,
                            &format!("raw: {shape}"),
                            RawScripts::Minimal,
                            clients,
                            duration,
                        )
                        .await,
                    );
                    raw_palisade.push(
                        raw_scenario(
                            &server,
                            &format!("raw, Palisade's scripts: {shape}"),
                            RawScripts::Palisade,
                            clients,
                            duration,
                        )
                        .await,
                    );
                }
                palisade.push(
                    palisade_scenario(
                        &server,
                        &format!("palisade: {shape}"),
                        clients,
                        one_name,
                        duration,
                    )
                    .await,
                );
                rslock.push(
                    rslock_scenario(&server, &format!("rslock: {shape}"), clients, one_name, duration)
                        .await,
                );
            }
            if !raw.is_empty() {
                ours.push(merge(raw));
                ours.push(merge(raw_palisade));
            }
            ours.push(merge(palisade));
            theirs.push(merge(rslock));
        }
        // With `PALISADE_BENCH_ONLY`, the raw rates of the shapes not run
        // are unknown.
        let raw_rate = |label: &str| {
            ours.iter()
                .find(|outcome: &&Outcome| outcome.label == format!("raw: {label}"))
                .map_or(f64::NAN, Outcome::rate)
        };
        let (raw_one, raw_eight) = (raw_rate("1 client"), raw_rate("8 clients, 8 names"));
        print_table(&ours, raw_one, raw_eight, &theirs);
        print_table(&theirs, raw_one, raw_eight, &[]);
        println!();
        println!(
            "raw: a minimal fenced lock written in the benchmark (one script: SET NX PX, then INCR of a counter; release: compare-and-delete). raw, Palisade's scripts: Palisade's acquire and release scripts called directly, without its client. vs raw: against the minimal raw lock of the same shape (for one name: against raw with 8 clients on 8 names). requests/acq: client requests per acquisition (scripts; plus SET for rslock). Redis cmds/acq: every command Redis ran per acquisition, inside scripts included (PUBLISH and the scripts' reads and writes). failed attempts: acquire calls after the first that did not grant (Palisade: re-checks; rslock: refused SET NX tries)."
        );
    });
}
