//! The durable mark store: marks survive a reopen, a stale request is
//! still refused afterwards, and the guard shares one set of marks with
//! the fenced store's own transactions.

use crate::common;
use axum::Router;
use axum::http::StatusCode;
use axum::routing::put;
use common::*;
use palisade_guard::{Admission, Fenced, Guard, MarkStore, Marks, SledMarks};
use palisade_store::{Op, StoreConfig};
use serde_json::json;
use tower::ServiceExt as _;

fn guarded(marks: SledMarks) -> (Guard, Router) {
    let guard = Guard::builder(marks).build();
    let app = Router::new()
        .route(
            "/v1/{lock}/items/{key}",
            put(|fenced: Fenced| async move { fenced.generation().to_string() })
                .get(|fenced: Option<Fenced>| async move { fenced.is_some().to_string() }),
        )
        .route_layer(guard.layer());
    (guard, app)
}

fn marks(exclusive: u64, shared: u64) -> Marks {
    Marks { exclusive, shared }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marks_survive_a_reopen_and_a_stale_request_is_still_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (guard, app) = guarded(SledMarks::open(dir.path(), StoreConfig::default()).unwrap());
        let (status, _) =
            status_and_text(app.clone().oneshot(put_item(&exclusive(7))).await.unwrap()).await;
        assert_eq!(status, StatusCode::OK);
        let (status, _) = status_and_text(
            app.clone()
                .oneshot(get_item(Some(&shared(9))))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(guard.metrics().admitted, 2);
        // Dropping the guard and the router closes the store (its committer
        // flushes and exits).
    }

    let reopened = SledMarks::open(dir.path(), StoreConfig::default()).unwrap();
    assert_eq!(reopened.marks(&lock()).await.unwrap(), marks(7, 9));
    let (_, app) = guarded(reopened);
    // Generation 8 was granted before the reader with 9: still refused.
    let (status, body) =
        status_and_json(app.clone().oneshot(put_item(&exclusive(8))).await.unwrap()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["code"], "stale");
    assert_eq!(body["required"], 9);
    assert_eq!(body["marks"], json!({"exclusive": 7, "shared": 9}));
    let (status, text) =
        status_and_text(app.clone().oneshot(put_item(&exclusive(9))).await.unwrap()).await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "9"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sled_marks_follow_the_fencing_rule_and_never_touch_data() {
    let dir = tempfile::tempdir().unwrap();
    let mark_store = SledMarks::open(dir.path(), StoreConfig::default()).unwrap();
    let cases = [
        (exclusive(5), Some(marks(5, 0))),
        (shared(7), Some(marks(5, 7))),
        (shared(6), Some(marks(5, 7))),
        (exclusive(6), None),
        (shared(4), None),
        (exclusive(7), Some(marks(7, 7))),
    ];
    for (sequencer, expected) in cases {
        let before = mark_store.marks(&lock()).await.unwrap();
        let expected = match expected {
            Some(after) => Admission::Admitted { marks: after },
            None => Admission::Stale { marks: before },
        };
        assert_eq!(
            mark_store.admit(&sequencer).await.unwrap(),
            expected,
            "{sequencer}"
        );
    }
    let read = mark_store
        .store()
        .get(&lock(), b"k", None)
        .unwrap()
        .unwrap();
    assert_eq!((read.value, read.marks), (None, marks(7, 7)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_and_the_fenced_store_share_one_set_of_marks() {
    let dir = tempfile::tempdir().unwrap();
    let mark_store = SledMarks::open(dir.path(), StoreConfig::default()).unwrap();
    let store = mark_store.store().clone();
    let (_guard, app) = guarded(mark_store);

    // A newer holder writes through the store directly (another route, or
    // the Palisade server on the same data directory's store).
    store
        .submit(&exclusive(10), &[Op::put("k", "ten")], None)
        .unwrap()
        .await
        .unwrap()
        .unwrap();
    let (status, body) =
        status_and_json(app.clone().oneshot(put_item(&exclusive(9))).await.unwrap()).await;
    assert_eq!(
        (status, body["required"].clone()),
        (StatusCode::CONFLICT, json!(10))
    );

    // And a request the guard admits fences the store's writers.
    let (status, _) =
        status_and_text(app.clone().oneshot(put_item(&exclusive(11))).await.unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    let refused = store
        .submit(&exclusive(10), &[Op::put("k", "late")], None)
        .unwrap()
        .await
        .unwrap();
    assert!(
        matches!(refused, Err(palisade_store::Refused::Stale { .. })),
        "{refused:?}"
    );
    let read = store.get(&lock(), b"k", None).unwrap().unwrap();
    assert_eq!(read.value.as_deref(), Some(&b"ten"[..]));
}
