//! The decision of a request, as a pure function of what was read.
//!
//! A request runs in two etcd round trips: a read-only Txn that fetches
//! everything the decision needs ([`ReadSet`]), then, when the request is
//! admitted and changes something, one commit Txn ([`Commit`]) whose
//! compares require every key read to be unchanged since. Deciding here,
//! with no I/O, keeps the rules testable without a server and keeps the
//! commit exactly as large as what [`commit_bytes_bound`] promised.

use std::collections::HashMap;

use palisade_core::{Mode, Sequencer};
use palisade_store::{Applied, Marks, Op, OpResult, Read, Refused, WriteRequest};

use crate::keys::{LockKeys, LockState, Record};

/// A key and the `mod_revision` it had when read (0: absent), which the
/// commit compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) key: Vec<u8>,
    pub(crate) mod_revision: i64,
}

/// One range of the read Txn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Range {
    /// One key, with its value, or only whether it exists.
    Key { key: Vec<u8>, keys_only: bool },
    /// The first key under a prefix, with its value.
    FirstUnder { prefix: Vec<u8> },
}

/// A key as read: `None` when absent; `value` is empty for a key read with
/// `keys_only`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) key: Vec<u8>,
    pub(crate) value: Vec<u8>,
    pub(crate) mod_revision: i64,
}

/// What a write needs read, in order: the lock's state, its idempotency
/// record and oldest slot (with a request id), then each distinct data
/// key (with its value only when a compare-and-swap needs it).
#[derive(Debug, Clone)]
pub(crate) struct ReadSet {
    pub(crate) ranges: Vec<Range>,
    /// The data keys, in the order of their ranges, after the first
    /// `data_from` ranges, and whether each was read with its value.
    data_keys: Vec<Vec<u8>>,
    with_value: Vec<bool>,
    data_from: usize,
}

impl ReadSet {
    pub(crate) fn for_write(keys: &LockKeys, request: &WriteRequest) -> ReadSet {
        let mut ranges = vec![Range::Key {
            key: keys.state(),
            keys_only: false,
        }];
        if let Some(request_id) = &request.request_id {
            ranges.push(Range::Key {
                key: keys.record(request_id.as_str()),
                keys_only: false,
            });
            ranges.push(Range::FirstUnder {
                prefix: keys.slots(),
            });
        }
        let data_from = ranges.len();
        let mut needs_value: HashMap<Vec<u8>, bool> = HashMap::new();
        let mut data_keys = Vec::new();
        for op in &request.ops {
            let key = keys.data(op.key());
            let cas = matches!(op, Op::Cas { .. });
            match needs_value.get_mut(&key) {
                Some(value) => *value |= cas,
                None => {
                    needs_value.insert(key.clone(), cas);
                    data_keys.push(key);
                }
            }
        }
        let with_value: Vec<bool> = data_keys.iter().map(|key| needs_value[key]).collect();
        ranges.extend(
            data_keys
                .iter()
                .zip(&with_value)
                .map(|(key, with_value)| Range::Key {
                    key: key.clone(),
                    keys_only: !with_value,
                }),
        );
        ReadSet {
            ranges,
            data_keys,
            with_value,
            data_from,
        }
    }

    pub(crate) fn for_read(keys: &LockKeys, user_key: &[u8]) -> ReadSet {
        let data_key = keys.data(user_key);
        ReadSet {
            ranges: vec![
                Range::Key {
                    key: keys.state(),
                    keys_only: false,
                },
                Range::Key {
                    key: data_key.clone(),
                    keys_only: false,
                },
            ],
            data_keys: vec![data_key],
            with_value: vec![true],
            data_from: 1,
        }
    }

    pub(crate) fn for_marks(keys: &LockKeys) -> ReadSet {
        ReadSet {
            ranges: vec![Range::Key {
                key: keys.state(),
                keys_only: false,
            }],
            data_keys: Vec::new(),
            with_value: Vec::new(),
            data_from: 1,
        }
    }
}

/// What the read Txn returned, one entry per range of the [`ReadSet`].
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    pub(crate) found: Vec<Option<Found>>,
}

/// Stored bytes that do not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Undecodable(pub(crate) String);

