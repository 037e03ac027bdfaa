//! The Redis Functions library: its source, its version, and how a node's
//! library is judged before anything is loaded over it.

use std::fmt;

/// The library's name in Redis (`FUNCTION LIST LIBRARYNAME palisade_fence`).
pub const LIBRARY_NAME: &str = "palisade_fence";

/// This crate's library version, written in the source's second line
/// (`-- palisade_fence version 3`). Raised whenever the source changes.
pub const LIBRARY_VERSION: u32 = 3;

/// The library's Lua source, exactly as `FUNCTION LOAD` receives it.
pub const LIBRARY_SOURCE: &str = include_str!("palisade_fence.lua");

/// The line of the source that holds the mark check, the one line a
/// mutation test replaces to show that the rule table notices.
#[doc(hidden)]
pub const MARK_CHECK_LINE: &str = "local admitted = ge(g, required)";

/// What a node holds under the library's name, when it is not this crate's
/// library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Found {
    /// An older Palisade version.
    Older(u32),
    /// A newer Palisade version: this client is out of date.
    Newer(u32),
    /// This version's number over other code: changed by hand.
    Modified,
    /// A library without a Palisade version line: someone else's.
    Foreign,
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Found::Older(version) => write!(f, "an older Palisade version ({version})"),
            Found::Newer(version) => write!(f, "a newer Palisade version ({version})"),
            Found::Modified => write!(
                f,
                "version {LIBRARY_VERSION} with code that differs from this client's"
            ),
            Found::Foreign => write!(f, "not a Palisade library (no version line)"),
        }
    }
}

/// The version a library's source declares, if it is a Palisade one.
pub(crate) fn version_of(code: &str) -> Option<u32> {
    let prefix = format!("-- {LIBRARY_NAME} version ");
    code.lines()
        .take(3)
        .find_map(|line| line.trim().strip_prefix(&prefix)?.trim().parse().ok())
}

/// `Ok` when `code` is this crate's library; else what it is.
pub(crate) fn judge(code: &str) -> Result<(), Found> {
    if code == LIBRARY_SOURCE {
        return Ok(());
    }
    Err(match version_of(code) {
        None => Found::Foreign,
        Some(version) if version < LIBRARY_VERSION => Found::Older(version),
        Some(version) if version > LIBRARY_VERSION => Found::Newer(version),
        Some(_) => Found::Modified,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_declares_its_name_and_version() {
        assert!(LIBRARY_SOURCE.starts_with(&format!("#!lua name={LIBRARY_NAME}\n")));
        assert_eq!(version_of(LIBRARY_SOURCE), Some(LIBRARY_VERSION));
        assert_eq!(LIBRARY_SOURCE.matches(MARK_CHECK_LINE).count(), 1);
    }

    #[test]
    fn libraries_are_judged_by_code_then_version() {
        assert_eq!(judge(LIBRARY_SOURCE), Ok(()));
        let with_version = |version: u32| {
            LIBRARY_SOURCE.replacen(
                &format!("version {LIBRARY_VERSION}"),
                &format!("version {version}"),
                1,
            )
        };
        assert_eq!(judge(&with_version(0)), Err(Found::Older(0)));
        assert_eq!(
            judge(&with_version(LIBRARY_VERSION + 1)),
            Err(Found::Newer(LIBRARY_VERSION + 1))
        );
        let modified = LIBRARY_SOURCE.replace(MARK_CHECK_LINE, "local admitted = true");
        assert_eq!(judge(&modified), Err(Found::Modified));
        assert_eq!(
            judge("#!lua name=palisade_fence\nredis.register_function('x', function() end)"),
            Err(Found::Foreign)
        );
    }
}
