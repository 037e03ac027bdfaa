//! Fenced `DECRBY` (the rule, the marks, the write sequence and the
//! decrement in one call) through the module's `PALISADE.FENCE` and
//! through the function's `palisade_fence_apply`, against plain `DECRBY`,
//! through the same client (one multiplexed `ConnectionManager`), at 1 and
//! 32 clients, in one run. Like with like: the plain commands of
//! concurrent clients are pipelined on the one socket; the fence groups
//! the requests that queue behind its calls in flight. A fourth column
//! sends the module's command for one request directly (a prepared
//! `redis::Cmd`, no fence client): what the command costs on the wire and
//! in Redis, apart from the client's own work.
//!
//! Run with: `cargo bench -p palisade-fence-redis --bench fence_decrby`
//! (starts its own `redis-server` on a free port, no persistence, with the
//! module that cargo builds beside the bench binary, or the one
//! `PALISADE_REDIS_MODULE` names). Each variant runs
//! `PALISADE_BENCH_ROUNDS` (3) interleaved rounds of `PALISADE_BENCH_SECS`
//! (3) seconds per client count; the figure is the median round. Each
//! client decrements its own key under its own lock at a steady generation
//! (the holder's steady state: the marks are read, not rewritten; the
//! write sequence is raised).

use std::sync::Arc;
use std::time::Duration;

use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_fence_redis::{FenceOptions, RedisFence};
use palisade_testkit::bench::{env_number, process_cpu};
use palisade_testkit::redis::{RedisOptions, RedisServer};
use tokio::time::Instant;

/// Runs `clients` loops of `one` for `secs`; calls per second.
async fn measure<F, Fut>(clients: usize, secs: u64, one: F) -> f64
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let one = Arc::new(one);
    let end = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let one = Arc::clone(&one);
            tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < end {
                    one(client).await;
                    done += 1;
                }
                done
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("a bench client panicked");
    }
    total as f64 / started.elapsed().as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run());
}

async fn run() {
    let rounds = env_number("PALISADE_BENCH_ROUNDS", 3);
    let secs = env_number("PALISADE_BENCH_SECS", 3);
    let module = std::env::var_os("PALISADE_REDIS_MODULE").map_or_else(
        || {
            std::env::current_exe()
                .expect("the bench binary's path")
                .with_file_name("libpalisade_fence_redis_module.so")
        },
        Into::into,
    );
    let redis = RedisServer::spawn(RedisOptions::default().with_module(module));
    let manager = redis::Client::open(redis.url())
        .expect("a URL")
        .get_connection_manager()
        .await
        .expect("connect");
    let fence = RedisFence::with_options(
        manager.clone(),
        FenceOptions::default().with_calls_in_flight(env_number("PALISADE_BENCH_IN_FLIGHT", 2)),
    )
    .await
    .expect("the fence");
    assert!(fence.uses_module(), "the module is loaded");
    let function =
        RedisFence::with_options(manager.clone(), FenceOptions::default().with_module(false))
            .await
            .expect("the fence through the function");
    let locks: Vec<LockName> = (0..32)
        .map(|client| LockName::new(format!("bench/decrby/{client}")).expect("a lock name"))
        .collect();
    let sequencers: Arc<Vec<Sequencer>> = Arc::new(
        locks
            .iter()
            .map(|lock| Sequencer::new(lock.clone(), Mode::Exclusive, Generation::MIN))
            .collect(),
    );
    let keys: Arc<Vec<String>> = Arc::new(
        locks
            .iter()
            .map(|lock| fence.data_key(lock, "stock"))
            .collect(),
    );
    for key in keys.iter() {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(1_000_000_000_000i64)
            .query_async(&mut manager.clone())
            .await
            .expect("seed the stock");
    }
    println!("fenced DECRBY vs plain DECRBY, same ConnectionManager, {rounds} rounds of {secs} s");
    println!(
        "| clients | plain DECRBY | module (PALISADE.FENCE) | module / plain | requests per call | the module's command sent directly | direct / plain | function (FCALL) | function / plain |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut cpu_rows = Vec::new();
    for clients in [1usize, 32] {
        let (mut plain, mut module, mut function_fenced) = (Vec::new(), Vec::new(), Vec::new());
        let (mut direct, mut per_call) = (Vec::new(), Vec::new());
        // Per variant: (Redis µs, client µs) of CPU per request, each round.
        let mut cpu: [Vec<(f64, f64)>; 4] = Default::default();
        for _ in 0..rounds {
            let (connection, keys_plain) = (manager.clone(), keys.clone());
            plain.push(
                cpu_of(&redis, secs, &mut cpu[0], async {
                    measure(clients, secs, move |client| {
                        let (mut connection, key) =
                            (connection.clone(), keys_plain[client].clone());
                        async move {
                            let _: i64 = redis::cmd("DECRBY")
                                .arg(key)
                                .arg(1)
                                .query_async(&mut connection)
                                .await
                                .expect("DECRBY");
                        }
                    })
                    .await
                })
                .await,
            );
            let mut requests_per_call = 0.0;
            module.push(
                cpu_of(&redis, secs, &mut cpu[1], async {
                    let (rate, per) = fenced(clients, secs, &fence, &keys, &sequencers).await;
                    requests_per_call = per;
                    rate
                })
                .await,
            );
            per_call.push(requests_per_call);
            direct.push(
                cpu_of(
                    &redis,
                    secs,
                    &mut cpu[2],
                    directly(clients, secs, &manager, &fence, &locks, &keys),
                )
                .await,
            );
            function_fenced.push(
                cpu_of(&redis, secs, &mut cpu[3], async {
                    fenced(clients, secs, &function, &keys, &sequencers).await.0
                })
                .await,
            );
        }
        let (plain, module, function) = (median(plain), median(module), median(function_fenced));
        let (direct, per_call) = (median(direct), median(per_call));
        println!(
            "| {clients} | {plain:.0}/s | {module:.0}/s | {:.2} × | {per_call:.1} | {direct:.0}/s | {:.2} × | {function:.0}/s | {:.2} × |",
            module / plain,
            direct / plain,
            function / plain
        );
        let [plain, module, direct, function] = cpu.map(|rounds| {
            let redis = median(rounds.iter().map(|(redis, _)| *redis).collect());
            let client = median(rounds.iter().map(|(_, client)| *client).collect());
            format!("{redis:.1} + {client:.1}")
        });
        cpu_rows.push(format!(
            "| {clients} | {plain} | {module} | {direct} | {function} |"
        ));
    }
    println!();
    println!(
        "CPU per request, µs: Redis (INFO cpu) + the client process (/proc/self/stat: the bench, redis-rs and the fence), over each round"
    );
    println!("| clients | plain | module | module's command directly | function |");
    println!("|---:|---:|---:|---:|---:|");
    for row in cpu_rows {
        println!("{row}");
    }
    server_time(
        &redis,
        &manager,
        &fence,
        &function,
        &keys[0],
        &sequencers[0],
    )
    .await;
}

/// Redis's CPU time so far (`INFO cpu`, user + sys of the main thread's
/// process), in seconds.
fn redis_cpu(redis: &RedisServer) -> f64 {
    let info = redis.command(&["INFO", "cpu"]).expect("INFO cpu");
    info.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            matches!(name, "used_cpu_sys" | "used_cpu_user")
                .then(|| value.trim().parse::<f64>().ok())?
        })
        .sum()
}

