//! Scenario 2: an etcd lock holder's process is stopped (SIGSTOP) past its
//! lease with a write in hand: its keep-alive stops with it, etcd expires
//! the lease and deletes its key, a contender's key becomes the oldest and
//! it writes; the holder resumes and sends its write.
//!
//! Invariants asserted: I-MONO and I-STALE (every late write refused),
//! I-DUR, I-ONCE, I-TOKEN (create-revisions only grow), I-LIVE (after the
//! last resume a client acquires and writes within TTL + 20 s).

use palisade_testkit::etcd::EtcdServer;
use palisade_tests::fault::{ClientConfig, Scenario};

use crate::story::paused_holder_is_fenced;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_holder_paused_past_its_lease_is_fenced() -> anyhow::Result<()> {
    let etcd = EtcdServer::start();
    paused_holder_is_fenced(
        "s02",
        Scenario::new("2 etcd holder paused past its lease", "etcd"),
        |server| ClientConfig::etcd(&etcd.endpoints(), server),
    )
    .await
}
