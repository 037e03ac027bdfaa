//! Lock names: what is locked.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::encoding;

/// The name of a lock, such as `orders/42`.
///
/// A valid name is 1 to [`LockName::MAX_LEN`] bytes of UTF-8 with no control
/// characters (C0, DEL, C1). Everything else is allowed, including `/`,
/// spaces and `;`: wherever a name travels inside another syntax (the
/// sequencer text form, an etcd key, a Redis key) it is percent-encoded
/// first, so no name can be mistaken for another or for a prefix of another.
///
/// Names are isolated from each other: a lock on `a/b` never blocks `a` or
/// `a/bc`. Backends keep that promise by building keys from
/// [`LockName::key_segment`], in which `/` is escaped.
///
/// Cheap to clone: clones share the text (hold tables, sequencers and
/// guards each keep the name of every lock they track).
///
/// ```
/// use palisade_core::LockName;
///
/// let name = LockName::new("orders/42")?;
/// assert_eq!(name.as_str(), "orders/42");
/// assert_eq!(name.key_segment(), "orders%2F42");
///
/// assert!(LockName::new("").is_err());
/// assert!(LockName::new("bad\nname").is_err());
/// # Ok::<(), palisade_core::LockNameError>(())
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockName(Arc<str>);

/// Why a string is not a valid [`LockName`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockNameError {
    /// The name is the empty string.
    #[error("lock name is empty")]
    Empty,
    /// The name is longer than [`LockName::MAX_LEN`] bytes.
    #[error("lock name is {len} bytes long; the limit is {max} bytes", max = LockName::MAX_LEN)]
    TooLong {
        /// The length that was offered, in bytes.
        len: usize,
    },
    /// The name contains a control character.
    #[error("lock name contains control character {character:?} at byte {index}")]
    ControlChar {
        /// Byte offset of the offending character.
        index: usize,
        /// The offending character.
        character: char,
    },
}

impl LockName {
    /// The longest valid name, in bytes.
    pub const MAX_LEN: usize = 512;

