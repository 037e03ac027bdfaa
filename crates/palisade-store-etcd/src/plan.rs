//! From a request to etcd Txns: what to read, and the commit of what the
//! shared planner decided.
//!
//! A request runs in two etcd round trips: a read-only Txn that fetches
//! everything the decision needs ([`ReadSet`]), then, when the request is
//! admitted and changes something, one commit Txn ([`Commit`]) whose
//! compares require every key read to be unchanged since. The decision
//! itself is `palisade_store::plan::plan_write`, the planner every engine
//! written in Rust shares (replay, the raise cap, the rule, the ops over an
//! overlay); what is etcd's is here: the keys read, the compares that make
//! read, decide and commit one isolated step, the window's slots, and the
//! bound on the commit's size ([`commit_bytes_bound`]). No I/O, so all of
//! it is testable without a server.

use std::collections::HashMap;

use bytes::Bytes;
use palisade_core::Sequencer;
use palisade_store::plan::{self as planner, Prior, WritePlan as Decision};
use palisade_store::stored::LockState;
use palisade_store::{Applied, Op, OpResult, Read, Refused, WriteRequest};

use crate::keys::{LockKeys, Record};

/// A condition of a commit Txn: all must hold for its writes to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Condition {
    /// The key is as it was read: same `mod_revision` (0: still absent).
    Unchanged { key: Vec<u8>, mod_revision: i64 },
    /// The key does not exist.
    Absent { key: Vec<u8> },
    /// The key exists with exactly this value.
    Holds { key: Vec<u8>, value: Vec<u8> },
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
    /// The user keys of the data ranges, in their order after the first
    /// `data_from` ranges, and whether each was read with its value.
    data_keys: Vec<(Bytes, bool)>,
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
        let data_keys = planner::keys_to_read(&request.ops);
        ranges.extend(data_keys.iter().map(|(key, with_value)| Range::Key {
            key: keys.data(key),
            keys_only: !with_value,
        }));
        ReadSet {
            ranges,
            data_keys,
            data_from,
        }
    }

    pub(crate) fn for_read(keys: &LockKeys, user_key: &[u8]) -> ReadSet {
        ReadSet {
            ranges: vec![
                Range::Key {
                    key: keys.state(),
                    keys_only: false,
                },
                Range::Key {
                    key: keys.data(user_key),
                    keys_only: false,
                },
            ],
            data_keys: vec![(Bytes::copy_from_slice(user_key), true)],
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
            data_from: 1,
        }
    }

    /// What `snapshot` (read for `request` by this set) tells the planner.
    fn view(
        &self,
        request: &WriteRequest,
        snapshot: &Snapshot,
    ) -> Result<planner::Snapshot, Undecodable> {
        let (state, _) = snapshot.state()?;
        let remembered = match (&request.request_id, snapshot.found.get(1)) {
            (Some(request_id), Some(Some(found))) => Some(
                Record::decode(&found.value)
                    .ok_or_else(|| Undecodable(format!("the idempotency record `{request_id}`")))?
                    .remembered(found.mod_revision),
            ),
            _ => None,
        };
        let data = self
            .data_keys
            .iter()
            .zip(&snapshot.found[self.data_from..])
            .map(|((key, with_value), found)| {
                let prior = match found {
                    None => Prior::Absent,
                    Some(found) if *with_value => Prior::Present(found.value.clone().into()),
                    Some(_) => Prior::Exists,
                };
                (key.clone(), prior)
            })
            .collect();
        Ok(planner::Snapshot {
            state,
            remembered,
            data,
        })
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

/// What an engine remembers of a lock after its last request on it, so
/// the next write can commit at once, compared against it, without a read
/// first. A wrong memory (another engine wrote since) only costs a failed
/// compare, whose failure branch reads what the slow path needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cached {
    pub(crate) state: LockState,
    /// The state key's `mod_revision` (0: absent).
    pub(crate) state_revision: i64,
    /// The oldest remembered id's slot at that revision: `Some(None)` when
    /// there is none, `None` when not known.
    pub(crate) oldest_slot: Option<Option<Found>>,
}

