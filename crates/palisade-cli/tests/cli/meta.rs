//! What people expect of any command: `--version` with the git revision,
//! shell completions, and manual pages that match the binary.

use std::path::Path;

use crate::fixtures::{code, run};

/// `palisade --version` names the revision the binary was built from
/// (`git rev-parse --short HEAD` where the source is a checkout).
#[tokio::test]
async fn version_names_the_git_revision() {
    let finished = run(["--version"]).await;
    finished.assert_code(code::OK);
    let line = finished.stdout_text();
    let version = env!("CARGO_PKG_VERSION");
    let manifest_dir = env!("CARGO_MANIFEST_DIR");
    let revision = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(manifest_dir)
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned());
    let expected = match revision {
        Some(revision) => format!("palisade {version} ({revision})\n"),
        None => format!("palisade {version}\n"),
    };
    assert_eq!(line, expected);
}

/// Each script is what its shell loads; bash's is sourced for real and
/// completes the subcommands.
#[tokio::test]
async fn completions_for_bash_zsh_and_fish() {
    for shell in ["bash", "zsh", "fish"] {
        let finished = run(["completions", shell]).await;
        finished.assert_code(code::OK);
        let script = finished.stdout_text();
        // Fish names long flags without their dashes (`-l etcd-endpoints`).
        for word in ["raise-floor", "locks", "unlock", "etcd-endpoints"] {
            assert!(script.contains(word), "{shell} script lacks {word}");
        }
    }
    let bash = run(["completions", "bash"]).await.stdout_text();
    let dir = tempfile::tempdir().expect("temporary directory");
    let script = dir.path().join("palisade.bash");
    std::fs::write(&script, bash).expect("write the script");
    // Complete `palisade rai<TAB>` with the generated function.
    let probe = format!(
        "source {}; COMP_WORDS=(palisade rai); COMP_CWORD=1; COMP_LINE='palisade rai'; \
         COMP_POINT=12; _palisade palisade rai palisade; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display()
    );
    let output = std::process::Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &probe])
        .output()
        .expect("bash runs");
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "raise-floor\n");

    let unknown = run(["completions", "tcsh"]).await;
    unknown.assert_code(code::USAGE);
}

/// The committed pages under `docs/man/` are exactly what `palisade man`
/// writes today: a flag added without regenerating them fails here.
#[tokio::test]
async fn committed_man_pages_are_up_to_date() {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/man");
    let dir = tempfile::tempdir().expect("temporary directory");
    let out = dir.path().to_str().expect("UTF-8 path");
    run(["man", "--out-dir", out]).await.assert_code(code::OK);
    let regenerate = "regenerate with `cargo run -p palisade-cli -- man --out-dir docs/man`";
    let generated = pages(dir.path());
    assert!(
        generated.iter().any(|(name, _)| name == "palisade.1")
            && generated.iter().any(|(name, _)| name == "palisade-lock.1"),
        "{:?}",
        generated.iter().map(|(name, _)| name).collect::<Vec<_>>()
    );
    let on_disk = pages(&committed);
    let names =
        |pages: &[(String, String)]| pages.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&on_disk), names(&generated), "{regenerate}");
    for ((name, committed), (_, fresh)) in on_disk.iter().zip(&generated) {
        assert!(
            committed == fresh,
            "docs/man/{name} is out of date: {regenerate}"
        );
    }

    let top = run(["man"]).await;
    top.assert_code(code::OK);
    let palisade_1 = &generated
        .iter()
        .find(|(n, _)| n == "palisade.1")
        .expect("page")
        .1;
    assert_eq!(&top.stdout_text(), palisade_1);
}

/// The `.1` files of `dir`, sorted by name, with their text.
fn pages(dir: &Path) -> Vec<(String, String)> {
    let mut pages: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("read {}: {error}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "1"))
        .map(|path| {
            let name = path
                .file_name()
                .expect("file name")
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&path).expect("page is UTF-8");
            (name, text)
        })
        .collect();
    pages.sort();
    pages
}
