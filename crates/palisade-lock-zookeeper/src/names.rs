//! The layout in ZooKeeper: one lock directory per lock name, contender
//! nodes named the way kazoo or Curator name theirs, lock-delay markers,
//! and the generation floor node.
//!
//! ```text
//! <root>/                               persistent (root = chroot + prefix)
//!   palisade:generation-floor           persistent: the floor history (floor.rs)
//!   <segment of the lock name>/         container: the lock directory
//!     <id>__lock__0000000007            ephemeral sequential: an exclusive contender (kazoo form)
//!     <id>__rlock__0000000008           ephemeral sequential: a shared contender (kazoo form)
//!     palisade-delay.0000000007         ephemeral, on the lock-delay session: holder 7's lock-delay
//! ```
//!
//! A lock name becomes one path segment through `LockName::key_segment`,
//! so `a/b` and `a` are separate directories, never parent and child.
//! `:` never occurs in a segment, so no lock directory is ever the floor
//! node.

use palisade_core::{LockName, Mode};

/// Where the floor history lives, under the root.
const FLOOR_NODE: &str = "palisade:generation-floor";

/// What a lock-delay marker's name starts with; the holder's sequence
/// number follows.
const MARKER_PREFIX: &str = "palisade-delay.";

/// The longest contender node name Palisade creates (Curator's
/// `_c_<36-char uuid>-__WRIT__<19 digits>`), for sizing the holder field.
pub(crate) const LONGEST_NODE_NAME: usize = 3 + 36 + 1 + 8 + 19;

/// How contender nodes are named, so that another library's lock on the
/// same path excludes Palisade's and is excluded by it.
///
/// Palisade recognises every form when it orders a directory's contenders,
/// so mixed forms still exclude each other on Palisade's side; the other
/// library recognises only its own form, so every client of one lock path
/// must name its nodes alike.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeNames {
    /// kazoo's (Python): exclusive `<32 hex>__lock__<seq>`, shared
    /// `<32 hex>__rlock__<seq>`. Shares a lock with kazoo's `Lock` and
    /// `WriteLock` (exclusive) and `ReadLock` (shared) on the same path. The
    /// default: it names both modes, and so does ZooKeeper's own recipe.
    #[default]
    Kazoo,
    /// Curator's `InterProcessMutex` (Java): exclusive
    /// `_c_<uuid>-lock-<seq>`. Curator's mutex has no shared mode, so a
    /// shared acquire is refused with [`UnsupportedMode`](crate::ZkLockError).
    CuratorMutex,
    /// Curator's `InterProcessReadWriteLock`: exclusive
    /// `_c_<uuid>-__WRIT__<seq>`, shared `_c_<uuid>-__READ__<seq>`.
    CuratorReadWrite,
}

impl NodeNames {
    /// The name of this form in messages and flags: `kazoo`,
    /// `curator-mutex`, `curator-rw`.
    pub const fn as_str(self) -> &'static str {
        match self {
            NodeNames::Kazoo => "kazoo",
            NodeNames::CuratorMutex => "curator-mutex",
            NodeNames::CuratorReadWrite => "curator-rw",
        }
    }

    /// The form named `text` (as [`NodeNames::as_str`] writes it).
    pub fn parse(text: &str) -> Option<NodeNames> {
        [
            NodeNames::Kazoo,
            NodeNames::CuratorMutex,
            NodeNames::CuratorReadWrite,
        ]
        .into_iter()
        .find(|form| form.as_str() == text)
    }

    /// The name of a new contender node before ZooKeeper appends the
    /// sequence number, for an attempt with the random `id`; `None` when
    /// the form has no name for `mode`.
    pub(crate) fn prefix(self, mode: Mode, id: u128) -> Option<String> {
        let uuid = || {
            let hex = format!("{id:032x}");
            format!(
                "{}-{}-{}-{}-{}",
                &hex[..8],
                &hex[8..12],
                &hex[12..16],
                &hex[16..20],
                &hex[20..]
            )
        };
        match (self, mode) {
            (NodeNames::Kazoo, Mode::Exclusive) => Some(format!("{id:032x}__lock__")),
            (NodeNames::Kazoo, Mode::Shared) => Some(format!("{id:032x}__rlock__")),
            (NodeNames::CuratorMutex, Mode::Exclusive) => Some(format!("_c_{}-lock-", uuid())),
            (NodeNames::CuratorMutex, Mode::Shared) => None,
            (NodeNames::CuratorReadWrite, Mode::Exclusive) => {
                Some(format!("_c_{}-__WRIT__", uuid()))
            }
            (NodeNames::CuratorReadWrite, Mode::Shared) => Some(format!("_c_{}-__READ__", uuid())),
        }
    }
}