/// The record to write when it depends on whether one data key existed
/// before the request (its op results do): etcd picks it in a nested Txn,
/// evaluated before the data writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordChoice {
    pub(crate) data_key: Vec<u8>,
    pub(crate) record_key: Vec<u8>,
    pub(crate) if_present: Vec<u8>,
    pub(crate) if_absent: Vec<u8>,
}

/// A commit Txn: when every condition holds, the record choice, the data
/// writes (one per key, its final value: `None` deletes), the metadata puts
/// and deletes, then the `then_read` ranges, in one etcd revision;
/// otherwise only the `else_read` ranges, as one snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Commit {
    pub(crate) conditions: Vec<Condition>,
    pub(crate) record_choice: Option<RecordChoice>,
    pub(crate) data: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Whether the data writes report whether each key existed before.
    pub(crate) data_reports_previous: bool,
    pub(crate) puts: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) deletes: Vec<Vec<u8>>,
    pub(crate) then_read: Vec<Range>,
    pub(crate) else_read: Vec<Range>,
}

/// An admitted write: commit this, then answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Admitted {
    pub(crate) commit: Commit,
    /// The planner's decision: the marks, the lock's state once committed,
    /// and the op results (settled by the commit's answer where the
    /// decision was made without reading a key).
    pub(crate) planned: planner::Admitted,
    /// The oldest remembered id once committed.
    pub(crate) oldest_after: OldestAfter,
}

impl Admitted {
    /// The op results, given which data keys the commit reports existed
    /// before it (by storage key).
    pub(crate) fn results(
        &self,
        keys: &LockKeys,
        existed: &HashMap<Vec<u8>, bool>,
    ) -> Vec<OpResult> {
        self.planned
            .results_given(|key| existed.get(&keys.data(key)).copied().unwrap_or(false))
    }
}

/// What the oldest remembered id's slot is once a commit has applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OldestAfter {
    /// Known without the commit's answer (`None`: not known).
    Known(Option<Option<Found>>),
    /// The slot the commit writes: the lock remembered no id before.
    Written { key: Vec<u8>, value: Vec<u8> },
    /// The commit evicted the oldest: the next one is read back by the
    /// commit's `then_read`.
    ReadBack,
}

impl OldestAfter {
    /// The oldest slot after a commit applied at `revision`; `read_back` is
    /// its first `then_read` range.
    pub(crate) fn resolve(self, revision: i64, read_back: Option<Found>) -> Option<Option<Found>> {
        match self {
            OldestAfter::Known(oldest) => oldest,
            OldestAfter::Written { key, value } => Some(Some(Found {
                key,
                value,
                mod_revision: revision,
            })),
            // Absent only if the slots had a gap, which no engine makes:
            // not known then, so the next eviction reads it afresh.
            OldestAfter::ReadBack => read_back.map(Some),
        }
    }
}

/// How a write is decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WritePlan {
    /// A retry of a remembered request: its original outcome, nothing
    /// to write. `commit_seq` is the record's `mod_revision`.
    Replay(Applied),
    /// Refused: nothing to write.
    Refuse(Refused),
    Commit(Box<Admitted>),
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
        commit: Box<Commit>,
        read: Read,
        after: LockState,
    },
}

/// One put or delete per data key (etcd refuses two writes to one key in a
/// Txn), its final value.
fn data_writes(keys: &LockKeys, planned: &planner::Admitted) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    planned
        .writes
        .iter()
        .map(|(key, value)| (keys.data(key), value.as_deref().map(<[u8]>::to_vec)))
        .collect()
}

/// The encoded idempotency record of `planned` with `results`.
fn record_of(
    request: &WriteRequest,
    planned: &planner::Admitted,
    results: Vec<OpResult>,
) -> Vec<u8> {
    Record {
        fingerprint: request.fingerprint.clone(),
        marks: planned.marks,
        results,
    }
    .encode()
}

