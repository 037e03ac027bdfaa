//! Network faults on the harness: where the fault proxy
//! (`palisade_testkit::proxy::FaultProxy`) meets the fault suite's
//! processes, and scenario 7 as a function of its own, so that both its
//! test (`tests/tests/faults_net`) and the mutation check can run it, the
//! latter with fencing switched off.
//!
//! # Where to start
//!
//! - [`client_server_partition`]: scenario 7, fenced or not ([`Fencing`]).
//! - [`late_write_in_doubt_unfenced`]: scenario 7 unfenced with the late
//!   write's answer never read: the mutation check for writes in doubt.
//! - [`loopback`], [`redis_url_via`]: addresses for proxies and clients.

use std::net::SocketAddr;
use std::time::Duration;

use crate::checker::{CheckOptions, Report};
use crate::history::{OpKind, Phase};
use anyhow::Context as _;
use palisade::LockName;
use palisade_testkit::proxy::FaultProxy;
use palisade_testkit::redis::{RedisOptions, RedisServer};

use super::{
    ClientConfig, ClientLine, FaultBinaries, FaultRun, ResourceServerOptions,
    ResourceServerProcess, Scenario,
};

/// `127.0.0.1:<port>`.
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// The Redis URL of a proxy in front of a Redis without a password.
pub fn redis_url_via(proxy: &FaultProxy) -> String {
    format!("redis://{}", proxy.address())
}

/// Whether the resource server fences (the product) or accepts every write
/// (`--unfenced`, the mutation check's proof that the checker can fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fencing {
    /// The resource server checks generations.
    On,
    /// The resource server accepts every write (test-only flag).
    Off,
}

/// What scenario 7 saw.
#[derive(Debug)]
pub struct PartitionOutcome {
    /// The checker's verdict over the whole run.
    pub report: Report,
    /// The generation the partitioned client held when it sent its write.
    pub old_generation: u64,
    /// The generation the newer holder wrote with.
    pub new_generation: u64,
    /// What became of the write sent into the partition: `Refused` (409
    /// stale) with fencing on, `Wrote` without.
    pub late_write: ClientLine,
}

/// The lease TTL of scenario 7's clients.
const TTL: Duration = Duration::from_secs(2);
/// Generous bounds for a loaded 2-core machine: process start-up, a lock
/// that frees only when a lease runs out, an answer after the heal.
const STEP: Duration = Duration::from_secs(30);
/// Longer than the whole partition, so the partitioned client's request is
/// still waiting for its answer when the partition heals (a client that
/// gave up would close the connection, and the proxy would still deliver
/// the request: the kernel sends what was queued before a close).
const LATE_WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// I-LIVE: TTL + margin, from the heal to an acquire + write.
const LIVE_BOUND: Duration = Duration::from_secs(15);

