//! Scenario 1: a Redis lock holder is stopped (SIGSTOP) past its TTL with
//! a write in hand; a contender takes the lock and writes; the holder
//! resumes and sends its write.
//!
//! Invariants asserted: I-MONO and I-STALE (every late write is refused as
//! stale, none is accepted), I-DUR and I-ONCE (every acknowledged write is
//! in the final state, none applied twice), I-TOKEN (the default
//! server-clock generations only grow), I-LIVE (after the last resume a
//! client acquires and writes within TTL + 20 s).

use palisade_testkit::redis::RedisServer;
use palisade_tests::fault::{ClientConfig, Scenario};

use crate::story::paused_holder_is_fenced;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_holder_paused_past_its_ttl_is_fenced() -> anyhow::Result<()> {
    let redis = RedisServer::start();
    paused_holder_is_fenced(
        "s01",
        Scenario::new("1 Redis holder paused past its TTL", "redis"),
        |server| ClientConfig::redis(&redis.url(), server),
    )
    .await
}
