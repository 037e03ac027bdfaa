//! The write planner: how an engine written in Rust decides a fenced
//! request, as a pure function of what it read.
//!
//! An engine reads what a write needs (the lock's [`LockState`], the
//! idempotency record of its request id, and the data keys its ops touch,
//! [`keys_to_read`]) its own way: sled inside its group transaction, etcd
//! in one linearizable read or from the state it remembers of the lock.
//! It hands that to [`plan_write`] as a [`Snapshot`], and the planner
//! decides, in this order:
//!
//! 1. a remembered request id: the original outcome (a replay), or
//!    [`Refused::IdempotencyKeyReused`] for another request under the id;
//! 2. a shared sequencer: [`Refused::SharedOnWrite`];
//! 3. the raise cap, when the request carries one ([`RaiseLimit`](crate::RaiseLimit));
//! 4. the fencing rule, [`Marks::admit`] (through [`fence`], which reads
//!    and admits use too);
//! 5. every op in order against an overlay of the earlier ops of the
//!    request: a compare-and-swap sees what they left, and a mismatch
//!    refuses the whole request.
//!
//! An admitted write comes back as an [`Admitted`]: one final value per
//! key, the op results, the lock's new state and the number its request id
//! is recorded under. The engine applies that in its one atomic step.
//! What stays the engine's own: its layout (keys, the record's bytes, how
//! its window evicts old ids), its commit sequence number, and what makes
//! its step atomic (sled's transaction, etcd's compares).
//!
//! An engine may decide without reading a key ([`Prior::Unknown`]): the
//! planner then assumes a compare-and-swap's expectation holds (the commit
//! must be conditional on it, [`Admitted::assumed`]) and leaves a put's or
//! delete's result to be settled by whether the key existed
//! ([`Admitted::results_given`]). etcd's one-round-trip writes decide that
//! way and learn the existence from the commit's answer.

use std::collections::HashMap;

use bytes::Bytes;
use palisade_core::{Mode, Sequencer};

use crate::stored::LockState;
use crate::{Applied, Marks, Op, OpResult, Refused, WriteRequest};

/// The fencing step of any request, read, admission or write: the marks
/// after it ([`Marks::admit`]), or the stale refusal carrying the marks it
/// was decided against.
pub fn fence(marks: Marks, sequencer: &Sequencer) -> Result<Marks, Refused> {
    marks
        .admit(sequencer.mode(), sequencer.generation())
        .ok_or_else(|| Refused::stale(sequencer, marks))
}

/// What an engine knows of one data key before the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prior {
    /// Read: absent.
    Absent,
    /// Read: this value.
    Present(Bytes),
    /// Read without its value (a keys-only read): present.
    Exists,
    /// Not read. A key missing from [`Snapshot::data`] is unknown.
    Unknown,
}

/// The fingerprint a request id was recorded with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fingerprint {
    /// [`WriteRequest::fingerprint`] of the recorded request.
    Digest(Vec<u8>),
    /// The 64-bit FNV-1a fingerprint of records that earlier versions of
    /// the sled engine wrote, still compared their way.
    LegacyFnv(u64),
}

impl Fingerprint {
    /// Whether `request` is the request recorded with this fingerprint.
    pub fn matches(&self, request: &WriteRequest) -> bool {
        match self {
            Fingerprint::Digest(digest) => *digest == request.fingerprint,
            Fingerprint::LegacyFnv(fnv) => {
                *fnv == crate::idempotency::legacy_fingerprint(&request.sequencer, &request.ops)
            }
        }
    }
}

/// An idempotency record: the request it stands for and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remembered {
    /// What the recorded request was.
    pub fingerprint: Fingerprint,
    /// Its outcome, with its original commit sequence number.
    pub applied: Applied,
}

/// What an engine read for a write, in one consistent view.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The lock's state (the default for a lock never seen).
    pub state: LockState,
    /// The record of the request's id, if the lock remembers it. `None`
    /// also where the engine did not look (it must then make its commit
    /// conditional on the id being unrecorded).
    pub remembered: Option<Remembered>,
    /// What is known of each data key the ops touch, by user key.
    pub data: HashMap<Bytes, Prior>,
}

