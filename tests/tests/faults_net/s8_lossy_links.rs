//! Scenario 8: lossy links on every client path (client ↔ lock service,
//! client ↔ resource server) under a concurrent workload whose clients
//! retry writes with the same request id.
//!
//! "Loss" is what loss does to a TCP connection (see
//! `palisade_testkit::proxy`): with the given probability per chunk, a
//! chunk waits for a retransmission timeout (200 ms, doubling on
//! consecutive losses, capped at 1.6 s), a new connection's handshake waits
//! 1 s, and now and then a connection is reset, as an application that
//! timed out during a stall resets it. The clients see slow answers,
//! timeouts (their write timeout is 1 s) and resets, and retry writes whose
//! outcome they could not know, with the same request id.
//!
//! Invariants:
//! - I-MONO, I-STALE: only the newest holder's writes are accepted, in
//!   generation order, however late requests arrive; that includes writes
//!   whose outcome the client never learnt (every attempt timed out or was
//!   reset; one client never retries, so it leaves some): the checker
//!   judges each one by whether it is visible in the final state, and the
//!   row says how many it judged.
//! - I-DUR: every acknowledged write is in the final state.
//! - I-ONCE: a retried write is applied at most once: the server answers a
//!   retry of a write it already applied from its idempotency record.
//! - I-TOKEN: grants strictly increase (no data is lost in this scenario).
//! - I-LIVE: once the links heal, a client acquires and writes within the
//!   bound.

use std::time::Duration;

use palisade_testkit::etcd::EtcdServer;
use palisade_testkit::proxy::{Fault, FaultProxy, Loss};
use palisade_testkit::redis::{RedisOptions, RedisServer};
use palisade_tests::fault::net::{loopback, redis_url_via};
use palisade_tests::fault::{
    CheckOptions, ClientConfig, ClientProcess, FaultRun, Invariant, ResourceServerOptions,
    ResourceServerProcess, Scenario, scaled,
};

use crate::{Retries, wait_for_fresh_hold, wait_for_write};

/// Lease TTL: a few lost keep-alives in a row may still lose a lease,
/// which the scenario allows (the fence is what it checks).
const TTL: Duration = Duration::from_secs(3);
/// Process start-up, a first write, recovery: generous for a loaded
/// 2-core machine.
const STEP: Duration = Duration::from_secs(45);
/// I-LIVE: TTL + the longest retransmission back-off + margin.
const LIVE_BOUND: Duration = Duration::from_secs(20);

/// The lossy link between the clients and the resource server: 25 % of
/// chunks late, 2 % of chunks reset their connection (so writes whose
/// answer was lost are retried).
fn resource_path_loss() -> Fault {
    Fault::Loss(Loss::new(0.25).with_resets(0.02))
}

/// The lossy link between the clients and the lock service: 20 % of
/// chunks late, resets rarer (a reset ends the lock service's connection,
/// and with it, for etcd, a keep-alive stream).
fn lock_path_loss() -> Fault {
    Fault::Loss(Loss::new(0.2).with_resets(0.005))
}

/// The lock service under test, started and reached through a proxy.
enum LockService {
    Redis(RedisServer),
    Etcd(Box<EtcdServer>),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_lossy_links_redis() -> anyhow::Result<()> {
    let _serial = crate::serial().await;
    let redis = RedisServer::spawn(RedisOptions::default());
    lossy_links(LockService::Redis(redis)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_lossy_links_etcd() -> anyhow::Result<()> {
    let _serial = crate::serial().await;
    let etcd = EtcdServer::spawn();
    lossy_links(LockService::Etcd(Box::new(etcd))).await
}

async fn lossy_links(service: LockService) -> anyhow::Result<()> {
    let binaries = palisade_tests::fault_binaries!();
    let backend = match &service {
        LockService::Redis(_) => "redis",
        LockService::Etcd(_) => "etcd",
    };
    let mut run = FaultRun::new(&format!("s8-lossy-{backend}"))?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let to_server = FaultProxy::start("s8 clients to resource server", loopback(server.port()))?;
    let (to_lock, base_config) = match &service {
        LockService::Redis(redis) => {
            let port = redis.port().expect("a spawned Redis has a port");
            let proxy = FaultProxy::start("s8 clients to redis", loopback(port))?;
            let config = ClientConfig::redis(&redis_url_via(&proxy), &to_server.url());
            (proxy, config)
        }
        LockService::Etcd(etcd) => {
            let address = etcd.endpoint().trim_start_matches("http://").parse()?;
            let proxy = FaultProxy::start("s8 clients to etcd", address)?;
            let config = ClientConfig::etcd(&[proxy.url()], &to_server.url());
            (proxy, config)
        }
    };
    let n_clients = scaled(3, 6);
    let lossy_for = scaled(Duration::from_secs(12), Duration::from_secs(120));
    let config = base_config
        .lock("s8/a")
        .lock("s8/b")
        .ttl(TTL)
        .writes_per_hold(4)
        .think(Duration::from_millis(20))
        .write_timeout(Duration::from_secs(1))
        .retries(4)
        .acquire_timeout(Duration::from_secs(10))
        .register_every(4);
    // `c0` never retries: a write of its whose answer was lost stays in
    // doubt, and the checker judges it by what the final state shows.
    let mut clients: Vec<ClientProcess> = (0..n_clients)
        .map(|i| {
            let config = if i == 0 {
                config.clone().retries(0)
            } else {
                config.clone()
            };
            run.spawn_client(&binaries, &format!("c{i}"), &config)
        })
        .collect::<anyhow::Result<_>>()?;
    for client in &mut clients {
        wait_for_write(client, STEP).await?;
    }

    let fault = format!(
        "{} on clients <-> resource server, {} on clients <-> {backend}",
        resource_path_loss(),
        lock_path_loss()
    );
    run.inject(&fault)?;
    to_server.set(resource_path_loss());
    to_lock.set(lock_path_loss());
    // The links stay lossy this long while the clients work: time is the
    // subject.
    tokio::time::sleep(lossy_for).await;
    to_server.pass();
    to_lock.pass();
    run.heal(&fault)?;
    wait_for_fresh_hold(&mut clients, STEP).await?;

    for client in &mut clients {
        client.stop_and_wait(STEP).await?;
    }
    let server_path = to_server.stats();
    let lock_path = to_lock.stats();
    eprintln!("[s8 {backend}] clients -> resource server: {server_path}");
    eprintln!("[s8 {backend}] clients -> {backend}: {lock_path}");
    let retries = Retries::of(&run.events()?);
    let options = CheckOptions {
        live_bound: Some(LIVE_BOUND),
    };
    let report = run
        .verdict(
            &server.base_url(),
            &options,
            &Scenario::new(
                "8 lossy links (20-25 % loss, resets) on every client path",
                backend,
            )
            .note_in_doubt()
            .note(format!(
                "{}; {} chunks lost and {} connections reset by the proxies",
                retries.note(),
                server_path.chunks_lost + lock_path.chunks_lost,
                server_path.connections_reset + lock_path.connections_reset
            )),
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    // The faults really happened on both paths.
    assert!(server_path.chunks_lost > 0, "{server_path}");
    assert!(lock_path.chunks_lost > 0, "{lock_path}");
    assert!(report.accepted_writes > 0, "{report}");
    drop(service);
    Ok(())
}
