//! Scenario 10: a hold is ended early from outside while its holder is
//! running and about to write, as a lock server whose clock jumped forward
//! would end it (libfaketime cannot move etcd's or Redis's clocks here).
//!
//! - Redis: `PEXPIRE <lock key> 1`, `DEL <lock key>`, and the Redis server
//!   itself stopped (SIGSTOP) for longer than the TTL, in turn;
//! - etcd: `etcdctl lease revoke` of the holder's session lease.
//!
//! A contender then takes the lock and writes, and the holder's write goes
//! out with its old sequencer.
//!
//! Invariants asserted: I-MONO and I-STALE (each late write is refused as
//! stale), I-DUR, I-ONCE, I-TOKEN, I-LIVE (a grant and a write within
//! TTL + 20 s of the last round).

use std::process::Command;
use std::time::Duration;

use anyhow::Context as _;
use palisade::redis::{LockKeys, RedisConfig};
use palisade::{LockName, Sequencer};
use palisade_testkit::etcd::EtcdServer;
use palisade_testkit::process::require_binary;
use palisade_testkit::redis::{RedisOptions, RedisServer};
use palisade_tests::fault::{
    ClientConfig, FaultRun, Invariant, ResourceServerOptions, ResourceServerProcess, Scenario,
    scaled,
};

use crate::story::{EarlyExpiry, expired_holder};
use crate::{TTL, live_within};

/// Redis: PEXPIRE, DEL, then a server pause past the TTL, in turn.
struct RedisExpiry<'a> {
    redis: &'a RedisServer,
    lock_key: String,
}

impl EarlyExpiry for RedisExpiry<'_> {
    fn describe(&self, round: usize) -> String {
        match round % 3 {
            1 => format!("PEXPIRE {} 1", self.lock_key),
            2 => format!("DEL {}", self.lock_key),
            _ => "SIGSTOP redis-server past the TTL".to_owned(),
        }
    }

    async fn expire(&mut self, round: usize, _sequencer: &str) -> anyhow::Result<()> {
        match round % 3 {
            1 => {
                let reply = self.redis.command(&["PEXPIRE", &self.lock_key, "1"])?;
                anyhow::ensure!(reply == "1", "PEXPIRE found no lock key (reply {reply:?})");
            }
            2 => {
                let reply = self.redis.command(&["DEL", &self.lock_key])?;
                anyhow::ensure!(reply == "1", "DEL found no lock key (reply {reply:?})");
            }
            _ => {
                self.redis.pause()?;
                // The pause itself is the fault: time is the subject. Redis
                // expires keys by its wall clock, which a stop does not hold.
                tokio::time::sleep(TTL + Duration::from_secs(1)).await;
                self.redis.resume()?;
            }
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_hold_ended_from_outside_is_fenced() -> anyhow::Result<()> {
    let redis = RedisServer::spawn(RedisOptions::default());
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new("s10-redis")?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let lock = "faults/s10/redis";
    let base = ClientConfig::redis(&redis.url(), &server.base_url())
        .lock(lock)
        .ttl(TTL);
    let mut expiry = RedisExpiry {
        redis: &redis,
        lock_key: LockKeys::new(RedisConfig::DEFAULT_KEY_PREFIX, &LockName::new(lock)?)
            .lock()
            .to_owned(),
    };
    let rounds = scaled(3, 9);
    let late = expired_holder(&mut run, &binaries, &base, 2, rounds, &mut expiry).await?;

    let report = run
        .verdict(
            &server.base_url(),
            &live_within(TTL + Duration::from_secs(20)),
            &Scenario::new("10 hold ended early from outside", "redis")
                .note("PEXPIRE, DEL, redis-server SIGSTOP"),
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    late.assert_fenced(rounds);
    Ok(())
}

/// etcd: revoke the holder's session lease with `etcdctl`.
struct EtcdRevoke {
    etcdctl: std::path::PathBuf,
    endpoints: String,
}

impl EarlyExpiry for EtcdRevoke {
    fn describe(&self, _round: usize) -> String {
        "etcdctl lease revoke <holder's lease>".to_owned()
    }

    async fn expire(&mut self, _round: usize, sequencer: &str) -> anyhow::Result<()> {
        let sequencer: Sequencer = sequencer.parse()?;
        let lease = sequencer
            .lease()
            .context("an etcd sequencer carries its lease id")?;
        let output = Command::new(&self.etcdctl)
            .arg(format!("--endpoints={}", self.endpoints))
            .args(["lease", "revoke", lease])
            .output()?;
        anyhow::ensure!(
            output.status.success(),
            "etcdctl lease revoke {lease}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_lease_revoked_from_outside_is_fenced() -> anyhow::Result<()> {
    let etcd = EtcdServer::start();
    let etcdctl = require_binary("etcdctl");
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new("s10-etcd")?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let base = ClientConfig::etcd(&etcd.endpoints(), &server.base_url())
        .lock("faults/s10/etcd")
        .ttl(TTL);
    let mut expiry = EtcdRevoke {
        etcdctl,
        endpoints: etcd.endpoints().join(","),
    };
    let rounds = scaled(2, 8);
    let late = expired_holder(&mut run, &binaries, &base, 2, rounds, &mut expiry).await?;

    let report = run
        .verdict(
            &server.base_url(),
            &live_within(TTL + Duration::from_secs(20)),
            &Scenario::new("10 hold ended early from outside", "etcd").note("lease revoke"),
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    late.assert_fenced(rounds);
    Ok(())
}
