//! How marks, data and idempotency records are laid out as etcd keys.
//!
//! Under the configured prefix `P`:
//!
//! - `P/format` → the layout version ([`FORMAT_VERSION`]);
//! - `P/l/<lock segment>/m` → the lock's [`LockState`] (marks and the count
//!   of idempotency ids recorded);
//! - `P/l/<lock segment>/d/<user key>` → a value;
//! - `P/l/<lock segment>/r/<request id>` → an idempotency [`Record`];
//! - `P/l/<lock segment>/s/<n: u64 BE>` → the request id recorded `n`-th:
//!   the window of remembered ids, oldest first in key order.
//!
//! The lock segment is [`LockName::key_segment`], which never contains `/`,
//! so the first `/` after it ends it: lock `a` with key `b/c` and lock
//! `a/b` (segment `a%2Fb`) with key `c` can never collide, and no data key
//! is ever a metadata key.
//!
//! Every write of a lock rewrites its `m` key in the same Txn as its data,
//! records and slots, so the `m` key's `mod_revision` changes whenever
//! anything in the lock's keyspace does: comparing it in the commit is
//! what makes read, decide and commit one isolated step.

use palisade_core::LockName;
use palisade_store::{Marks, OpResult};

/// The layout this version writes and reads.
pub(crate) const FORMAT_VERSION: &[u8] = b"palisade-store-etcd/1";

/// The keys of the engine's prefix.
#[derive(Debug, Clone)]
pub(crate) struct PrefixKeys {
    prefix: String,
}

impl PrefixKeys {
    pub(crate) fn new(prefix: &str) -> Self {
        PrefixKeys {
            prefix: prefix.to_owned(),
        }
    }

    /// The key holding the layout version.
    pub(crate) fn format(&self) -> Vec<u8> {
        format!("{}/format", self.prefix).into_bytes()
    }

    /// The keys of one lock.
    pub(crate) fn lock(&self, lock: &LockName) -> LockKeys {
        LockKeys {
            base: format!("{}/l/{}/", self.prefix, lock.key_segment()).into_bytes(),
        }
    }
}

/// The keys of one lock, computed once per request.
#[derive(Debug, Clone)]
pub(crate) struct LockKeys {
    /// `P/l/<segment>/`.
    base: Vec<u8>,
}

impl LockKeys {
    fn with(&self, kind: u8, suffix: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.base.len() + 2 + suffix.len());
        key.extend_from_slice(&self.base);
        key.push(kind);
        if kind != b'm' {
            key.push(b'/');
            key.extend_from_slice(suffix);
        }
        key
    }

    /// The lock's state key.
    pub(crate) fn state(&self) -> Vec<u8> {
        self.with(b'm', b"")
    }

    /// The key of `user_key`'s value.
    pub(crate) fn data(&self, user_key: &[u8]) -> Vec<u8> {
        self.with(b'd', user_key)
    }

    /// The key of an idempotency record.
    pub(crate) fn record(&self, request_id: &str) -> Vec<u8> {
        self.with(b'r', request_id.as_bytes())
    }

    /// The key of the `n`-th recorded id.
    pub(crate) fn slot(&self, n: u64) -> Vec<u8> {
        self.with(b's', &n.to_be_bytes())
    }

    /// The prefix of every slot key, for a range read of the oldest.
    pub(crate) fn slots(&self) -> Vec<u8> {
        self.with(b's', b"")
    }

    /// The slot number in a slot key, if it is one of this lock's.
    pub(crate) fn slot_number(&self, key: &[u8]) -> Option<u64> {
        let rest = key.strip_prefix(self.slots().as_slice())?;
        Some(u64::from_be_bytes(rest.try_into().ok()?))
    }
}

/// What the engine keeps per lock: `[H_excl][H_shared][ids recorded]`,
/// three u64 big-endian. Absent = all zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LockState {
    pub(crate) marks: Marks,
    /// How many idempotency ids this lock has ever recorded: the next one
    /// goes to slot `recorded`.
    pub(crate) recorded: u64,
}

impl LockState {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24);
        out.extend_from_slice(&self.marks.exclusive.to_be_bytes());
        out.extend_from_slice(&self.marks.shared.to_be_bytes());
        out.extend_from_slice(&self.recorded.to_be_bytes());
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<LockState> {
        let bytes: &[u8; 24] = bytes.try_into().ok()?;
        let word = |i: usize| u64::from_be_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        Some(LockState {
            marks: Marks {
                exclusive: word(0),
                shared: word(1),
            },
            recorded: word(2),
        })
    }
}

