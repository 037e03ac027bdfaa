//! etcd's limits against a real etcd with its default `--max-txn-ops`
//! (128) and `--max-request-bytes` (1.5 MiB): what the engine accepts fits
//! in one Txn, and what it refuses is refused whole, before anything is
//! sent.

use crate::common;

use common::{config, connect, lock, write};
use palisade_store::{Engine, LimitKind, Marks, Op, ReadRequest, StoreError};
use palisade_store_etcd::{DEFAULT_MAX_TXN_OPS, RESERVED_TXN_OPS};
use palisade_testkit::etcd::EtcdServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_batch_fits_one_txn_even_while_evicting_an_id() {
    let etcd = EtcdServer::start();
    let engine = connect(config(etcd.endpoints(), "limits-fit").with_idempotency_window(1)).await;
    let max = engine.limits().max_batch_ops;
    assert_eq!(max, DEFAULT_MAX_TXN_OPS - RESERVED_TXN_OPS);
    // Window 1 and one id already recorded: the next write with an id
    // evicts one, which takes every reserved op.
    engine
        .write(write("fit", 1, vec![Op::put("seed", "x")], Some("first")))
        .await
        .expect("etcd answers")
        .expect("admitted");
    let ops: Vec<Op> = (0..max)
        .map(|i| Op::put(format!("k{i:03}").into_bytes(), b"v".to_vec()))
        .collect();
    let applied = engine
        .write(write("fit", 1, ops, Some("second")))
        .await
        .expect("the largest batch fits etcd's --max-txn-ops")
        .expect("admitted");
    assert_eq!(applied.results.len(), max);
    // The evicted id is forgotten: the same id is now a new request.
    let again = engine
        .write(write("fit", 1, vec![Op::put("seed", "x")], Some("first")))
        .await
        .unwrap()
        .unwrap();
    assert!(!again.replayed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_near_the_byte_limit_fits_one_txn() {
    let etcd = EtcdServer::start();
    let engine = connect(config(etcd.endpoints(), "limits-bytes")).await;
    let value = vec![7u8; engine.limits().max_value_bytes];
    let applied = engine
        .write(write(
            "bytes",
            1,
            vec![Op::put("big", value.clone())],
            Some("big-1"),
        ))
        .await
        .expect("a value within the engine's limit fits etcd's --max-request-bytes")
        .expect("admitted");
    assert!(applied.commit_seq > 0);
    let read = engine
        .read(ReadRequest::new(&lock("bytes"), b"big", None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.value.as_deref(), Some(value.as_slice()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_limit_batch_is_refused_whole_and_writes_nothing() {
    let etcd = EtcdServer::start();
    let engine = connect(config(etcd.endpoints(), "limits-refused")).await;
    let max = engine.limits().max_batch_ops;

    let too_many: Vec<Op> = (0..=max)
        .map(|i| Op::put(format!("k{i:03}").into_bytes(), b"v".to_vec()))
        .collect();
    match engine.write(write("over", 5, too_many, None)).await {
        Err(StoreError::TooLarge {
            kind: LimitKind::BatchOps,
            actual,
            max: limit,
        }) => assert_eq!((actual, limit), (max + 1, max)),
        other => panic!("expected TooLarge(batch_ops), got {other:?}"),
    }

    // Each value within the per-value limit, together over the request's.
    let half = vec![1u8; engine.limits().max_value_bytes / 2 + 1];
    let too_big = vec![
        Op::put("a", half.clone()),
        Op::put("b", half.clone()),
        Op::put("c", half),
    ];
    match engine.write(write("over", 5, too_big, Some("big"))).await {
        Err(StoreError::TooLarge {
            kind: LimitKind::RequestBytes,
            actual,
            max: limit,
        }) => assert!(actual > limit, "{actual} <= {limit}"),
        other => panic!("expected TooLarge(request_bytes), got {other:?}"),
    }

    // Nothing of either reached etcd: no mark, no key, and the request id
    // is unused.
    assert_eq!(engine.marks(&lock("over")).await.unwrap(), Marks::ZERO);
    for key in ["k000", "a", "b"] {
        let read = engine
            .read(ReadRequest::new(&lock("over"), key.as_bytes(), None))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.value, None, "{key}");
    }
    let small = engine
        .write(write("over", 5, vec![Op::put("a", "1")], Some("big")))
        .await
        .unwrap()
        .expect("the id of a refused request is free");
    assert!(!small.replayed);
}