impl Snapshot {
    fn prior(&self, key: &[u8]) -> Prior {
        self.data.get(key).cloned().unwrap_or(Prior::Unknown)
    }
}

/// The distinct data keys `ops` touch, in the order of their first op,
/// each with whether its value is needed (a compare-and-swap compares it;
/// for the others, whether the key exists is enough).
pub fn keys_to_read(ops: &[Op]) -> Vec<(Bytes, bool)> {
    let mut keys: Vec<(Bytes, bool)> = Vec::with_capacity(ops.len());
    let mut index: HashMap<&[u8], usize> = HashMap::new();
    for op in ops {
        let (key, cas) = match op {
            Op::Put { key, .. } | Op::Delete { key } => (key, false),
            Op::Cas { key, .. } => (key, true),
        };
        match index.get(&key[..]) {
            Some(&at) => keys[at].1 |= cas,
            None => {
                // One op (most writes) needs no index.
                if ops.len() > 1 {
                    index.insert(key, keys.len());
                }
                keys.push((key.clone(), cas));
            }
        }
    }
    keys
}

/// How a write is decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WritePlan {
    /// A retry of a remembered request: its original outcome (`replayed`,
    /// the original commit sequence number). Nothing to write.
    Replay(Applied),
    /// Refused: nothing to write.
    Refuse(Refused),
    /// Admitted: apply this in one atomic step.
    Apply(Admitted),
}

/// What one op did, or what settles it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannedResult {
    /// Decided.
    Known(OpResult),
    /// The first op on a key whose existence the snapshot left unknown:
    /// `existed` if the key existed before the request, else `absent`.
    IfExisted {
        /// The user key.
        key: Bytes,
        /// The result if it existed.
        existed: OpResult,
        /// The result if it did not.
        absent: OpResult,
    },
}

/// An admitted write: what the engine applies in its atomic step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The lock's marks after the write.
    pub marks: Marks,
    /// One per op, in order.
    pub results: Vec<PlannedResult>,
    /// Each key the ops touch, once, in the order of its first op, with
    /// its final value (`None`: absent afterwards).
    pub writes: Vec<(Bytes, Option<Bytes>)>,
    /// Keys whose value the planner assumed, with the value assumed
    /// (`None`: absent): a compare-and-swap on a key not read with its
    /// value. The engine's commit must apply only if each still holds.
    pub assumed: Vec<(Bytes, Option<Bytes>)>,
    /// The lock's state once the write is applied.
    pub after: LockState,
    /// The number the request's id is recorded under (the state's
    /// `recorded` before the write), when it has one.
    pub recorded_as: Option<u64>,
}

impl Admitted {
    /// The results, when the snapshot knew whether every key existed.
    pub fn known_results(&self) -> Option<Vec<OpResult>> {
        self.results
            .iter()
            .map(|result| match result {
                PlannedResult::Known(result) => Some(*result),
                PlannedResult::IfExisted { .. } => None,
            })
            .collect()
    }

    /// The keys whose existence before the request settles a result.
    pub fn undecided(&self) -> impl Iterator<Item = &Bytes> {
        self.results.iter().filter_map(|result| match result {
            PlannedResult::IfExisted { key, .. } => Some(key),
            PlannedResult::Known(_) => None,
        })
    }

    /// The results, given whether each [undecided](Admitted::undecided)
    /// key existed before the request.
    pub fn results_given(&self, existed: impl Fn(&[u8]) -> bool) -> Vec<OpResult> {
        self.results
            .iter()
            .map(|result| match result {
                PlannedResult::Known(result) => *result,
                PlannedResult::IfExisted {
                    key,
                    existed: if_existed,
                    absent,
                } => {
                    if existed(key) {
                        *if_existed
                    } else {
                        *absent
                    }
                }
            })
            .collect()
    }
}

