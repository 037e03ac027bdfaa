//! The bytes every engine stores the same way: a lock's state (its marks
//! and how many request ids it has recorded) and the results of a write's
//! ops in an idempotency record.
//!
//! sled and etcd keep [`LockState`] in these 24 bytes; sled, etcd and
//! PostgreSQL (whose `palisade_store_write` function writes the same
//! numbers) keep one [`result_byte`] per op. The layouts are on disk and in
//! running clusters: never renumber them.

use crate::{Marks, OpResult};

/// What an engine keeps per lock: its marks and how many idempotency ids it
/// has ever recorded, stored as `[H_excl][H_shared][recorded]`, three u64
/// big-endian. A lock never seen has the default state (all zero).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockState {
    /// The high-water marks. Every write of the lock rewrites the record
    /// holding them in its atomic step, which is what makes "check, mark
    /// update and write" one step.
    pub marks: Marks,
    /// How many request ids the lock has ever recorded: the next one is
    /// numbered `recorded` (the engine's window keeps the last ones).
    pub recorded: u64,
}

impl LockState {
    /// The length of [`LockState::encode`]'s bytes.
    pub const LEN: usize = 24;

    /// The stored bytes.
    pub fn encode(&self) -> [u8; LockState::LEN] {
        let mut out = [0; LockState::LEN];
        out[..8].copy_from_slice(&self.marks.exclusive.to_be_bytes());
        out[8..16].copy_from_slice(&self.marks.shared.to_be_bytes());
        out[16..].copy_from_slice(&self.recorded.to_be_bytes());
        out
    }

    /// The state in `bytes`, or `None` if they are not [`LockState::LEN`]
    /// long.
    pub fn decode(bytes: &[u8]) -> Option<LockState> {
        let bytes: &[u8; LockState::LEN] = bytes.try_into().ok()?;
        let word = |i: usize| {
            let mut word = [0; 8];
            word.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
            u64::from_be_bytes(word)
        };
        Some(LockState {
            marks: Marks {
                exclusive: word(0),
                shared: word(1),
            },
            recorded: word(2),
        })
    }

    /// The lowest id number a lock in this state still remembers when it
    /// keeps the last `window` ids: ids numbered below it may be evicted.
    pub fn first_kept(&self, window: u64) -> u64 {
        self.recorded.saturating_sub(window)
    }
}

/// An op result as one stored byte: 1 created, 2 replaced, 3 deleted,
/// 4 absent, 5 swapped.
pub fn result_byte(result: OpResult) -> u8 {
    match result {
        OpResult::Created => 1,
        OpResult::Replaced => 2,
        OpResult::Deleted => 3,
        OpResult::Absent => 4,
        OpResult::Swapped => 5,
    }
}

/// The op result stored as `byte`; `None` for a byte no version wrote.
pub fn result_of_byte(byte: u8) -> Option<OpResult> {
    Some(match byte {
        1 => OpResult::Created,
        2 => OpResult::Replaced,
        3 => OpResult::Deleted,
        4 => OpResult::Absent,
        5 => OpResult::Swapped,
        _ => return None,
    })
}

/// One [`result_byte`] per result, in order.
pub fn encode_results(results: &[OpResult]) -> Vec<u8> {
    results.iter().map(|result| result_byte(*result)).collect()
}

/// The inverse of [`encode_results`]; `None` if any byte is unknown.
pub fn decode_results(bytes: &[u8]) -> Option<Vec<OpResult>> {
    bytes.iter().map(|byte| result_of_byte(*byte)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_refuses_other_lengths() {
        let state = LockState {
            marks: Marks {
                exclusive: 3,
                shared: u64::MAX,
            },
            recorded: 17,
        };
        assert_eq!(LockState::decode(&state.encode()), Some(state));
        assert_eq!(LockState::decode(&[1, 2, 3]), None);
        assert_eq!(LockState::decode(&[0; 25]), None);
        assert_eq!(
            LockState::decode(&[0; 24]),
            Some(LockState::default()),
            "all zero is the state of a lock never seen"
        );
    }

    #[test]
    fn the_window_keeps_the_last_ids() {
        let state = |recorded| LockState {
            marks: Marks::ZERO,
            recorded,
        };
        assert_eq!(state(3).first_kept(4), 0);
        assert_eq!(state(10).first_kept(4), 6);
    }

    #[test]
    fn results_round_trip_with_the_stored_numbers() {
        let all = OpResult::ALL;
        assert_eq!(encode_results(&all), [1, 2, 3, 4, 5]);
        assert_eq!(decode_results(&encode_results(&all)), Some(all.to_vec()));
        assert_eq!(decode_results(&[1, 0]), None);
        assert_eq!(decode_results(&[6]), None);
    }
}