/// A contender node, as read back from a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Contender {
    /// The node's name in its directory.
    pub(crate) name: String,
    pub(crate) mode: Mode,
    /// ZooKeeper's sequence number: the order within one incarnation of
    /// the directory.
    pub(crate) sequence: i64,
}

/// What one child of a lock directory is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Child {
    Contender(Contender),
    /// A lock-delay marker for the holder with this sequence number.
    Marker {
        name: String,
        holder_sequence: i64,
    },
    /// Anything else (another recipe's nodes): ignored, as kazoo and
    /// Curator ignore what they do not recognise.
    Other,
}

/// Reads a child's name: every form's contenders, Palisade's markers.
pub(crate) fn parse_child(name: &str) -> Child {
    if let Some(sequence) = name.strip_prefix(MARKER_PREFIX) {
        return match parse_sequence(sequence) {
            Some(holder_sequence) => Child::Marker {
                name: name.to_owned(),
                holder_sequence,
            },
            None => Child::Other,
        };
    }
    // The markers of each form, longest first where one ends another.
    const FORMS: [(&str, Mode); 5] = [
        ("__rlock__", Mode::Shared),
        ("__lock__", Mode::Exclusive),
        ("__READ__", Mode::Shared),
        ("__WRIT__", Mode::Exclusive),
        ("lock-", Mode::Exclusive),
    ];
    for (marker, mode) in FORMS {
        // Curator sorts on what follows the last occurrence; kazoo on the
        // digits at the very end. Both agree on well-formed names.
        if let Some(index) = name.rfind(marker) {
            if let Some(sequence) = parse_sequence(&name[index + marker.len()..]) {
                return Child::Contender(Contender {
                    name: name.to_owned(),
                    mode,
                    sequence,
                });
            }
        }
    }
    Child::Other
}

/// A ZooKeeper sequence suffix: ten digits (nineteen past `i32::MAX`), or a
/// negative ten-digit number after the 32-bit counter wrapped.
fn parse_sequence(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if !(digits.len() == 10 || digits.len() == 19) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// The lock-delay marker's name for the holder with `sequence`.
pub(crate) fn marker_name(sequence: i64) -> String {
    format!("{MARKER_PREFIX}{sequence:010}")
}

/// Paths under one root.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    root: String,
}

impl Layout {
    pub(crate) fn new(root: String) -> Self {
        Layout { root }
    }

    pub(crate) fn root(&self) -> &str {
        &self.root
    }

    /// The lock directory of `name`.
    pub(crate) fn dir(&self, name: &LockName) -> String {
        format!("{}/{}", self.root, segment(name))
    }

    /// The floor history node.
    pub(crate) fn floor(&self) -> String {
        format!("{}/{FLOOR_NODE}", self.root)
    }
}

/// The path of `name`'s lock directory under `root`: where a kazoo or
/// Curator client must lock to share the lock with Palisade.
///
/// ```
/// use palisade_core::LockName;
/// use palisade_lock_zookeeper::lock_path;
///
/// assert_eq!(lock_path("/palisade/locks", &LockName::new("orders-42")?), "/palisade/locks/orders-42");
/// assert_eq!(lock_path("/palisade/locks", &LockName::new("orders/42")?), "/palisade/locks/orders%2F42");
/// # Ok::<(), palisade_core::LockNameError>(())
/// ```
pub fn lock_path(root: &str, name: &LockName) -> String {
    Layout::new(root.to_owned()).dir(name)
}

/// A lock name as one path segment: its key segment, with `.` and `..`
/// (which ZooKeeper refuses as segments) spelled `%2E` and `%2E%2E`, which
/// no key segment contains.
fn segment(name: &LockName) -> String {
    let segment = name.key_segment();
    match segment.as_str() {
        "." | ".." => segment.replace('.', "%2E"),
        _ => segment,
    }
}

