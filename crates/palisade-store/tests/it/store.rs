//! The fenced store against a real sled in a temporary directory: every
//! rule of DESIGN.md, atomic batches, keyspace isolation, idempotency,
//! limits, persistence.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_store::{
    Applied, Durability, LimitKind, Limits, Marks, Op, OpResult, Refused, RequestId, Store,
    StoreConfig, StoreError,
};
use proptest::prelude::*;
use tempfile::TempDir;

fn open(config: StoreConfig) -> (TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config).unwrap();
    (dir, store)
}

fn open_default() -> (TempDir, Store) {
    open(StoreConfig::default())
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

fn shared(name: &str, generation: u64) -> Sequencer {
    seq(name, Mode::Shared, generation)
}

fn marks(exclusive: u64, shared: u64) -> Marks {
    Marks { exclusive, shared }
}

fn value(store: &Store, name: &str, key: &str) -> Option<Vec<u8>> {
    store
        .get(&lock(name), key.as_bytes(), None)
        .unwrap()
        .unwrap()
        .value
        .map(|v| v.to_vec())
}

fn put(store: &Store, sequencer: &Sequencer, key: &str, val: &str) -> Result<Applied, Refused> {
    store
        .apply(sequencer, &[Op::put(key.to_owned(), val.to_owned())], None)
        .unwrap()
}

#[test]
fn a_lock_never_seen_has_marks_zero() {
    let (_dir, store) = open_default();
    assert_eq!(store.marks(&lock("never/seen")).unwrap(), Marks::ZERO);
}

#[test]
fn exclusive_writes_follow_the_rule_and_equal_generations_pass() {
    let (_dir, store) = open_default();
    let applied = put(&store, &excl("L", 5), "k", "v5").unwrap();
    assert_eq!(applied.marks, marks(5, 0));
    assert_eq!(applied.results, vec![OpResult::Created]);
    // Equal generation: the same holder writes again.
    let applied = put(&store, &excl("L", 5), "k", "v5b").unwrap();
    assert_eq!(applied.results, vec![OpResult::Replaced]);
    // Newer holder.
    assert_eq!(
        put(&store, &excl("L", 7), "k", "v7").unwrap().marks,
        marks(7, 0)
    );
    // The old holder wakes up: refused, and nothing changes.
    match put(&store, &excl("L", 5), "k", "late") {
        Err(Refused::Stale {
            lock: refused_lock,
            mode,
            presented,
            marks: current,
            regression: false,
        }) => {
            assert_eq!(refused_lock, lock("L"));
            assert_eq!(mode, Mode::Exclusive);
            assert_eq!(presented.get(), 5);
            assert_eq!(current, marks(7, 0));
        }
        other => panic!("expected stale, got {other:?}"),
    }
    assert_eq!(value(&store, "L", "k").as_deref(), Some(&b"v7"[..]));
    assert_eq!(store.marks(&lock("L")).unwrap(), marks(7, 0));
}

#[test]
fn a_reader_with_a_newer_generation_fences_older_writers() {
    let (_dir, store) = open_default();
    put(&store, &excl("L", 3), "k", "v3").unwrap();
    // A shared reader with generation 4 reads and raises H_shared.
    let read = store
        .get(&lock("L"), b"k", Some(&shared("L", 4)))
        .unwrap()
        .unwrap();
    assert_eq!(read.value.as_deref(), Some(&b"v3"[..]));
    assert_eq!(read.marks, marks(3, 4));
    // The writer with generation 3 (granted before the reader) is now stale:
    // exclusive needs g >= max(H_excl, H_shared).
    assert!(matches!(
        put(&store, &excl("L", 3), "k", "x"),
        Err(Refused::Stale { .. })
    ));
    // A shared reader below H_excl is stale; at or above it is fine, and
    // H_shared never goes down.
    put(&store, &excl("L", 6), "k", "v6").unwrap();
    assert!(matches!(
        store.get(&lock("L"), b"k", Some(&shared("L", 5))).unwrap(),
        Err(Refused::Stale { .. })
    ));
    let read = store
        .get(&lock("L"), b"k", Some(&shared("L", 6)))
        .unwrap()
        .unwrap();
    assert_eq!(read.marks, marks(6, 6));
    // An exclusive read also raises H_excl.
    let read = store
        .get(&lock("L"), b"k", Some(&excl("L", 9)))
        .unwrap()
        .unwrap();
    assert_eq!(read.marks, marks(9, 6));
    // A plain read (no sequencer) changes no mark.
    let read = store.get(&lock("L"), b"k", None).unwrap().unwrap();
    assert_eq!(read.marks, marks(9, 6));
}

#[test]
fn writes_need_an_exclusive_sequencer() {
    let (_dir, store) = open_default();
    match put(&store, &shared("L", 10), "k", "v") {
        Err(Refused::SharedOnWrite { presented, .. }) => assert_eq!(presented.get(), 10),
        other => panic!("expected shared_on_write, got {other:?}"),
    }
    assert_eq!(store.marks(&lock("L")).unwrap(), Marks::ZERO);
    assert_eq!(value(&store, "L", "k"), None);
}

#[test]
fn a_read_with_a_sequencer_for_another_lock_is_refused() {
    let (_dir, store) = open_default();
    assert!(matches!(
        store.get(&lock("a"), b"k", Some(&shared("b", 1))).unwrap(),
        Err(Refused::LockMismatch { .. })
    ));
    assert_eq!(store.marks(&lock("b")).unwrap(), Marks::ZERO);
}

#[test]
fn each_lock_has_its_own_keyspace_and_marks() {
    let (_dir, store) = open_default();
    put(&store, &excl("a", 1), "b/c", "lock a, key b/c").unwrap();
    put(&store, &excl("a/b", 9), "c", "lock a/b, key c").unwrap();
    assert_eq!(
        value(&store, "a", "b/c").as_deref(),
        Some(&b"lock a, key b/c"[..])
    );
    assert_eq!(
        value(&store, "a/b", "c").as_deref(),
        Some(&b"lock a/b, key c"[..])
    );
    assert_eq!(value(&store, "a", "c"), None);
    assert_eq!(value(&store, "a/b", "b/c"), None);
    // Marks are per lock: generation 9 on `a/b` does not fence `a`.
    assert_eq!(store.marks(&lock("a")).unwrap(), marks(1, 0));
    put(&store, &excl("a", 2), "k", "v").unwrap();
}

#[test]
fn delete_and_cas_semantics() {
    let (_dir, store) = open_default();
    let s = excl("L", 1);
    let apply = |ops: &[Op]| store.apply(&s, ops, None).unwrap();
    assert_eq!(
        apply(&[Op::delete("k")]).unwrap().results,
        vec![OpResult::Absent]
    );
    // Expected absent: create.
    assert_eq!(
        apply(&[Op::cas("k", None, Some("v1".into()))])
            .unwrap()
            .results,
        vec![OpResult::Swapped]
    );
    // Expected absent but present: mismatch, with the current value.
    match apply(&[Op::cas("k", None, Some("v2".into()))]) {
        Err(Refused::CasMismatch { op_index, current }) => {
            assert_eq!(op_index, 0);
            assert_eq!(current.as_deref(), Some(&b"v1"[..]));
        }
        other => panic!("expected cas mismatch, got {other:?}"),
    }
    assert!(apply(&[Op::cas("k", Some("v1".into()), Some("v2".into()))]).is_ok());
    assert_eq!(value(&store, "L", "k").as_deref(), Some(&b"v2"[..]));
    // Compare-and-delete.
    assert!(apply(&[Op::cas("k", Some("v2".into()), None)]).is_ok());
    assert_eq!(value(&store, "L", "k"), None);
    apply(&[Op::put("k", "x")]).unwrap();
    assert_eq!(
        apply(&[Op::delete("k")]).unwrap().results,
        vec![OpResult::Deleted]
    );
}

#[test]
fn a_batch_is_all_or_nothing_including_the_mark() {
    let (_dir, store) = open_default();
    put(&store, &excl("L", 1), "c", "current").unwrap();
    let ops = [
        Op::put("a", "1"),
        Op::delete("c"),
        Op::put("b", "2"),
        Op::cas("c", Some("current".into()), Some("never".into())), // c was deleted above
    ];
    match store.apply(&excl("L", 5), &ops, None).unwrap() {
        Err(Refused::CasMismatch { op_index, current }) => {
            assert_eq!(op_index, 3);
            assert_eq!(current, None);
        }
        other => panic!("expected cas mismatch, got {other:?}"),
    }
    assert_eq!(value(&store, "L", "a"), None);
    assert_eq!(value(&store, "L", "b"), None);
    assert_eq!(value(&store, "L", "c").as_deref(), Some(&b"current"[..]));
    // The failed batch did not move the mark: generation 2 still writes.
    assert_eq!(store.marks(&lock("L")).unwrap(), marks(1, 0));
    put(&store, &excl("L", 2), "z", "ok").unwrap();
}

#[test]
fn a_batch_sees_its_own_earlier_ops() {
    let (_dir, store) = open_default();
    let ops = [
        Op::put("a", "1"),
        Op::cas("a", Some("1".into()), Some("2".into())),
        Op::put("b", "x"),
        Op::delete("b"),
    ];
    let applied = store.apply(&excl("L", 3), &ops, None).unwrap().unwrap();
    assert_eq!(
        applied.results,
        vec![
            OpResult::Created,
            OpResult::Swapped,
            OpResult::Created,
            OpResult::Deleted
        ]
    );
    assert_eq!(value(&store, "L", "a").as_deref(), Some(&b"2"[..]));
    assert_eq!(value(&store, "L", "b"), None);
}

#[test]
fn an_empty_batch_only_raises_the_mark() {
    let (_dir, store) = open_default();
    put(&store, &excl("L", 1), "k", "v").unwrap();
    let applied = store.apply(&excl("L", 8), &[], None).unwrap().unwrap();
    assert_eq!(applied.marks, marks(8, 0));
    assert!(matches!(
        put(&store, &excl("L", 7), "k", "late"),
        Err(Refused::Stale { .. })
    ));
}

#[test]
fn an_idempotent_retry_gets_the_original_outcome() {
    let (_dir, store) = open_default();
    let id = RequestId::new("retry-1").unwrap();
    let ops = [Op::put("k", "first")];
    let first = store
        .apply(&excl("L", 4), &ops, Some(&id))
        .unwrap()
        .unwrap();
    assert!(!first.replayed);
    // Someone else (same holder) changes the value.
    put(&store, &excl("L", 4), "k", "second").unwrap();
    // The retry is answered from the record, applying nothing.
    let retry = store
        .apply(&excl("L", 4), &ops, Some(&id))
        .unwrap()
        .unwrap();
    assert!(retry.replayed);
    assert_eq!(retry.results, first.results);
    assert_eq!(retry.marks, first.marks);
    assert_eq!(retry.commit_seq, first.commit_seq);
    assert_eq!(value(&store, "L", "k").as_deref(), Some(&b"second"[..]));
    // Even after a newer holder has written, the retry of an accepted
    // request is answered, not re-fenced.
    put(&store, &excl("L", 9), "k", "newer").unwrap();
    assert!(
        store
            .apply(&excl("L", 4), &ops, Some(&id))
            .unwrap()
            .unwrap()
            .replayed
    );
    // The same key for a different request is refused.
    assert!(matches!(
        store
            .apply(&excl("L", 4), &[Op::put("k", "other")], Some(&id))
            .unwrap(),
        Err(Refused::IdempotencyKeyReused { .. })
    ));
    // Keys are per lock: the same id on another lock is a new request.
    assert!(
        !store
            .apply(&excl("M", 1), &ops, Some(&id))
            .unwrap()
            .unwrap()
            .replayed
    );
}

#[test]
fn a_refused_request_is_not_remembered() {
    let (_dir, store) = open_default();
    put(&store, &excl("L", 5), "k", "v").unwrap();
    let id = RequestId::new("r").unwrap();
    let stale = excl("L", 4);
    for _ in 0..2 {
        assert!(matches!(
            store
                .apply(&stale, &[Op::put("k", "late")], Some(&id))
                .unwrap(),
            Err(Refused::Stale { .. })
        ));
    }
    // A failed CAS is not remembered either: once the value matches, the
    // same request with the same key applies.
    let cas = [Op::cas("k", Some("w".into()), Some("x".into()))];
    assert!(matches!(
        store.apply(&excl("L", 5), &cas, Some(&id)).unwrap(),
        Err(Refused::CasMismatch { .. })
    ));
    put(&store, &excl("L", 5), "k", "w").unwrap();
    let applied = store
        .apply(&excl("L", 5), &cas, Some(&id))
        .unwrap()
        .unwrap();
    assert!(!applied.replayed);
    assert_eq!(value(&store, "L", "k").as_deref(), Some(&b"x"[..]));
}

#[test]
fn the_idempotency_window_evicts_the_oldest_keys() {
    let (_dir, store) = open(StoreConfig::default().with_idempotency_window(2));
    let ids: Vec<RequestId> = (0..3)
        .map(|i| RequestId::new(format!("id-{i}")).unwrap())
        .collect();
    let ops = |i: usize| [Op::put(format!("k{i}").into_bytes(), "v")];
    for (i, id) in ids.iter().enumerate() {
        store
            .apply(&excl("L", 1), &ops(i), Some(id))
            .unwrap()
            .unwrap();
    }
    // The two most recent are remembered.
    for (i, id) in ids.iter().enumerate().skip(1) {
        assert!(
            store
                .apply(&excl("L", 1), &ops(i), Some(id))
                .unwrap()
                .unwrap()
                .replayed
        );
    }
    // The oldest was evicted: its retry is a new request and applies again.
    store
        .apply(&excl("L", 1), &[Op::delete("k0")], None)
        .unwrap()
        .unwrap();
    let again = store
        .apply(&excl("L", 1), &ops(0), Some(&ids[0]))
        .unwrap()
        .unwrap();
    assert!(!again.replayed);
    assert_eq!(value(&store, "L", "k0").as_deref(), Some(&b"v"[..]));
}

#[test]
fn commit_sequence_numbers_increase_in_commit_order_across_locks_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let mut last = 0;
    for round in 0..3u64 {
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        for i in 0..20u64 {
            let name = if i % 2 == 0 { "L" } else { "M" };
            let applied = put(&store, &excl(name, round + 1), "k", "v").unwrap();
            assert!(
                applied.commit_seq > last,
                "round {round}, write {i}: {} after {last}",
                applied.commit_seq
            );
            last = applied.commit_seq;
        }
    }
}

