//! What the fence writes besides the user's bytes: the per-lock fence
//! object's text, and the metadata every fenced object and log entry
//! carries.

use std::borrow::Cow;

use object_store::path::{Path, PathPart};
use object_store::{Attribute, AttributeValue, Attributes};
use palisade_core::LockName;
use palisade_core::marks::Marks;

use crate::FenceError;

/// The folder (under the configured prefix) where the fence keeps its own
/// objects; user paths may not start with it.
pub const RESERVED: &str = ".palisade";

/// Metadata names (S3: `x-amz-meta-<name>`).
pub(crate) mod meta {
    /// The lock whose holder wrote the object.
    pub(crate) const LOCK: &str = "palisade-lock";
    /// The writer's generation.
    pub(crate) const GENERATION: &str = "palisade-generation";
    /// The object's version: 1 for the first fenced write, one more for
    /// each write after it. Each write is conditional on the version before
    /// it, so versions are the object's commit order.
    pub(crate) const VERSION: &str = "palisade-version";
    /// A random id per write call, kept by its retries: how an in-doubt
    /// write is recognised when read back.
    pub(crate) const WRITE: &str = "palisade-write";
    /// `1` on a tombstone, the fenced delete's mark.
    pub(crate) const DELETED: &str = "palisade-deleted";
    /// A log entry's marks after it (`<H_excl> <H_shared>`).
    pub(crate) const MARKS: &str = "palisade-marks";
}

/// The fence object of `lock`: `.palisade/fences/<lock, percent-encoded
/// into one path segment>`.
pub(crate) fn fence_path(lock: &LockName) -> Path {
    Path::from_iter([
        PathPart::from(RESERVED),
        PathPart::from("fences"),
        PathPart::from(lock.as_str()),
    ])
}

/// Refuses paths inside [`RESERVED`].
pub(crate) fn check_user_path(path: &Path) -> Result<(), FenceError> {
    match path.parts().next() {
        Some(first) if first.as_ref() == RESERVED => Err(FenceError::ReservedPath {
            path: path.to_string(),
        }),
        _ => Ok(()),
    }
}

/// A new write id: 128 random bits in hex.
pub(crate) fn new_write_id() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// The body of a lock's fence object: its marks and a version that grows
/// with every write of it. The version makes every write's bytes, and so
/// its S3 ETag (the MD5 of the bytes), differ from every earlier one: an
/// `If-Match` taken on an old version can never match again.
///
/// Format v2 adds `settled`: a raise is written unsettled, and settled by
/// a write of the same marks once [`MARKS_REUSE`](crate::MARKS_REUSE) has
/// passed since it landed (docs/object-storage.md). A v1 record (written
/// by a fence that did not wait) reads as unsettled. A v1 reader refuses
/// v2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct FenceRecord {
    pub(crate) marks: Marks,
    pub(crate) version: u64,
    /// At least `MARKS_REUSE` has passed since these marks were raised.
    pub(crate) settled: bool,
}

impl FenceRecord {
    pub(crate) fn encode(&self, lock: &LockName) -> String {
        format!(
            "palisade-fence v2\nlock={lock}\nexclusive={}\nshared={}\nversion={}\nsettled={}\n",
            self.marks.exclusive,
            self.marks.shared,
            self.version,
            u8::from(self.settled)
        )
    }

    pub(crate) fn decode(path: &Path, lock: &LockName, text: &[u8]) -> Result<Self, FenceError> {
        let corrupt = |detail: String| FenceError::Corrupt {
            path: path.to_string(),
            detail,
        };
        let text = std::str::from_utf8(text).map_err(|_| corrupt("not UTF-8".into()))?;
        let mut lines = text.lines();
        let v2 = match lines.next() {
            Some("palisade-fence v2") => true,
            Some("palisade-fence v1") => false,
            _ => return Err(corrupt("no `palisade-fence v2` (or v1) header".into())),
        };
        let mut field = |name: &str| -> Result<&str, FenceError> {
            lines
                .next()
                .and_then(|line| line.strip_prefix(name)?.strip_prefix('='))
                .ok_or_else(|| corrupt(format!("no `{name}=` line")))
        };
        let found = field("lock")?;
        if found != lock.as_str() {
            return Err(corrupt(format!("it fences lock `{found}`, not `{lock}`")));
        }
        let number = |text: &str, name: &str| {
            text.parse::<u64>()
                .map_err(|_| corrupt(format!("`{name}` is not a number")))
        };
        let exclusive = number(field("exclusive")?, "exclusive")?;
        let shared = number(field("shared")?, "shared")?;
        let version = number(field("version")?, "version")?;
        let settled = match v2 {
            true => match field("settled")? {
                "1" => true,
                "0" => false,
                _ => return Err(corrupt("`settled` is neither 0 nor 1".into())),
            },
            false => false,
        };
        Ok(FenceRecord {
            marks: Marks { exclusive, shared },
            version,
            settled,
        })
    }
}

