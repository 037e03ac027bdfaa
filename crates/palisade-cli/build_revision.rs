//! The git revision `palisade --version` shows: shared by `build.rs` and its
//! unit test.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The short revision of the checkout `dir` is in, or `None` when there is
/// no git or no repository (a source tarball, a vendored crate).
pub(crate) fn short_revision(dir: &Path) -> Option<String> {
    let revision = git(dir, &["rev-parse", "--short", "HEAD"])?;
    let plain = !revision.is_empty() && revision.chars().all(|c| c.is_ascii_hexdigit());
    plain.then_some(revision)
}

/// The files whose change means a new revision: `HEAD`, the branch it points
/// at and the packed refs, so the build script runs again after a commit.
pub(crate) fn revision_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for path in ["HEAD", "packed-refs"] {
        files.extend(git(dir, &["rev-parse", "--git-path", path]));
    }
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        files.extend(git(dir, &["rev-parse", "--git-path", &branch]));
    }
    files
        .into_iter()
        .map(|file| dir.join(file))
        .filter(|file| file.exists())
        .collect()
}

/// The version line: `0.1.0 (abc1234)`, or the crate version alone.
pub(crate) fn version_text(crate_version: &str, revision: Option<&str>) -> String {
    match revision {
        Some(revision) => format!("{crate_version} ({revision})"),
        None => crate_version.to_owned(),
    }
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    Some(text.trim().to_owned())
}
