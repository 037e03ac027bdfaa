//! `redis-buyer`: one buyer of the fault suite's flash sale with its stock
//! in Redis, fenced by `palisade-fence-redis`, in a process of its own so a
//! test can stop it (SIGSTOP) while it holds the lock.
//!
//! Each hold: take the lock (the Redis lock backend, on the same Redis as
//! the stock), read the stock with a fenced read, and if any is left sell
//! one: one fenced batch sets the stock to what was read minus one and
//! records the sale under a key of its own (`{<lock tag>}:sale/<client>-<n>`,
//! the value `<client>-<n>@<generation>`). The sale is recorded in the
//! history as a write of that key (`palisade_tests::history`): `ok` with
//! the lock's write sequence as `commit_seq`, `fail` with detail `stale`
//! when the fence refused it, `unknown` when Redis did not answer. The
//! buyer stops once it reads a stock of 0 (or none), or when its standard
//! input closes.
//!
//! Standard output, one line per step, as `fault-client`'s: `READY`,
//! `GRANTED <lock> <generation> <sequencer> <monotonic µs>`, `HOLDING <lock>
//! <generation>` (with `--gate`, before its first sale, waiting for `GO`
//! on standard input), `WROTE <lock> <generation> <seq>`, `REFUSED <lock>
//! <generation> <detail>`, `GAVEUP <lock> <generation> <detail>`, `DONE
//! <operations>`.

use std::io::BufRead as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use palisade::redis::{RedisConfig, RedisLockClient};
use palisade::{Lock, LockGuard, LockName, Mode, Refused, SessionOptions};
use palisade_fence_redis::{Batch, FenceConnection, FenceOptions, RedisFence};
use palisade_tests::history::{Event, OpKind, Phase, Recorder};
use tokio::sync::{mpsc, watch};

/// A flash-sale buyer on the Redis fence.
#[derive(Debug, Parser)]
#[command(name = "redis-buyer")]
struct Args {
    /// The Redis holding the stock and the locks; with `--cluster`, the
    /// cluster's seed URLs, comma-separated.
    #[arg(long)]
    redis: String,
    /// `--redis` names a Redis Cluster.
    #[arg(long)]
    cluster: bool,
    /// After every sale, wait until this many replicas have it (`WAIT`,
    /// at most 2 s).
    #[arg(long)]
    replicas: Option<u64>,
    /// The lock guarding the stock.
    #[arg(long)]
    lock: String,
    /// This buyer's name in the history.
    #[arg(long)]
    client_id: String,
    /// Where to append the history.
    #[arg(long)]
    history: PathBuf,
    /// Lease TTL in milliseconds.
    #[arg(long, default_value_t = 1000)]
    ttl_ms: u64,
    /// Wait for `GO` before the first sale.
    #[arg(long)]
    gate: bool,
}

