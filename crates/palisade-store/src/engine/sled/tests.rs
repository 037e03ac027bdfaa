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

/// The sequencer of lock `L`'s exclusive holder of `generation`.
fn holder(generation: u64) -> Sequencer {
    Sequencer::new(
        LockName::new("L").unwrap(),
        Mode::Exclusive,
        Generation::new(generation).unwrap(),
    )
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
    store.sled().health.fail("injected: fsync failed".into());

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

/// Makes the next sync of sled's files (a checkpoint's, an explicit
/// flush's) fail, as a dying disk would.
fn fail_next_sync(store: &Store, kind: std::io::ErrorKind) {
    let files = &store.sled().files;
    files.lock().unwrap().fail_next = Some(kind);
}

/// Makes the next group's append to the group log fail at its sync.
fn fail_next_log_sync(store: &Store, kind: std::io::ErrorKind) {
    *store.sled().log_switches.fail_next.lock().unwrap() = Some(kind);
}

#[test]
fn a_failed_sync_of_the_group_log_is_never_acknowledged_and_fail_stops() {
    let (dir, store) = fresh_store();
    let lock = LockName::new("L").unwrap();
    store
        .apply(&holder(5), &[Op::put("k", "acknowledged")], None)
        .unwrap()
        .unwrap();

    // The group's record is written, its fsync fails: the write is
    // answered with a failure, never with `Applied`.
    fail_next_log_sync(&store, std::io::ErrorKind::StorageFull);
    let outcome = store.apply(&holder(6), &[Op::put("k", "unsynced")], None);
    assert!(
        matches!(&outcome, Err(StoreError::FlushFailed { message }) if message.contains("syncing the group log failed")),
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
    // write's outcome was unknown (its record reached the group log, so
    // here it survives), and the mark is the acknowledged one or the
    // unknown write's, never lower.
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
    // acknowledged after the group log's write alone, and an explicit
    // flush skips the sync of sled's files too.
    fail_next_log_sync(&store, std::io::ErrorKind::Other);
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
fn large_values_are_logged_before_the_acknowledgement_and_their_blobs_synced_by_a_flush() {
    let (dir, store) = fresh_store();
    let (lock, sequencer) = first_writer();
    // sled keeps a page bigger than a quarter of its 512 KiB segment in
    // a blob file of its own, and writes blob files without any sync.
    let big = vec![7u8; 300 * 1024];
    let logged = |_: &Store| log_segment(dir.path()).1.len() as u64;
    let before = logged(&store);
    store
        .apply(&sequencer, &[Op::put("big", big.clone())], None)
        .unwrap()
        .unwrap();
    assert!(
        logged(&store) >= before + big.len() as u64,
        "the acknowledged value is in the group log"
    );
    store.flush().unwrap();
    let blobs = std::fs::read_dir(dir.path().join("blobs")).unwrap().count();
    assert!(
        blobs > 0,
        "sled wrote the value inline; the test needs a blob"
    );
    let files = store.sled().files.lock().unwrap();
    assert!(
        files.synced_blob_count() > 0,
        "the blob holding a flushed value was not synced"
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
    // Through the apply gate, as every read outside the committer: the
    // answer may come before the group is in sled's trees.
    let raw = {
        let _reading = store.sled().reading();
        store.sled().meta.get(&key).unwrap().unwrap()
    };
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

/// The one group log segment in `dir`: its name and contents.
fn log_segment(dir: &std::path::Path) -> (std::ffi::OsString, Vec<u8>) {
    let mut segments: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| is_log_segment(&entry.file_name()))
        .collect();
    assert_eq!(segments.len(), 1, "one segment");
    let segment = segments.pop().unwrap();
    (segment.file_name(), std::fs::read(segment.path()).unwrap())
}

fn is_log_segment(name: &std::ffi::OsStr) -> bool {
    name.to_str()
        .is_some_and(|name| name.starts_with("palisade-groups-") && name.ends_with(".log"))
}

/// Copies the files of `from` into `to` (a new directory), leaving out
/// the group log: what sled's files hold at this moment.
fn copy_sled_files(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if is_log_segment(&name) {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            copy_sled_files(&entry.path(), &to.join(&name));
        } else {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

#[test]
fn groups_sled_lost_in_a_crash_are_replayed_from_the_group_log() {
    let (dir, store) = fresh_store();
    let lock = LockName::new("L").unwrap();
    let write = |generation: u64, ops: &[Op]| {
        store
            .apply(&holder(generation), ops, None)
            .unwrap()
            .unwrap()
    };
    write(5, &[Op::put("k", "v1"), Op::put("gone", "soon")]);
    // sled's files made durable here (nothing empties the log but the
    // committer's checkpoints), then two more groups reach only the log
    // and sled's memory: the state of a crash before the next checkpoint.
    store.flush().unwrap();
    let crashed = tempfile::tempdir().unwrap();
    copy_sled_files(dir.path(), crashed.path());
    write(6, &[Op::put("k", "v2"), Op::delete("gone")]);
    // A group that writes nothing (a refused write) has no record: the
    // records stay consecutive around it.
    assert!(matches!(
        store
            .apply(&holder(5), &[Op::put("k", "late")], None)
            .unwrap(),
        Err(Refused::Stale { .. })
    ));
    let last = write(7, &[Op::put("new", "v3")]).commit_seq;
    let (segment, log) = log_segment(dir.path());
    // A torn record behind them: a group whose sync never returned.
    let mut torn = log.clone();
    torn.extend_from_slice(&log[..log.len() / 3]);
    std::fs::write(crashed.path().join(&segment), &torn).unwrap();
    drop(store);

    let store = Store::open(crashed.path(), StoreConfig::default()).unwrap();
    let read = |key: &[u8]| store.get(&lock, key, None).unwrap().unwrap();
    assert_eq!(read(b"k").value.as_deref(), Some(&b"v2"[..]));
    assert_eq!(read(b"gone").value, None);
    assert_eq!(read(b"new").value.as_deref(), Some(&b"v3"[..]));
    assert_eq!(read(b"k").marks.exclusive, 7);
    assert!(matches!(
        store
            .apply(&holder(6), &[Op::put("k", "stale")], None)
            .unwrap(),
        Err(Refused::Stale { .. })
    ));
    // The replay was made durable and its segment removed; a new one is
    // being written.
    assert!(!crashed.path().join(&segment).exists());
    assert!(log_segment(crashed.path()).1.is_empty());
    // Commit sequence numbers go on after the replayed ones.
    let next = store
        .apply(&holder(7), &[Op::put("k", "v4")], None)
        .unwrap()
        .unwrap();
    assert!(next.commit_seq > last, "{} after {last}", next.commit_seq);
}

#[test]
fn a_read_never_sees_half_of_a_group() {
    // Each write raises the mark to its generation and sets `k` to it in
    // one request. A read outside the committer that found the value of a
    // generation beside a lower mark would have seen half of its group.
    let (_dir, store) = fresh_store();
    let lock = LockName::new("L").unwrap();
    const WRITES: u64 = 2000;
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for generation in 1..=WRITES {
                store
                    .apply(
                        &holder(generation),
                        &[Op::put("k", generation.to_string())],
                        None,
                    )
                    .unwrap()
                    .unwrap();
            }
        });
        let mut reads = 0u64;
        loop {
            let read = store.get(&lock, b"k", None).unwrap().unwrap();
            reads += 1;
            let Some(value) = read.value else { continue };
            let generation: u64 = std::str::from_utf8(&value).unwrap().parse().unwrap();
            assert!(
                generation <= read.marks.exclusive,
                "read {reads}: the value of generation {generation} beside the mark {}",
                read.marks.exclusive
            );
            if generation == WRITES {
                break;
            }
        }
    });
}

#[test]
fn a_read_after_an_answer_finds_the_answered_write() {
    // A group is answered before sled has it; the apply gate, taken before
    // the first answer, holds reads back until it does. Two writers each
    // read back what they were just told is written, while the other's
    // writes keep the committer busy.
    let (_dir, store) = fresh_store();
    let lock = LockName::new("L").unwrap();
    let sequencer = holder(1);
    std::thread::scope(|scope| {
        for writer in 0..2 {
            let (store, lock, sequencer) = (&store, &lock, &sequencer);
            scope.spawn(move || {
                let key = format!("k{writer}");
                for i in 0..1000 {
                    let value = format!("{i}");
                    store
                        .apply(sequencer, &[Op::put(key.clone(), value.clone())], None)
                        .unwrap()
                        .unwrap();
                    let read = store.get(lock, key.as_bytes(), None).unwrap().unwrap();
                    assert_eq!(
                        read.value.as_deref(),
                        Some(value.as_bytes()),
                        "write {i} of {key} answered, then not found"
                    );
                }
            });
        }
    });
}

#[test]
fn a_full_log_segment_is_checkpointed_and_removed_while_writes_go_on() {
    let (dir, store) = fresh_store();
    let (lock, sequencer) = first_writer();
    let value = vec![3u8; 256 * 1024];
    let writes = super::group_log::SEGMENT_BYTES / value.len() as u64 + 8;
    for i in 0..writes {
        store
            .apply(&sequencer, &[Op::put(format!("k{i}"), value.clone())], None)
            .unwrap()
            .unwrap();
    }
    eventually("a checkpoint", || store.flush_stats().checkpoints >= 1);
    let segments = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|entry| is_log_segment(&entry.as_ref().unwrap().file_name()))
        .count();
    assert_eq!(segments, 1, "the full segment was removed");
    drop(store);
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    for i in [0, writes / 2, writes - 1] {
        let read = store
            .get(&lock, format!("k{i}").as_bytes(), None)
            .unwrap()
            .unwrap();
        assert_eq!(read.value.as_deref(), Some(&value[..]), "k{i}");
    }
}

#[test]
fn the_last_commit_sequence_number_is_written_with_its_group_and_read_back() {
    let (dir, store) = fresh_store();
    let (_, sequencer) = first_writer();
    let applied = store
        .apply(&sequencer, &[Op::put("k", "v")], None)
        .unwrap()
        .unwrap();
    let recorded = |store: &Store| {
        let _reading = store.sled().reading();
        let raw = store.sled().meta.get(super::keys::COMMIT_SEQ_KEY).unwrap();
        u64::from_be_bytes(raw.unwrap().as_ref().try_into().unwrap())
    };
    assert_eq!(recorded(&store), applied.commit_seq);
    // Far ahead of sled's own id generator, as after many writes: the
    // recorded number is where the next open goes on from.
    store
        .sled()
        .meta
        .insert(super::keys::COMMIT_SEQ_KEY, &5_000_000u64.to_be_bytes())
        .unwrap();
    drop(store);
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let next = store
        .apply(&sequencer, &[Op::put("k", "w")], None)
        .unwrap()
        .unwrap();
    assert_eq!(next.commit_seq, 5_000_001);
    assert_eq!(recorded(&store), 5_000_001);
}
