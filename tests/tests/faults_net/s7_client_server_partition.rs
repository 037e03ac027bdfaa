//! Scenario 7: a client's write sent into a partition longer than its
//! lease arrives after a newer holder's write. The scenario itself lives in
//! `palisade_tests::fault::net::client_server_partition`, so the mutation
//! check can run it with fencing off; see its docs for the steps.
//!
//! Invariants: I-STALE and I-MONO (the late write is refused with 409
//! stale), I-DUR, I-ONCE, I-TOKEN, and I-LIVE after the heal. Mutation:
//! with fencing off, the same run must violate I-MONO, also when the late
//! write's answer is never read (a write in doubt).

use palisade_tests::fault::net::{Fencing, client_server_partition, late_write_in_doubt_unfenced};
use palisade_tests::fault::{ClientLine, Invariant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s7_late_write_from_a_partition_is_refused() -> anyhow::Result<()> {
    let _serial = crate::serial().await;
    let binaries = palisade_tests::fault_binaries!();
    let outcome = client_server_partition(&binaries, Fencing::On).await?;
    assert!(outcome.new_generation > outcome.old_generation);
    match &outcome.late_write {
        ClientLine::Refused {
            generation, detail, ..
        } => {
            assert_eq!(*generation, outcome.old_generation);
            assert_eq!(detail, "stale");
        }
        other => panic!("the late write was not refused as stale: {other:?}"),
    }
    let report = &outcome.report;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    assert!(report.fenced_writes >= 1, "{report}");
    assert_eq!(report.faults, 1);
    assert!(report.recovery.is_some(), "{report}");
    Ok(())
}

/// The mutation check for scenario 7: the same run with fencing switched
/// off must report the late write (proof that the checker can fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s7_mutation_without_fencing_the_checker_reports_the_late_write() -> anyhow::Result<()> {
    let _serial = crate::serial().await;
    let binaries = palisade_tests::fault_binaries!();
    let outcome = client_server_partition(&binaries, Fencing::Off).await?;
    assert!(
        matches!(outcome.late_write, ClientLine::Wrote { .. }),
        "without fencing the late write lands: {:?}",
        outcome.late_write
    );
    let report = &outcome.report;
    assert!(report.count(Invariant::Mono) >= 1, "{report}");
    assert!(report.stale_accepted() >= 1, "{report}");
    Ok(())
}

/// The mutation check for writes in doubt: with fencing off, the late
/// write lands but its client never reads the answer. Only the judgement
/// of writes in doubt can see it: the late value holds the shared key over
/// a newer acknowledged generation (I-MONO).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s7_mutation_a_late_write_in_doubt_is_judged() -> anyhow::Result<()> {
    let _serial = crate::serial().await;
    let binaries = palisade_tests::fault_binaries!();
    let report = late_write_in_doubt_unfenced(&binaries).await?;
    assert!(report.in_doubt_visible >= 1, "{report}");
    assert!(report.count(Invariant::Mono) >= 1, "{report}");
    // Every violation comes from the write in doubt, none from the checks
    // on acknowledged writes.
    assert!(
        report
            .violations
            .iter()
            .all(|violation| violation.message.contains("outcome unknown")),
        "{:?}",
        report.violations
    );
    assert!(report.recovery.is_some(), "{report}");
    Ok(())
}