fn say(line: impl AsRef<str>) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", line.as_ref());
    let _ = stdout.flush();
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut recorder = Recorder::open(&args.history).context("open the history")?;
    let (go_sender, mut go) = mpsc::unbounded_channel();
    let (stop_sender, stop) = watch::channel(false);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if line.trim() == "GO" {
                let _ = go_sender.send(());
            }
        }
        let _ = stop_sender.send(true);
    });
    let ttl = Duration::from_millis(args.ttl_ms);
    let options = SessionOptions::default()
        .with_ttl(ttl)
        .with_keepalive_interval(ttl / 4)
        .with_safety_margin(ttl / 4);
    let lock = LockName::new(args.lock.as_str())?;
    let urls: Vec<&str> = args.redis.split(',').collect();
    let config = match args.cluster {
        true => RedisConfig::cluster(urls.iter().copied()),
        false => RedisConfig::new(&args.redis),
    };
    let locks = RedisLockClient::connect(config).await?.session(options)?;
    let connection: FenceConnection = match args.cluster {
        true => palisade_fence_redis::redis::cluster::ClusterClient::new(urls)?
            .get_async_connection()
            .await?
            .into(),
        false => palisade_fence_redis::redis::Client::open(args.redis.as_str())?
            .get_connection_manager()
            .await?
            .into(),
    };
    let fence_options = match args.replicas {
        Some(replicas) => FenceOptions::default().with_replicas(replicas, Duration::from_secs(2)),
        None => FenceOptions::default(),
    };
    let fence = RedisFence::with_options(connection.clone(), fence_options).await?;
    let stock = fence.data_key(&lock, "stock");
    say("READY");
    let id = args.client_id.as_str();
    let mut record = |event: Event| recorder.record(&event);
    let mut operations = 0u64;
    let mut sales = 0u64;
    let mut gate = args.gate;
    while !*stop.borrow() {
        record(Event::now(
            id,
            Phase::Invoke,
            OpKind::Acquire,
            lock.as_str(),
        ))?;
        operations += 1;
        let guard = match locks
            .acquire_timeout(&lock, Mode::Exclusive, Duration::from_secs(15))
            .await
        {
            Ok(guard) => guard,
            Err(error) => {
                record(
                    Event::now(id, Phase::Unknown, OpKind::Acquire, lock.as_str())
                        .detail(error.kind()),
                )?;
                // Redis may be restarting.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let sequencer = guard.issued().clone();
        let generation = sequencer.generation().get();
        let granted =
            Event::now(id, Phase::Ok, OpKind::Acquire, lock.as_str()).generation(generation);
        let at_us = granted.mono_us;
        record(granted)?;
        say(format!("GRANTED {lock} {generation} {sequencer} {at_us}"));
        let left = match fence.get(&sequencer, stock.clone()).await {
            Ok(Ok(read)) => read.value.map_or(0, |bytes| {
                String::from_utf8_lossy(&bytes).parse::<i64>().unwrap_or(0)
            }),
            Ok(Err(_)) | Err(_) => {
                let _ = guard.release().await;
                continue;
            }
        };
        if left <= 0 {
            let _ = guard.release().await;
            break;
        }
        if gate {
            gate = false;
            say(format!("HOLDING {lock} {generation}"));
            let mut stopped = stop.clone();
            tokio::select! {
                _ = go.recv() => {}
                _ = stopped.wait_for(|stopped| *stopped) => break,
            }
            // Woken up: Redis may have restarted under the pause, and the
            // connection's socket with it. Reconnect (a PING, until it
            // answers) so the sale itself meets a live connection.
            for _ in 0..100 {
                if ping(&connection).await {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        sales += 1;
        let sale = format!("{id}-{sales}");
        let key = format!("sale/{sale}");
        let value = format!("{sale}@{generation}");
        let event = |phase| {
            Event::now(id, phase, OpKind::Write, lock.as_str())
                .generation(generation)
                .write(&sale, &key, &value)
        };
        record(event(Phase::Invoke))?;
        operations += 1;
        let batch = Batch::new()
            .set(stock.clone(), (left - 1).to_string())
            .set(fence.data_key(&lock, &key), value.clone());
        match fence.batch(&sequencer, &batch).await {
            Ok(Ok(written)) => {
                record(event(Phase::Ok).commit_seq(written.seq))?;
                say(format!("WROTE {lock} {generation} {}", written.seq));
            }
            Ok(Err(refused)) => {
                let detail = match refused {
                    Refused::Stale { .. } => "stale".to_owned(),
                    other => other.reason().to_owned(),
                };
                record(event(Phase::Fail).detail(detail.clone()))?;
                say(format!("REFUSED {lock} {generation} {detail}"));
            }
            Err(error) => {
                let phase = if error.is_unknown_outcome() {
                    Phase::Unknown
                } else {
                    Phase::Fail
                };
                record(event(phase).detail(error.to_string()))?;
                say(format!("GAVEUP {lock} {generation} {error}"));
            }
        }
        record(
            Event::now(id, Phase::Invoke, OpKind::Release, lock.as_str()).generation(generation),
        )?;
        let released = guard.release().await;
        let phase = if released.is_ok() {
            Phase::Ok
        } else {
            Phase::Fail
        };
        record(Event::now(id, phase, OpKind::Release, lock.as_str()).generation(generation))?;
    }
    say(format!("DONE {operations}"));
    Ok(())
}

/// Whether Redis answers a `PING` on `connection` (on a cluster: the node
/// the driver picks).
async fn ping(connection: &FenceConnection) -> bool {
    let ping = palisade_fence_redis::redis::cmd("PING");
    let answer: Result<String, _> = match connection.clone() {
        FenceConnection::Manager(mut manager) => ping.query_async(&mut manager).await,
        FenceConnection::Multiplexed(mut multiplexed) => ping.query_async(&mut multiplexed).await,
        FenceConnection::Cluster(mut cluster) => ping.query_async(&mut cluster).await,
        _ => return false,
    };
    answer.is_ok()
}
