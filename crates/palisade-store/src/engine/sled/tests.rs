//! The sled engine through the store: what only sled has (fail-stop on a
//! failed flush or sync, blobs, the interval sync, the mutation switch).

use std::time::Duration;

use palisade_core::{Generation, LockName, Mode, Sequencer};

use crate::{Durability, Marks, Op, Refused, Store, StoreConfig, StoreError};

/// A store with the default settings in a new temporary directory, which
/// lives as long as the returned handle.
fn fresh_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    (dir, store)
}

/// Lock `L`, and the sequencer of its first exclusive holder.
fn first_writer() -> (LockName, Sequencer) {
    let lock = LockName::new("L").unwrap();
    let sequencer = Sequencer::new(lock.clone(), Mode::Exclusive, Generation::MIN);
    (lock, sequencer)
}

#[test]
fn submit_admit_raises_marks_without_touching_data() {
    let (dir, store) = fresh_store();
    let lock = LockName::new("L").unwrap();
    let seq =
        |mode, generation| Sequencer::new(lock.clone(), mode, Generation::new(generation).unwrap());
    let admit = |sequencer: Sequencer| {
        let future = store.submit_admit(&sequencer).unwrap();
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
            .unwrap()
    };
    let marks = |exclusive, shared| Marks { exclusive, shared };
    assert_eq!(admit(seq(Mode::Exclusive, 5)), Ok(marks(5, 0)));
    assert_eq!(admit(seq(Mode::Shared, 7)), Ok(marks(5, 7)));
    assert_eq!(admit(seq(Mode::Shared, 6)), Ok(marks(5, 7)));
    assert!(matches!(
        admit(seq(Mode::Exclusive, 6)),
        Err(Refused::Stale { marks: m, .. }) if m == marks(5, 7)
    ));
    assert!(matches!(
        admit(seq(Mode::Shared, 4)),
        Err(Refused::Stale { .. })
    ));
    assert_eq!(store.marks(&lock).unwrap(), marks(5, 7));
    assert_eq!(store.sled().data.len(), 0, "no data was written");
    drop(store);
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    assert_eq!(store.marks(&lock).unwrap(), marks(5, 7));
}

#[test]
fn after_a_failed_flush_every_call_fails_until_reopened() {
    let (dir, store) = fresh_store();
    let (lock, sequencer) = first_writer();
    store
        .apply(&sequencer, &[Op::put("k", "v")], None)
        .unwrap()
        .unwrap();

    // What the committer records when sled's flush returns an error.
    store.sled().epochs.fail("injected: fsync failed".into());

    let failed = |result: Result<(), StoreError>| matches!(result, Err(StoreError::FlushFailed { message }) if message.contains("injected"));
    assert!(failed(store.check_health()));
    assert!(failed(
        store
            .apply(&sequencer, &[Op::put("k", "w")], None)
            .map(|_| ())
    ));
    assert!(failed(store.get(&lock, b"k", None).map(|_| ())));
    assert!(failed(store.get(&lock, b"k", Some(&sequencer)).map(|_| ())));
    assert!(failed(store.marks(&lock).map(|_| ())));
    drop(store);

    // A restart recovers from sled's log: the acknowledged write is there.
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let read = store.get(&lock, b"k", None).unwrap().unwrap();
    assert_eq!(read.value.as_deref(), Some(&b"v"[..]));
}

/// Makes the next sync of sled's files fail, as a dying disk would.
fn fail_next_sync(store: &Store, kind: std::io::ErrorKind) {
    let files = &store.sled().files;
    files.lock().unwrap().fail_next = Some(kind);
}

