//! Raising the generation floor: after etcd lost its history, the next
//! holder must get a generation above a resource server's mark.

use std::time::Duration;

use palisade_core::{Lock, LockGuard, Mode};
use palisade_lock_etcd::{RaiseFloorError, RaiseFloorOptions};

use crate::fixtures::*;

/// How far above the current revision the test raises: enough puts to
/// measure a rate, few enough for a loaded CI machine.
const GAP: u64 = 5_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_holder_is_granted_above_the_raised_floor() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("floor");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    let lock = name("floor");
    let start = connection.revision().await.unwrap();
    let target = start + GAP;

    let mut reports = Vec::new();
    let options = RaiseFloorOptions {
        progress_every: Duration::from_millis(100),
        ..RaiseFloorOptions::default()
    };
    let raised = connection
        .raise_floor(target, options, |progress| reports.push(*progress))
        .await
        .unwrap();
    assert_eq!(raised.before, start);
    assert!(raised.after >= target, "{raised:?}");
    assert!(raised.puts >= 1 && raised.puts <= GAP, "{raised:?}");
    for report in &reports {
        assert_eq!(report.target, target);
        assert!(report.revision > start && report.revision <= raised.after);
    }
    println!(
        "raised the revision by {} with {} puts in {:?}: {:.0} puts/s",
        raised.after - raised.before,
        raised.puts,
        raised.elapsed,
        raised.puts as f64 / raised.elapsed.as_secs_f64()
    );

    let session = session(&connection, options_for_test()).await;
    let guard = session.acquire(&lock, Mode::Exclusive).await.unwrap();
    assert!(
        guard.generation().get() > target,
        "generation {} is not above the floor {target}",
        guard.generation()
    );
    guard.release().await.unwrap();

    // Already above: nothing is written.
    let again = connection
        .raise_floor(target, RaiseFloorOptions::default(), |_| {})
        .await
        .unwrap();
    assert_eq!(again.puts, 0);
    assert_eq!(again.before, again.after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absurd_gap_is_refused_before_anything_is_written() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("floor-gap");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    let before = connection.revision().await.unwrap();
    let error = connection
        .raise_floor(before + 1_000_000_000, RaiseFloorOptions::default(), |_| {})
        .await
        .unwrap_err();
    match &error {
        RaiseFloorError::GapTooLarge { gap, max_gap, .. } => {
            assert_eq!(*gap, 1_000_000_000);
            assert_eq!(*max_gap, RaiseFloorOptions::DEFAULT_MAX_GAP);
        }
        other => panic!("expected GapTooLarge, got {other:?}"),
    }
    assert!(error.to_string().contains("over the limit"), "{error}");
    assert_eq!(
        connection.revision().await.unwrap(),
        before,
        "nothing written"
    );
    assert!(matches!(
        connection
            .raise_floor(u64::MAX, RaiseFloorOptions::default(), |_| {})
            .await,
        Err(RaiseFloorError::OutOfRange { .. })
    ));
}

fn options_for_test() -> palisade_core::SessionOptions {
    options(10)
}
