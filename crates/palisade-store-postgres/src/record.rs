//! How marks and idempotency records are stored in their rows.

use palisade_store::{Marks, OpResult};

/// Marks as `BIGINT`s: the `u64` bit pattern, so every generation fits
/// (SQL compares them through `palisade_store_u64`).
pub(crate) fn marks_to_db(marks: Marks) -> (i64, i64) {
    (marks.exclusive as i64, marks.shared as i64)
}

/// The inverse of [`marks_to_db`].
pub(crate) fn marks_from_db((exclusive, shared): (i64, i64)) -> Marks {
    Marks {
        exclusive: exclusive as u64,
        shared: shared as u64,
    }
}

/// One byte per op result, as `palisade_store_write` records them.
#[cfg(test)]
fn encode_results(results: &[OpResult]) -> Vec<u8> {
    results
        .iter()
        .map(|result| match result {
            OpResult::Created => 1,
            OpResult::Replaced => 2,
            OpResult::Deleted => 3,
            OpResult::Absent => 4,
            OpResult::Swapped => 5,
        })
        .collect()
}

/// The inverse of [`encode_results`]; `None` for a byte no version wrote.
pub(crate) fn decode_results(bytes: &[u8]) -> Option<Vec<OpResult>> {
    bytes
        .iter()
        .map(|byte| {
            Some(match byte {
                1 => OpResult::Created,
                2 => OpResult::Replaced,
                3 => OpResult::Deleted,
                4 => OpResult::Absent,
                5 => OpResult::Swapped,
                _ => return None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_round_trip_over_the_whole_u64_range() {
        for value in [0, 1, i64::MAX as u64, i64::MAX as u64 + 1, u64::MAX] {
            let marks = Marks {
                exclusive: value,
                shared: u64::MAX - value,
            };
            assert_eq!(marks_from_db(marks_to_db(marks)), marks);
        }
    }

    #[test]
    fn results_round_trip_and_unknown_bytes_are_refused() {
        let all = [
            OpResult::Created,
            OpResult::Replaced,
            OpResult::Deleted,
            OpResult::Absent,
            OpResult::Swapped,
        ];
        assert_eq!(decode_results(&encode_results(&all)), Some(all.to_vec()));
        assert_eq!(decode_results(&[1, 9]), None);
    }
}
