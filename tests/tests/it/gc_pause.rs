//! The GC-pause story across processes, on real lock services (etcd, Redis,
//! the SQL backend on PostgreSQL and MariaDB, and ZooKeeper): a holder in its own
//! process is stopped with SIGSTOP past its lease, another client takes the
//! lock and writes, and the holder's late write is refused.

use std::time::Duration;

use palisade::client::Refused;
use palisade::etcd::{EtcdConfig, EtcdLock};
use palisade::redis::RedisLock;
use palisade::{Lock, LockGuard, LockName, Mode, Sequencer, SessionOptions};
use palisade_lock_sql::{SqlConfig, SqlLockClient};
use palisade_lock_zookeeper::{ZkConfig, ZkLock};
use palisade_testkit::etcd::EtcdServer;
use palisade_testkit::redis::RedisServer;
use palisade_testkit::sql::SqlServer;
use palisade_testkit::zookeeper::ZooKeeperServer;
use palisade_tests::{HolderProcess, ResourceServer};

/// etcd's smallest lease is 2 s; Redis, the SQL backend and ZooKeeper (whose
/// session timeout it is; the testkit's servers allow 1 s to 60 s) use the
/// same so every story matches.
const TTL: Duration = Duration::from_secs(2);
/// How long the contender may wait for the stopped holder's lease to end:
/// the TTL plus a wide margin for a loaded 2-core machine.
const TAKEOVER_WAIT: Duration = Duration::from_secs(30);

fn options() -> SessionOptions {
    SessionOptions::default()
        .with_ttl(TTL)
        .with_keepalive_interval(TTL / 4)
        .with_safety_margin(TTL / 4)
}

fn holder_args(
    backend: &str,
    endpoint: &str,
    lock: &LockName,
    server: &ResourceServer,
) -> Vec<String> {
    vec![
        "--backend".into(),
        backend.into(),
        "--endpoint".into(),
        endpoint.into(),
        "--lock".into(),
        lock.to_string(),
        "--server".into(),
        server.base_url(),
        "--ttl-ms".into(),
        TTL.as_millis().to_string(),
    ]
}

/// What the holder that replaces the stopped one does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NewHolder {
    /// Writes: its write raises the mark.
    Writes,
    /// Fences on acquire and writes nothing: only the fence raises the
    /// mark (without it the late write would land).
    OnlyFences,
}