/// Decides `request` on `snapshot`: see the module docs for the order.
pub fn plan_write(request: &WriteRequest, snapshot: &Snapshot) -> WritePlan {
    let sequencer = &request.sequencer;
    if let (Some(request_id), Some(remembered)) = (&request.request_id, &snapshot.remembered) {
        if !remembered.fingerprint.matches(request) {
            return WritePlan::Refuse(Refused::IdempotencyKeyReused {
                request_id: request_id.clone(),
            });
        }
        return WritePlan::Replay(Applied {
            replayed: true,
            ..remembered.applied.clone()
        });
    }
    if sequencer.mode() != Mode::Exclusive {
        return WritePlan::Refuse(Refused::SharedOnWrite {
            lock: sequencer.lock().clone(),
            presented: sequencer.generation(),
        });
    }
    let before = snapshot.state;
    if let Some(limit) = &request.raise_limit {
        if let Err(refused) = limit.check(sequencer, before.marks) {
            return WritePlan::Refuse(refused);
        }
    }
    let marks = match fence(before.marks, sequencer) {
        Ok(marks) => marks,
        Err(refused) => return WritePlan::Refuse(refused),
    };
    let Overlay {
        results,
        writes,
        assumed,
    } = match Overlay::run(&request.ops, snapshot) {
        Ok(overlay) => overlay,
        Err(refused) => return WritePlan::Refuse(refused),
    };
    let mut after = LockState {
        marks,
        recorded: before.recorded,
    };
    let recorded_as = request.request_id.as_ref().map(|_| {
        after.recorded += 1;
        before.recorded
    });
    WritePlan::Apply(Admitted {
        marks,
        results,
        writes,
        assumed,
        after,
        recorded_as,
    })
}

/// The ops applied in order, each key's value as the earlier ops left it.
struct Overlay {
    results: Vec<PlannedResult>,
    writes: Vec<(Bytes, Option<Bytes>)>,
    assumed: Vec<(Bytes, Option<Bytes>)>,
}