/// The idempotency record of an admitted write, its slot (`number`, the
/// number the planner recorded the id under), and the eviction of the
/// oldest id beyond the window, added to `commit`. `oldest_slot` is the
/// oldest remembered id's slot before it (`Some(None)`: none; `None`: not
/// known, allowed only while the window cannot be full).
#[allow(clippy::too_many_arguments)]
fn record_idempotency(
    keys: &LockKeys,
    request_id: &str,
    record: Option<Vec<u8>>,
    number: u64,
    after: &LockState,
    oldest_slot: Option<Option<&Found>>,
    commit: &mut Commit,
    window: u32,
) -> Result<OldestAfter, Undecodable> {
    if let Some(record) = record {
        commit.puts.push((keys.record(request_id), record));
    }
    let slot = (keys.slot(number), request_id.as_bytes().to_vec());
    commit.puts.push(slot.clone());
    let Some(oldest) = oldest_slot else {
        return Ok(OldestAfter::Known(None));
    };
    let Some(found) = oldest else {
        let (key, value) = slot;
        return Ok(OldestAfter::Written { key, value });
    };
    // Keep the last `window` ids: cut one from the oldest end once there
    // are more (one per write, so a window made smaller shrinks the kept
    // set over the next writes).
    let oldest_number = keys
        .slot_number(&found.key)
        .ok_or_else(|| Undecodable("an idempotency slot key".to_owned()))?;
    if oldest_number >= after.first_kept(u64::from(window)) {
        return Ok(OldestAfter::Known(Some(Some(found.clone()))));
    }
    let evicted = std::str::from_utf8(&found.value)
        .ok()
        .filter(|evicted| *evicted != request_id)
        .ok_or_else(|| Undecodable("an idempotency slot".to_owned()))?;
    commit.deletes.push(found.key.clone());
    commit.deletes.push(keys.record(evicted));
    // Slots are contiguous (recorded at the top, evicted one at a time from
    // the bottom), so the next oldest is the next number: read back as one
    // key in the same Txn, for the next write's eviction. Not a range over
    // the slots: etcd 3.4 walks every key a range covers before applying
    // its limit, deleted ones too until compaction, so that read would
    // cost in proportion to every id the lock ever recorded.
    commit.then_read.push(Range::Key {
        key: keys.slot(oldest_number + 1),
        keys_only: false,
    });
    Ok(OldestAfter::ReadBack)
}

/// Decides a write from what the engine remembers of its lock, with no
/// read: `None` when the memory cannot decide it (a refusal, which is
/// always decided on a fresh read; a compare-and-swap that fails within
/// the request; an eviction from an unknown oldest slot; a request id with
/// more than one key of unknown prior existence). The planner decides
/// with every data key unknown; the commit's conditions make it apply only
/// if the memory and the planner's assumptions were right. It has no
/// failure branch: a memory gone stale is rare for a lock written through
/// one engine, and reads sent in every commit for that case cost etcd more
/// than the extra round trip when it happens (the caller then reads
/// afresh).
pub(crate) fn plan_optimistic(
    keys: &LockKeys,
    request: &WriteRequest,
    cached: &Cached,
    window: u32,
) -> Option<Admitted> {
    let view = planner::Snapshot {
        state: cached.state,
        ..planner::Snapshot::default()
    };
    let Decision::Apply(planned) = planner::plan_write(request, &view) else {
        return None;
    };
    let mut commit = Commit {
        conditions: vec![Condition::Unchanged {
            key: keys.state(),
            mod_revision: cached.state_revision,
        }],
        data_reports_previous: true,
        data: data_writes(keys, &planned),
        ..Commit::default()
    };
    commit
        .conditions
        .extend(planned.assumed.iter().map(|(key, expected)| {
            let key = keys.data(key);
            match expected {
                Some(value) => Condition::Holds {
                    key,
                    value: value.to_vec(),
                },
                None => Condition::Absent { key },
            }
        }));
    let mut oldest_after = OldestAfter::Known(cached.oldest_slot.clone());
    if let (Some(request_id), Some(number)) = (&request.request_id, planned.recorded_as) {
        // More than `window` ids once this one is added: one is evicted,
        // which needs the oldest slot.
        let full = number >= u64::from(window);
        let oldest_slot = match &cached.oldest_slot {
            Some(Some(found)) => Some(Some(found)),
            Some(None) if !full => Some(None),
            None if !full => None,
            Some(None) | None => return None,
        };
        // The oldest id is this one: a retry, whose record a read finds.
        // (Evicting and recording one key in one Txn is refused by etcd.)
        if oldest_slot
            .flatten()
            .is_some_and(|found| found.value == request_id.as_str().as_bytes())
        {
            return None;
        }
        commit.conditions.push(Condition::Absent {
            key: keys.record(request_id.as_str()),
        });
        let undecided: Vec<&Bytes> = planned.undecided().collect();
        let record = match undecided[..] {
            [] => Some(record_of(request, &planned, planned.known_results()?)),
            // The record's results depend on whether this key existed:
            // etcd picks the record in a nested Txn before the writes.
            [key] => {
                let with = |existed: bool| {
                    record_of(
                        request,
                        &planned,
                        planned.results_given(|other| existed && other == &key[..]),
                    )
                };
                commit.record_choice = Some(RecordChoice {
                    data_key: keys.data(key),
                    record_key: keys.record(request_id.as_str()),
                    if_present: with(true),
                    if_absent: with(false),
                });
                None
            }
            _ => return None,
        };
        oldest_after = record_idempotency(
            keys,
            request_id.as_str(),
            record,
            number,
            &planned.after,
            oldest_slot,
            &mut commit,
            window,
        )
        .ok()?;
    }
    // Always rewritten, even unchanged: the new revision is this write's
    // commit sequence number, and the state key's mod_revision is what
    // concurrent requests on the lock compare.
    commit
        .puts
        .push((keys.state(), planned.after.encode().to_vec()));
    Some(Admitted {
        commit,
        planned,
        oldest_after,
    })
}