/// Steps 1-5 of the story, whatever the lock service.
async fn paused_holder_is_fenced<L: Lock>(
    holder_args: Vec<String>,
    contender: L,
    lock: &LockName,
    server: &ResourceServer,
    new_holder: NewHolder,
) -> anyhow::Result<()> {
    let client = server.client();

    // 1. A holds the lock in its own process and writes once.
    let mut holder = HolderProcess::start(env!("CARGO_BIN_EXE_fence-client"), &holder_args).await?;
    assert_eq!(holder.ask("WRITE balance from-A").await?, "WRITE accepted");
    assert_eq!(client.marks(lock).await?.exclusive, holder.generation);

    // 2. A is stopped: no keep-alive, no watchdog, nothing runs.
    holder.pause()?;

    // 3. A's lease ends; B gets the lock with a newer generation and
    //    writes, or only fences.
    let guard_b = contender
        .acquire_timeout(lock, Mode::Exclusive, TAKEOVER_WAIT)
        .await?;
    assert!(
        guard_b.generation().get() > holder.generation,
        "B's generation {} must exceed A's {}",
        guard_b.generation(),
        holder.generation
    );
    let expected = match new_holder {
        NewHolder::Writes => {
            client
                .put(&guard_b, b"balance", "from-B", None)
                .await?
                .expect("B holds the newest generation");
            "from-B"
        }
        NewHolder::OnlyFences => {
            let marks = client
                .fence(&guard_b)
                .await?
                .expect("a new holder's fence is accepted");
            assert_eq!(marks.exclusive, guard_b.generation().get());
            "from-A"
        }
    };

    // 4. A wakes: its guard already says the lease is lost, and its write
    //    with the old sequencer is refused.
    holder.resume()?;
    let lease = holder.ask("LEASE").await?;
    assert!(lease.starts_with("LEASE lost"), "A's guard says `{lease}`");
    let answer = holder.ask("WRITE balance from-A-late").await?;
    assert_eq!(
        answer,
        format!(
            "WRITE stale presented={} mark={}",
            holder.generation,
            guard_b.generation()
        )
    );

    // 5. B's write (or A's first) stands, and so does B's mark.
    let read = client
        .get(lock, b"balance", None)
        .await?
        .expect("plain read");
    assert_eq!(read.value.as_deref(), Some(expected.as_bytes()));
    assert_eq!(read.marks.exclusive, guard_b.generation().get());
    let refused_again = client
        .put(
            &holder.sequencer.parse::<Sequencer>()?,
            b"balance",
            "again",
            None,
        )
        .await?
        .expect_err("still stale");
    assert!(matches!(refused_again, Refused::Stale { .. }));
    guard_b.release().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_holder_stopped_past_its_lease_is_fenced() -> anyhow::Result<()> {
    let etcd = EtcdServer::start();
    let server = ResourceServer::start().await?;
    let lock = LockName::new("gc-pause/etcd")?;
    let contender = EtcdLock::connect(EtcdConfig::new(etcd.endpoints())?, options()).await?;
    let args = holder_args("etcd", &etcd.endpoints().join(","), &lock, &server);
    paused_holder_is_fenced(args, contender, &lock, &server, NewHolder::Writes).await?;
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_holder_stopped_past_its_lease_is_fenced() -> anyhow::Result<()> {
    let redis = RedisServer::start();
    let server = ResourceServer::start().await?;
    let lock = LockName::new("gc-pause/redis")?;
    let contender = RedisLock::connect(&redis.url(), options()).await?;
    let args = holder_args("redis", &redis.url(), &lock, &server);
    paused_holder_is_fenced(args, contender, &lock, &server, NewHolder::Writes).await?;
    server.stop().await
}

/// The SQL lock backend: the holder's session row expires by the
/// database's clock while its process is stopped.
async fn sql_holder_stopped_past_its_lease_is_fenced(
    database: SqlServer,
    lock: &str,
) -> anyhow::Result<()> {
    let server = ResourceServer::start().await?;
    let lock = LockName::new(lock)?;
    let client = SqlLockClient::connect(SqlConfig::new(database.url())).await?;
    let contender = client.session(options()).await?;
    let args = holder_args("sql", &database.url(), &lock, &server);
    paused_holder_is_fenced(args, contender, &lock, &server, NewHolder::Writes).await?;
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_holder_stopped_past_its_lease_is_fenced() -> anyhow::Result<()> {
    sql_holder_stopped_past_its_lease_is_fenced(SqlServer::postgres(), "gc-pause/postgres").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_holder_stopped_past_its_lease_is_fenced() -> anyhow::Result<()> {
    sql_holder_stopped_past_its_lease_is_fenced(SqlServer::mariadb(), "gc-pause/mariadb").await
}

/// ZooKeeper: the stopped holder's session is expired by the server (its
/// ephemeral node goes with it), the contender's node becomes the lock with
/// a later creation zxid, and the resource server fences the holder by it.
async fn zookeeper_holder_stopped_past_its_session_timeout(
    lock: &str,
    new_holder: NewHolder,
) -> anyhow::Result<()> {
    let zookeeper = ZooKeeperServer::start();
    let server = ResourceServer::start().await?;
    let lock = LockName::new(lock)?;
    let config = ZkConfig::parse(&zookeeper.connect_string())?;
    let contender = ZkLock::connect(config, options()).await?;
    let args = holder_args("zookeeper", &zookeeper.connect_string(), &lock, &server);
    paused_holder_is_fenced(args, contender, &lock, &server, new_holder).await?;
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_holder_stopped_past_its_session_timeout_is_fenced() -> anyhow::Result<()> {
    zookeeper_holder_stopped_past_its_session_timeout("gc-pause/zookeeper", NewHolder::Writes).await
}

/// With fence on acquire: the new holder only fences, so the fence alone
/// refuses the late write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_fence_on_acquire_refuses_a_stopped_holder() -> anyhow::Result<()> {
    zookeeper_holder_stopped_past_its_session_timeout(
        "gc-pause/zookeeper-fence-on-acquire",
        NewHolder::OnlyFences,
    )
    .await
}
