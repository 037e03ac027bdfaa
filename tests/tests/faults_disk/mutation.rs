//! The mutation check for I-DUR: the checker must report acknowledged
//! writes lost when the resource server acknowledges before its data files
//! are synced (`resource-server --unsynced`, test only).
//!
//! The procedure is scenario 12c cut to its core, so that it decides on
//! every run: a probe writes a few keys and gets each one acknowledged,
//! then at once the ext4 under the server dies without flushing its
//! journal, the server is killed, the file system mounted again and the
//! server restarted on it. A `kill -9` alone would not show the bug (the
//! page cache keeps what sled wrote); the dead disk drops whatever its
//! journal had not committed, which is everything not fsynced. The file
//! system is mounted with a journal commit interval far longer than the
//! test (`commit=600`), so the journal commits only when someone syncs:
//! whether the writes survive depends on the store's sync alone, not on
//! the timing of ext4's own 5 s commit.
//!
//! - The normal server: every acknowledged write is there after the
//!   restart, the checker reports 0 lost.
//! - `--unsynced`: the checker must report at least one acknowledged
//!   write lost (I-DUR); every one is, in practice.

use palisade_testkit::process::require_binary;
use palisade_tests::checker::{CheckOptions, Invariant, Report};
use palisade_tests::fault::{FaultRun, ResourceServerOptions, ResourceServerProcess, Scenario};

use crate::disk::{LoopExt4, require_mount};
use crate::probe::{Probe, ProbeWrite};

/// How many writes are acknowledged before the disk dies.
const WRITES: u64 = 10;

/// ext4 commits its journal every 5 s by itself; with this it commits only
/// on a sync (within the test's few seconds).
const COMMIT_ONLY_ON_SYNC: &str = "commit=600";

const FAULT: &str =
    "the disk dies (ext4 shut down, journal not flushed) right after the acknowledgements";

/// Writes [`WRITES`] keys (each acknowledged) to a server on a fresh ext4,
/// kills the disk at once, remounts it, restarts the server and judges the
/// history. `unsynced` starts the server with `--unsynced`.
async fn acknowledged_then_the_disk_dies(
    name: &str,
    unsynced: bool,
    scenario: Scenario,
) -> anyhow::Result<Report> {
    require_mount();
    require_binary("xfs_io");
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new(name)?;
    let mut disk = LoopExt4::create_with_options(64, COMMIT_ONLY_ON_SYNC)?;
    let mut options = ResourceServerOptions::default().data_dir(disk.path().join("data"));
    if unsynced {
        options = options.unsynced();
    }
    let mut server = ResourceServerProcess::start(&binaries, &run, options)?;
    let lock = format!("{name}/a");
    let mut probe = Probe::new(&run, "probe", &server.base_url())?;
    for generation in 1..=WRITES {
        let outcome = probe.write(&lock, generation).await?;
        anyhow::ensure!(
            matches!(outcome, ProbeWrite::Accepted { .. }),
            "write {generation} to a healthy disk was answered {outcome:?}"
        );
    }

    run.inject(FAULT)?;
    disk.shut_down_without_journal_flush()?;
    // Nothing may keep a file open on the dead file system.
    server.kill()?;
    disk.remount()?;
    server.restart()?;
    run.heal(FAULT)?;

    let report = run
        .verdict(&server.base_url(), &CheckOptions::default(), &scenario)
        .await?;
    assert_eq!(report.accepted_writes, WRITES as usize, "{report}");
    assert_eq!(report.faults, 1, "{report}");
    Ok(report)
}

/// The normal server loses nothing it acknowledged: the control run that
/// makes the mutation's failure mean something.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root to mount file systems: scripts/test.sh includes it when run as root, as CI does"]
async fn s12c_disk_dies_right_after_acknowledgements() -> anyhow::Result<()> {
    let report = acknowledged_then_the_disk_dies(
        "s12c-short",
        false,
        Scenario::new(
            "12c short: the disk dies right after 10 acknowledged writes, remount",
            "ext4 on a loop device (commit=600)",
        ),
    )
    .await?;
    report.assert_holds(&[
        Invariant::Mono,
        Invariant::Stale,
        Invariant::Dur,
        Invariant::Once,
    ]);
    Ok(())
}

/// With the sync skipped, the same run must lose acknowledged writes, and
/// the checker must say so (I-DUR).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root to mount file systems: scripts/test.sh includes it when run as root, as CI does"]
async fn unsynced_acknowledgements_are_caught_by_the_checker() -> anyhow::Result<()> {
    let report = acknowledged_then_the_disk_dies(
        "m12c-short",
        true,
        Scenario::new(
            "mutation: 12c short with the sync skipped",
            "ext4 on a loop device (commit=600)",
        )
        .note("writes acknowledged before any fsync on purpose; mutation check: lost must be > 0"),
    )
    .await?;
    assert!(
        report.lost_writes() >= 1,
        "the server acknowledged {WRITES} writes without syncing them and the disk died, yet the checker reports none lost: {report}"
    );
    Ok(())
}

/// Durability cannot be switched off by the flag alone: the server also
/// wants `PALISADE_TEST_UNSYNCED=1`, and refuses to start without it.
#[test]
fn unsynced_flag_alone_does_not_start_a_server() -> anyhow::Result<()> {
    let binaries = palisade_tests::fault_binaries!();
    let data_dir = tempfile::tempdir()?;
    let output = std::process::Command::new(&binaries.resource_server)
        .arg("--data-dir")
        .arg(data_dir.path())
        .args(["--listen", "127.0.0.1:0", "--unsynced"])
        .env_remove("PALISADE_TEST_UNSYNCED")
        .output()?;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("PALISADE_TEST_UNSYNCED=1"), "{stderr}");
    assert!(
        output.stdout.is_empty(),
        "it must not have started listening"
    );
    Ok(())
}