#[test]
fn a_failed_sync_of_the_data_files_is_never_acknowledged_and_fail_stops() {
    let (dir, store) = fresh_store();
    let lock = LockName::new("L").unwrap();
    let holder = |generation| {
        Sequencer::new(
            lock.clone(),
            Mode::Exclusive,
            Generation::new(generation).unwrap(),
        )
    };
    store
        .apply(&holder(5), &[Op::put("k", "acknowledged")], None)
        .unwrap()
        .unwrap();

    // sled's flush succeeds, the fsync after it does not: the write is
    // answered with a failure, never with `Applied`.
    fail_next_sync(&store, std::io::ErrorKind::StorageFull);
    let outcome = store.apply(&holder(6), &[Op::put("k", "unsynced")], None);
    assert!(
        matches!(&outcome, Err(StoreError::FlushFailed { message }) if message.contains("syncing the data files failed")),
        "{outcome:?}"
    );
    // Fail-stop: nothing is answered any more, not even a read or the
    // marks that the unsynced write may have raised in memory, and a
    // later flush does not pretend to fix it.
    assert!(store.check_health().is_err());
    assert!(matches!(
        store.apply(&holder(6), &[Op::put("k2", "v")], None),
        Err(StoreError::FlushFailed { .. })
    ));
    assert!(matches!(
        store.marks(&lock),
        Err(StoreError::FlushFailed { .. })
    ));
    assert!(matches!(
        store.get(&lock, b"k", None),
        Err(StoreError::FlushFailed { .. })
    ));
    assert!(matches!(store.flush(), Err(StoreError::FlushFailed { .. })));
    drop(store);

    // After a restart the acknowledged state is there; the unsynced
    // write's outcome was unknown (it reached sled's log, so here it
    // survives), and the mark is the acknowledged one or the unknown
    // write's, never lower.
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let read = store.get(&lock, b"k", None).unwrap().unwrap();
    let value = read.value.as_deref().unwrap();
    assert!(
        value == b"acknowledged" || value == b"unsynced",
        "{value:?}"
    );
    assert!(read.marks.exclusive == 5 || read.marks.exclusive == 6);
    assert!(matches!(
        store
            .apply(&holder(4), &[Op::put("k", "stale")], None)
            .unwrap(),
        Err(Refused::Stale { .. })
    ));
}

#[test]
fn the_mutation_switch_acknowledges_without_syncing() {
    let (_dir, store) = fresh_store();
    let (_, sequencer) = first_writer();
    store.skip_file_sync_unsafe_for_mutation_tests();
    // A sync that would fail is never attempted: the write is
    // acknowledged after sled's flush alone.
    fail_next_sync(&store, std::io::ErrorKind::Other);
    store
        .apply(&sequencer, &[Op::put("k", "unsynced")], None)
        .unwrap()
        .unwrap();
    assert!(store.check_health().is_ok());
    assert!(store.flush().is_ok());
}

#[test]
fn a_failed_explicit_flush_fail_stops_too() {
    let (_dir, store) = fresh_store();
    fail_next_sync(&store, std::io::ErrorKind::Other);
    assert!(matches!(store.flush(), Err(StoreError::FlushFailed { .. })));
    assert!(store.check_health().is_err());
}

#[test]
fn large_values_in_sled_blob_files_are_synced_before_the_acknowledgement() {
    let (dir, store) = fresh_store();
    let (lock, sequencer) = first_writer();
    // sled keeps a page bigger than a quarter of its 512 KiB segment in
    // a blob file of its own, and writes blob files without any sync.
    let big = vec![7u8; 300 * 1024];
    store
        .apply(&sequencer, &[Op::put("big", big.clone())], None)
        .unwrap()
        .unwrap();
    let blobs = std::fs::read_dir(dir.path().join("blobs")).unwrap().count();
    assert!(
        blobs > 0,
        "sled wrote the value inline; the test needs a blob"
    );
    let files = store.sled().files.lock().unwrap();
    assert!(
        files.synced_blob_count() > 0,
        "the blob holding an acknowledged value was not synced"
    );
    drop(files);
    let read = store.get(&lock, b"big", None).unwrap().unwrap();
    assert_eq!(read.value.as_deref(), Some(&big[..]));
}

