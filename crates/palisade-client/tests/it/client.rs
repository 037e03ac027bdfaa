//! The client against a real in-process server bound on 127.0.0.1:0.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use palisade_client::{BatchOp, Client, ClientError, Marks, OpResult, Refused};
use palisade_core::{
    Generation, LeaseTracker, LeaseWatch, LiveCheck, Liveness, LockError, LockGuard, LockName,
    LostReason, Mode, Sequencer,
};
use palisade_server::{AppState, run};
use palisade_store::{Limits, Store, StoreConfig};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

struct TestServer {
    _dir: TempDir,
    base: String,
    _stop: oneshot::Sender<()>,
}

async fn start_with(adjust: impl FnOnce(AppState) -> AppState, config: StoreConfig) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config).unwrap();
    start_on(dir, adjust(AppState::new(store))).await
}

async fn start_on(dir: TempDir, state: AppState) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(run(listener, state, async {
        let _ = stopped.await;
    }));
    TestServer {
        _dir: dir,
        base,
        _stop: stop,
    }
}

async fn start() -> TestServer {
    start_with(|s| s, StoreConfig::default()).await
}

fn lock(name: &str) -> LockName {
    LockName::new(name).unwrap()
}

fn seq(name: &str, mode: Mode, generation: u64) -> Sequencer {
    Sequencer::new(lock(name), mode, Generation::new(generation).unwrap())
}