impl Snapshot {
    pub(crate) fn state(&self) -> Result<(LockState, i64), Undecodable> {
        match &self.found[0] {
            None => Ok((LockState::default(), 0)),
            Some(found) => LockState::decode(&found.value)
                .map(|state| (state, found.mod_revision))
                .ok_or_else(|| Undecodable("the lock's marks".to_owned())),
        }
    }
}

/// The commit Txn of an admitted request: every compare must hold, then
/// every put and delete is applied, in one etcd revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Commit {
    pub(crate) compares: Vec<Seen>,
    pub(crate) puts: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) deletes: Vec<Vec<u8>>,
}

/// How a write is decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WritePlan {
    /// A retry of a remembered request: its original outcome, nothing
    /// to write. `commit_seq` is the record's `mod_revision`.
    Replay(Applied),
    /// Refused: nothing to write.
    Refuse(Refused),
    /// Admitted: commit this, then answer with these results and marks
    /// and the commit's revision.
    Commit {
        commit: Commit,
        results: Vec<OpResult>,
        marks: Marks,
    },
}

/// How a fenced read is decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReadPlan {
    /// Answer now: no mark moves.
    Answer(Read),
    Refuse(Refused),
    /// Commit the raised mark (unchanged data and marks compared), then
    /// answer.
    Commit {
        commit: Commit,
        read: Read,
    },
}

/// What is known about a data key while the ops are evaluated.
#[derive(Debug, Clone)]
enum Current {
    Absent,
    /// Present; the value when it was read or written in this request.
    Present(Option<Vec<u8>>),
}

fn stale(sequencer: &Sequencer, marks: Marks) -> Refused {
    Refused::Stale {
        lock: sequencer.lock().clone(),
        mode: sequencer.mode(),
        presented: sequencer.generation(),
        marks,
    }
}