    /// Validates `name` and wraps it.
    pub fn new(name: impl Into<String>) -> Result<Self, LockNameError> {
        let name = name.into();
        validate(&name)?;
        Ok(LockName(name.into()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The shell command that lifts this lock's generation floor above the
    /// resource servers' marks after the lock service lost its counter, as
    /// refusals print it: `palisade raise-floor orders/42`, the name quoted
    /// when a shell would split or expand it.
    ///
    /// ```
    /// use palisade_core::LockName;
    ///
    /// let name = LockName::new("it's").unwrap();
    /// assert_eq!(name.raise_floor_command(), r"palisade raise-floor 'it'\''s'");
    /// ```
    pub fn raise_floor_command(&self) -> String {
        let name = self.as_str();
        let plain = name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/-_.:@+=,%".contains(c));
        // A name that starts with `-` would read as a flag.
        let end_of_flags = if name.starts_with('-') { "-- " } else { "" };
        if plain {
            format!("palisade raise-floor {end_of_flags}{name}")
        } else {
            let quoted = name.replace('\'', "'\\''");
            format!("palisade raise-floor {end_of_flags}'{quoted}'")
        }
    }

    /// The name percent-encoded so that it contains only `A-Z a-z 0-9 - . _ ~`
    /// and `%XX` escapes (upper-case hex).
    ///
    /// Two different names always give two different segments, and no
    /// segment contains `/`, `{`, `}` or `:`. Backends build storage keys from
    /// it: `<prefix>/<segment>/...` in etcd, `<prefix>{<segment>}:...` in
    /// Redis. That is what makes `a` and `a/b` different locks rather than a
    /// prefix and its child.
    pub fn key_segment(&self) -> String {
        encoding::encode(&self.0, encoding::KEY_SEGMENT)
    }

    /// The key segment of every name that starts with `prefix` begins with
    /// this text (the encoding is byte by byte), so a backend can filter
    /// names by prefix on encoded keys. `prefix` need not be a valid name:
    /// the empty prefix gives the empty text.
    ///
    /// ```
    /// use palisade_core::LockName;
    ///
    /// assert_eq!(LockName::key_segment_prefix("a/b"), "a%2Fb");
    /// assert!(LockName::new("a/bc")?.key_segment().starts_with("a%2Fb"));
    /// assert!(!LockName::new("ab")?.key_segment().starts_with("a%2Fb"));
    /// # Ok::<(), palisade_core::LockNameError>(())
    /// ```
    pub fn key_segment_prefix(prefix: &str) -> String {
        encoding::encode(prefix, encoding::KEY_SEGMENT)
    }

    /// Reverses [`LockName::key_segment`]. Accepts only the exact output of
    /// `key_segment`, so a key can be mapped back to exactly one name.
    pub fn from_key_segment(segment: &str) -> Option<Self> {
        let decoded = encoding::decode_canonical(segment, encoding::KEY_SEGMENT).ok()?;
        LockName::new(decoded).ok()
    }
}

fn validate(name: &str) -> Result<(), LockNameError> {
    if name.is_empty() {
        return Err(LockNameError::Empty);
    }
    if name.len() > LockName::MAX_LEN {
        return Err(LockNameError::TooLong { len: name.len() });
    }
    if let Some((index, character)) = name.char_indices().find(|(_, c)| c.is_control()) {
        return Err(LockNameError::ControlChar { index, character });
    }
    Ok(())
}

/// Why `prefix` cannot be the key prefix of a lock or storage service
/// (etcd keys, ZooKeeper paths): empty, longer than 256 bytes, ending with
/// `/`, or holding a control character; `None` when it can. A service adds
/// its own rules (a leading `/`, reserved paths) before or after these.
///
/// ```
/// use palisade_core::key_prefix_problem;
///
/// assert_eq!(key_prefix_problem("/palisade/locks"), None);
/// assert_eq!(key_prefix_problem("locks/"), Some("must not end with `/`"));
/// ```
pub fn key_prefix_problem(prefix: &str) -> Option<&'static str> {
    if prefix.is_empty() {
        Some("must not be empty")
    } else if prefix.len() > 256 {
        Some("must be at most 256 bytes")
    } else if prefix.ends_with('/') {
        Some("must not end with `/`")
    } else if prefix.chars().any(char::is_control) {
        Some("must not contain control characters")
    } else {
        None
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl AsRef<str> for LockName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl FromStr for LockName {
    type Err = LockNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LockName::new(s)
    }
}

impl TryFrom<&str> for LockName {
    type Error = LockNameError;

    fn try_from(value: &str) -> Result<Self, Self::Error> {
        LockName::new(value)
    }
}

impl TryFrom<String> for LockName {
    type Error = LockNameError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        LockName::new(value)
    }
}

impl From<LockName> for String {
    fn from(name: LockName) -> String {
        name.0.as_ref().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: Result<(), LockNameError>) {
        assert_eq!(
            LockName::new(input).map(|_| ()),
            expected,
            "input {input:?}"
        );
    }

    #[test]
    fn validation_table() {
        check("orders/42", Ok(()));
        check("a", Ok(()));
        check("with space; and=signs %", Ok(()));
        check("日本語/ロック", Ok(()));
        check(&"x".repeat(LockName::MAX_LEN), Ok(()));
        check("", Err(LockNameError::Empty));
        check(
            &"x".repeat(LockName::MAX_LEN + 1),
            Err(LockNameError::TooLong { len: 513 }),
        );
        check(
            "a\u{0}b",
            Err(LockNameError::ControlChar {
                index: 1,
                character: '\u{0}',
            }),
        );
        check(
            "tab\there",
            Err(LockNameError::ControlChar {
                index: 3,
                character: '\t',
            }),
        );
        check(
            "del\u{7f}",
            Err(LockNameError::ControlChar {
                index: 3,
                character: '\u{7f}',
            }),
        );
        check(
            "c1\u{85}",
            Err(LockNameError::ControlChar {
                index: 2,
                character: '\u{85}',
            }),
        );
    }

    #[test]
    fn key_segments_isolate_prefixes() {
        let names = ["a", "a/b", "ab", "a/bc", "a%2Fb", "{a}", "a:b"];
        let segments: Vec<String> = names
            .iter()
            .map(|n| LockName::new(*n).unwrap().key_segment())
            .collect();
        for (i, a) in segments.iter().enumerate() {
            assert!(!a.contains('/') && !a.contains('{') && !a.contains(':'));
            for (j, b) in segments.iter().enumerate() {
                if i != j {
                    assert_ne!(a, b);
                    // No segment followed by the separator is a prefix of another's key.
                    assert!(!format!("{b}/").starts_with(&format!("{a}/")));
                }
            }
            let back = LockName::from_key_segment(a).unwrap();
            assert_eq!(back.as_str(), names[i]);
        }
    }

    #[test]
    fn from_key_segment_rejects_non_canonical() {
        assert!(LockName::from_key_segment("a%2fb").is_none());
        assert!(LockName::from_key_segment("%61").is_none());
        assert!(LockName::from_key_segment("a/b").is_none());
        assert!(LockName::from_key_segment("").is_none());
    }
}
