//! Fencing with the etcd backend across a leader failure: a 3-member
//! cluster on loopback loses its leader (kill -9) while one client holds a
//! lock and another waits. Generations stay strictly increasing, the
//! resource server accepts writes only in generation order, no stale write
//! is accepted, and the lock is usable again within election time + TTL.
//! And fencing on acquire: a new holder that fences at once refuses a
//! paused holder before it writes anything itself.

use std::time::{Duration, Instant};

use anyhow::Context;
use palisade::client::Refused;
use palisade::etcd::{EtcdConfig, EtcdGuard, EtcdLock};
use palisade::{Lock, LockGuard, LockName, Mode, SessionOptions};
use palisade_testkit::etcd::{EtcdCluster, EtcdServer};
use palisade_tests::{ResourceServer, fence_on_acquire_refuses_a_silent_holder};

/// Longer than an election (about 2 s here), so a session can ride out the
/// leader change; a session that does not is reported lost, never doubled.
const TTL: Duration = Duration::from_secs(5);
/// Election (about 2 s here) + TTL, with a wide margin for a loaded box.
const RECOVERY_BOUND: Duration = Duration::from_secs(30);

fn options() -> SessionOptions {
    SessionOptions::default()
        .with_ttl(TTL)
        .with_keepalive_interval(TTL / 4)
        .with_safety_margin(TTL / 4)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kill_keeps_generations_ordered_and_writes_fenced() -> anyhow::Result<()> {
    let mut cluster = EtcdCluster::start();
    let server = ResourceServer::start().await?;
    let resource = server.client();
    let lock = LockName::new("etcd-fencing/leader-kill")?;
    let endpoints = cluster.endpoints();
    let config = || EtcdConfig::new(endpoints.clone());

    // A holds and writes; B waits behind A.
    let client_a = EtcdLock::connect(config()?, options()).await?;
    let guard_a = client_a.acquire(&lock, Mode::Exclusive).await?;
    let sequencer_a = guard_a.sequencer()?;
    resource
        .put(&sequencer_a, b"log", "A-before-kill", None)
        .await?
        .expect("first holder");
    // B opens its session before the failure and queues behind A.
    let first_session_b = EtcdLock::connect(config()?, options()).await?;
    let lock_b = lock.clone();
    let endpoints_b = endpoints.clone();
    let waiter_b = tokio::spawn(async move {
        // A waiter that is told its session or the cluster failed opens a
        // new session and queues again, as an application would.
        let deadline = Instant::now() + RECOVERY_BOUND * 2;
        let mut failures = Vec::new();
        let mut session = Some(first_session_b);
        loop {
            let attempt = async {
                let session = match session.take() {
                    Some(session) => session,
                    None => {
                        EtcdLock::connect(EtcdConfig::new(endpoints_b.clone())?, options()).await?
                    }
                };
                let guard = session
                    .acquire_timeout(&lock_b, Mode::Exclusive, deadline - Instant::now())
                    .await?;
                anyhow::Ok((session, guard))
            };
            match attempt.await {
                Ok((session, guard)) => return Ok((session, guard, Instant::now(), failures)),
                Err(error) if Instant::now() < deadline => failures.push(error.to_string()),
                Err(error) => return Err(error.context(format!("B gave up after {failures:?}"))),
            }
        }
    });
    // The leader dies.
    let leader = tokio::task::block_in_place(|| cluster.wait_for_leader(Duration::from_secs(10)))?;
    tokio::task::block_in_place(|| cluster.kill(leader))?;
    let killed_at = Instant::now();

    // A is either still the holder (then its write is accepted, in order)
    // or knows it lost the lease (then its guard refuses to hand out the
    // sequencer). Never both A and B valid with a write of A's after B's.
    let mut accepted = vec![sequencer_a.generation().get()];
    match resource.put(&guard_a, b"log", "A-after-kill", None).await {
        Ok(Ok(written)) => accepted.push(written.marks.exclusive),
        Ok(Err(refused)) => panic!("nobody newer has written yet, A was refused: {refused}"),
        Err(error) => {
            // The only acceptable local failure is a lapsed lease.
            assert!(error.to_string().contains("lease lost"), "{error}");
        }
    }
    // A finishes and releases; if the cluster is still electing, the
    // release may fail, and then A's lease runs out on its own.
    let _ = guard_a.release().await;

    // B gets the lock within election + TTL, with a higher generation.
    let (_client_b, guard_b, granted_at, failures_b) = waiter_b
        .await?
        .context("B waiting across the leader kill")?;
    eprintln!("B's failed attempts while the cluster recovered: {failures_b:?}");
    let recovery = granted_at.duration_since(killed_at);
    assert!(
        recovery < RECOVERY_BOUND,
        "B waited {recovery:?} after the leader kill"
    );
    assert!(guard_b.generation() > sequencer_a.generation());
    let written = resource
        .put(&guard_b, b"log", "B", None)
        .await?
        .expect("B holds the newest generation");
    accepted.push(written.marks.exclusive);

    // A's old sequencer can no longer write.
    let refused = resource
        .put(&sequencer_a, b"log", "A-stale", None)
        .await?
        .expect_err("A's generation is older than B's write");
    assert!(matches!(refused, Refused::Stale { .. }), "{refused:?}");

    // Accepted generations, in the server's commit order, never decrease.
    assert!(
        accepted.windows(2).all(|pair| pair[0] <= pair[1]),
        "accepted out of order: {accepted:?}"
    );
    let read = resource.get(&lock, b"log", None).await?.expect("read");
    assert_eq!(read.value.as_deref(), Some(&b"B"[..]));

    // The killed member rejoins, and the lock keeps working.
    tokio::task::block_in_place(|| cluster.restart(leader))?;
    let generation_b = guard_b.generation();
    guard_b.release().await?;
    let client_c = EtcdLock::connect(config()?, options()).await?;
    let guard_c = client_c
        .acquire_timeout(&lock, Mode::Exclusive, RECOVERY_BOUND)
        .await?;
    assert!(guard_c.generation() > generation_b);
    resource
        .put(&guard_c, b"log", "C", None)
        .await?
        .expect("C is newest");
    guard_c.release().await?;
    server.stop().await
}

/// A holder whose lease ended while it was paused (`etcdctl lease revoke`
/// stands in for the expiry) still has a write in hand; B takes the lock
/// and writes nothing. A's late write lands unless B fenced on acquire;
/// with `fence` it is refused as stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_on_acquire_refuses_a_paused_holder_before_the_new_one_writes() -> anyhow::Result<()>
{
    let etcd = EtcdServer::start();
    let server = ResourceServer::start().await?;
    let config = || EtcdConfig::new(etcd.endpoints());
    let etcdctl = palisade_testkit::process::require_binary("etcdctl");
    let revoke = async |_: &EtcdLock, guard: &EtcdGuard| {
        let sequencer = guard.sequencer()?;
        let lease = sequencer
            .lease()
            .context("etcd sequencers name their lease")?;
        let revoked = std::process::Command::new(&etcdctl)
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", etcd.endpoints().join(",")))
            .args(["lease", "revoke", lease])
            .output()?;
        anyhow::ensure!(revoked.status.success(), "etcdctl lease revoke {lease}");
        anyhow::Ok(())
    };
    let contender = EtcdLock::connect(config()?, options()).await?;
    fence_on_acquire_refuses_a_silent_holder(
        async || anyhow::Ok(EtcdLock::connect(config()?, options()).await?),
        revoke,
        &contender,
        &server.client(),
        (
            &LockName::new("etcd-fencing/fence-on-acquire")?,
            &LockName::new("etcd-fencing/no-fence-on-acquire")?,
        ),
        RECOVERY_BOUND,
    )
    .await?;
    server.stop().await
}