/// Runs `run` (a rate per second over `secs`); pushes the CPU per request
/// of Redis and of this process, in µs.
async fn cpu_of(
    redis: &RedisServer,
    secs: u64,
    into: &mut Vec<(f64, f64)>,
    run: impl std::future::Future<Output = f64>,
) -> f64 {
    let (redis_before, own_before) = (
        redis_cpu(redis),
        process_cpu(std::process::id()).as_secs_f64(),
    );
    let rate = run.await;
    let requests = rate * secs as f64;
    into.push((
        (redis_cpu(redis) - redis_before) * 1e6 / requests,
        (process_cpu(std::process::id()).as_secs_f64() - own_before) * 1e6 / requests,
    ));
    rate
}

/// Fenced `DECRBY`s per second through `fence`, and how many requests
/// rode in each call.
async fn fenced(
    clients: usize,
    secs: u64,
    fence: &RedisFence,
    keys: &Arc<Vec<String>>,
    sequencers: &Arc<Vec<Sequencer>>,
) -> (f64, f64) {
    let before = fence.stats();
    let (counted, keys, sequencers) = (fence.clone(), keys.clone(), sequencers.clone());
    let fence = fence.clone();
    let rate = measure(clients, secs, move |client| {
        let (fence, key, sequencers) = (fence.clone(), keys[client].clone(), sequencers.clone());
        async move {
            fence
                .decr_by(&sequencers[client], key, 1)
                .await
                .expect("no failure")
                .expect("a steady holder is accepted");
        }
    })
    .await;
    let after = counted.stats();
    let calls = (after.calls - before.calls).max(1);
    (
        rate,
        (after.accepted - before.accepted) as f64 / calls as f64,
    )
}