/// Builds the attributes of a fenced write.
pub(crate) fn attributes(pairs: impl IntoIterator<Item = (&'static str, String)>) -> Attributes {
    pairs
        .into_iter()
        .map(|(name, value)| {
            (
                Attribute::Metadata(Cow::Borrowed(name)),
                AttributeValue::from(value),
            )
        })
        .collect()
}

/// One metadata value of a read object.
pub(crate) fn metadata<'a>(attributes: &'a Attributes, name: &'static str) -> Option<&'a str> {
    attributes
        .get(&Attribute::Metadata(Cow::Borrowed(name)))
        .map(|value| value.as_ref())
}

/// `H_excl H_shared`, as a log entry's metadata carries them.
pub(crate) fn encode_marks(marks: Marks) -> String {
    format!("{} {}", marks.exclusive, marks.shared)
}

pub(crate) fn decode_marks(text: &str) -> Option<Marks> {
    let (exclusive, shared) = text.split_once(' ')?;
    Some(Marks {
        exclusive: exclusive.parse().ok()?,
        shared: shared.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_record_round_trips_and_every_version_reads_differently() {
        let lock = LockName::new("orders/42").unwrap();
        let path = fence_path(&lock);
        assert_eq!(path.as_ref(), ".palisade/fences/orders%2F42");
        let record = FenceRecord {
            marks: Marks {
                exclusive: 34,
                shared: 7,
            },
            version: 3,
            settled: true,
        };
        let text = record.encode(&lock);
        assert_eq!(
            FenceRecord::decode(&path, &lock, text.as_bytes()).unwrap(),
            record
        );
        let next = FenceRecord {
            version: 4,
            ..record
        };
        assert_ne!(next.encode(&lock), text, "same marks, other bytes");
        let other = LockName::new("orders/43").unwrap();
        assert!(matches!(
            FenceRecord::decode(&path, &other, text.as_bytes()),
            Err(FenceError::Corrupt { .. })
        ));
        let unsettled = FenceRecord {
            settled: false,
            ..record
        };
        assert_ne!(unsettled.encode(&lock), text);
        let v1 = "palisade-fence v1\nlock=orders/42\nexclusive=34\nshared=7\nversion=3\n";
        assert_eq!(
            FenceRecord::decode(&path, &lock, v1.as_bytes()).unwrap(),
            unsettled,
            "a v1 record reads as unsettled"
        );
        for bad in [
            "",
            "palisade-fence v2\nlock=orders/42\nexclusive=x\n",
            "palisade-fence v2\nlock=orders/42\nexclusive=34\nshared=7\nversion=3\n",
            "palisade-fence v3\nlock=orders/42\nexclusive=34\nshared=7\nversion=3\nsettled=1\n",
            "hello",
        ] {
            assert!(
                FenceRecord::decode(&path, &lock, bad.as_bytes()).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_reserved_folder_is_refused_and_everything_else_passes() {
        assert!(check_user_path(&Path::from(".palisade/fences/x")).is_err());
        assert!(check_user_path(&Path::from("data/.palisade")).is_ok());
        assert!(check_user_path(&Path::from("orders/42.json")).is_ok());
    }

    #[test]
    fn marks_round_trip() {
        let marks = Marks {
            exclusive: 5,
            shared: 9,
        };
        assert_eq!(decode_marks(&encode_marks(marks)), Some(marks));
        assert_eq!(decode_marks("5"), None);
    }
}
