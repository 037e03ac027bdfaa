//! Shared by the test binaries: a real database per test, clients on it,
//! and the conformance suite's view of this backend.
#![allow(dead_code)]

use std::time::Duration;

use palisade_core::SessionOptions;
use palisade_lock_sql::{SqlConfig, SqlLock, SqlLockClient};
use palisade_testkit::sql::SqlServer;

/// Session options with a short TTL for tests: a quarter of it as the safety
/// margin and as the keep-alive interval.
pub(crate) fn options(ttl: Duration) -> SessionOptions {
    SessionOptions::default()
        .with_ttl(ttl)
        .with_safety_margin(ttl / 4)
        .with_keepalive_interval(ttl / 4)
}

/// A client on `server`.
pub(crate) async fn client(server: &SqlServer) -> SqlLockClient {
    SqlLockClient::connect(SqlConfig::new(server.url()))
        .await
        .expect("connect to the test database")
}

/// Installs a `tracing` subscriber once, honouring `RUST_LOG`.
pub(crate) fn trace() {
    use std::sync::Once;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
    });
}

/// The conformance suite's view of this backend: sessions on one client,
/// `kill_lease` = end the session's lease on the database as a crash would.
pub(crate) struct SuiteSql {
    pub(crate) client: SqlLockClient,
    pub(crate) name: &'static str,
    /// Keeps the server alive as long as the backend.
    pub(crate) _server: SqlServer,
}

impl palisade_testkit::lock_suite::SuiteBackend for SuiteSql {
    type Lock = SqlLock;

    fn name(&self) -> &'static str {
        self.name
    }

    async fn session(&self, options: SessionOptions) -> SqlLock {
        self.client
            .session(options)
            .await
            .expect("the suite's session options are valid")
    }

    async fn kill_lease(&self, session: &SqlLock) {
        session
            .expire_session()
            .await
            .expect("end the session's lease on the database");
    }

    fn min_ttl(&self) -> Duration {
        Duration::from_secs(1)
    }
}

impl palisade_testkit::lock_suite::SuiteInspect for SuiteSql {
    type Inspector = SqlLockClient;

    fn inspector(&self) -> &SqlLockClient {
        &self.client
    }
}

impl palisade_testkit::lock_suite::SuiteRaiseFloor for SuiteSql {
    type Floor = SqlLockClient;

    fn floor(&self) -> &SqlLockClient {
        &self.client
    }
}
