//! Where a lock's fence lives in Redis, and which keys it may guard.
//!
//! The marks record of a lock is `<prefix>{<segment>}:marks`, where the
//! segment is [`LockName::key_segment`] (the name percent-encoded, with no
//! `{`, `}`, `/` or `:`), the hash tag the Redis lock backend gives the
//! lock's own keys. Redis Cluster hashes only the tag, so the marks record,
//! the lock backend's keys and every data key carrying the same tag share
//! one slot, and one function call can change them all atomically.

use bytes::Bytes;
use palisade_core::LockName;

use crate::RedisFenceError;

/// The number of Redis Cluster hash slots.
const SLOTS: u16 = 16384;

/// The hash slot of `key`, as Redis Cluster computes it: CRC16 (XMODEM)
/// of the hash tag (the text between the first `{` and the next `}`, when
/// not empty), else of the whole key, modulo 16384.
///
/// ```
/// use palisade_fence_redis::slot;
///
/// assert_eq!(slot(b"foo"), 12182); // CLUSTER KEYSLOT foo
/// assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
/// ```
pub fn slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hashed_part(key)) % SLOTS
}

/// What Redis Cluster hashes of `key`: its hash tag, else all of it.
fn hashed_part(key: &[u8]) -> &[u8] {
    key.iter()
        .position(|byte| *byte == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|byte| *byte == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key)
}

/// A lock's place in Redis: its hash tag, its marks record, its slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockKeys {
    lock: LockName,
    tag: String,
    marks: String,
    /// `marks` as the bytes every request sends (shared, not copied).
    marks_key: Bytes,
    slot: u16,
}

impl LockKeys {
    /// The keys of `lock` under `prefix`.
    ///
    /// ```
    /// use palisade_core::LockName;
    /// use palisade_fence_redis::LockKeys;
    ///
    /// let keys = LockKeys::new("palisade:", &LockName::new("flash-sale/sku-42").unwrap());
    /// assert_eq!(keys.marks(), "palisade:{flash-sale%2Fsku-42}:marks");
    /// assert_eq!(keys.data_key("stock"), "{flash-sale%2Fsku-42}:stock");
    /// ```
    pub fn new(prefix: &str, lock: &LockName) -> Self {
        let tag = format!("{{{}}}", lock.key_segment());
        let marks = format!("{prefix}{tag}:marks");
        LockKeys {
            lock: lock.clone(),
            slot: slot(marks.as_bytes()),
            tag,
            marks_key: Bytes::copy_from_slice(marks.as_bytes()),
            marks,
        }
    }

    /// The lock.
    pub fn lock(&self) -> &LockName {
        &self.lock
    }

    /// The lock's hash tag, `{<segment>}`.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The marks record: a string `x s n`, decimals, `x` = `H_excl`, `s` =
    /// `H_shared`, `n` the lock's write sequence.
    pub fn marks(&self) -> &str {
        &self.marks
    }

    pub(crate) fn marks_key(&self) -> Bytes {
        self.marks_key.clone()
    }

    /// The hash slot of every key of the lock.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// A data key of the lock: `{<segment>}:<name>`.
    pub fn data_key(&self, name: &str) -> String {
        format!("{}:{name}", self.tag)
    }

    /// Refuses `key` unless it is in the lock's slot.
    pub(crate) fn check(&self, key: &[u8]) -> Result<(), RedisFenceError> {
        // The lock's own tag (the usual case) needs no CRC.
        if hashed_part(key) == hashed_part(self.tag.as_bytes()) {
            return Ok(());
        }
        let key_slot = slot(key);
        if key_slot == self.slot {
            return Ok(());
        }
        let shown = String::from_utf8_lossy(&key[..key.len().min(64)]).into_owned();
        Err(RedisFenceError::WrongSlot {
            lock: self.lock.clone(),
            key: shown,
            key_slot,
            lock_slot: self.slot,
            tag: self.tag.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.0.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
        assert_eq!(slot(b"{foo}bar"), slot(b"foo"));
        // An empty tag hashes the whole key; only the first `{` counts.
        assert_eq!(
            slot(b"{}foo"),
            crc16::State::<crc16::XMODEM>::calculate(b"{}foo") % SLOTS
        );
        assert_eq!(slot(b"a{b}{c}"), slot(b"b"));
    }

    #[test]
    fn names_sharing_a_prefix_get_their_own_tags() {
        let tags: Vec<String> = ["a", "a/b", "ab", "{a}", "a:b"]
            .iter()
            .map(|name| {
                LockKeys::new("p:", &LockName::new(*name).unwrap())
                    .tag()
                    .to_owned()
            })
            .collect();
        for (index, tag) in tags.iter().enumerate() {
            assert_eq!(
                tags.iter().filter(|other| *other == tag).count(),
                1,
                "{tag}"
            );
            assert_eq!(tag.matches('{').count(), 1, "{index}: {tag}");
        }
    }

    #[test]
    fn keys_outside_the_slot_are_refused() {
        let keys = LockKeys::new("palisade:", &LockName::new("orders/42").unwrap());
        assert!(keys.check(keys.data_key("total").as_bytes()).is_ok());
        assert!(keys.check(keys.marks().as_bytes()).is_ok());
        let error = keys.check(b"total").unwrap_err().to_string();
        assert!(error.contains("`{orders%2F42}`"), "{error}");
    }
}