/// Decides a write on a fresh snapshot (the planner), and builds its commit:
/// compares on everything read, one write per data key, the record, the
/// window's slots and the state.
pub(crate) fn plan_write(
    keys: &LockKeys,
    request: &WriteRequest,
    reads: &ReadSet,
    snapshot: &Snapshot,
    window: u32,
) -> Result<WritePlan, Undecodable> {
    let (_, state_revision) = snapshot.state()?;
    let planned = match planner::plan_write(request, &reads.view(request, snapshot)?) {
        Decision::Replay(applied) => return Ok(WritePlan::Replay(applied)),
        Decision::Refuse(refused) => return Ok(WritePlan::Refuse(refused)),
        Decision::Apply(planned) => planned,
    };
    let mut commit = Commit {
        conditions: vec![Condition::Unchanged {
            key: keys.state(),
            mod_revision: state_revision,
        }],
        data: data_writes(keys, &planned),
        else_read: reads.ranges.clone(),
        ..Commit::default()
    };
    let oldest_slot = request.request_id.as_ref().map(|request_id| {
        commit.conditions.push(Condition::Absent {
            key: keys.record(request_id.as_str()),
        });
        snapshot.found[2].as_ref()
    });
    if let Some(Some(found)) = oldest_slot {
        commit.conditions.push(Condition::Unchanged {
            key: found.key.clone(),
            mod_revision: found.mod_revision,
        });
    }
    let data_found = &snapshot.found[reads.data_from..];
    for ((key, _), found) in reads.data_keys.iter().zip(data_found) {
        commit.conditions.push(Condition::Unchanged {
            key: keys.data(key),
            mod_revision: found.as_ref().map_or(0, |found| found.mod_revision),
        });
    }
    let mut oldest_after = OldestAfter::Known(oldest_slot.map(|found| found.cloned()));
    if let (Some(request_id), Some(number)) = (&request.request_id, planned.recorded_as) {
        // Every data key was read: the results are known.
        let results = planned.results_given(|_| false);
        oldest_after = record_idempotency(
            keys,
            request_id.as_str(),
            Some(record_of(request, &planned, results)),
            number,
            &planned.after,
            oldest_slot,
            &mut commit,
            window,
        )?;
    }
    // Always rewritten, even unchanged: the new revision is this write's
    // commit sequence number, and the state key's mod_revision is what
    // concurrent requests on the lock compare.
    commit
        .puts
        .push((keys.state(), planned.after.encode().to_vec()));
    Ok(WritePlan::Commit(Box::new(Admitted {
        commit,
        planned,
        oldest_after,
    })))
}