/// **Scenario 7: client ↔ resource server partition longer than the lease;
/// the delayed write arrives after a newer holder's write.**
///
/// Client `a` holds the Redis lock and sends its write, but both of its
/// paths (to Redis and to the resource server) go through fault proxies,
/// and they are partitioned just before the write leaves: the request
/// waits inside the partition. `a`'s lease runs out (its keep-alive cannot
/// reach Redis); client `b`, on paths of its own, acquires with a newer
/// generation and writes. The partition heals and `a`'s request, sent
/// while `a` still held a valid lease, reaches the server after `b`'s write.
/// With fencing it is refused (409 stale); without fencing it is accepted
/// and the checker must report it. A third client then acquires and writes
/// (I-LIVE).
///
/// Invariants with fencing on: I-MONO, I-STALE, I-DUR, I-ONCE, I-TOKEN,
/// I-LIVE. With fencing off: I-MONO is violated (the late write commits a
/// lower generation after a higher one).
///
pub async fn client_server_partition(
    binaries: &FaultBinaries,
    fencing: Fencing,
) -> anyhow::Result<PartitionOutcome> {
    let redis = RedisServer::spawn(RedisOptions::default());
    let redis_port = redis.port().context("a spawned Redis has a port")?;
    let (run_name, server_options, scenario) = match fencing {
        Fencing::On => (
            "s7-partition",
            ResourceServerOptions::default(),
            Scenario::new(
                "7 client <-> resource server partition longer than the lease",
                "redis",
            ),
        ),
        Fencing::Off => (
            "s7-unfenced",
            ResourceServerOptions::default().unfenced(),
            Scenario::new("mutation: 7 with fencing off", "redis")
                .note("fencing off on purpose: the checker must report the late write"),
        ),
    };
    let mut run = FaultRun::new(run_name)?;
    let server = ResourceServerProcess::start(binaries, &run, server_options)?;
    // `a`'s own paths; `b` and `c` reach Redis and the server directly.
    let a_to_redis = FaultProxy::start("s7 a to redis", loopback(redis_port))?;
    let a_to_server = FaultProxy::start("s7 a to resource server", loopback(server.port()))?;
    let lock = "s7/partition";

    let a_config = ClientConfig::redis(&redis_url_via(&a_to_redis), &a_to_server.url())
        .lock(lock)
        .ttl(TTL)
        .rounds(1)
        .writes_per_hold(1)
        .gate()
        .write_timeout(LATE_WRITE_TIMEOUT)
        .retries(0);
    let mut a = run.spawn_client(binaries, "a", &a_config)?;
    let (old_generation, _) = a.wait_granted(STEP).await?;
    a.wait_for(STEP, |line| {
        matches!(line, ClientLine::Holding { .. }).then_some(())
    })
    .await?;

    // `a` checked its lease and is about to send: cut it off, and let the
    // write go into the partition.
    run.inject("partition: a <-> redis and a <-> resource server")?;
    a_to_redis.partition();
    a_to_server.partition();
    a.go()?;
    anyhow::ensure!(
        a_to_server.wait_for_held(1, STEP).await,
        "a's write never reached the partition"
    );

    // `b` gets the lock once `a`'s lease has run out, and writes.
    let b_config = ClientConfig::redis(&redis.url(), &server.base_url())
        .lock(lock)
        .ttl(TTL)
        .rounds(1)
        .writes_per_hold(1);
    let mut b = run.spawn_client(binaries, "b", &b_config)?;
    let (new_generation, _) = b.wait_granted(STEP).await?;
    anyhow::ensure!(
        new_generation > old_generation,
        "b was granted {new_generation} after a's {old_generation}"
    );
    b.wait_wrote_above(new_generation - 1, STEP).await?;
    b.stop_and_wait(STEP).await?;

    // The partition heals: `a`'s request arrives now, after `b`'s write.
    a_to_redis.pass();
    a_to_server.pass();
    run.heal("partition: a <-> redis and a <-> resource server")?;
    let late_write = a
        .wait_for(STEP, |line| match line {
            ClientLine::Wrote { .. } | ClientLine::Refused { .. } => Some(line.clone()),
            _ => None,
        })
        .await?;
    a.stop_and_wait(STEP).await?;

    // After the heal, a fresh client takes the lock and writes.
    let c_config = ClientConfig::redis(&redis.url(), &server.base_url())
        .lock(lock)
        .ttl(TTL)
        .rounds(1)
        .writes_per_hold(1);
    let mut c = run.spawn_client(binaries, "c", &c_config)?;
    c.wait_wrote_above(new_generation, STEP).await?;
    c.stop_and_wait(STEP).await?;

    eprintln!(
        "[{run_name}] a -> resource server proxy: {}",
        a_to_server.stats()
    );
    let options = CheckOptions {
        live_bound: Some(LIVE_BOUND),
    };
    let report = run.verdict(&server.base_url(), &options, &scenario).await?;
    Ok(PartitionOutcome {
        report,
        old_generation,
        new_generation,
        late_write,
    })
}

