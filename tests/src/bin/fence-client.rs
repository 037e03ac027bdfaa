//! `fence-client`: a lock holder in a process of its own, so a test can
//! stop it with SIGSTOP the way a GC pause or a page-fault storm would.
//!
//! It takes the lock, prints `ACQUIRED <generation> <sequencer>`, then
//! answers one command per line on standard input:
//!
//! - `WRITE <key> <value>`: writes with the sequencer fetched right after
//!   acquiring (a client that checked its lease, then paused before the
//!   write left), and prints `WRITE accepted`, `WRITE stale presented=<g>
//!   mark=<m>` or `WRITE error <message>`;
//! - `LEASE`: prints `LEASE valid` or `LEASE lost <reason>`;
//! - `RELEASE`: releases and prints `RELEASED ok` or `RELEASED error <message>`.
//!
//! It exits when standard input closes.

use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use palisade::client::{Client, Refused};
use palisade::etcd::{EtcdConfig, EtcdLock};
use palisade::redis::RedisLock;
use palisade::{LeaseState, Lock, LockGuard, LockName, Mode, SessionOptions};
use palisade_lock_sql::{SqlConfig, SqlLockClient};
use palisade_lock_zookeeper::{ZkConfig, ZkLock};
use tokio::io::{AsyncBufReadExt, BufReader};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Backend {
    Etcd,
    Redis,
    /// The SQL lock backend on PostgreSQL or MariaDB; the URL's scheme
    /// says which.
    Sql,
    /// ZooKeeper: the session timeout is the TTL.
    Zookeeper,
}

/// A lock holder for fencing tests.
#[derive(Debug, Parser)]
struct Args {
    /// Which lock service.
    #[arg(long, value_enum)]
    backend: Backend,
    /// etcd endpoints (comma-separated), a Redis URL, a database URL
    /// (`postgres://` or `mysql://`), or a ZooKeeper connect string
    /// (`host:port[,host:port...][/chroot]`).
    #[arg(long)]
    endpoint: String,
    /// The lock to take.
    #[arg(long)]
    lock: String,
    /// The resource server's base URL.
    #[arg(long)]
    server: String,
    /// Lease TTL in milliseconds.
    #[arg(long, default_value_t = 2000)]
    ttl_ms: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let ttl = Duration::from_millis(args.ttl_ms);
    let options = SessionOptions::default()
        .with_ttl(ttl)
        .with_keepalive_interval(ttl / 4)
        .with_safety_margin(ttl / 4);
    match args.backend {
        Backend::Etcd => {
            let config = EtcdConfig::from_endpoint_list(&args.endpoint)?;
            hold(EtcdLock::connect(config, options).await?, &args).await
        }
        Backend::Redis => hold(RedisLock::connect(&args.endpoint, options).await?, &args).await,
        Backend::Sql => {
            let client = SqlLockClient::connect(SqlConfig::new(&args.endpoint)).await?;
            hold(client.session(options).await?, &args).await
        }
        Backend::Zookeeper => {
            let config = ZkConfig::parse(&args.endpoint)?;
            hold(ZkLock::connect(config, options).await?, &args).await
        }
    }
}

async fn hold<L: Lock>(locks: L, args: &Args) -> anyhow::Result<()> {
    let name = LockName::new(args.lock.as_str())?;
    let client = Client::new(&args.server)?;
    let guard = locks.acquire(&name, Mode::Exclusive).await?;
    let sequencer = guard.sequencer()?;
    println!("ACQUIRED {} {sequencer}", sequencer.generation());

    let mut guard = Some(guard);
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["WRITE", key, value] => {
                match client
                    .put(&sequencer, key.as_bytes(), value.to_string(), None)
                    .await
                {
                    Ok(Ok(_)) => "WRITE accepted".to_owned(),
                    Ok(Err(Refused::Stale {
                        presented, marks, ..
                    })) => format!("WRITE stale presented={presented} mark={}", marks.exclusive),
                    Ok(Err(other)) => format!("WRITE error {other}"),
                    Err(error) => format!("WRITE error {error}"),
                }
            }
            ["LEASE"] => match guard.as_ref().map(|g| g.lease().state()) {
                Some(LeaseState::Held { .. }) => "LEASE valid".to_owned(),
                Some(LeaseState::Lost(reason)) => format!("LEASE lost {}", reason.as_str()),
                Some(LeaseState::Released) | None => "LEASE released".to_owned(),
            },
            ["RELEASE"] => {
                let guard = guard.take().context("already released")?;
                match guard.release().await {
                    Ok(()) => "RELEASED ok".to_owned(),
                    Err(error) => format!("RELEASED error {error}"),
                }
            }
            _ => format!("ERROR unknown command `{line}`"),
        };
        println!("{answer}");
    }
    Ok(())
}