/// Decides a read: fenced when a sequencer is given.
pub(crate) fn plan_read(
    keys: &LockKeys,
    reads: &ReadSet,
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
    let marks = match planner::fence(before.marks, sequencer) {
        Ok(marks) => marks,
        Err(refused) => return Ok(ReadPlan::Refuse(refused)),
    };
    let read = Read { value, marks };
    if marks == before.marks {
        return Ok(ReadPlan::Answer(read));
    }
    let after = LockState { marks, ..before };
    let mut commit = Commit {
        conditions: vec![Condition::Unchanged {
            key: keys.state(),
            mod_revision: state_revision,
        }],
        puts: vec![(keys.state(), after.encode().to_vec())],
        else_read: reads.ranges.clone(),
        ..Commit::default()
    };
    if let Some(found) = found {
        commit.conditions.push(Condition::Unchanged {
            key: found.key,
            mod_revision: found.mod_revision,
        });
    }
    Ok(ReadPlan::Commit {
        commit: Box::new(commit),
        read,
        after,
    })
}

/// Per-entry framing in a protobuf Txn request, generously rounded up:
/// field tags, lengths, the compare's target and result.
const ENTRY_OVERHEAD: usize = 32;

/// The largest commit a write can need, from the request alone, on either
/// path: each distinct data key compared (with the expected value of a
/// compare-and-swap) and written with its largest value, the state key,
/// and with a request id two candidate records, the slot, an evicted slot
/// and record (an evicted id is at most
/// [`RequestId::MAX_LEN`](palisade_store::RequestId::MAX_LEN) bytes) and
/// the read-back of the oldest slot.
pub(crate) fn commit_bytes_bound(keys: &LockKeys, request: &WriteRequest) -> usize {
    let mut largest: HashMap<Vec<u8>, usize> = HashMap::new();
    for op in &request.ops {
        let size = match op {
            Op::Put { value, .. } => value.len(),
            Op::Delete { .. } => 0,
            Op::Cas { expected, new, .. } => {
                expected.as_ref().map_or(0, |v| v.len()) + new.as_ref().map_or(0, |v| v.len())
            }
        };
        let entry = largest.entry(keys.data(op.key())).or_default();
        *entry += size;
    }
    let data: usize = largest
        .iter()
        .map(|(key, value)| 3 * (key.len() + ENTRY_OVERHEAD) + value)
        .sum();
    let state = 2 * (keys.state().len() + ENTRY_OVERHEAD) + 24;
    let idempotency = request.request_id.as_ref().map_or(0, |id| {
        let record_key = keys.record(id.as_str()).len();
        let evicted_key = keys
            .record(&"x".repeat(palisade_store::RequestId::MAX_LEN))
            .len();
        let slot_key = keys.slot(0).len();
        let record = 2 + request.fingerprint.len() + 16 + request.ops.len();
        4 * (record_key + ENTRY_OVERHEAD)
            + 2 * record
            + 4 * (slot_key + ENTRY_OVERHEAD)
            + id.as_str().len()
            + (evicted_key + ENTRY_OVERHEAD)
            + 4 * ENTRY_OVERHEAD
    });
    ENTRY_OVERHEAD + data + state + idempotency
}

