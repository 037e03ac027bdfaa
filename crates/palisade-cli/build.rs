//! Puts the git revision into `palisade --version` when the source is a git
//! checkout; a build from a tarball shows the crate version alone.
//! `PALISADE_BUILD_REVISION` overrides it (packagers who build without
//! `.git` but know the revision).

#[path = "build_revision.rs"]
mod build_revision;

use std::path::PathBuf;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=build_revision.rs");
    println!("cargo::rerun-if-env-changed=PALISADE_BUILD_REVISION");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let revision = match std::env::var("PALISADE_BUILD_REVISION") {
        Ok(revision) if !revision.trim().is_empty() => Some(revision.trim().to_owned()),
        _ => {
            for file in build_revision::revision_files(&dir) {
                println!("cargo::rerun-if-changed={}", file.display());
            }
            build_revision::short_revision(&dir)
        }
    };
    let version = build_revision::version_text(
        &std::env::var("CARGO_PKG_VERSION").unwrap_or_default(),
        revision.as_deref(),
    );
    println!("cargo::rustc-env=PALISADE_VERSION={version}");
}
