//! In-doubt writes: sent to moto, and the answer lost (or the request lost,
//! or delivered late). The fence reads back (its write id in the object's
//! metadata) before it sends anything again, so the write lands exactly
//! once and the caller is told the truth.
//!
//! The faults come from [`FaultyStore`], a store that forwards to moto and
//! then pretends the answer never came: deterministic, where a proxy would
//! have to be switched between the fence's read and its write.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use object_store::path::Path;
use palisade_fence_object::testing::{Fault, FaultyStore};
use palisade_fence_object::{ObjectFence, RetryBudget};

use crate::common;

async fn fence_with(moto: &palisade_testkit::s3::S3Server) -> (Arc<ObjectFence>, Arc<FaultyStore>) {
    let store = common::config(&moto.endpoint(), "in-doubt")
        .build_store()
        .unwrap();
    let spoiling = Arc::new(FaultyStore::new(store));
    let fence = ObjectFence::open(spoiling.clone(), "moto (answers lost)")
        .await
        .unwrap()
        .with_retry(RetryBudget {
            first_pause: Duration::from_millis(20),
            max_pause: Duration::from_millis(200),
            total: Duration::from_secs(30),
        });
    (Arc::new(fence), spoiling)
}

/// Each fault, on an in-place object and on a log: the call returns the
/// write as landed, and it landed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_doubt_write_is_resolved_by_reading_back() {
    let moto = common::moto();
    for fault in [Fault::AnswerLost, Fault::RequestLost, Fault::DeliveredLate] {
        let (fence, spoiling) = fence_with(&moto).await;
        let holder = common::exclusive(&format!("doubt/{fault:?}"), 5);
        let object = Path::from(format!("{fault:?}.json"));
        fence.put(&holder, &object, "v1").await.unwrap().unwrap();

        spoiling.spoil_next(fault, 1);
        let written = fence.put(&holder, &object, "v2").await.unwrap().unwrap();
        assert_eq!(written.version, 2, "{fault:?}");
        assert!(fence.stats().in_doubt.load(Ordering::Relaxed) >= 1);
        if let Some(late) = spoiling.take_late() {
            // The original arrives after the resend landed: its condition
            // (the version before) no longer holds.
            let error = late
                .await
                .unwrap()
                .expect_err("the late original must not land");
            assert!(
                matches!(error, object_store::Error::Precondition { .. }),
                "{error:?}"
            );
        }
        let read = fence.get(&object).await.unwrap().unwrap();
        assert_eq!(
            (read.bytes.as_ref(), read.version),
            (b"v2".as_ref(), 2),
            "{fault:?}"
        );

        // The log: the entry lands in one slot, once.
        let log = fence.log(Path::from(format!("log-{fault:?}"))).unwrap();
        log.append(&holder, "1").await.unwrap().unwrap();
        spoiling.spoil_next(fault, 1);
        let appended = log.append(&holder, "2").await.unwrap().unwrap();
        assert_eq!(appended.slot, 2, "{fault:?}");
        if let Some(late) = spoiling.take_late() {
            let error = late.await.unwrap().expect_err("the slot is taken");
            assert!(
                matches!(error, object_store::Error::AlreadyExists { .. }),
                "{error:?}"
            );
        }
        assert_eq!(
            log.last_slot().await.unwrap(),
            2,
            "{fault:?}: no second copy"
        );
        assert_eq!(log.read(2).await.unwrap().unwrap().bytes, "2");
    }
}