#[cfg(test)]
mod tests {
    use palisade_core::{Generation, LockName, Mode};
    use palisade_store::{Marks, RequestId};

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
            .encode()
            .to_vec(),
            mod_revision: 7,
        })
    }

    fn commit(plan: WritePlan) -> (Commit, Vec<OpResult>) {
        match plan {
            WritePlan::Commit(admitted) => {
                let results = admitted.planned.known_results().expect("known results");
                (admitted.commit, results)
            }
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
        assert_eq!(
            reads.ranges[1],
            Range::Key {
                key: keys().data(b"k"),
                keys_only: false
            },
            "a compare-and-swap key is read with its value"
        );
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
            commit.data,
            [
                (keys().data(b"k"), Some(b"2".to_vec())),
                (keys().data(b"j"), Some(b"3".to_vec()))
            ]
        );
        assert!(commit.deletes.is_empty());
        assert_eq!(commit.conditions.len(), 3);
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
        let recorded = |record: Record| Snapshot {
            found: vec![
                state(2, 1),
                Some(Found {
                    key: keys().record("r1"),
                    value: record.encode(),
                    mod_revision: 9,
                }),
                None,
                None,
            ],
        };
        assert!(matches!(
            plan_write(&keys(), &with_id, &reads, &recorded(other), 4).unwrap(),
            WritePlan::Refuse(Refused::IdempotencyKeyReused { .. })
        ));
        // The same request: its original outcome, numbered by the record's
        // revision.
        let same = Record {
            fingerprint: with_id.fingerprint.clone(),
            marks: Marks {
                exclusive: 2,
                shared: 0,
            },
            results: vec![OpResult::Created],
        };
        match plan_write(&keys(), &with_id, &reads, &recorded(same), 4).unwrap() {
            WritePlan::Replay(applied) => {
                assert_eq!(applied.commit_seq, 9);
                assert!(applied.replayed);
                assert_eq!(applied.results, [OpResult::Created]);
            }
            other => panic!("expected a replay, got {other:?}"),
        }
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

    /// After an eviction the next oldest id is read back as one key, the
    /// next slot, never as a range over the slots (whose cost in etcd grows
    /// with every id ever recorded); otherwise it is known without a read.
    #[test]
    fn the_next_oldest_id_is_one_key_read_or_known() {
        let request = request(3, vec![], Some("new"));
        let reads = ReadSet::for_write(&keys(), &request);
        let plan = |found: Option<Found>, recorded: u64, window: u32| {
            let snapshot = Snapshot {
                found: vec![state(2, recorded), None, found],
            };
            match plan_write(&keys(), &request, &reads, &snapshot, window).unwrap() {
                WritePlan::Commit(admitted) => *admitted,
                other => panic!("expected a commit, got {other:?}"),
            }
        };
        let oldest = Found {
            key: keys().slot(5),
            value: b"old".to_vec(),
            mod_revision: 4,
        };
        // Ids 5..7 kept, window 2: recording id 7 evicts id 5; 6 is next.
        let evicting = plan(Some(oldest.clone()), 7, 2);
        assert_eq!(
            evicting.commit.then_read,
            [Range::Key {
                key: keys().slot(6),
                keys_only: false
            }]
        );
        assert_eq!(evicting.oldest_after, OldestAfter::ReadBack);
        let next = Found {
            key: keys().slot(6),
            value: b"six".to_vec(),
            mod_revision: 9,
        };
        assert_eq!(
            evicting.oldest_after.resolve(10, Some(next.clone())),
            Some(Some(next))
        );
        assert_eq!(
            OldestAfter::ReadBack.resolve(10, None),
            None,
            "a gap: not known"
        );
        // Room in the window: the oldest stays, nothing read.
        let room = plan(Some(oldest.clone()), 7, 4);
        assert!(room.commit.then_read.is_empty());
        assert_eq!(room.oldest_after.resolve(10, None), Some(Some(oldest)));
        // No id remembered before: the one recorded now is the oldest.
        let first = plan(None, 0, 4);
        assert!(first.commit.then_read.is_empty());
        assert_eq!(
            first.oldest_after.resolve(10, None),
            Some(Some(Found {
                key: keys().slot(0),
                value: b"new".to_vec(),
                mod_revision: 10
            }))
        );
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
        let reads = ReadSet::for_read(&keys(), b"k");
        assert!(matches!(
            plan_read(&keys(), &reads, Some(&shared), &snapshot).unwrap(),
            ReadPlan::Commit { .. }
        ));
        assert!(matches!(
            plan_read(&keys(), &reads, None, &snapshot).unwrap(),
            ReadPlan::Answer(_)
        ));
        let snapshot = Snapshot {
            found: vec![state(6, 0), None],
        };
        assert!(matches!(
            plan_read(&keys(), &reads, Some(&shared), &snapshot).unwrap(),
            ReadPlan::Refuse(Refused::Stale { .. })
        ));
    }

    fn cached(exclusive: u64, recorded: u64, oldest_slot: Option<Option<Found>>) -> Cached {
        Cached {
            state: LockState {
                marks: Marks {
                    exclusive,
                    shared: 0,
                },
                recorded,
            },
            state_revision: 7,
            oldest_slot,
        }
    }

    #[test]
    fn the_optimistic_path_compares_what_it_assumed() {
        let request = request(
            3,
            vec![
                Op::cas("c", Some("old".into()), Some("new".into())),
                Op::put("k", "v"),
                Op::delete("k"),
            ],
            None,
        );
        let admitted = plan_optimistic(&keys(), &request, &cached(2, 0, None), 4).unwrap();
        assert_eq!(
            admitted.commit.conditions,
            [
                Condition::Unchanged {
                    key: keys().state(),
                    mod_revision: 7
                },
                Condition::Holds {
                    key: keys().data(b"c"),
                    value: b"old".to_vec()
                },
            ]
        );
        assert_eq!(
            admitted.commit.data,
            [
                (keys().data(b"c"), Some(b"new".to_vec())),
                (keys().data(b"k"), None)
            ]
        );
        assert_eq!(
            admitted.planned.known_results(),
            None,
            "settled by the commit"
        );
        assert!(admitted.commit.else_read.is_empty(), "no failure branch");
        let existed = HashMap::from([(keys().data(b"c"), true), (keys().data(b"k"), true)]);
        assert_eq!(
            admitted.results(&keys(), &existed),
            [OpResult::Swapped, OpResult::Replaced, OpResult::Deleted]
        );
    }

    #[test]
    fn the_optimistic_path_leaves_to_a_fresh_read_what_it_cannot_decide() {
        // Stale on the remembered marks: refusals are decided on a read.
        let stale = request(1, vec![Op::put("k", "v")], None);
        assert!(plan_optimistic(&keys(), &stale, &cached(2, 0, None), 4).is_none());
        // A compare-and-swap that fails within the request.
        let mismatch = request(
            3,
            vec![Op::put("k", "1"), Op::cas("k", Some("2".into()), None)],
            None,
        );
        assert!(plan_optimistic(&keys(), &mismatch, &cached(2, 0, None), 4).is_none());
        // A request id with two keys of unknown prior existence.
        let two = request(3, vec![Op::put("a", "1"), Op::put("b", "2")], Some("r"));
        assert!(plan_optimistic(&keys(), &two, &cached(2, 0, None), 4).is_none());
        // An eviction from an unknown oldest slot.
        let one = request(3, vec![Op::put("a", "1")], Some("r"));
        assert!(plan_optimistic(&keys(), &one, &cached(2, 4, None), 4).is_none());
        // A retry of the oldest remembered id: evicting and recording one
        // key in one Txn would be refused by etcd as a duplicate key.
        let oldest = Found {
            key: keys().slot(0),
            value: b"r".to_vec(),
            mod_revision: 3,
        };
        assert!(plan_optimistic(&keys(), &one, &cached(2, 4, Some(Some(oldest))), 4).is_none());
        // With room in the window, one key: the record is chosen by etcd.
        let admitted = plan_optimistic(&keys(), &one, &cached(2, 1, None), 4).unwrap();
        let choice = admitted.commit.record_choice.expect("a record choice");
        assert_eq!(choice.data_key, keys().data(b"a"));
        assert_eq!(
            Record::decode(&choice.if_present).unwrap().results,
            [OpResult::Replaced]
        );
        assert_eq!(
            Record::decode(&choice.if_absent).unwrap().results,
            [OpResult::Created]
        );
        assert!(admitted.commit.conditions.contains(&Condition::Absent {
            key: keys().record("r")
        }));
    }

    #[test]
    fn a_capped_write_is_refused_on_a_fresh_read_only() {
        use palisade_core::RaiseCap;
        use palisade_store::RaiseLimit;
        let limit = RaiseLimit::now(RaiseCap::new(10));
        let over = request(13, vec![Op::put("k", "v")], None).with_raise_limit(limit);
        // Over the cap on the remembered marks: left to a fresh read.
        assert!(plan_optimistic(&keys(), &over, &cached(2, 0, None), 4).is_none());
        let reads = ReadSet::for_write(&keys(), &over);
        let snapshot = Snapshot {
            found: vec![state(2, 0), None],
        };
        assert!(matches!(
            plan_write(&keys(), &over, &reads, &snapshot, 4).unwrap(),
            WritePlan::Refuse(Refused::RaiseTooLarge {
                allowed_up_to: 12,
                ..
            })
        ));
        // Within it, on memory: one round trip.
        assert!(plan_optimistic(&keys(), &over, &cached(3, 0, None), 4).is_some());
    }
}
