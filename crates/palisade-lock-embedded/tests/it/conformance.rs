//! The shared conformance suite, run against the embedded backend on the
//! real clock.

use std::time::Duration;

use palisade_core::SessionOptions;
use palisade_lock_embedded::{EmbeddedLock, EmbeddedLockClient};
use palisade_testkit::lock_suite::{self, SuiteBackend, SuiteInspect, SuiteRaiseFloor};

/// The embedded service, driven by the suite.
struct EmbeddedBackend {
    service: EmbeddedLockClient,
}

impl SuiteBackend for EmbeddedBackend {
    type Lock = EmbeddedLock;

    fn name(&self) -> &'static str {
        "embedded"
    }

    async fn session(&self, options: SessionOptions) -> EmbeddedLock {
        self.service
            .session(options)
            .expect("the suite's session options are valid")
    }

    async fn kill_lease(&self, session: &EmbeddedLock) {
        session.kill_lease();
    }

    /// Nothing stops the embedded service from going lower, but a TTL of
    /// one second keeps the suite's margins generous on a loaded machine
    /// while the whole suite still runs in a few seconds.
    fn min_ttl(&self) -> Duration {
        Duration::from_secs(1)
    }
}

impl SuiteInspect for EmbeddedBackend {
    type Inspector = EmbeddedLockClient;

    fn inspector(&self) -> &EmbeddedLockClient {
        &self.service
    }
}

impl SuiteRaiseFloor for EmbeddedBackend {
    type Floor = EmbeddedLockClient;

    fn floor(&self) -> &EmbeddedLockClient {
        &self.service
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance() {
    let backend = EmbeddedBackend {
        service: EmbeddedLockClient::new(),
    };
    lock_suite::test_all(backend).await;
}