/// Decides a write: idempotency, fencing, then every op against an
/// overlay; builds the commit only when every op passed.
pub(crate) fn plan_write(
    keys: &LockKeys,
    request: &WriteRequest,
    reads: &ReadSet,
    snapshot: &Snapshot,
    window: u32,
) -> Result<WritePlan, Undecodable> {
    let (before, state_revision) = snapshot.state()?;
    let sequencer = &request.sequencer;
    let mut commit = Commit::default();
    commit.compares.push(Seen {
        key: keys.state(),
        mod_revision: state_revision,
    });

    let mut oldest_slot = None;
    if let Some(request_id) = &request.request_id {
        let record_key = keys.record(request_id.as_str());
        match &snapshot.found[1] {
            Some(found) => {
                let record = Record::decode(&found.value)
                    .ok_or_else(|| Undecodable(format!("the idempotency record `{request_id}`")))?;
                if record.fingerprint != request.fingerprint {
                    return Ok(WritePlan::Refuse(Refused::IdempotencyKeyReused {
                        request_id: request_id.clone(),
                    }));
                }
                return Ok(WritePlan::Replay(Applied {
                    results: record.results,
                    marks: record.marks,
                    commit_seq: revision_seq(found.mod_revision),
                    replayed: true,
                }));
            }
            None => commit.compares.push(Seen {
                key: record_key,
                mod_revision: 0,
            }),
        }
        if let Some(found) = &snapshot.found[2] {
            let number = keys
                .slot_number(&found.key)
                .ok_or_else(|| Undecodable("an idempotency slot key".to_owned()))?;
            let evicted = std::str::from_utf8(&found.value)
                .map_err(|_| Undecodable("an idempotency slot".to_owned()))?
                .to_owned();
            commit.compares.push(Seen {
                key: found.key.clone(),
                mod_revision: found.mod_revision,
            });
            oldest_slot = Some((number, found.key.clone(), evicted));
        }
    }

    if sequencer.mode() == Mode::Shared {
        return Ok(WritePlan::Refuse(Refused::SharedOnWrite {
            lock: sequencer.lock().clone(),
            presented: sequencer.generation(),
        }));
    }
    let Some(marks) = before.marks.admit(sequencer.mode(), sequencer.generation()) else {
        return Ok(WritePlan::Refuse(stale(sequencer, before.marks)));
    };

    let mut overlay: HashMap<Vec<u8>, Current> = HashMap::new();
    let data = reads.data_keys.iter().zip(&reads.with_value);
    for ((key, with_value), found) in data.zip(&snapshot.found[reads.data_from..]) {
        let current = match found {
            None => Current::Absent,
            Some(found) => Current::Present(with_value.then(|| found.value.clone())),
        };
        commit.compares.push(Seen {
            key: key.clone(),
            mod_revision: found.as_ref().map_or(0, |found| found.mod_revision),
        });
        overlay.insert(key.clone(), current);
    }

    let mut results = Vec::with_capacity(request.ops.len());
    let mut finals: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    for (op_index, op) in request.ops.iter().enumerate() {
        let key = keys.data(op.key());
        let current = overlay.get(&key).cloned().unwrap_or(Current::Absent);
        let present = matches!(current, Current::Present(_));
        let (result, new_value) = match op {
            Op::Put { value, .. } => (
                if present {
                    OpResult::Replaced
                } else {
                    OpResult::Created
                },
                Some(value[..].to_vec()),
            ),
            Op::Delete { .. } => (
                if present {
                    OpResult::Deleted
                } else {
                    OpResult::Absent
                },
                None,
            ),
            Op::Cas { expected, new, .. } => {
                let current_value = match current {
                    Current::Absent => None,
                    // A compare-and-swap key is always read with its value.
                    Current::Present(value) => Some(value.unwrap_or_default()),
                };
                if current_value.as_deref() != expected.as_deref() {
                    return Ok(WritePlan::Refuse(Refused::CasMismatch {
                        op_index,
                        current: current_value.map(Into::into),
                    }));
                }
                (OpResult::Swapped, new.as_ref().map(|new| new[..].to_vec()))
            }
        };
        results.push(result);
        let after = match &new_value {
            Some(value) => Current::Present(Some(value.clone())),
            None => Current::Absent,
        };
        overlay.insert(key.clone(), after);
        match finals.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = new_value,
            None => finals.push((key, new_value)),
        }
    }
    // etcd refuses two writes to one key in a Txn: one per key, its
    // final value.
    for (key, value) in finals {
        match value {
            Some(value) => commit.puts.push((key, value)),
            None => commit.deletes.push(key),
        }
    }

    let mut after = LockState {
        marks,
        recorded: before.recorded,
    };
    if let Some(request_id) = &request.request_id {
        let record = Record {
            fingerprint: request.fingerprint.clone(),
            marks,
            results: results.clone(),
        };
        commit
            .puts
            .push((keys.record(request_id.as_str()), record.encode()));
        commit.puts.push((
            keys.slot(before.recorded),
            request_id.as_str().as_bytes().to_vec(),
        ));
        after.recorded += 1;
        // Keep the last `window` ids: cut one from the oldest end once
        // there are more (one per write, so a window made smaller shrinks
        // the kept set over the next writes).
        if let Some((number, slot_key, evicted)) = oldest_slot
            && after.recorded.saturating_sub(number) > u64::from(window)
        {
            commit.deletes.push(slot_key);
            commit.deletes.push(keys.record(&evicted));
        }
    }
    // Always rewritten, even unchanged: the new revision is this write's
    // commit sequence number, and the state key's mod_revision is what
    // concurrent requests on the lock compare.
    commit.puts.push((keys.state(), after.encode()));
    Ok(WritePlan::Commit {
        commit,
        results,
        marks,
    })
}

/// Decides a read: fenced when a sequencer is given.
pub(crate) fn plan_read(
    keys: &LockKeys,
    sequencer: Option<&Sequencer>,
    snapshot: &Snapshot,
) -> Result<ReadPlan, Undecodable> {
    let (before, state_revision) = snapshot.state()?;
    let found = snapshot.found.get(1).cloned().flatten();
    let value = found.as_ref().map(|found| found.value.clone().into());
    let Some(sequencer) = sequencer else {
        return Ok(ReadPlan::Answer(Read {
            value,
            marks: before.marks,
        }));
    };
    let Some(marks) = before.marks.admit(sequencer.mode(), sequencer.generation()) else {
        return Ok(ReadPlan::Refuse(stale(sequencer, before.marks)));
    };
    let read = Read { value, marks };
    if marks == before.marks {
        return Ok(ReadPlan::Answer(read));
    }
    let after = LockState { marks, ..before };
    let mut commit = Commit {
        compares: vec![Seen {
            key: keys.state(),
            mod_revision: state_revision,
        }],
        puts: vec![(keys.state(), after.encode())],
        deletes: Vec::new(),
    };
    if let Some(found) = found {
        commit.compares.push(Seen {
            key: found.key,
            mod_revision: found.mod_revision,
        });
    }
    Ok(ReadPlan::Commit { commit, read })
}

