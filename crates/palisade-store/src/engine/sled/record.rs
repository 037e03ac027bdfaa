//! The sled engine's idempotency record: a remembered outcome, as stored.
//!
//! Two layouts, told apart by the first byte:
//!
//! - `2`: `[2][slot sequence: u64 BE][fingerprint: 32 bytes, SHA-256][H_excl: u64 BE][H_shared: u64 BE][commit seq: u64 BE][one byte per op result]`,
//!   what this version writes;
//! - `0`: `[slot sequence: u64 BE][fingerprint: u64 BE, FNV-1a][H_excl][H_shared][commit seq][results]`,
//!   what earlier versions wrote (the top byte of a slot sequence is 0:
//!   no lock records 2^56 ids). Still read, and compared by FNV.
//!
//! Op results are [`stored::result_byte`](crate::stored::result_byte)s.

use crate::idempotency::FINGERPRINT_LEN;
use crate::plan::{Fingerprint, Remembered};
use crate::stored::{decode_results, encode_results};
use crate::{Applied, Marks};

/// The tag of the SHA-256 layout.
const TAG_SHA256: u8 = 2;
/// The fixed part of the SHA-256 layout: the tag, four words, the digest.
const HEADER_LEN: usize = 1 + 8 + FINGERPRINT_LEN + 24;
/// The fixed part of the FNV layout: five big-endian words.
const FNV_HEADER_LEN: usize = 40;

/// The stored bytes of `remembered`, recorded as the lock's `sequence`-th
/// id. This version writes SHA-256 records only (the engine refuses a
/// request whose digest is not [`FINGERPRINT_LEN`] bytes before queueing
/// it); the FNV layout is written for tests of reading it.
pub(super) fn encode(remembered: &Remembered, sequence: u64) -> Vec<u8> {
    let applied = &remembered.applied;
    let mut out = Vec::with_capacity(HEADER_LEN + applied.results.len());
    match &remembered.fingerprint {
        Fingerprint::Digest(digest) => {
            out.push(TAG_SHA256);
            out.extend_from_slice(&sequence.to_be_bytes());
            out.extend_from_slice(digest);
        }
        Fingerprint::LegacyFnv(fnv) => {
            out.extend_from_slice(&sequence.to_be_bytes());
            out.extend_from_slice(&fnv.to_be_bytes());
        }
    }
    out.extend_from_slice(&applied.marks.exclusive.to_be_bytes());
    out.extend_from_slice(&applied.marks.shared.to_be_bytes());
    out.extend_from_slice(&applied.commit_seq.to_be_bytes());
    out.extend(encode_results(&applied.results));
    out
}

/// The record in `bytes`, as a replay answers it (`replayed`); `None` if
/// they do not decode.
pub(super) fn decode(bytes: &[u8]) -> Option<Remembered> {
    let word = |bytes: &[u8], at: usize| -> Option<u64> {
        Some(u64::from_be_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
    };
    let (fingerprint, rest, results) = match bytes.first()? {
        &TAG_SHA256 => {
            let (header, results) = bytes.split_at_checked(HEADER_LEN)?;
            let digest = header[9..9 + FINGERPRINT_LEN].to_vec();
            (
                Fingerprint::Digest(digest),
                &header[9 + FINGERPRINT_LEN..],
                results,
            )
        }
        0 => {
            let (header, results) = bytes.split_at_checked(FNV_HEADER_LEN)?;
            let fnv = word(header, 8)?;
            (Fingerprint::LegacyFnv(fnv), &header[16..], results)
        }
        _ => return None,
    };
    Some(Remembered {
        fingerprint,
        applied: Applied {
            results: decode_results(results)?,
            marks: Marks {
                exclusive: word(rest, 0)?,
                shared: word(rest, 8)?,
            },
            commit_seq: word(rest, 16)?,
            replayed: true,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OpResult;

    fn remembered(fingerprint: Fingerprint) -> Remembered {
        Remembered {
            fingerprint,
            applied: Applied {
                results: vec![OpResult::Created, OpResult::Absent, OpResult::Swapped],
                marks: Marks {
                    exclusive: 9,
                    shared: 4,
                },
                commit_seq: 12,
                replayed: true,
            },
        }
    }

    #[test]
    fn records_round_trip_and_refuse_garbage() {
        let record = remembered(Fingerprint::Digest(vec![7; FINGERPRINT_LEN]));
        assert_eq!(decode(&encode(&record, 5)), Some(record));
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[TAG_SHA256; HEADER_LEN - 1]), None);
        let mut bad_result = vec![TAG_SHA256; HEADER_LEN];
        bad_result.push(9);
        assert_eq!(decode(&bad_result), None);
        assert_eq!(decode(&[1; 80]), None, "an unknown layout");
    }

    #[test]
    fn records_of_earlier_versions_are_read_with_their_fnv_fingerprint() {
        let record = remembered(Fingerprint::LegacyFnv(77));
        let bytes = encode(&record, 5);
        assert_eq!(bytes.len(), FNV_HEADER_LEN + 3, "the earlier layout");
        assert_eq!(decode(&bytes), Some(record));
        assert_eq!(decode(&bytes[..39]), None);
    }
}