impl Overlay {
    fn run(ops: &[Op], snapshot: &Snapshot) -> Result<Overlay, Refused> {
        let mut overlay = Overlay {
            results: Vec::with_capacity(ops.len()),
            writes: Vec::with_capacity(ops.len()),
            assumed: Vec::new(),
        };
        // Where each key written so far is in `writes`; most requests
        // write one key, and need no map.
        let mut written: HashMap<Bytes, usize> = HashMap::new();
        for (op_index, op) in ops.iter().enumerate() {
            let (key, new) = match op {
                Op::Put { key, value } => (key, Some(value.clone())),
                Op::Delete { key } => (key, None),
                Op::Cas { key, new, .. } => (key, new.clone()),
            };
            let at = if ops.len() == 1 {
                None
            } else {
                written.get(&key[..]).copied()
            };
            let prior = match at {
                Some(at) => match &overlay.writes[at].1 {
                    Some(value) => Prior::Present(value.clone()),
                    None => Prior::Absent,
                },
                None => snapshot.prior(key),
            };
            let result = match op {
                Op::Put { .. } | Op::Delete { .. } => {
                    let (existed, absent) = match op {
                        Op::Put { .. } => (OpResult::Replaced, OpResult::Created),
                        _ => (OpResult::Deleted, OpResult::Absent),
                    };
                    match prior {
                        Prior::Present(_) | Prior::Exists => PlannedResult::Known(existed),
                        Prior::Absent => PlannedResult::Known(absent),
                        Prior::Unknown => PlannedResult::IfExisted {
                            key: key.clone(),
                            existed,
                            absent,
                        },
                    }
                }
                Op::Cas { expected, .. } => {
                    let current = match prior {
                        Prior::Present(current) => Some(current),
                        Prior::Absent => None,
                        // Never compared here: only the first op on a key
                        // can meet a key not read with its value.
                        Prior::Exists | Prior::Unknown => {
                            overlay.assumed.push((key.clone(), expected.clone()));
                            expected.clone()
                        }
                    };
                    if current != *expected {
                        return Err(Refused::CasMismatch { op_index, current });
                    }
                    PlannedResult::Known(OpResult::Swapped)
                }
            };
            overlay.results.push(result);
            match at {
                Some(at) => overlay.writes[at].1 = new,
                None => {
                    if ops.len() > 1 {
                        written.insert(key.clone(), overlay.writes.len());
                    }
                    overlay.writes.push((key.clone(), new));
                }
            }
        }
        Ok(overlay)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use palisade_core::{RaiseCap, RequestId};

    use super::*;
    use crate::RaiseLimit;

    fn sequencer(mode: Mode, generation: u64) -> Sequencer {
        crate::test_sequencer("L", mode, generation)
    }

    fn request(generation: u64, ops: Vec<Op>, id: Option<&str>) -> WriteRequest {
        WriteRequest::new(
            sequencer(Mode::Exclusive, generation),
            ops,
            id.map(|id| RequestId::new(id).unwrap()),
        )
    }

    fn state(exclusive: u64, shared: u64, recorded: u64) -> LockState {
        LockState {
            marks: Marks { exclusive, shared },
            recorded,
        }
    }

    /// A snapshot that read every key the ops touch (values from `values`).
    fn read_all(state: LockState, ops: &[Op], values: &[(&str, &str)]) -> Snapshot {
        let data = keys_to_read(ops)
            .into_iter()
            .map(|(key, _)| {
                let prior = values
                    .iter()
                    .find(|(k, _)| k.as_bytes() == &key[..])
                    .map_or(Prior::Absent, |(_, v)| {
                        Prior::Present(Bytes::copy_from_slice(v.as_bytes()))
                    });
                (key, prior)
            })
            .collect();
        Snapshot {
            state,
            remembered: None,
            data,
        }
    }

    fn admitted(plan: WritePlan) -> Admitted {
        match plan {
            WritePlan::Apply(admitted) => admitted,
            other => panic!("expected an admitted write, got {other:?}"),
        }
    }

    fn b(text: &str) -> Bytes {
        Bytes::copy_from_slice(text.as_bytes())
    }

    #[test]
    fn ops_see_the_earlier_ops_and_each_key_is_written_once() {
        let ops = vec![
            Op::put("k", "1"),
            Op::cas("k", Some("1".into()), Some("2".into())),
            Op::delete("j"),
            Op::put("j", "3"),
            Op::delete("gone"),
        ];
        let snapshot = read_all(state(1, 0, 0), &ops, &[("j", "old"), ("gone", "x")]);
        let admitted = admitted(plan_write(&request(2, ops, None), &snapshot));
        assert_eq!(
            admitted.known_results().unwrap(),
            [
                OpResult::Created,
                OpResult::Swapped,
                OpResult::Deleted,
                OpResult::Created,
                OpResult::Deleted,
            ]
        );
        assert_eq!(
            admitted.writes,
            [
                (b("k"), Some(b("2"))),
                (b("j"), Some(b("3"))),
                (b("gone"), None)
            ]
        );
        assert!(admitted.assumed.is_empty());
        assert_eq!(admitted.after, state(2, 0, 0));
        assert_eq!(admitted.recorded_as, None);
    }

    #[test]
    fn a_mismatch_anywhere_refuses_the_whole_request() {
        let ops = vec![Op::put("k", "1"), Op::cas("k", Some("2".into()), None)];
        let snapshot = read_all(state(1, 0, 0), &ops, &[]);
        assert_eq!(
            plan_write(&request(2, ops, None), &snapshot),
            WritePlan::Refuse(Refused::CasMismatch {
                op_index: 1,
                current: Some(b("1"))
            })
        );
        let ops = vec![Op::cas("k", None, Some("new".into()))];
        let snapshot = read_all(state(1, 0, 0), &ops, &[("k", "there")]);
        assert_eq!(
            plan_write(&request(2, ops, None), &snapshot),
            WritePlan::Refuse(Refused::CasMismatch {
                op_index: 0,
                current: Some(b("there"))
            })
        );
    }

    #[test]
    fn the_order_is_replay_shared_cap_rule() {
        let ops = vec![Op::put("k", "v")];
        let id = Some("r1");
        let recorded = request(3, ops.clone(), id);
        let original = Applied {
            results: vec![OpResult::Created],
            marks: Marks {
                exclusive: 3,
                shared: 0,
            },
            commit_seq: 41,
            replayed: false,
        };
        // A replay is answered even on marks that now refuse it.
        let snapshot = Snapshot {
            remembered: Some(Remembered {
                fingerprint: Fingerprint::Digest(recorded.fingerprint.clone()),
                applied: original.clone(),
            }),
            ..read_all(state(9, 0, 1), &ops, &[])
        };
        assert_eq!(
            plan_write(&recorded, &snapshot),
            WritePlan::Replay(Applied {
                replayed: true,
                ..original
            })
        );
        let other = request(3, vec![Op::put("k", "w")], id);
        assert!(matches!(
            plan_write(&other, &snapshot),
            WritePlan::Refuse(Refused::IdempotencyKeyReused { .. })
        ));

        let shared = WriteRequest::new(sequencer(Mode::Shared, 9), ops.clone(), None);
        assert!(matches!(
            plan_write(&shared, &read_all(state(1, 0, 0), &ops, &[])),
            WritePlan::Refuse(Refused::SharedOnWrite { .. })
        ));

        // Over the cap and stale at once: the cap speaks first.
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let clock_mark = 1_800_000_000_000_000 + 2 * 3_600_000_000;
        let limit = RaiseLimit::new(RaiseCap::new(10), now);
        let capped = request(clock_mark - 1, ops.clone(), None).with_raise_limit(limit);
        assert!(matches!(
            plan_write(&capped, &read_all(state(clock_mark, 0, 0), &ops, &[])),
            WritePlan::Refuse(Refused::RaiseTooLarge { by_clock: true, .. })
        ));
        // The higher mark decides: 11 + 10 allows 21, 10 + 10 does not.
        let capped = request(21, ops.clone(), None).with_raise_limit(limit);
        assert!(matches!(
            plan_write(&capped, &read_all(state(10, 11, 0), &ops, &[])),
            WritePlan::Apply(_)
        ));
        assert!(matches!(
            plan_write(&capped, &read_all(state(10, 10, 0), &ops, &[])),
            WritePlan::Refuse(Refused::RaiseTooLarge {
                allowed_up_to: 20,
                ..
            })
        ));
        let stale = request(9, ops.clone(), None).with_raise_limit(limit);
        assert!(matches!(
            plan_write(&stale, &read_all(state(10, 0, 0), &ops, &[])),
            WritePlan::Refuse(Refused::Stale { .. })
        ));
    }

    #[test]
    fn a_request_id_takes_the_next_number() {
        let ops = vec![Op::put("k", "v")];
        let snapshot = read_all(state(1, 0, 7), &ops, &[]);
        let admitted = admitted(plan_write(&request(1, ops, Some("r")), &snapshot));
        assert_eq!(admitted.recorded_as, Some(7));
        assert_eq!(admitted.after, state(1, 0, 8));
    }

    #[test]
    fn unread_keys_are_assumed_or_settled_afterwards() {
        let ops = vec![
            Op::cas("c", Some("old".into()), Some("new".into())),
            Op::put("k", "v"),
            Op::delete("k"),
            Op::delete("d"),
        ];
        let snapshot = Snapshot {
            state: state(2, 0, 0),
            ..Snapshot::default()
        };
        let admitted = admitted(plan_write(&request(3, ops, None), &snapshot));
        assert_eq!(admitted.assumed, [(b("c"), Some(b("old")))]);
        assert_eq!(admitted.known_results(), None);
        assert_eq!(admitted.undecided().collect::<Vec<_>>(), [&b("k"), &b("d")]);
        assert_eq!(
            admitted.results_given(|key| key == b"k"),
            [
                OpResult::Swapped,
                OpResult::Replaced,
                OpResult::Deleted,
                OpResult::Absent
            ]
        );
        assert_eq!(
            admitted.writes,
            [(b("c"), Some(b("new"))), (b("k"), None), (b("d"), None)]
        );
    }

    #[test]
    fn keys_are_read_once_with_their_value_where_a_cas_needs_it() {
        let ops = [
            Op::put("a", "1"),
            Op::cas("a", None, None),
            Op::delete("b"),
            Op::put("b", "2"),
        ];
        assert_eq!(keys_to_read(&ops), [(b("a"), true), (b("b"), false)]);
    }
}
