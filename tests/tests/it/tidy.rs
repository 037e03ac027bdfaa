//! Tidy: the rules docs/ARCHITECTURE.md states about the code, checked
//! against the code (in rust-analyzer's manner), so the next drift fails CI
//! instead of being found by a reader.
//!
//! - Dependency rules: the table under "Dependency Rules" in
//!   docs/ARCHITECTURE.md says, for each workspace crate, which workspace
//!   crates it may depend on (normal and build dependencies) and, where it
//!   matters, which crates from outside the workspace; `cargo metadata` says
//!   what each really depends on.
//! - Every crate under `crates/` has its code-map heading in
//!   ARCHITECTURE.md, and every heading names a crate that exists.
//! - No dependency is declared and never used (what `cargo machete` did):
//!   each declared dependency's library name appears in the package's Rust
//!   sources, unless its manifest lists it under
//!   `[package.metadata.tidy] unused = [...]` with a comment saying why.
//! - No test is skipped or expects a panic: neither attribute appears in
//!   any Rust file (ARCHITECTURE.md's "Testing" section promises it), but
//!   for the disk fault scenarios' "needs root to mount file systems",
//!   which the test command includes when it runs as root.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace root")
        .to_owned()
}

/// `cargo metadata` for the workspace, without dependencies' own packages.
fn metadata() -> Value {
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace_root())
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON")
}

/// One workspace package as the checks need it.
struct Package {
    name: String,
    dir: PathBuf,
    /// (dependency name, library name as code spells it, kind, optional)
    dependencies: Vec<Dependency>,
    /// Dependencies the manifest says are used without being named in code.
    unused_ok: BTreeSet<String>,
}

struct Dependency {
    name: String,
    lib_name: String,
    /// `normal`, `dev` or `build`.
    kind: String,
}