/// Polls `done` every few milliseconds for up to 30 s (the interval
/// sync runs on its own thread; there is no event to wait for).
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what} within 30 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A store in `dir` that syncs every 20 ms, holding `k` = `v` under lock
/// `L`, written with the returned sequencer and on disk: two interval
/// syncs ran after the write was acknowledged, so at least one began
/// after it.
fn buffered_store_with_a_synced_write(dir: &std::path::Path) -> (Store, Sequencer) {
    let config = StoreConfig {
        durability: Durability::Buffered {
            flush_every: Duration::from_millis(20),
        },
        ..StoreConfig::default()
    };
    let store = Store::open(dir, config).unwrap();
    let sequencer = Sequencer::new(
        LockName::new("L").unwrap(),
        Mode::Exclusive,
        Generation::MIN,
    );
    store
        .apply(&sequencer, &[Op::put("k", "v")], None)
        .unwrap()
        .unwrap();
    let acknowledged_at = store.flush_stats().background_syncs;
    eventually("two interval syncs after the write", || {
        store.flush_stats().background_syncs >= acknowledged_at + 2
    });
    (store, sequencer)
}

#[test]
fn a_buffered_store_syncs_sleds_files_every_flush_every() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = buffered_store_with_a_synced_write(dir.path());
    assert_eq!(store.flush_stats().flushes, 0, "no group-commit flushes");
    store.check_health().unwrap();
}

#[test]
fn a_failed_interval_sync_fail_stops_a_buffered_store() {
    let dir = tempfile::tempdir().unwrap();
    let (store, sequencer) = buffered_store_with_a_synced_write(dir.path());
    let lock = sequencer.lock().clone();

    // The disk dies: the next interval sync fails.
    store.sled().files.lock().unwrap().fail_next = Some(std::io::ErrorKind::Other);
    eventually("the store fail-stops", || store.check_health().is_err());
    let failed = |result: Result<(), StoreError>| matches!(result, Err(StoreError::FlushFailed { message }) if message.contains("injected"));
    assert!(failed(
        store
            .apply(&sequencer, &[Op::put("k", "w")], None)
            .map(|_| ())
    ));
    assert!(failed(store.get(&lock, b"k", None).map(|_| ())));
    assert!(failed(store.flush()));
    let syncs = store.flush_stats().background_syncs;
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        store.flush_stats().background_syncs,
        syncs,
        "no sync after the failure proves anything: the syncer stopped"
    );
    drop(store);

    // The write synced before the failure survives the restart.
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let read = store.get(&lock, b"k", None).unwrap().unwrap();
    assert_eq!(read.value.as_deref(), Some(&b"v"[..]));
}

#[test]
fn a_retry_of_a_write_recorded_with_an_fnv_fingerprint_still_replays() {
    use super::keys::LockKeys;
    use super::record;
    use crate::RequestId;
    use crate::idempotency::legacy_fingerprint;
    use crate::plan::{Fingerprint, Remembered};

    let (dir, store) = fresh_store();
    let (lock, sequencer) = first_writer();
    let ops = [Op::put("k", "v")];
    let id = RequestId::new("order-1").unwrap();
    let applied = store.apply(&sequencer, &ops, Some(&id)).unwrap().unwrap();

    // Rewrite the record the way earlier versions stored it (FNV-1a,
    // 64 bits), as a data directory they wrote holds it.
    let key = LockKeys::new(&lock).request(id.as_str());
    let raw = store.sled().meta.get(&key).unwrap().unwrap();
    let recorded = record::decode(&raw).unwrap();
    assert!(matches!(recorded.fingerprint, Fingerprint::Digest(_)));
    let earlier = Remembered {
        fingerprint: Fingerprint::LegacyFnv(legacy_fingerprint(&sequencer, &ops)),
        ..recorded
    };
    store
        .sled()
        .meta
        .insert(&key, record::encode(&earlier, 0))
        .unwrap();
    store.flush().unwrap();
    drop(store);

    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let replay = store.apply(&sequencer, &ops, Some(&id)).unwrap().unwrap();
    assert!(replay.replayed, "{replay:?}");
    assert_eq!(replay.commit_seq, applied.commit_seq);
    assert!(matches!(
        store
            .apply(&sequencer, &[Op::put("k", "other")], Some(&id))
            .unwrap(),
        Err(Refused::IdempotencyKeyReused { .. })
    ));
}