/// **The mutation check for writes in doubt: scenario 7 with fencing off,
/// and the late write's answer never read.**
///
/// As in [`client_server_partition`], client `a` sends its write into a
/// partition and `b` takes the lock with a newer generation and writes;
/// but here both write the shared key `register`, and `a` is stopped
/// (SIGSTOP) before the heal, so the answer to its late write reaches a
/// process that cannot read it. Once the unfenced server shows the late
/// value in `register`, `a` is killed: its history ends with the write
/// invoked and never completed, a write in doubt. A third client then
/// acquires and writes a key of its own (I-LIVE).
///
/// The checks on acknowledged writes see nothing wrong here (I-DUR allows
/// a write in doubt to be the final value); the judgement of writes in
/// doubt must report that a lower generation holds `register` over an
/// acknowledged higher one (I-MONO).
pub async fn late_write_in_doubt_unfenced(binaries: &FaultBinaries) -> anyhow::Result<Report> {
    let redis = RedisServer::spawn(RedisOptions::default());
    let redis_port = redis.port().context("a spawned Redis has a port")?;
    let mut run = FaultRun::new("s7-unfenced-in-doubt")?;
    let server =
        ResourceServerProcess::start(binaries, &run, ResourceServerOptions::default().unfenced())?;
    let a_to_redis = FaultProxy::start("s7 a to redis", loopback(redis_port))?;
    let a_to_server = FaultProxy::start("s7 a to resource server", loopback(server.port()))?;
    let lock = "s7/in-doubt";

    let a_config = ClientConfig::redis(&redis_url_via(&a_to_redis), &a_to_server.url())
        .lock(lock)
        .ttl(TTL)
        .rounds(1)
        .writes_per_hold(1)
        .register_every(1)
        .gate()
        .write_timeout(LATE_WRITE_TIMEOUT)
        .retries(0);
    let mut a = run.spawn_client(binaries, "a", &a_config)?;
    let (old_generation, _) = a.wait_granted(STEP).await?;
    a.wait_for(STEP, |line| {
        matches!(line, ClientLine::Holding { .. }).then_some(())
    })
    .await?;

    let fault = "partition: a <-> redis and a <-> resource server; a stopped before the heal";
    run.inject(fault)?;
    a_to_redis.partition();
    a_to_server.partition();
    a.go()?;
    anyhow::ensure!(
        a_to_server.wait_for_held(1, STEP).await,
        "a's write never reached the partition"
    );

    let b_config = ClientConfig::redis(&redis.url(), &server.base_url())
        .lock(lock)
        .ttl(TTL)
        .rounds(1)
        .writes_per_hold(1)
        .register_every(1);
    let mut b = run.spawn_client(binaries, "b", &b_config)?;
    let (new_generation, _) = b.wait_granted(STEP).await?;
    anyhow::ensure!(
        new_generation > old_generation,
        "b was granted {new_generation} after a's {old_generation}"
    );
    b.wait_wrote_above(new_generation - 1, STEP).await?;
    b.stop_and_wait(STEP).await?;

    // `a` cannot read the answer: its write stays in doubt.
    a.pause()?;
    a_to_redis.pass();
    a_to_server.pass();
    let late_value = run
        .events()?
        .into_iter()
        .find(|event| {
            event.client == "a" && event.op == OpKind::Write && event.phase == Phase::Invoke
        })
        .and_then(|event| event.value)
        .context("a's history has no write")?;
    wait_for_value(&server, lock, "register", &late_value).await?;
    a.kill()?;
    run.heal(fault)?;

    let c_config = ClientConfig::redis(&redis.url(), &server.base_url())
        .lock(lock)
        .ttl(TTL)
        .rounds(1)
        .writes_per_hold(1);
    let mut c = run.spawn_client(binaries, "c", &c_config)?;
    c.wait_wrote_above(new_generation, STEP).await?;
    c.stop_and_wait(STEP).await?;

    let options = CheckOptions {
        live_bound: Some(LIVE_BOUND),
    };
    let scenario = Scenario::new(
        "mutation: 7 with fencing off, the late write in doubt",
        "redis",
    )
    .note_in_doubt()
    .note("fencing off on purpose, the late write's answer never read: the checker must judge it");
    run.verdict(&server.base_url(), &options, &scenario).await
}

/// Waits until a plain read of `key` on `lock` returns `value`. Nothing
/// outside the server says when a request was applied, so this polls, for
/// at most [`STEP`].
async fn wait_for_value(
    server: &ResourceServerProcess,
    lock: &str,
    key: &str,
    value: &str,
) -> anyhow::Result<()> {
    let client = server.client(Duration::from_secs(5))?;
    let name = LockName::new(lock)?;
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let read = client.get(&name, key.as_bytes(), None).await;
        if let Ok(Ok(read)) = &read {
            if read.value.as_deref() == Some(value.as_bytes()) {
                return Ok(());
            }
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{lock}/{key} never showed {value:?} within {STEP:?} (last read {read:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
