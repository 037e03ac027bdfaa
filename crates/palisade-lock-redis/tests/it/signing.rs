//! Signed sequencers from the Redis backend, against a real `redis-server`:
//! the testkit's signing cases, and the issuer a client refuses.

use std::time::Duration;

use palisade_core::Signer;
use palisade_lock_redis::{
    RedisConfig, RedisLiveCheck, RedisLock, RedisLockClient, RedisLockError,
};
use palisade_testkit::redis::RedisServer;
use palisade_testkit::signing_suite::{ISSUER, SigningBackend, key, signer};

use crate::common::{client_with, options, unique_prefix};

const TTL: Duration = Duration::from_secs(5);

/// A real Redis and a key prefix of the test's own.
struct RedisSigning {
    server: RedisServer,
    prefix: String,
}

impl RedisSigning {
    fn start() -> Self {
        Self {
            server: RedisServer::start(),
            prefix: unique_prefix("signing"),
        }
    }

    fn config(&self, signer: Option<Signer>) -> RedisConfig {
        let config = RedisConfig::new(self.server.url()).with_key_prefix(self.prefix.clone());
        match signer {
            Some(signer) => config.with_signer(signer),
            None => config,
        }
    }
}

impl SigningBackend for RedisSigning {
    type Client = RedisLockClient;
    type Lock = RedisLock;
    type Check = RedisLiveCheck;

    async fn client(&self, signer: Option<Signer>) -> RedisLockClient {
        client_with(self.config(signer)).await
    }

    fn issuer(&self, client: &RedisLockClient) -> String {
        client.issuer().to_owned()
    }

    async fn session(&self, client: &RedisLockClient) -> RedisLock {
        client.session(options(TTL)).unwrap()
    }

    async fn live_check(&self, _client: &RedisLockClient, signer: Signer) -> RedisLiveCheck {
        RedisLiveCheck::connect(self.config(Some(signer)))
            .await
            .unwrap()
    }
}

palisade_testkit::signing_tests!(RedisSigning::start());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_client_names_redis_and_a_conflicting_issuer_is_refused() {
    let backend = RedisSigning::start();
    let client = backend.client(None).await;
    assert!(client.issuer().starts_with("redis@"), "{}", client.issuer());

    let conflicting = backend
        .config(Some(signer(key("k1", 1))))
        .with_issuer("redis-other");
    match RedisLockClient::connect(conflicting).await {
        Err(RedisLockError::InvalidConfig { reason }) => {
            assert!(reason.contains("redis-other"), "{reason}");
            assert!(reason.contains(ISSUER), "{reason}");
        }
        Err(other) => panic!("expected InvalidConfig, got {other}"),
        Ok(_) => panic!("a conflicting issuer was accepted"),
    }
}