/// `PALISADE.FENCE` for one fenced `DECRBY` per call, built once per
/// client and sent as it is (the arguments the fence sends, at the
/// holders' steady generation).
async fn directly(
    clients: usize,
    secs: u64,
    manager: &redis::aio::ConnectionManager,
    fence: &RedisFence,
    locks: &[LockName],
    keys: &[String],
) -> f64 {
    let commands: Arc<Vec<redis::Cmd>> = Arc::new(
        locks
            .iter()
            .zip(keys)
            .map(|(lock, key)| {
                let mut command = redis::cmd("PALISADE.FENCE");
                command
                    .arg(2)
                    .arg(fence.keys(lock).marks())
                    .arg(key)
                    .arg(4)
                    .arg(1)
                    .arg(0)
                    .arg(format!("1 x {} 0 0 incr 2 -1 -", Generation::MIN.get()));
                command
            })
            .collect(),
    );
    let connection = manager.clone();
    measure(clients, secs, move |client| {
        let (mut connection, commands) = (connection.clone(), commands.clone());
        async move {
            let answer: Vec<u8> = commands[client]
                .query_async(&mut connection)
                .await
                .expect("PALISADE.FENCE");
            assert!(answer.starts_with(b"ok "), "accepted");
        }
    })
    .await
}

/// Redis's own CPU time per call (`INFO commandstats`, `usec_per_call`)
/// of plain `DECRBY`, the fenced `DECRBY` (module and function), an empty
/// script, and an
/// HMAC-SHA256 over a signed sequencer's fields in Lua (checked against
/// Rust's `hmac`): what verifying signatures inside the function would add
/// to every call, in Redis's one thread.
async fn server_time(
    redis: &RedisServer,
    manager: &redis::aio::ConnectionManager,
    module: &RedisFence,
    function: &RedisFence,
    key: &str,
    sequencer: &Sequencer,
) {
    use hmac::{Hmac, KeyInit, Mac};
    const CALLS: u32 = 2000;
    let hmac_sha = redis
        .command(&["SCRIPT", "LOAD", include_str!("hmac_sha256.lua")])
        .expect("load the HMAC script");
    let noop_sha = redis
        .command(&["SCRIPT", "LOAD", "return 'x'"])
        .expect("load the empty script");
    let secret = [0x5au8; 32];
    let signed = palisade_core::Signer::new(
        "redis-bench",
        palisade_core::SigningKey::new("k1", secret.to_vec()).expect("a key"),
    )
    .expect("a signer")
    .sign(sequencer.clone());
    let payload = signed.to_string();
    let mut expected =
        <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&secret).expect("any key length");
    expected.update(payload.as_bytes());
    let expected = expected.finalize().into_bytes().to_vec();
    let call = |sha: &str| {
        let mut call = redis::cmd("EVALSHA");
        call.arg(sha).arg(0).arg(&secret[..]).arg(&payload);
        call
    };
    let lua: Vec<u8> = call(&hmac_sha)
        .query_async(&mut manager.clone())
        .await
        .expect("the Lua HMAC");
    assert_eq!(lua, expected, "the Lua HMAC-SHA256 agrees with Rust's");
    let per_call = |command: &str| {
        let info = redis.command(&["INFO", "commandstats"]).expect("INFO");
        let line = info
            .lines()
            .find(|line| line.starts_with(&format!("cmdstat_{command}:")))
            .unwrap_or_default()
            .to_owned();
        line.split(',')
            .find_map(|field| field.strip_prefix("usec_per_call="))
            .and_then(|value| value.trim().parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    let mut rows = Vec::new();
    for (what, command) in [
        ("plain DECRBY", "decrby"),
        ("fenced DECRBY (PALISADE.FENCE)", "palisade.fence"),
        ("fenced DECRBY (palisade_fence_apply)", "fcall"),
        ("an empty script (EVALSHA)", "evalsha"),
        (
            "HMAC-SHA256 of a sequencer in a Lua script (EVALSHA)",
            "evalsha",
        ),
    ] {
        redis.command(&["CONFIG", "RESETSTAT"]).expect("RESETSTAT");
        for _ in 0..CALLS {
            match what {
                "plain DECRBY" => {
                    let _: i64 = redis::cmd("DECRBY")
                        .arg(key)
                        .arg(1)
                        .query_async(&mut manager.clone())
                        .await
                        .expect("DECRBY");
                }
                "an empty script (EVALSHA)" => {
                    let _: String = call(&noop_sha)
                        .query_async(&mut manager.clone())
                        .await
                        .expect("noop");
                }
                "HMAC-SHA256 of a sequencer in a Lua script (EVALSHA)" => {
                    let _: Vec<u8> = call(&hmac_sha)
                        .query_async(&mut manager.clone())
                        .await
                        .expect("hmac");
                }
                _ => {
                    let fence = if command == "fcall" { function } else { module };
                    fence
                        .decr_by(sequencer, key.to_owned(), 1)
                        .await
                        .expect("no failure")
                        .expect("accepted");
                }
            }
        }
        rows.push((what, per_call(command)));
    }
    println!();
    println!(
        "Redis CPU per call (INFO commandstats usec_per_call, {CALLS} calls each; payload {} bytes)",
        payload.len()
    );
    println!("| call | µs per call in Redis |");
    println!("|---|---:|");
    for (what, usec) in rows {
        println!("| {what} | {usec:.2} |");
    }
}