fn packages() -> Vec<Package> {
    let metadata = metadata();
    let mut packages = Vec::new();
    for package in metadata["packages"].as_array().expect("packages") {
        let manifest = PathBuf::from(package["manifest_path"].as_str().expect("manifest_path"));
        let dependencies = package["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .map(|dependency| {
                let name = dependency["name"].as_str().expect("name").to_owned();
                let lib_name = dependency["rename"]
                    .as_str()
                    .unwrap_or(&name)
                    .replace('-', "_");
                let kind = dependency["kind"].as_str().unwrap_or("normal").to_owned();
                Dependency {
                    name,
                    lib_name,
                    kind,
                }
            })
            .collect();
        let unused_ok = package["metadata"]["tidy"]["unused"]
            .as_array()
            .map(|names| {
                names
                    .iter()
                    .filter_map(|name| name.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        packages.push(Package {
            name: package["name"].as_str().expect("name").to_owned(),
            dir: manifest.parent().expect("manifest dir").to_owned(),
            dependencies,
            unused_ok,
        });
    }
    packages
}

fn architecture() -> String {
    std::fs::read_to_string(workspace_root().join("docs/ARCHITECTURE.md"))
        .expect("docs/ARCHITECTURE.md is readable")
}

/// One row of the dependency rules: a crate name or a `prefix-*` pattern,
/// the workspace crates it may depend on, and the outside crates it may
/// use (`None`: any).
#[derive(Debug)]
struct Rule {
    pattern: String,
    workspace: BTreeSet<String>,
    outside: Option<BTreeSet<String>>,
}

impl Rule {
    fn matches(&self, name: &str) -> bool {
        match self.pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => self.pattern == name,
        }
    }

    /// How closely it matches: an exact row beats a pattern, a longer
    /// pattern beats a shorter one.
    fn specificity(&self) -> usize {
        if self.pattern.ends_with('*') {
            self.pattern.len()
        } else {
            usize::MAX
        }
    }
}

/// Reads the table under the "Dependency Rules" heading:
/// `| crate | workspace crates | outside crates |`, names in backticks,
/// `none` for an empty list, `any` for no limit.
fn rules(architecture: &str) -> Vec<Rule> {
    let section = architecture
        .split("\n## Dependency Rules")
        .nth(1)
        .expect("docs/ARCHITECTURE.md has a `## Dependency Rules` section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let names = |cell: &str| -> Option<BTreeSet<String>> {
        let cell = cell.trim();
        if cell == "any" {
            return None;
        }
        Some(
            cell.split(',')
                .map(|name| name.trim().trim_matches('`').to_owned())
                .filter(|name| !name.is_empty() && name != "none")
                .collect(),
        )
    };
    let mut rules = Vec::new();
    for line in section.lines() {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        if cells.len() != 3 || !cells[0].trim().starts_with('`') {
            continue;
        }
        rules.push(Rule {
            pattern: cells[0].trim().trim_matches('`').to_owned(),
            workspace: names(cells[1]).expect("a workspace cell lists crates or says none"),
            outside: names(cells[2]),
        });
    }
    assert!(!rules.is_empty(), "the Dependency Rules table has no rows");
    rules
}

#[test]
fn dependencies_follow_the_rules_in_architecture_md() {
    let packages = packages();
    let workspace: BTreeSet<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    let rules = rules(&architecture());
    let mut broken = Vec::new();
    for package in &packages {
        let Some(rule) = rules
            .iter()
            .filter(|rule| rule.matches(&package.name))
            .max_by_key(|rule| rule.specificity())
        else {
            broken.push(format!(
                "{}: no row in ARCHITECTURE.md's Dependency Rules",
                package.name
            ));
            continue;
        };
        for dependency in package.dependencies.iter().filter(|d| d.kind != "dev") {
            let name = dependency.name.as_str();
            if workspace.contains(name) {
                if !rule.workspace.contains(name) {
                    broken.push(format!(
                        "{} depends on {name}, which its row (`{}`) does not allow",
                        package.name, rule.pattern
                    ));
                }
            } else if let Some(outside) = &rule.outside
                && !outside.contains(name)
            {
                broken.push(format!(
                    "{} depends on {name} (outside the workspace), which its row (`{}`) does not allow",
                    package.name, rule.pattern
                ));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The table's rows are checked too: a forbidden dependency is caught.
#[test]
fn the_rules_catch_a_forbidden_dependency() {
    let table = "\n## Dependency Rules\n\n| crate | workspace | outside |\n|---|---|---|\n\
                 | `palisade-core` | none | `tokio` |\n| `palisade-lock-*` | `palisade-core` | any |\n";
    let rules = rules(table);
    let core = rules
        .iter()
        .find(|rule| rule.matches("palisade-core"))
        .unwrap();
    assert!(core.workspace.is_empty());
    assert!(!core.outside.as_ref().unwrap().contains("etcd-client"));
    let lock = rules
        .iter()
        .find(|rule| rule.matches("palisade-lock-redis"))
        .unwrap();
    assert!(lock.workspace.contains("palisade-core"));
    assert!(!lock.workspace.contains("palisade-server"));
    assert!(lock.outside.is_none());
}

#[test]
fn every_crate_has_its_code_map_entry() {
    let architecture = architecture();
    let headings: BTreeSet<String> = architecture
        .lines()
        .filter_map(|line| line.strip_prefix("### `crates/"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_owned)
        .collect();
    let crates: BTreeSet<String> = std::fs::read_dir(workspace_root().join("crates"))
        .expect("crates/")
        .filter_map(Result::ok)
        .filter(|entry| entry.path().join("Cargo.toml").is_file())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    let missing: Vec<_> = crates.difference(&headings).collect();
    let stale: Vec<_> = headings.difference(&crates).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "ARCHITECTURE.md's code map is out of date: no heading for {missing:?}; headings for crates that do not exist: {stale:?}"
    );
}

/// Every `.rs` file of a package (sources, tests, benches, examples,
/// build script), not descending into `target` or nested packages.
fn rust_files(dir: &Path, top: bool, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            let name = entry.file_name();
            if name == "target" || name == ".git" || (!top && path.join("Cargo.toml").is_file()) {
                continue;
            }
            rust_files(&path, false, files);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
}

/// Whether `ident` appears in `text` as a whole identifier.
fn names_identifier(text: &str, ident: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(ident).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + ident.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

#[test]
fn no_dependency_is_declared_and_never_used() {
    let mut unused = Vec::new();
    for package in packages() {
        let mut files = Vec::new();
        rust_files(&package.dir, true, &mut files);
        let sources: String = files
            .iter()
            .filter_map(|file| std::fs::read_to_string(file).ok().map(|text| (file, text)))
            .map(|(file, text)| {
                // Documents compiled as doctests (`#[doc = include_str!(..)]`,
                // the README's examples) are sources too.
                let included: String = text
                    .split("include_str!(\"")
                    .skip(1)
                    .filter_map(|rest| rest.split('"').next())
                    .filter(|path| path.ends_with(".md"))
                    .filter_map(|path| std::fs::read_to_string(file.parent()?.join(path)).ok())
                    .collect();
                text + &included
            })
            .collect::<Vec<_>>()
            .join("\n");
        let mut seen = BTreeMap::new();
        for dependency in &package.dependencies {
            let used = *seen
                .entry(dependency.lib_name.clone())
                .or_insert_with(|| names_identifier(&sources, &dependency.lib_name));
            if !used && !package.unused_ok.contains(&dependency.name) {
                unused.push(format!(
                    "{}: {} dependency `{}` is never used (remove it, or list it under [package.metadata.tidy] unused with the reason)",
                    package.name, dependency.kind, dependency.name
                ));
            }
        }
        for name in &package.unused_ok {
            assert!(
                package.dependencies.iter().any(|d| &d.name == name),
                "{}: [package.metadata.tidy] unused lists `{name}`, which is not a dependency",
                package.name
            );
        }
    }
    assert!(unused.is_empty(), "{}", unused.join("\n"));
}

#[test]
fn no_test_is_skipped_or_expects_a_panic() {
    // Spelled in two halves so this file does not match itself.
    let forbidden = [concat!("#[", "ignore"), concat!("#[", "should_panic")];
    let mut files = Vec::new();
    for top in ["crates", "examples", "tests", "fuzz"] {
        rust_files(&workspace_root().join(top), false, &mut files);
    }
    // The one exception: scenarios that mount file systems need root, and
    // say so; the test command includes them when it runs as root.
    let needs_root = concat!("#[", "ignore = \"needs root to mount file systems");
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let text = if file.to_string_lossy().contains("tests/faults_disk/") {
            text.replace(needs_root, "")
        } else {
            text
        };
        for attribute in forbidden {
            if text.contains(attribute) {
                found.push(format!("{}: {attribute}]", file.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "ARCHITECTURE.md promises no skipped tests and no expected panics:\n{}",
        found.join("\n")
    );
}
