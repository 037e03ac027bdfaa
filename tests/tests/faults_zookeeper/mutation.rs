//! The mutation rows of the ZooKeeper scenarios: each plays one of the
//! backend's test-only flaws (`palisade_lock_zookeeper::Mutation`, through
//! `fault-client --zk-mutation`) and the checker has to fail.
//!
//! - Scenario 30 with generations from the sequence suffix: the re-created
//!   directory numbers its nodes from 0 again, so grants go backwards
//!   (I-TOKEN reported; the resource server still refuses them).
//! - Scenario 31 with the lease counted from the disconnect notice, and
//!   fencing off: the cut-off holder says `LOST` only after the new grant
//!   and writes on over the new holder (I-MONO and I-STALE reported).

use palisade_tests::fault::{Invariant, Scenario};

use crate::s30_leader_kill::leader_killed;
use crate::s31_client_cut_off::holder_cut_off;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m30_generation_from_the_sequence_suffix_is_caught_by_the_checker() -> anyhow::Result<()> {
    let report = leader_killed(
        "m30-zk-sequence-generation",
        Scenario::new(
            "mutation: 30 with generations from the sequence suffix",
            "zookeeper (3 members)",
        )
        .note("mutation check: I-TOKEN must be reported"),
        Some("generation-from-sequence"),
    )
    .await?;
    assert!(report.count(Invariant::Token) > 0, "{report}");
    assert!(report.fenced_writes > 0, "{report}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m31_lease_from_the_disconnect_notice_is_caught_by_the_checker() -> anyhow::Result<()> {
    let outcome = holder_cut_off(
        "m31-zk-lease-from-notice",
        Scenario::new(
            "mutation: 31 lease counted from the disconnect notice, fencing off",
            "zookeeper",
        )
        .note("mutation check: must be > 0"),
        Some("lease-from-disconnect-notice"),
    )
    .await?;
    let report = &outcome.report;
    assert!(
        !outcome.lost_before_grant,
        "counted from the notice, the lease outlives the session: {report}"
    );
    assert!(report.stale_accepted() > 0, "{report}");
    Ok(())
}
