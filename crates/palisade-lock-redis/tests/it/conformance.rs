//! The shared lock conformance suite, against a real Redis.

use palisade_testkit::lock_suite::test_all;
use palisade_testkit::redis::RedisServer;

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance() {
    common::trace();
    let server = RedisServer::start();
    let client = common::client(&server.url(), "conformance").await;
    test_all(common::SuiteRedis {
        client,
        _servers: server,
    })
    .await;
}