/// A remembered outcome:
/// `[fingerprint length: u16 BE][fingerprint][H_excl: u64 BE][H_shared: u64 BE][one byte per op result]`.
///
/// The commit sequence number is not stored: it is the record key's
/// `mod_revision`, the revision of the Txn that wrote the record with the
/// data, which is only known once that Txn has committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) fingerprint: Vec<u8>,
    pub(crate) marks: Marks,
    pub(crate) results: Vec<OpResult>,
}

impl Record {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(2 + self.fingerprint.len() + 16 + self.results.len());
        let length = u16::try_from(self.fingerprint.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&length.to_be_bytes());
        out.extend_from_slice(&self.fingerprint[..usize::from(length)]);
        out.extend_from_slice(&self.marks.exclusive.to_be_bytes());
        out.extend_from_slice(&self.marks.shared.to_be_bytes());
        out.extend(self.results.iter().map(|result| result_byte(*result)));
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Record> {
        let (length, rest) = bytes.split_at_checked(2)?;
        let length = usize::from(u16::from_be_bytes(length.try_into().ok()?));
        let (fingerprint, rest) = rest.split_at_checked(length)?;
        let (marks, results) = rest.split_at_checked(16)?;
        let word = |i: usize| u64::from_be_bytes(marks[i * 8..i * 8 + 8].try_into().unwrap());
        Some(Record {
            fingerprint: fingerprint.to_vec(),
            marks: Marks {
                exclusive: word(0),
                shared: word(1),
            },
            results: results
                .iter()
                .map(|byte| result_from_byte(*byte))
                .collect::<Option<_>>()?,
        })
    }
}

fn result_byte(result: OpResult) -> u8 {
    match result {
        OpResult::Created => 1,
        OpResult::Replaced => 2,
        OpResult::Deleted => 3,
        OpResult::Absent => 4,
        OpResult::Swapped => 5,
    }
}

fn result_from_byte(byte: u8) -> Option<OpResult> {
    Some(match byte {
        1 => OpResult::Created,
        2 => OpResult::Replaced,
        3 => OpResult::Deleted,
        4 => OpResult::Absent,
        5 => OpResult::Swapped,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(name: &str) -> LockKeys {
        PrefixKeys::new("/p").lock(&LockName::new(name).unwrap())
    }

    #[test]
    fn locks_and_kinds_never_collide() {
        assert_eq!(lock("a").data(b"b/c"), b"/p/l/a/d/b/c");
        assert_ne!(lock("a").data(b"b/c"), lock("a/b").data(b"c"));
        assert_ne!(lock("a").data(b"/x"), lock("a/").data(b"x"));
        assert_eq!(lock("a").state(), b"/p/l/a/m");
        // No lock's keys fall under another lock's prefix.
        assert!(!lock("ab").state().starts_with(b"/p/l/a/"));
        assert!(!PrefixKeys::new("/p").format().starts_with(b"/p/l/"));
    }

    #[test]
    fn slots_sort_by_number_and_parse_back() {
        let keys = lock("a");
        assert!(keys.slot(255) < keys.slot(256));
        assert_eq!(keys.slot_number(&keys.slot(77)), Some(77));
        assert_eq!(keys.slot_number(&keys.record("x")), None);
        assert_eq!(keys.slot_number(&lock("b").slot(1)), None);
    }

    #[test]
    fn state_and_records_round_trip_and_refuse_garbage() {
        let state = LockState {
            marks: Marks {
                exclusive: 3,
                shared: u64::MAX,
            },
            recorded: 17,
        };
        assert_eq!(LockState::decode(&state.encode()), Some(state));
        assert_eq!(LockState::decode(&[1, 2, 3]), None);
        let record = Record {
            fingerprint: vec![9; 32],
            marks: Marks {
                exclusive: 9,
                shared: 4,
            },
            results: vec![OpResult::Created, OpResult::Absent, OpResult::Swapped],
        };
        assert_eq!(Record::decode(&record.encode()), Some(record.clone()));
        let mut bad = record.encode();
        bad.push(0);
        assert_eq!(Record::decode(&bad), None);
        assert_eq!(Record::decode(&[0, 40, 1]), None);
    }
}