fn excl(name: &str, generation: u64) -> Sequencer {
    seq(name, Mode::Exclusive, generation)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_api_round_trips() {
    let server = start().await;
    let client = Client::new(&server.base).unwrap();
    let health = client.health().await.unwrap();
    assert_eq!(
        (health.status, health.durability.as_str()),
        (palisade_wire::HealthStatus::Ok, "flushed")
    );
    assert_eq!(health.engine.name, "sled");
    assert_eq!(
        client.marks(&lock("orders/42")).await.unwrap(),
        Marks::default()
    );

    let s = excl("orders/42", 33);
    let written = client.put(&s, b"stock", "7", None).await.unwrap().unwrap();
    assert_eq!(written.results, vec![OpResult::Created]);
    assert_eq!(
        written.marks,
        Marks {
            exclusive: 33,
            shared: 0
        }
    );
    assert!(!written.replayed);

    let read = client
        .get(&lock("orders/42"), b"stock", None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.value.as_deref(), Some(&b"7"[..]));
    assert_eq!(read.marks.exclusive, 33);

    // Binary keys and values.
    let key = [0xffu8, 0x00, b'/'];
    client
        .put(&s, &key, Bytes::from_static(&[1, 2, 0xff]), None)
        .await
        .unwrap()
        .unwrap();
    let read = client
        .get(&lock("orders/42"), &key, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.value.as_deref(), Some(&[1u8, 2, 0xff][..]));

    // A missing key is a value of None, not an error.
    let read = client
        .get(&lock("orders/42"), b"nope", None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.value, None);
    assert_eq!(read.marks.exclusive, 33);

    // Compare-and-swap.
    let written = client
        .cas(&s, b"stock", Some(b"7"), Some(&[0xfe, 0xff]), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(written.results, vec![OpResult::Swapped]);
    match client
        .cas(&s, b"stock", Some(b"7"), None, None)
        .await
        .unwrap()
    {
        Err(refused @ Refused::CasMismatch { .. }) => {
            assert!(!refused.to_string().is_empty());
            let Refused::CasMismatch { op_index, current } = refused else {
                unreachable!()
            };
            // The server says what the key holds now (bytes that are not
            // UTF-8 travel in base64), so a caller can retry against it.
            assert_eq!(op_index, 0);
            assert_eq!(current.as_deref(), Some(&[0xfe, 0xff][..]));
        }
        other => panic!("expected a cas mismatch, got {other:?}"),
    }

    // Batch, all or nothing.
    let ops = [
        BatchOp::put("a", "1"),
        BatchOp::delete("stock"),
        BatchOp::cas(
            "a",
            Some(Bytes::from("1")),
            Some(Bytes::from_static(&[0xff])),
        ),
    ];
    let written = client.batch(&s, &ops, None).await.unwrap().unwrap();
    assert_eq!(
        written.results,
        vec![OpResult::Created, OpResult::Deleted, OpResult::Swapped]
    );
    let failing = [BatchOp::put("b", "1"), BatchOp::cas("a", None, None)];
    match client.batch(&s, &failing, None).await.unwrap() {
        Err(Refused::CasMismatch { op_index, .. }) => assert_eq!(op_index, 1),
        other => panic!("expected a cas mismatch, got {other:?}"),
    }
    assert_eq!(
        client
            .get(&lock("orders/42"), b"b", None)
            .await
            .unwrap()
            .unwrap()
            .value,
        None
    );

    // Delete.
    let written = client.delete(&s, b"a", None).await.unwrap().unwrap();
    assert_eq!(written.results, vec![OpResult::Deleted]);
    let written = client.delete(&s, b"a", None).await.unwrap().unwrap();
    assert_eq!(written.results, vec![OpResult::Absent]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_refusals_are_typed() {
    let server = start().await;
    let client = Client::new(&server.base).unwrap();
    client
        .put(&excl("L", 34), b"k", "new", None)
        .await
        .unwrap()
        .unwrap();
    match client.put(&excl("L", 33), b"k", "old", None).await.unwrap() {
        Err(Refused::Stale {
            lock: l,
            mode,
            presented,
            marks,
            ..
        }) => {
            assert_eq!(l, lock("L"));
            assert_eq!(mode, Mode::Exclusive);
            assert_eq!(presented.get(), 33);
            assert_eq!(marks.required(mode), 34);
            assert_eq!(
                marks,
                Marks {
                    exclusive: 34,
                    shared: 0
                }
            );
        }
        other => panic!("expected stale, got {other:?}"),
    }
    // A shared reader with a newer generation fences the writer.
    let reader = seq("L", Mode::Shared, 40);
    let read = client
        .get(&lock("L"), b"k", Some(&reader))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        read.marks,
        Marks {
            exclusive: 34,
            shared: 40
        }
    );
    assert!(matches!(
        client.put(&excl("L", 35), b"k", "x", None).await.unwrap(),
        Err(Refused::Stale { marks, mode, .. }) if marks.required(mode) == 40
    ));
    // Shared sequencers cannot write.
    assert!(matches!(
        client.put(&reader, b"k", "x", None).await.unwrap(),
        Err(Refused::SharedOnWrite { .. })
    ));
    // Stale reads are refused too.
    assert!(matches!(
        client
            .get(&lock("L"), b"k", Some(&seq("L", Mode::Shared, 33)))
            .await
            .unwrap(),
        Err(Refused::Stale { .. })
    ));
    // A read whose sequencer is for another lock is a bad request.
    match client.get(&lock("L"), b"k", Some(&excl("M", 1))).await {
        Err(ClientError::BadRequest {
            status: 422, code, ..
        }) => assert_eq!(code, "lock_mismatch"),
        other => panic!("expected lock_mismatch, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_retries_are_replayed() {
    let server = start().await;
    let client = Client::new(&server.base).unwrap();
    let s = excl("L", 2);
    let first = client
        .put(&s, b"k", "v", Some("op-1"))
        .await
        .unwrap()
        .unwrap();
    assert!(!first.replayed);
    let retry = client
        .put(&s, b"k", "v", Some("op-1"))
        .await
        .unwrap()
        .unwrap();
    assert!(retry.replayed);
    assert_eq!(retry.results, first.results);
    assert!(matches!(
        client.put(&s, b"k", "other", Some("op-1")).await.unwrap(),
        Err(Refused::IdempotencyKeyReused { .. })
    ));
    match client.put(&s, b"k", "v", Some("not valid")).await {
        Err(ClientError::BadRequest {
            status: 400, code, ..
        }) => assert_eq!(code, "bad_request"),
        other => panic!("expected bad_request, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_typed() {
    let limits = Limits {
        max_key_bytes: 4,
        ..Limits::default()
    };
    let server = start_with(
        |s| s,
        StoreConfig {
            limits,
            ..StoreConfig::default()
        },
    )
    .await;
    let client = Client::new(&server.base).unwrap();
    match client.put(&excl("L", 1), b"12345", "v", None).await {
        Err(ClientError::TooLarge { limit, max, .. }) => {
            assert_eq!((limit.as_str(), max), ("key", 4))
        }
        other => panic!("expected too_large, got {other:?}"),
    }
    // A base URL that is not the API root: 404 no_route.
    let wrong = Client::new(&format!("{}/nested", server.base)).unwrap();
    match wrong.marks(&lock("L")).await {
        Err(ClientError::NotFound { code, .. }) => assert_eq!(code, "no_route"),
        other => panic!("expected no_route, got {other:?}"),
    }

    // Nothing listening: a connection error.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let client = Client::new(&format!("http://{closed}")).unwrap();
    let error = client.marks(&lock("L")).await.unwrap_err();
    assert!(matches!(error, ClientError::Connect { .. }), "{error:?}");
    assert!(error.is_transient());

    // Something that accepts and never answers: a timeout.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let _holder = tokio::spawn(async move {
        let mut connections = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            connections.push(socket);
        }
    });
    let client =
        Client::with_timeout(&format!("http://{silent_addr}"), Duration::from_millis(300)).unwrap();
    let error = client
        .put(&excl("L", 1), b"k", "v", None)
        .await
        .unwrap_err();
    assert!(matches!(error, ClientError::Timeout { .. }), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_failures_are_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    {
        // Damaged with sled itself, then closed: the store opens it.
        let db = sled::open(dir.path()).unwrap();
        db.open_tree("palisade-meta")
            .unwrap()
            .insert(b"L", b"damaged".to_vec())
            .unwrap();
        db.flush().unwrap();
    }
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let server = start_on(dir, AppState::new(store)).await;
    let client = Client::new(&server.base).unwrap();
    match client.put(&excl("L", 1), b"k", "v", None).await {
        Err(error @ ClientError::Unavailable { .. }) => {
            assert_eq!(error.code(), Some("storage_unavailable"));
            assert!(error.is_transient());
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
}

struct NotHeld;

impl LiveCheck for NotHeld {
    async fn check(&self, _sequencer: &Sequencer) -> Result<Liveness, LockError> {
        Ok(Liveness::NotHeld)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_check_refusal_is_typed() {
    let server = start_with(
        |s| s.with_live_check(Arc::new(NotHeld)),
        StoreConfig::default(),
    )
    .await;
    let client = Client::new(&server.base).unwrap();
    match client.put(&excl("L", 7), b"k", "v", None).await.unwrap() {
        Err(Refused::NotHeld { lock: l, presented }) => {
            assert_eq!((l, presented.get()), (lock("L"), 7));
        }
        other => panic!("expected not_held, got {other:?}"),
    }
}

/// A guard over a lease the test controls, standing in for a lock backend.
#[derive(Debug)]
struct TestGuard {
    sequencer: Sequencer,
    tracker: LeaseTracker,
}

impl LockGuard for TestGuard {
    fn issued(&self) -> &Sequencer {
        &self.sequencer
    }

    fn lease(&self) -> LeaseWatch {
        self.tracker.watch()
    }

    async fn release(self) -> Result<(), LockError> {
        self.tracker.release();
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_helpers_refuse_locally_once_the_lease_is_lost() {
    let server = start().await;
    let client = Client::new(&server.base).unwrap();
    let guard = TestGuard {
        sequencer: excl("G", 5),
        tracker: LeaseTracker::new(tokio::time::Instant::now() + Duration::from_secs(600)),
    };
    let written = client.put(&guard, b"k", "v", None).await.unwrap().unwrap();
    assert_eq!(written.marks.exclusive, 5);
    let read = client.get_with(&guard, b"k").await.unwrap().unwrap();
    assert_eq!(read.value.as_deref(), Some(&b"v"[..]));
    client
        .batch(&guard, &[BatchOp::put("k2", "v2")], None)
        .await
        .unwrap()
        .unwrap();
    client
        .cas(&guard, b"k2", Some(b"v2"), None, None)
        .await
        .unwrap()
        .unwrap();

    guard.tracker.lose(LostReason::Expired);
    match client.put(&guard, b"k", "late", None).await {
        Err(ClientError::Lock(LockError::LeaseLost { generation, .. })) => {
            assert_eq!(generation.get(), 5)
        }
        other => panic!("expected lease lost, got {other:?}"),
    }
    assert!(matches!(
        client.delete(&guard, b"k", None).await,
        Err(ClientError::Lock(_))
    ));
    // Nothing was sent: the value is unchanged.
    let read = client.get(&lock("G"), b"k", None).await.unwrap().unwrap();
    assert_eq!(read.value.as_deref(), Some(&b"v"[..]));
}

/// `fence` raises the marks without touching data: exclusive through an
/// empty batch, shared through a fenced read. An older holder is refused
/// from then on, and a fence older than the marks is `Stale` and changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_raises_the_marks_and_refuses_older_holders() {
    let server = start().await;
    let client = Client::new(&server.base).unwrap();

    let marks = client.fence(&excl("fence/x", 5)).await.unwrap().unwrap();
    assert_eq!(
        marks,
        Marks {
            exclusive: 5,
            shared: 0
        }
    );
    let late = client
        .put(&excl("fence/x", 4), b"k", "late", None)
        .await
        .unwrap()
        .expect_err("generation 4 is below the fence");
    assert!(
        matches!(late, Refused::Stale { marks, mode, .. } if marks.required(mode) == 5),
        "{late:?}"
    );
    let read = client
        .get(&lock("fence/x"), b"k", None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.value, None, "the fence wrote nothing");

    let shared = client
        .fence(&seq("fence/x", Mode::Shared, 7))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        shared,
        Marks {
            exclusive: 5,
            shared: 7
        }
    );
    let behind = client
        .fence(&excl("fence/x", 6))
        .await
        .unwrap()
        .expect_err("an exclusive 6 is below the shared mark 7");
    assert!(matches!(behind, Refused::Stale { .. }), "{behind:?}");
    assert_eq!(
        client.marks(&lock("fence/x")).await.unwrap(),
        Marks {
            exclusive: 5,
            shared: 7
        },
        "a refused fence changes nothing"
    );
}

/// The client's marks and op results are the store's own types (defined
/// once, in core): an answer converts to nothing.
#[test]
fn marks_and_op_results_are_the_stores_types() {
    fn as_store_types(
        written: palisade_client::Written,
    ) -> (palisade_store::Marks, Vec<palisade_store::OpResult>) {
        (written.marks, written.results)
    }
    let written = palisade_client::Written {
        results: vec![palisade_store::OpResult::Created],
        marks: palisade_store::Marks {
            exclusive: 3,
            shared: 1,
        },
        commit_seq: 1,
        replayed: false,
    };
    let (marks, results) = as_store_types(written);
    assert_eq!(marks.required(palisade_core::Mode::Exclusive), 3);
    assert_eq!(results[0].as_str(), "created");
}