#[test]
fn marks_data_and_idempotency_records_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let id = RequestId::new("persisted").unwrap();
    {
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        store
            .apply(&excl("L", 12), &[Op::put("k", "v")], Some(&id))
            .unwrap()
            .unwrap();
        store
            .get(&lock("L"), b"k", Some(&shared("L", 14)))
            .unwrap()
            .unwrap();
    }
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    assert_eq!(store.marks(&lock("L")).unwrap(), marks(12, 14));
    assert_eq!(value(&store, "L", "k").as_deref(), Some(&b"v"[..]));
    assert!(
        store
            .apply(&excl("L", 12), &[Op::put("k", "v")], Some(&id))
            .unwrap()
            .unwrap()
            .replayed
    );
    assert!(matches!(
        put(&store, &excl("L", 13), "k", "x"),
        Err(Refused::Stale { .. })
    ));
}

#[test]
fn limits_are_errors_before_any_transaction() {
    let limits = Limits {
        max_key_bytes: 4,
        max_value_bytes: 8,
        max_batch_ops: 2,
    };
    let (_dir, store) = open(StoreConfig {
        limits,
        ..StoreConfig::default()
    });
    let s = excl("L", 1);
    let check = |ops: &[Op], kind: LimitKind| match store.apply(&s, ops, None) {
        Err(StoreError::TooLarge { kind: found, .. }) => assert_eq!(found, kind),
        other => panic!("expected {kind:?} too large, got {other:?}"),
    };
    check(&[Op::put("12345", "v")], LimitKind::Key);
    check(&[Op::put("k", "123456789")], LimitKind::Value);
    check(
        &[Op::cas("k", Some("123456789".into()), None)],
        LimitKind::Value,
    );
    check(
        &[Op::delete("a"), Op::delete("b"), Op::delete("c")],
        LimitKind::BatchOps,
    );
    assert!(matches!(
        store.apply(&s, &[Op::put("", "v")], None),
        Err(StoreError::EmptyKey)
    ));
    assert!(matches!(
        store.get(&lock("L"), b"", None),
        Err(StoreError::EmptyKey)
    ));
    // Nothing was applied, not even the mark.
    assert_eq!(store.marks(&lock("L")).unwrap(), Marks::ZERO);
    // At the limits exactly: fine.
    store
        .apply(&s, &[Op::put("1234", "12345678"), Op::delete("x")], None)
        .unwrap()
        .unwrap();
}

