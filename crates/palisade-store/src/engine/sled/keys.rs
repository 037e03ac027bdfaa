//! How a lock's keyspace and metadata are laid out in sled.
//!
//! Two trees, touched together by every group of writes:
//!
//! - `data`: `<lock segment> "/" <user key>` → value.
//! - `meta`: per lock, `<lock segment>` → its [`LockState`]; the idempotency
//!   records `<lock segment> "/r/" <request id>`; and the ring of recent
//!   ids `<lock segment> "/s/" <slot: u64 BE>` → request id. And two keys
//!   of the store's own, starting with a NUL byte: the format and the last
//!   commit sequence number.
//!
//! The lock segment is [`LockName::key_segment`], which contains only
//! `A-Z a-z 0-9 - . _ ~ %`, never `/`. So the first `/` of a stored key ends
//! the segment, and lock `a` with key `b/c` (`a/b/c`) can never collide with
//! lock `a/b` with key `c` (`a%2Fb/c`).
//!
//! One tree per lock was the alternative. It was not taken: sled
//! transactions span a fixed set of trees, opening a tree per request costs
//! a lookup in sled's tree registry, and thousands of locks would mean
//! thousands of trees that are never dropped.

use palisade_core::LockName;

use crate::stored::LockState;

/// The key of sled's `meta` tree that records the on-disk format. It starts
/// with a NUL byte, which no lock segment contains.
pub(super) const FORMAT_KEY: &[u8] = b"\0palisade-store-format";

/// The key of sled's `meta` tree that holds the last commit sequence
/// number given out (`u64`, big-endian), written with the group that gave
/// it out, so it is exactly as durable as that group (`committer.rs`).
pub(super) const COMMIT_SEQ_KEY: &[u8] = b"\0palisade-commit-seq";

/// The format this version writes and reads.
pub(super) const FORMAT_VERSION: &[u8] = b"1";

/// The stored prefix of one lock, computed once per request.
#[derive(Debug, Clone)]
pub(super) struct LockKeys {
    segment: Vec<u8>,
}

impl LockKeys {
    pub(super) fn new(lock: &LockName) -> Self {
        LockKeys {
            segment: lock.key_segment().into_bytes(),
        }
    }

    fn with_suffix(&self, infix: &[u8], suffix: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.segment.len() + infix.len() + suffix.len());
        key.extend_from_slice(&self.segment);
        key.extend_from_slice(infix);
        key.extend_from_slice(suffix);
        key
    }

    /// The `data` key of `user_key`.
    pub(super) fn data(&self, user_key: &[u8]) -> Vec<u8> {
        self.with_suffix(b"/", user_key)
    }

    /// The `meta` key of the lock's state.
    pub(super) fn state(&self) -> &[u8] {
        &self.segment
    }

    /// The `meta` key of an idempotency record.
    pub(super) fn request(&self, request_id: &str) -> Vec<u8> {
        self.with_suffix(b"/r/", request_id.as_bytes())
    }

    /// The `meta` key of a ring slot.
    pub(super) fn slot(&self, slot: u64) -> Vec<u8> {
        self.with_suffix(b"/s/", &slot.to_be_bytes())
    }
}

/// The lock's state as stored under [`LockKeys::state`]: absent is the
/// state of a lock never seen; `None` if the stored bytes do not decode.
pub(super) fn decode_state(raw: Option<&[u8]>) -> Option<LockState> {
    raw.map_or(Some(LockState::default()), LockState::decode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_and_key_never_collide_across_locks() {
        let a = LockKeys::new(&LockName::new("a").unwrap());
        let ab = LockKeys::new(&LockName::new("a/b").unwrap());
        assert_ne!(a.data(b"b/c"), ab.data(b"c"));
        assert_ne!(
            a.data(b"/x"),
            LockKeys::new(&LockName::new("a/").unwrap()).data(b"x")
        );
        // Metadata keys of one lock are never another lock's state key.
        assert_ne!(a.request("x"), ab.state());
        assert!(!FORMAT_KEY.starts_with(a.state()));
    }

    #[test]
    fn an_absent_state_is_zero_and_a_damaged_one_is_not_read() {
        assert_eq!(decode_state(None), Some(LockState::default()));
        assert_eq!(decode_state(Some(&[1, 2, 3])), None);
    }
}