/// An etcd revision as a commit sequence number (revisions start at 1).
pub(crate) fn revision_seq(revision: i64) -> u64 {
    u64::try_from(revision).unwrap_or(0)
}

/// Per-entry framing in a protobuf Txn request, generously rounded up:
/// field tags, lengths, the compare's target and result.
const ENTRY_OVERHEAD: usize = 32;

/// The largest commit a write can need, from the request alone: each
/// distinct data key compared and written with its largest value, the
/// state key, and with a request id the record, its slot, and an evicted
/// slot and record (an evicted id is at most
/// [`RequestId::MAX_LEN`](palisade_store::RequestId::MAX_LEN) bytes).
pub(crate) fn commit_bytes_bound(keys: &LockKeys, request: &WriteRequest) -> usize {
    let mut largest: HashMap<Vec<u8>, usize> = HashMap::new();
    for op in &request.ops {
        let size = match op {
            Op::Put { value, .. } => value.len(),
            Op::Delete { .. } => 0,
            Op::Cas { new, .. } => new.as_ref().map_or(0, |new| new.len()),
        };
        let entry = largest.entry(keys.data(op.key())).or_default();
        *entry = (*entry).max(size);
    }
    let data: usize = largest
        .iter()
        .map(|(key, value)| 2 * (key.len() + ENTRY_OVERHEAD) + value)
        .sum();
    let state = 2 * (keys.state().len() + ENTRY_OVERHEAD) + 24;
    let idempotency = request.request_id.as_ref().map_or(0, |id| {
        let record_key = keys.record(id.as_str()).len();
        let evicted_key = keys
            .record(&"x".repeat(palisade_store::RequestId::MAX_LEN))
            .len();
        let slot_key = keys.slot(0).len();
        let record = 2 + request.fingerprint.len() + 16 + request.ops.len();
        2 * (record_key + ENTRY_OVERHEAD)
            + record
            + 2 * (slot_key + ENTRY_OVERHEAD)
            + id.as_str().len()
            + (evicted_key + ENTRY_OVERHEAD)
    });
    ENTRY_OVERHEAD + data + state + idempotency
}

#[cfg(test)]
mod tests {
    use palisade_core::{Generation, LockName};
    use palisade_store::RequestId;

    use super::*;
    use crate::keys::PrefixKeys;

    fn keys() -> LockKeys {
        PrefixKeys::new("/p").lock(&LockName::new("a").unwrap())
    }

    fn request(generation: u64, ops: Vec<Op>, id: Option<&str>) -> WriteRequest {
        WriteRequest::new(
            Sequencer::new(
                LockName::new("a").unwrap(),
                Mode::Exclusive,
                Generation::new(generation).unwrap(),
            ),
            ops,
            id.map(|id| RequestId::new(id).unwrap()),
        )
    }

    fn state(exclusive: u64, recorded: u64) -> Option<Found> {
        Some(Found {
            key: keys().state(),
            value: LockState {
                marks: Marks {
                    exclusive,
                    shared: 0,
                },
                recorded,
            }
            .encode(),
            mod_revision: 7,
        })
    }

    fn commit(plan: WritePlan) -> (Commit, Vec<OpResult>) {
        match plan {
            WritePlan::Commit {
                commit, results, ..
            } => (commit, results),
            other => panic!("expected a commit, got {other:?}"),
        }
    }

    #[test]
    fn one_write_per_key_with_its_final_value() {
        let request = request(
            2,
            vec![
                Op::put("k", "1"),
                Op::cas("k", Some("1".into()), Some("2".into())),
                Op::delete("j"),
                Op::put("j", "3"),
            ],
            None,
        );
        let reads = ReadSet::for_write(&keys(), &request);
        assert_eq!(reads.ranges.len(), 3, "state + two distinct data keys");
        let snapshot = Snapshot {
            found: vec![state(1, 0), None, None],
        };
        let (commit, results) =
            commit(plan_write(&keys(), &request, &reads, &snapshot, 4).unwrap());
        assert_eq!(
            results,
            [
                OpResult::Created,
                OpResult::Swapped,
                OpResult::Absent,
                OpResult::Created
            ]
        );
        assert_eq!(
            commit.puts[..2],
            [
                (keys().data(b"k"), b"2".to_vec()),
                (keys().data(b"j"), b"3".to_vec())
            ]
        );
        assert!(commit.deletes.is_empty());
        assert_eq!(commit.compares.len(), 3);
        assert!(commit_bytes_bound(&keys(), &request) > 100);
    }

