//! The sled engine's idempotency record: a remembered outcome, as stored.

use crate::{Applied, Marks, OpResult};

/// A remembered outcome, as stored:
/// `[slot sequence: u64 BE][fingerprint: u64 BE][H_excl: u64 BE][H_shared: u64 BE][commit seq: u64 BE][one byte per op result]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    pub(super) fingerprint: u64,
    pub(super) applied: Applied,
}

/// The fixed part of a [`Record`]: five big-endian words.
const HEADER_LEN: usize = 40;

impl Record {
    pub(super) fn encode(&self, sequence: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.applied.results.len());
        out.extend_from_slice(&sequence.to_be_bytes());
        out.extend_from_slice(&self.fingerprint.to_be_bytes());
        out.extend_from_slice(&self.applied.marks.exclusive.to_be_bytes());
        out.extend_from_slice(&self.applied.marks.shared.to_be_bytes());
        out.extend_from_slice(&self.applied.commit_seq.to_be_bytes());
        out.extend(self.applied.results.iter().map(|r| r.to_byte()));
        out
    }

    pub(super) fn decode(bytes: &[u8]) -> Option<Record> {
        let (header, results) = bytes.split_at_checked(HEADER_LEN)?;
        let word = |i: usize| u64::from_be_bytes(header[i * 8..i * 8 + 8].try_into().unwrap());
        let results = results
            .iter()
            .map(|b| OpResult::from_byte(*b))
            .collect::<Option<Vec<_>>>()?;
        Some(Record {
            fingerprint: word(1),
            applied: Applied {
                results,
                marks: Marks {
                    exclusive: word(2),
                    shared: word(3),
                },
                commit_seq: word(4),
                replayed: true,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_refuse_garbage() {
        let record = Record {
            fingerprint: 77,
            applied: Applied {
                results: vec![OpResult::Created, OpResult::Absent, OpResult::Swapped],
                marks: Marks {
                    exclusive: 9,
                    shared: 4,
                },
                commit_seq: 12,
                replayed: true,
            },
        };
        assert_eq!(Record::decode(&record.encode(5)), Some(record));
        assert_eq!(Record::decode(&[0; 39]), None);
        assert_eq!(Record::decode(&[[0; 40].as_slice(), &[9]].concat()), None);
    }
}
