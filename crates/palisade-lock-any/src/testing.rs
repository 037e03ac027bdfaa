//! Test hooks (feature `testing`): pause a session on purpose, as a
//! stop-the-world pause would, on whichever backend it is. For the demos
//! and fault drills; never needed in production.

use std::time::Duration;

use crate::connect::AnyLock;

impl AnyLock {
    /// The same session, made pausable: a Redis session without its
    /// watchdog (a Redis hold cannot have it stopped afterwards, so a hold
    /// lapses one TTL after its grant unless released); any other session
    /// as it is, since [`AnyLock::stop_renewal`] can stop it later.
    pub fn without_watchdog(self) -> AnyLock {
        match self {
            #[cfg(feature = "redis")]
            AnyLock::Redis(session) => AnyLock::Redis(session.without_watchdog()),
            #[cfg(feature = "redis")]
            AnyLock::Redlock(session) => AnyLock::Redlock(session.without_watchdog()),
            other => other,
        }
    }

    /// Stops renewing the session's lease, as a stopped process would, and
    /// says how (for a timeline). `ttl` is the session's lease: a SQL
    /// session's keep-alive cannot be stopped from outside, so its row is
    /// expired one TTL on, as the database's clock would for a stopped
    /// process.
    pub fn stop_renewal(&self, ttl: Duration) -> &'static str {
        let _ = ttl;
        match self {
            #[cfg(feature = "embedded")]
            AnyLock::Embedded(session) => {
                session.stop_keepalive();
                "its keep-alive stops with it"
            }
            #[cfg(feature = "etcd")]
            AnyLock::Etcd(session) => {
                session.stop_keepalive();
                "its etcd lease keep-alive stops with it"
            }
            #[cfg(feature = "redis")]
            AnyLock::Redis(_) | AnyLock::Redlock(_) => {
                "its hold has no watchdog (a stopped world renews nothing), so it lapses one TTL after the grant"
            }
            #[cfg(feature = "sql")]
            AnyLock::Sql(session, _) => {
                let session = session.clone();
                expire_after(ttl, async move { session.expire_session().await });
                "its session row stops being renewed and expires one TTL later by the database's clock"
            }
            #[cfg(feature = "zookeeper")]
            AnyLock::ZooKeeper(session) => {
                // The client library's own pings would keep the ZooKeeper
                // session alive; a stopped process sends none, and the
                // ensemble expires it one TTL on.
                session.stop_keepalive();
                let session = session.clone();
                expire_after(ttl, async move { session.simulate_crash().await });
                "its keep-alive stops, and ZooKeeper expires its session one TTL later"
            }
            AnyLock::Never(never) => match *never {},
        }
    }
}

/// Ends a paused session one `ttl` from now with `expire`, in the
/// background, as the lock service's clock would for a stopped process.
#[cfg(any(feature = "sql", feature = "zookeeper"))]
fn expire_after(
    ttl: Duration,
    expire: impl Future<Output = Result<(), palisade_core::LockError>> + Send + 'static,
) {
    tokio::spawn(async move {
        tokio::time::sleep(ttl).await;
        if let Err(error) = expire.await {
            tracing::warn!(%error, "expiring the paused session failed");
        }
    });
}
