//! Fencing with the SQL lock backend, where the database is the lock
//! service, on PostgreSQL and MariaDB: fencing on acquire refuses a holder
//! whose session the database ended (the cross-process SIGSTOP story is in
//! `gc_pause`, the database killed under contention in `faults`, scenario
//! 13).

use std::time::Duration;

use palisade::SessionOptions;
use palisade_lock_sql::{SqlConfig, SqlGuard, SqlLock, SqlLockClient};
use palisade_testkit::sql::SqlServer;
use palisade_tests::{ResourceServer, fence_on_acquire_refuses_a_silent_holder};

const TTL: Duration = Duration::from_secs(2);
/// Bound on the new holder's wait: the ended session's lock-delay (at most
/// one TTL) plus a wide margin for a loaded 2-core machine.
const TAKEOVER_WAIT: Duration = Duration::from_secs(30);

fn options() -> SessionOptions {
    SessionOptions::default()
        .with_ttl(TTL)
        .with_keepalive_interval(TTL / 4)
        .with_safety_margin(TTL / 4)
}

/// A holder whose session the database ended (`expire_session`, the drill
/// that ends a session's lease on the database as its expiry would) still
/// has a write in hand; B takes the lock and writes nothing. A's late
/// write lands unless B fenced on acquire; with `fence` it is refused
/// as stale.
async fn fence_on_acquire_refuses_an_expired_holder(
    database: SqlServer,
    prefix: &str,
) -> anyhow::Result<()> {
    let server = ResourceServer::start().await?;
    let client = SqlLockClient::connect(SqlConfig::new(database.url())).await?;
    let contender = client.session(options()).await?;
    let expire = async |holder: &SqlLock, _: &SqlGuard| {
        holder.expire_session().await?;
        anyhow::Ok(())
    };
    fence_on_acquire_refuses_a_silent_holder(
        async || anyhow::Ok(client.session(options()).await?),
        expire,
        &contender,
        &server.client(),
        (
            &palisade::LockName::new(format!("{prefix}/fence-on-acquire"))?,
            &palisade::LockName::new(format!("{prefix}/no-fence-on-acquire"))?,
        ),
        TAKEOVER_WAIT,
    )
    .await?;
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fence_on_acquire_refuses_an_expired_holder() -> anyhow::Result<()> {
    fence_on_acquire_refuses_an_expired_holder(SqlServer::postgres(), "sql-fencing/postgres").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_fence_on_acquire_refuses_an_expired_holder() -> anyhow::Result<()> {
    fence_on_acquire_refuses_an_expired_holder(SqlServer::mariadb(), "sql-fencing/mariadb").await
}
