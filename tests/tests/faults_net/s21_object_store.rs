//! Scenario 20: fenced writes to object storage (`palisade-fence-object`
//! on moto's S3) while the S3 server is killed and restarted mid-stream,
//! every client's link turns lossy (late chunks, resets: writes in doubt,
//! read back), and one holder's write is held on a slow link between its
//! check and the store, past its lease, while the next holder writes.
//!
//! Invariants: I-MONO (in the store's own commit order, from its journal),
//! I-STALE, I-DUR, I-ONCE, I-TOKEN, I-LIVE; the held write is refused.
//! The mutation row runs the same with a store that ignores conditional
//! writes (a proxy strips `If-Match` and `If-None-Match`, the probe
//! skipped): the held write lands over the newer holder's, and the checker
//! must say so.

use palisade_tests::fault::object::{Held, object_store_under_faults};
use palisade_tests::fault::{Invariant, Scenario};

use crate::serial;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s21_object_store_restarted_lossy_and_a_held_write() -> anyhow::Result<()> {
    let _serial = serial().await;
    let (report, held) = object_store_under_faults(
        "s21",
        Scenario::new(
            "21 S3 restarted mid-stream, lossy links, a write held past its lease",
            "object store (moto), embedded lock",
        ),
        false,
    )
    .await?;
    report.assert_safe();
    assert_eq!(report.stale_accepted(), 0, "{report}");
    assert_eq!(report.lost_writes(), 0, "{report}");
    assert_eq!(
        held,
        Held::Refused,
        "the held write must be refused: {report}"
    );
    assert!(report.fenced_writes >= 1, "{report}");
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s21_without_conditions_the_checker_catches_the_held_write() -> anyhow::Result<()> {
    let _serial = serial().await;
    let (report, held) = object_store_under_faults(
        "m20",
        Scenario::new(
            "mutation: 21 with a store that ignores conditions",
            "object store (moto), embedded lock",
        )
        .note("mutation check: must be > 0"),
        true,
    )
    .await?;
    assert_eq!(
        held,
        Held::Landed,
        "without conditions the held write lands"
    );
    assert!(
        report.stale_accepted() > 0,
        "the checker must report it: {report}"
    );
    Ok(())
}