    #[test]
    fn stale_cas_mismatch_and_reused_ids_write_nothing() {
        let put = request(1, vec![Op::put("k", "v")], None);
        let reads = ReadSet::for_write(&keys(), &put);
        let snapshot = Snapshot {
            found: vec![state(2, 0), None],
        };
        assert!(matches!(
            plan_write(&keys(), &put, &reads, &snapshot, 4).unwrap(),
            WritePlan::Refuse(Refused::Stale { .. })
        ));

        let cas = request(3, vec![Op::cas("k", Some("x".into()), None)], None);
        let reads = ReadSet::for_write(&keys(), &cas);
        let snapshot = Snapshot {
            found: vec![
                state(2, 0),
                Some(Found {
                    key: keys().data(b"k"),
                    value: b"y".to_vec(),
                    mod_revision: 5,
                }),
            ],
        };
        assert_eq!(
            plan_write(&keys(), &cas, &reads, &snapshot, 4).unwrap(),
            WritePlan::Refuse(Refused::CasMismatch {
                op_index: 0,
                current: Some("y".into())
            })
        );

        let with_id = request(3, vec![Op::put("k", "v")], Some("r1"));
        let reads = ReadSet::for_write(&keys(), &with_id);
        let other = Record {
            fingerprint: vec![1],
            marks: Marks::ZERO,
            results: vec![],
        };
        let snapshot = Snapshot {
            found: vec![
                state(2, 1),
                Some(Found {
                    key: keys().record("r1"),
                    value: other.encode(),
                    mod_revision: 9,
                }),
                None,
                None,
            ],
        };
        assert!(matches!(
            plan_write(&keys(), &with_id, &reads, &snapshot, 4).unwrap(),
            WritePlan::Refuse(Refused::IdempotencyKeyReused { .. })
        ));
    }

    #[test]
    fn the_oldest_id_is_evicted_once_the_window_is_full() {
        let request = request(3, vec![], Some("new"));
        let reads = ReadSet::for_write(&keys(), &request);
        let oldest = |number: u64| {
            Some(Found {
                key: keys().slot(number),
                value: b"old".to_vec(),
                mod_revision: 4,
            })
        };
        // Window 2, ids 0 and 1 kept: recording id 2 evicts id 0.
        let snapshot = Snapshot {
            found: vec![state(2, 2), None, oldest(0)],
        };
        let (full, _) = commit(plan_write(&keys(), &request, &reads, &snapshot, 2).unwrap());
        assert_eq!(full.deletes, [keys().slot(0), keys().record("old")]);
        // Window 3: nothing evicted yet.
        let (room, _) = commit(plan_write(&keys(), &request, &reads, &snapshot, 3).unwrap());
        assert!(room.deletes.is_empty());
        assert!(room.puts.contains(&(keys().slot(2), b"new".to_vec())));
    }

    #[test]
    fn a_read_commits_only_a_raised_mark() {
        let shared = Sequencer::new(
            LockName::new("a").unwrap(),
            Mode::Shared,
            Generation::new(5).unwrap(),
        );
        let snapshot = Snapshot {
            found: vec![state(5, 0), None],
        };
        assert!(matches!(
            plan_read(&keys(), Some(&shared), &snapshot).unwrap(),
            ReadPlan::Commit { .. }
        ));
        assert!(matches!(
            plan_read(&keys(), None, &snapshot).unwrap(),
            ReadPlan::Answer(_)
        ));
        let snapshot = Snapshot {
            found: vec![state(6, 0), None],
        };
        assert!(matches!(
            plan_read(&keys(), Some(&shared), &snapshot).unwrap(),
            ReadPlan::Refuse(Refused::Stale { .. })
        ));
    }
}