/// The lock name of a lock directory's segment, `None` for anything else.
pub(crate) fn name_of_segment(segment: &str) -> Option<LockName> {
    match segment {
        "%2E" => LockName::new("."),
        "%2E%2E" => LockName::new(".."),
        _ => return LockName::from_key_segment(segment),
    }
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contender(name: &str) -> Option<(Mode, i64)> {
        match parse_child(name) {
            Child::Contender(contender) => Some((contender.mode, contender.sequence)),
            _ => None,
        }
    }

    #[test]
    fn every_form_round_trips_through_its_prefix() {
        for form in [
            NodeNames::Kazoo,
            NodeNames::CuratorMutex,
            NodeNames::CuratorReadWrite,
        ] {
            for mode in [Mode::Exclusive, Mode::Shared] {
                let Some(prefix) = form.prefix(mode, 0x0123_4567_89ab_cdef_0011_2233_4455_6677)
                else {
                    assert_eq!((form, mode), (NodeNames::CuratorMutex, Mode::Shared));
                    continue;
                };
                assert!(prefix.len() + 19 <= LONGEST_NODE_NAME);
                let name = format!("{prefix}0000000042");
                assert_eq!(contender(&name), Some((mode, 42)), "{name}");
            }
            assert_eq!(NodeNames::parse(form.as_str()), Some(form));
        }
    }

    #[test]
    fn foreign_names_are_read_as_their_libraries_write_them() {
        // kazoo 2.8: uuid4().hex + "__lock__" / "__rlock__".
        let kazoo = "4c1f2b1d0d5c4a3e9b8f7a6e5d4c3b2a__lock__0000000003";
        assert_eq!(contender(kazoo), Some((Mode::Exclusive, 3)));
        let reader = "4c1f2b1d0d5c4a3e9b8f7a6e5d4c3b2a__rlock__0000000004";
        assert_eq!(contender(reader), Some((Mode::Shared, 4)));
        // Curator: protected mode `_c_<uuid>-` + lock name + sequence.
        let mutex = "_c_8e0f6b2c-3d4a-4b5c-9d6e-7f8a9b0c1d2e-lock-0000000005";
        assert_eq!(contender(mutex), Some((Mode::Exclusive, 5)));
        let writer = "_c_8e0f6b2c-3d4a-4b5c-9d6e-7f8a9b0c1d2e-__WRIT__0000000006";
        assert_eq!(contender(writer), Some((Mode::Exclusive, 6)));
        let curator_reader = "_c_8e0f6b2c-3d4a-4b5c-9d6e-7f8a9b0c1d2e-__READ__0000000007";
        assert_eq!(contender(curator_reader), Some((Mode::Shared, 7)));
        // Unprotected Curator and a wrapped 32-bit counter.
        assert_eq!(contender("lock-0000000008"), Some((Mode::Exclusive, 8)));
        assert_eq!(
            contender("x__lock__-2147483648"),
            Some((Mode::Exclusive, -2_147_483_648))
        );
        // Other recipes' nodes and near misses are ignored.
        for other in [
            "lease_holder",
            "x__lock__12",
            "x__lock__00000000001",
            "leader-x",
        ] {
            assert_eq!(parse_child(other), Child::Other, "{other}");
        }
    }

    #[test]
    fn markers_name_their_holder_and_no_library_takes_them_for_a_contender() {
        let marker = marker_name(7);
        assert_eq!(
            parse_child(&marker),
            Child::Marker {
                name: marker.clone(),
                holder_sequence: 7
            }
        );
        // kazoo's contender pattern is `(__lock__|__rlock__)(-?\d{10})$`,
        // Curator sorts on what follows `lock-`, `__READ__` or `__WRIT__`:
        // a marker has none of them, so both ignore it.
        for token in ["__lock__", "__rlock__", "lock-", "__READ__", "__WRIT__"] {
            assert!(!marker.contains(token), "{marker} contains {token}");
        }
    }

    #[test]
    fn lock_directories_are_one_segment_each() {
        let root = "/r";
        let path = |name: &str| lock_path(root, &LockName::new(name).unwrap());
        assert_eq!(path("a/b"), "/r/a%2Fb");
        assert_eq!(path("."), "/r/%2E");
        assert_eq!(path(".."), "/r/%2E%2E");
        assert_eq!(path("..."), "/r/...");
        for name in ["a/b", ".", "..", "...", "x y", "%2E"] {
            let segment = path(name).rsplit('/').next().unwrap().to_owned();
            assert_eq!(name_of_segment(&segment).unwrap().as_str(), name);
        }
        assert_eq!(name_of_segment(FLOOR_NODE), None);
    }
}
