//! The key layout in etcd, and what the keys' values say.
//!
//! For a lock name `N` under prefix `P`, with `S = N.key_segment()` (the name
//! percent-encoded, so `S` never contains `/`), everything about the lock
//! lives in one directory, `P/S/`:
//!
//! ```text
//! P/S/<lease id, 16 hex digits>        one contender (waiter or holder) per session,
//!                                      attached to the session's lease
//! P/S/delay-<lease id, 16 hex digits>  a lock-delay marker, written when a session with
//!                                      a lock-delay is granted the lock, attached to the
//!                                      session's delay lease
//! ```
//!
//! One range read of the directory therefore returns the whole state of the
//! lock: the queue and the markers. Every read uses the directory with its
//! trailing separator. Because `S` contains no `/`, the directory of `a` is
//! never a prefix of the directory of `a/b` (`P/a%2Fb/`) or `ab` (`P/ab/`):
//! this is what keeps the etcdctl prefix pitfall out.

use palisade_core::{LockName, Mode};

/// The keys of one lock name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockKeys {
    /// `P/S/`: the lock's directory.
    dir: String,
}

/// What tells a marker key from a contender key in the directory.
const MARKER: &str = "delay-";

impl LockKeys {
    pub(crate) fn new(prefix: &str, name: &LockName) -> Self {
        LockKeys {
            dir: format!("{prefix}/{}/", name.key_segment()),
        }
    }

    /// The lock's directory, with its trailing `/`.
    pub(crate) fn dir(&self) -> &str {
        &self.dir
    }

    /// The contender key of the session with lease `lease`.
    pub(crate) fn contender(&self, lease: i64) -> String {
        self.key("", lease)
    }

    /// The lock-delay marker key of the session with lease `lease`.
    pub(crate) fn marker(&self, lease: i64) -> String {
        self.key(MARKER, lease)
    }

    /// `<dir><kind><lease hex>`, in one allocation: every acquire and
    /// release names a key, so no formatting machinery here.
    fn key(&self, kind: &str, lease: i64) -> String {
        let lease = LeaseHex::new(lease);
        let mut key = String::with_capacity(self.dir.len() + kind.len() + 16);
        key.push_str(&self.dir);
        key.push_str(kind);
        key.push_str(lease.as_str());
        key
    }

    /// What a key of the directory is.
    pub(crate) fn classify(&self, key: &[u8]) -> Option<KeyKind> {
        let rest = key.strip_prefix(self.dir.as_bytes())?;
        match rest.strip_prefix(MARKER.as_bytes()) {
            Some(lease) => parse_lease(lease).map(KeyKind::Marker),
            None => parse_lease(rest).map(KeyKind::Contender),
        }
    }
}

/// A key of a lock's directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyKind {
    /// The contender key of this lease.
    Contender(i64),
    /// The lock-delay marker of this lease.
    Marker(i64),
}

/// A lease id as it appears in keys and sequencers: 16 lower-case hex digits
/// (etcdctl prints lease ids in hex too), the id's two's complement for a
/// negative one. Kept on the stack until written into a key.
struct LeaseHex([u8; 16]);

impl LeaseHex {
    fn new(lease: i64) -> Self {
        let mut digits = [b'0'; 16];
        // Eight bytes always make sixteen digits: the error cannot happen.
        let _ = hex::encode_to_slice(lease.to_be_bytes(), &mut digits);
        LeaseHex(digits)
    }

