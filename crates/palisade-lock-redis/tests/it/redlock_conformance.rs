//! The shared lock conformance suite against Redlock on 3 and on 5 real,
//! independent Redis masters.

use std::time::Duration;

use palisade_core::SessionOptions;
use palisade_lock_redis::{Redlock, RedlockClient, RedlockConfig};
use palisade_testkit::lock_suite::{SuiteBackend, SuiteRaiseFloor, raise_floor, test_locking};
use palisade_testkit::redis::{RedisOptions, RedisServer};

use crate::common;

struct SuiteRedlock {
    client: RedlockClient,
    _masters: Vec<RedisServer>,
}

impl SuiteBackend for SuiteRedlock {
    type Lock = Redlock;

    fn name(&self) -> &'static str {
        "redlock"
    }

    async fn session(&self, options: SessionOptions) -> Redlock {
        self.client
            .session(options)
            .expect("the suite's session options are valid")
    }

    async fn kill_lease(&self, session: &Redlock) {
        session
            .expire_session()
            .await
            .expect("force-expire the session's holds on every master");
    }

    fn min_ttl(&self) -> Duration {
        // A hold is renewed on a majority of masters, each a round trip a
        // loaded machine can stretch: at 1 s a reader once lost its lease
        // between its grant and its release in `shared_mode` (load 8-14).
        Duration::from_secs(2)
    }
}

impl SuiteRaiseFloor for SuiteRedlock {
    type Floor = RedlockClient;

    fn floor(&self) -> &RedlockClient {
        &self.client
    }
}

async fn suite_on(masters: usize) {
    common::trace();
    let servers: Vec<RedisServer> = (0..masters)
        .map(|_| RedisServer::spawn(RedisOptions::default()))
        .collect();
    let config = RedlockConfig::new(servers.iter().map(RedisServer::url))
        .with_key_prefix(common::unique_prefix("redlock-conformance"));
    let client = RedlockClient::connect(config)
        .await
        .expect("connect to the test masters");
    assert_eq!(client.masters_connected(), masters);
    // Every case but `inspection`: Redlock has no inspection API yet
    // (`palisade locks` refuses `--backend redlock` and says so).
    let backend = SuiteRedlock {
        client,
        _masters: servers,
    };
    test_locking(&backend).await;
    raise_floor(&backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_on_three_masters() {
    suite_on(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_on_five_masters() {
    suite_on(5).await;
}
