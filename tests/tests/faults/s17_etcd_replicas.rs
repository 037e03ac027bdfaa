//! Scenario 17: three resource servers over one 3-member etcd cluster
//! (`--store etcd://...`), the clients' writes spread over them; the lock
//! service is the same cluster (locks and store under separate prefixes).
//! An etcd lock holder writing through replica 0 is stopped (SIGSTOP) past
//! its lease with a write in hand; a contender is granted a newer
//! generation and writes through another replica; the holder resumes and
//! sends its late write to replica 0. Then one replica is killed (SIGKILL)
//! while clients write through it, and restarted.
//!
//! Invariants asserted: I-MONO and I-STALE (every late write refused by
//! whichever replica gets it: the marks live in etcd, not in a replica),
//! I-DUR (nothing acknowledged by any replica is lost, the killed one
//! included), I-ONCE, I-TOKEN, I-LIVE. The final state is read through a
//! replica the holder never wrote to.

use palisade_testkit::etcd::EtcdCluster;
use palisade_tests::fault::{ClientConfig, Scenario};

use crate::story::replicas_fence_a_paused_holder;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_replicas_fence_a_paused_holder_and_lose_nothing() -> anyhow::Result<()> {
    let tag = "s17";
    let cluster = tokio::task::spawn_blocking(EtcdCluster::start).await?;
    let hosts: Vec<String> = cluster
        .endpoints()
        .iter()
        .map(|endpoint| endpoint.trim_start_matches("http://").to_owned())
        .collect();
    let store = format!(
        "etcd://{}/palisade-faults/{tag}-{}",
        hosts.join(","),
        std::process::id()
    );
    replicas_fence_a_paused_holder(
        tag,
        &store,
        Scenario::new(
            "17 three replicas over one etcd cluster: paused holder, replica kill -9",
            "etcd (3 members), etcd engine",
        ),
        |server| ClientConfig::etcd(&cluster.endpoints(), server),
    )
    .await
}
