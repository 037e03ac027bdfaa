//! How marks, data and idempotency records are laid out as etcd keys.
//!
//! Under the configured prefix `P`:
//!
//! - `P/format` → the layout version ([`FORMAT_VERSION`]);
//! - `P/l/<lock segment>/m` → the lock's
//!   [`LockState`](palisade_store::stored::LockState) (marks and the count
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
use palisade_store::plan::{Fingerprint, Remembered};
use palisade_store::stored::{decode_results, encode_results};
use palisade_store::{Applied, Marks, OpResult};

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
        out.extend(encode_results(&self.results));
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Record> {
        let (length, rest) = bytes.split_at_checked(2)?;
        let length = usize::from(u16::from_be_bytes(length.try_into().ok()?));
        let (fingerprint, rest) = rest.split_at_checked(length)?;
        let (marks, results) = rest.split_at_checked(16)?;
        let word = |i: usize| -> Option<u64> {
            Some(u64::from_be_bytes(
                marks.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        Some(Record {
            fingerprint: fingerprint.to_vec(),
            marks: Marks {
                exclusive: word(0)?,
                shared: word(1)?,
            },
            results: decode_results(results)?,
        })
    }

    /// The record as the planner compares it: the outcome of the write
    /// that stored it at `mod_revision`, its commit sequence number.
    pub(crate) fn remembered(self, mod_revision: i64) -> Remembered {
        Remembered {
            fingerprint: Fingerprint::Digest(self.fingerprint),
            applied: Applied {
                results: self.results,
                marks: self.marks,
                commit_seq: revision_seq(mod_revision),
                replayed: true,
            },
        }
    }
}

/// An etcd revision as a commit sequence number (revisions start at 1).
pub(crate) fn revision_seq(revision: i64) -> u64 {
    u64::try_from(revision).unwrap_or(0)
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
    fn records_round_trip_and_refuse_garbage() {
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
        let remembered = record.clone().remembered(77);
        assert_eq!(remembered.applied.commit_seq, 77);
        assert!(remembered.applied.replayed);
        assert_eq!(
            remembered.fingerprint,
            Fingerprint::Digest(record.fingerprint)
        );
    }
}