#[test]
fn keys_and_values_are_bytes() {
    let (_dir, store) = open_default();
    let key = [0xff, 0x00, b'/', 0x80];
    let val = [0u8, 1, 2, 0xfe];
    store
        .apply(&excl("L", 1), &[Op::put(key.to_vec(), val.to_vec())], None)
        .unwrap()
        .unwrap();
    let read = store.get(&lock("L"), &key, None).unwrap().unwrap();
    assert_eq!(read.value.as_deref(), Some(&val[..]));
}

#[test]
fn a_data_directory_of_another_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = sled::open(dir.path()).unwrap();
        db.open_tree("palisade-meta")
            .unwrap()
            .insert(b"\0palisade-store-format", b"99".to_vec())
            .unwrap();
        db.flush().unwrap();
    }
    match Store::open(dir.path(), StoreConfig::default()) {
        Err(StoreError::Corrupt { what }) => assert!(what.contains("99"), "{what}"),
        other => panic!("expected a format error, got {other:?}"),
    }
}

#[test]
fn concurrent_durable_writers_are_all_acknowledged_and_share_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let n_threads = 8;
    let writes_per_thread = 40;
    {
        let store = Arc::new(Store::open(dir.path(), StoreConfig::default()).unwrap());
        let handles: Vec<_> = (0..n_threads)
            .map(|t| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    for i in 0..writes_per_thread {
                        let key = format!("t{t}-{i}");
                        store
                            .apply(&excl("L", 1), &[Op::put(key.clone(), "v")], None)
                            .unwrap()
                            .unwrap();
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        let stats = store.flush_stats();
        assert!(stats.flushes >= 1);
        // Every acknowledged write waited for a flush...
        assert!(stats.tickets >= 1);
        assert!(stats.flushes <= stats.tickets);
    }
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    for t in 0..n_threads {
        for i in 0..writes_per_thread {
            assert!(value(&store, "L", &format!("t{t}-{i}")).is_some());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_outcomes_can_be_awaited() {
    let (_dir, store) = open_default();
    let tasks: Vec<_> = (1..=16u64)
        .map(|generation| {
            let store = store.clone();
            tokio::spawn(async move {
                let sequencer = excl("L", generation);
                let ops = [Op::put(format!("k{generation}").into_bytes(), "v")];
                store.submit(&sequencer, &ops, None).unwrap().await.unwrap()
            })
        })
        .collect();
    let mut accepted = 0;
    let mut highest_accepted = 0;
    for (index, task) in tasks.into_iter().enumerate() {
        match task.await.unwrap() {
            Ok(applied) => {
                accepted += 1;
                highest_accepted = highest_accepted.max(index as u64 + 1);
                assert_eq!(applied.marks.exclusive, index as u64 + 1);
            }
            Err(Refused::Stale {
                presented, marks, ..
            }) => {
                assert!(presented.get() < marks.exclusive)
            }
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert!(accepted >= 1);
    assert_eq!(
        store.submit_marks(&lock("L")).unwrap().await.unwrap(),
        marks(highest_accepted, 0)
    );
}

#[test]
fn buffered_mode_acknowledges_from_memory_and_persists_on_close() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        durability: Durability::buffered(),
        ..StoreConfig::default()
    };
    {
        let store = Store::open(dir.path(), config.clone()).unwrap();
        assert_eq!(store.durability().name(), "buffered");
        put(&store, &excl("L", 3), "k", "v").unwrap();
        assert_eq!(store.flush_stats().flushes, 0);
    }
    let store = Store::open(dir.path(), config).unwrap();
    assert_eq!(value(&store, "L", "k").as_deref(), Some(&b"v"[..]));
    assert_eq!(store.marks(&lock("L")).unwrap(), marks(3, 0));
}

/// A store reports the durability its engine acknowledges with, not the
/// configuration's: sled's setting is the sled engine's alone.
#[test]
fn the_store_reports_its_engines_durability() {
    let buffered = StoreConfig {
        durability: Durability::buffered(),
        ..StoreConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let engine = palisade_store::open_sled_engine(dir.path(), &buffered).unwrap();
    let store = Store::with_engine(engine, StoreConfig::default());
    assert_eq!(store.durability().name(), "buffered");
    assert_eq!(store.config().durability.name(), "buffered");
    drop(store);
    let dir = tempfile::tempdir().unwrap();
    let engine = palisade_store::open_sled_engine(dir.path(), &StoreConfig::default()).unwrap();
    let store = Store::with_engine(engine, buffered);
    assert_eq!(store.durability().name(), "flushed");
}

/// A request of the model test.
#[derive(Debug, Clone)]
enum Request {
    Put {
        lock: usize,
        generation: u64,
        key: u8,
    },
    Delete {
        lock: usize,
        generation: u64,
        key: u8,
    },
    Read {
        lock: usize,
        shared: bool,
        generation: Option<u64>,
        key: u8,
    },
}

fn arb_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (0..2usize, 1..8u64, 0..3u8).prop_map(|(lock, generation, key)| Request::Put {
            lock,
            generation,
            key
        }),
        (0..2usize, 1..8u64, 0..3u8).prop_map(|(lock, generation, key)| Request::Delete {
            lock,
            generation,
            key
        }),
        (
            0..2usize,
            any::<bool>(),
            proptest::option::of(1..8u64),
            0..3u8
        )
            .prop_map(|(lock, shared, generation, key)| Request::Read {
                lock,
                shared,
                generation,
                key
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// The store agrees with a ten-line model of DESIGN.md's rules on any
    /// sequence of requests over two locks whose names are prefixes of each
    /// other.
    #[test]
    fn the_store_agrees_with_the_model(requests in proptest::collection::vec(arb_request(), 1..40)) {
        let (_dir, store) = open(StoreConfig { durability: Durability::buffered(), ..StoreConfig::default() });
        let names = ["a", "a/b"];
        let mut model_marks: HashMap<usize, Marks> = HashMap::new();
        let mut model_data: HashMap<(usize, u8), u64> = HashMap::new();
        for request in requests {
            match request {
                Request::Put { lock: l, generation, key } | Request::Delete { lock: l, generation, key } => {
                    let is_put = matches!(request, Request::Put { .. });
                    let current = *model_marks.get(&l).unwrap_or(&Marks::ZERO);
                    let ops = if is_put {
                        vec![Op::put(vec![key], generation.to_string().into_bytes())]
                    } else {
                        vec![Op::delete(vec![key])]
                    };
                    let outcome = store.apply(&excl(names[l], generation), &ops, None).unwrap();
                    let expected_ok = generation >= current.exclusive.max(current.shared);
                    prop_assert_eq!(outcome.is_ok(), expected_ok);
                    if expected_ok {
                        model_marks.insert(l, Marks { exclusive: generation, shared: current.shared });
                        if is_put { model_data.insert((l, key), generation); } else { model_data.remove(&(l, key)); }
                    }
                }
                Request::Read { lock: l, shared: is_shared, generation, key } => {
                    let current = *model_marks.get(&l).unwrap_or(&Marks::ZERO);
                    let sequencer = generation.map(|g| seq(names[l], if is_shared { Mode::Shared } else { Mode::Exclusive }, g));
                    let outcome = store.get(&lock(names[l]), &[key], sequencer.as_ref()).unwrap();
                    let expected = match generation {
                        None => Some(current),
                        Some(g) => current.admit(if is_shared { Mode::Shared } else { Mode::Exclusive }, Generation::new(g).unwrap()),
                    };
                    match (outcome, expected) {
                        (Ok(read), Some(after)) => {
                            prop_assert_eq!(read.marks, after);
                            model_marks.insert(l, after);
                            let expected_value = model_data.get(&(l, key)).map(|g| Bytes::from(g.to_string().into_bytes()));
                            prop_assert_eq!(read.value, expected_value);
                        }
                        (Err(Refused::Stale { marks: reported, .. }), None) => prop_assert_eq!(reported, current),
                        (outcome, expected) => prop_assert!(false, "store {:?}, model {:?}", outcome, expected),
                    }
                }
            }
        }
        for (l, name) in names.iter().enumerate() {
            prop_assert_eq!(store.marks(&lock(name)).unwrap(), *model_marks.get(&l).unwrap_or(&Marks::ZERO));
        }
    }
}

#[test]
fn requests_grouped_in_one_transaction_keep_their_own_all_or_nothing() {
    // Submitted without waiting, these queue up behind each other and the
    // committer applies them in as few transactions as it can. Whatever the
    // grouping, each keeps its own outcome, in submission order.
    let (_dir, store) = open_default();
    let mut pendings = Vec::new();
    for round in 0..20u64 {
        let generation = round + 1;
        // A good batch on lock A.
        pendings.push((
            "good",
            store
                .submit(
                    &excl("A", generation),
                    &[
                        Op::put(format!("a{round}").into_bytes(), "1"),
                        Op::put("last", generation.to_string().into_bytes()),
                    ],
                    None,
                )
                .unwrap(),
        ));
        // A bad batch on lock A (its CAS fails): nothing of it may land,
        // not its put, not its higher generation.
        pendings.push((
            "cas",
            store
                .submit(
                    &excl("A", generation + 100),
                    &[
                        Op::put(format!("never{round}").into_bytes(), "x"),
                        Op::cas("missing", Some("x".into()), None),
                    ],
                    None,
                )
                .unwrap(),
        ));
        // A stale write on lock B after a newer one.
        pendings.push((
            "good",
            store
                .submit(&excl("B", 2 * generation), &[Op::put("b", "new")], None)
                .unwrap(),
        ));
        pendings.push((
            "stale",
            store
                .submit(&excl("B", 2 * generation - 1), &[Op::put("b", "old")], None)
                .unwrap(),
        ));
    }
    for (index, (expected, pending)) in pendings.into_iter().enumerate() {
        let outcome = pending.wait().unwrap();
        match (expected, &outcome) {
            ("good", Ok(_)) => {}
            ("cas", Err(Refused::CasMismatch { op_index: 1, .. })) => {}
            ("stale", Err(Refused::Stale { .. })) => {}
            _ => panic!("request {index}: expected {expected}, got {outcome:?}"),
        }
    }
    for round in 0..20 {
        assert_eq!(
            value(&store, "A", &format!("a{round}")).as_deref(),
            Some(&b"1"[..])
        );
        assert_eq!(value(&store, "A", &format!("never{round}")), None);
    }
    assert_eq!(value(&store, "A", "last").as_deref(), Some(&b"20"[..]));
    assert_eq!(store.marks(&lock("A")).unwrap(), marks(20, 0));
    assert_eq!(value(&store, "B", "b").as_deref(), Some(&b"new"[..]));
    assert_eq!(store.marks(&lock("B")).unwrap(), marks(40, 0));
}

#[test]
fn a_retry_queued_behind_its_original_is_replayed() {
    let (_dir, store) = open_default();
    let id = RequestId::new("dup").unwrap();
    let ops = [Op::put("k", "v")];
    let first = store.submit(&excl("L", 1), &ops, Some(&id)).unwrap();
    let second = store.submit(&excl("L", 1), &ops, Some(&id)).unwrap();
    let first = first.wait().unwrap().unwrap();
    let second = second.wait().unwrap().unwrap();
    assert!(!first.replayed);
    assert!(second.replayed);
    assert_eq!(first.results, second.results);
}

/// Raises `lock`'s marks to `before` through the store itself: an exclusive
/// admit at `H_excl`, then a shared one at `H_shared`.
fn raise_to(store: &Store, name: &str, before: Marks) {
    if before.exclusive > 0 {
        put(store, &excl(name, before.exclusive), "setup", "x").unwrap();
    }
    if before.shared > 0 {
        store
            .get(&lock(name), b"setup", Some(&shared(name, before.shared)))
            .unwrap()
            .unwrap();
    }
    assert_eq!(store.marks(&lock(name)).unwrap(), before);
}

#[tokio::test]
async fn the_shared_rule_table_of_core_holds_for_the_store() {
    let (_dir, store) = open_default();
    for (index, case) in palisade_core::marks::RULE_CASES.iter().enumerate() {
        let name = format!("rule-case/{index}");
        raise_to(&store, &name, case.before_marks());
        let sequencer = seq(&name, case.mode, case.generation);
        let outcome = store.submit_admit(&sequencer).unwrap().await.unwrap();
        match case.expected_marks() {
            Some(after) => assert_eq!(outcome, Ok(after), "{case:?}"),
            None => {
                assert!(
                    matches!(outcome, Err(Refused::Stale { marks, .. }) if marks == case.before_marks()),
                    "{case:?}: {outcome:?}"
                );
                assert_eq!(store.marks(&lock(&name)).unwrap(), case.before_marks());
            }
        }
    }
}
