//! How marks are stored in their rows (op results are
//! `palisade_store::stored::result_byte`s).

use palisade_store::Marks;

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
}
