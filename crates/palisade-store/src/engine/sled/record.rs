//! The sled engine's idempotency record: a remembered outcome, as stored.

use crate::idempotency::FINGERPRINT_LEN;
use crate::{Applied, Marks, OpResult};

/// A remembered outcome, as stored, in one of two layouts told apart by
/// the first byte:
///
/// - `2`: `[2][slot sequence: u64 BE][fingerprint: 32 bytes, SHA-256][H_excl: u64 BE][H_shared: u64 BE][commit seq: u64 BE][one byte per op result]`,
///   what this version writes;
/// - `0`: `[slot sequence: u64 BE][fingerprint: u64 BE, FNV-1a][H_excl][H_shared][commit seq][results]`,
///   what earlier versions wrote (the top byte of a slot sequence is 0:
///   no lock records 2^56 ids). Still read, and compared by FNV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    pub(super) fingerprint: Fingerprint,
    pub(super) applied: Applied,
}

/// The fingerprint a record was written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fingerprint {
    /// SHA-256, as [`WriteRequest::fingerprint`](crate::WriteRequest::fingerprint) gives it.
    Sha256([u8; FINGERPRINT_LEN]),
    /// FNV-1a, 64 bits: records of earlier versions.
    Fnv(u64),
}

/// The tag of the SHA-256 layout.
const TAG_SHA256: u8 = 2;
/// The fixed part of the SHA-256 layout: the tag, four words, the digest.
const HEADER_LEN: usize = 1 + 8 + FINGERPRINT_LEN + 24;
/// The fixed part of the FNV layout: five big-endian words.
const FNV_HEADER_LEN: usize = 40;

impl Record {
    /// The layout of the record's fingerprint (this version only writes
    /// SHA-256 records; the FNV layout is kept for tests of reading it).
    pub(super) fn encode(&self, sequence: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.applied.results.len());
        match &self.fingerprint {
            Fingerprint::Sha256(digest) => {
                out.push(TAG_SHA256);
                out.extend_from_slice(&sequence.to_be_bytes());
                out.extend_from_slice(digest);
            }
            Fingerprint::Fnv(fnv) => {
                out.extend_from_slice(&sequence.to_be_bytes());
                out.extend_from_slice(&fnv.to_be_bytes());
            }
        }
        out.extend_from_slice(&self.applied.marks.exclusive.to_be_bytes());
        out.extend_from_slice(&self.applied.marks.shared.to_be_bytes());
        out.extend_from_slice(&self.applied.commit_seq.to_be_bytes());
        out.extend(self.applied.results.iter().map(|r| result_byte(*r)));
        out
    }

    pub(super) fn decode(bytes: &[u8]) -> Option<Record> {
        let word = |bytes: &[u8], at: usize| -> Option<u64> {
            Some(u64::from_be_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
        };
        let (fingerprint, rest, results) = match bytes.first()? {
            &TAG_SHA256 => {
                let (header, results) = bytes.split_at_checked(HEADER_LEN)?;
                let digest = header[9..9 + FINGERPRINT_LEN].try_into().ok()?;
                (
                    Fingerprint::Sha256(digest),
                    &header[9 + FINGERPRINT_LEN..],
                    results,
                )
            }
            0 => {
                let (header, results) = bytes.split_at_checked(FNV_HEADER_LEN)?;
                (Fingerprint::Fnv(word(header, 8)?), &header[16..], results)
            }
            _ => return None,
        };
        let results = results
            .iter()
            .map(|b| result_of_byte(*b))
            .collect::<Option<Vec<_>>>()?;
        Some(Record {
            fingerprint,
            applied: Applied {
                results,
                marks: Marks {
                    exclusive: word(rest, 0)?,
                    shared: word(rest, 8)?,
                },
                commit_seq: word(rest, 16)?,
                replayed: true,
            },
        })
    }
}

/// An op result as one stored byte.
fn result_byte(result: OpResult) -> u8 {
    match result {
        OpResult::Created => 1,
        OpResult::Replaced => 2,
        OpResult::Deleted => 3,
        OpResult::Absent => 4,
        OpResult::Swapped => 5,
    }
}

fn result_of_byte(byte: u8) -> Option<OpResult> {
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

    fn applied() -> Applied {
        Applied {
            results: vec![OpResult::Created, OpResult::Absent, OpResult::Swapped],
            marks: Marks {
                exclusive: 9,
                shared: 4,
            },
            commit_seq: 12,
            replayed: true,
        }
    }

    #[test]
    fn records_round_trip_and_refuse_garbage() {
        let record = Record {
            fingerprint: Fingerprint::Sha256([7; FINGERPRINT_LEN]),
            applied: applied(),
        };
        assert_eq!(Record::decode(&record.encode(5)), Some(record));
        assert_eq!(Record::decode(&[]), None);
        assert_eq!(Record::decode(&[TAG_SHA256; HEADER_LEN - 1]), None);
        let mut bad_result = vec![TAG_SHA256; HEADER_LEN];
        bad_result.push(9);
        assert_eq!(Record::decode(&bad_result), None);
        assert_eq!(Record::decode(&[1; 80]), None, "an unknown layout");
    }

    #[test]
    fn records_of_earlier_versions_are_read_with_their_fnv_fingerprint() {
        let record = Record {
            fingerprint: Fingerprint::Fnv(77),
            applied: applied(),
        };
        let bytes = record.encode(5);
        assert_eq!(bytes.len(), FNV_HEADER_LEN + 3, "the earlier layout");
        assert_eq!(Record::decode(&bytes), Some(record));
        assert_eq!(Record::decode(&bytes[..39]), None);
    }
}