    fn as_str(&self) -> &str {
        // Hex digits are ASCII.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// [`LeaseHex`] as a string.
pub(crate) fn lease_hex(lease: i64) -> String {
    LeaseHex::new(lease).as_str().to_owned()
}

fn parse_lease(text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text).ok()?;
    if text.len() != 16 {
        return None;
    }
    u64::from_str_radix(text, 16)
        .ok()
        .and_then(|lease| i64::try_from(lease).ok())
}

/// The value of a contender key: `mode=<mode>;holder=<holder>`.
///
/// Waiters read the mode of the contenders ahead of them (a reader waits
/// only for writers); the holder is for operators reading the keys.
pub(crate) fn contender_value(mode: Mode, holder: &str) -> String {
    format!("mode={};holder={holder}", mode.as_str())
}

/// The value of a lock-delay marker:
/// `mode=<mode>;generation=<create revision>;delay_ms=<delay>;holder=<holder>`.
pub(crate) fn marker_value(mode: Mode, generation: i64, delay_ms: u128, holder: &str) -> String {
    format!(
        "mode={};generation={generation};delay_ms={delay_ms};holder={holder}",
        mode.as_str()
    )
}

/// The mode recorded in a contender's or marker's value. Anything
/// unreadable counts as exclusive: the conservative reading, since an
/// exclusive contender blocks everyone behind it.
pub(crate) fn mode_of(value: &[u8]) -> Mode {
    let text = std::str::from_utf8(value).unwrap_or("");
    let mode = text
        .strip_prefix("mode=")
        .and_then(|rest| rest.split(';').next())
        .unwrap_or("");
    if mode == Mode::Shared.as_str() {
        Mode::Shared
    } else {
        Mode::Exclusive
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(name: &str) -> LockKeys {
        LockKeys::new("/p", &LockName::new(name).unwrap())
    }

    #[test]
    fn layout() {
        let a = keys("a");
        assert_eq!(a.dir(), "/p/a/");
        assert_eq!(a.contender(0x694d), "/p/a/000000000000694d");
        assert_eq!(a.marker(0x694d), "/p/a/delay-000000000000694d");
        assert_eq!(
            a.classify(b"/p/a/000000000000694d"),
            Some(KeyKind::Contender(0x694d))
        );
        assert_eq!(
            a.classify(b"/p/a/delay-000000000000694d"),
            Some(KeyKind::Marker(0x694d))
        );
        assert_eq!(a.classify(b"/p/a/694d"), None);
        assert_eq!(a.classify(b"/p/a/ffffffffffffffff"), None);
        assert_eq!(a.classify(b"/p/a/delay-"), None);
        assert_eq!(a.classify(b"/p/ab/000000000000694d"), None);
    }

    /// The etcdctl pitfall: `a`, `a/b`, `ab` and `a/bc` must have
    /// directories none of which is a prefix of another's keys.
    #[test]
    fn directories_never_nest() {
        let names = [
            "a", "a/b", "ab", "a/bc", "a!delay", "a%2Fb", "a b", "delay-",
        ];
        let all: Vec<LockKeys> = names.iter().map(|n| keys(n)).collect();
        for (i, left) in all.iter().enumerate() {
            for (j, right) in all.iter().enumerate() {
                if i == j {
                    continue;
                }
                for key in [right.contender(1), right.marker(1)] {
                    assert!(
                        !key.starts_with(left.dir()),
                        "{key} is inside {}",
                        left.dir()
                    );
                    assert_eq!(left.classify(key.as_bytes()), None);
                }
            }
        }
    }

    #[test]
    fn lease_ids_print_as_sixteen_hex_digits() {
        for lease in [0, 1, 0x694d, i64::MAX, -1, i64::MIN] {
            assert_eq!(lease_hex(lease), format!("{lease:016x}"));
        }
    }

    #[test]
    fn values() {
        assert_eq!(
            mode_of(contender_value(Mode::Shared, "w/1").as_bytes()),
            Mode::Shared
        );
        assert_eq!(
            mode_of(marker_value(Mode::Shared, 7, 2000, "w").as_bytes()),
            Mode::Shared
        );
        assert_eq!(
            mode_of(contender_value(Mode::Exclusive, "w").as_bytes()),
            Mode::Exclusive
        );
        assert_eq!(mode_of(b"garbage"), Mode::Exclusive);
        assert_eq!(mode_of(b"mode=sharedish"), Mode::Exclusive);
    }
}
