//! Scenario 12: the resource server's disk fails under it: fsync returns
//! errors (libfiu), the file system is full (a small tmpfs), the disk dies
//! (an ext4 shut down without flushing its journal).
//!
//! What the store guarantees, and these tests assert, when its disk fails:
//! - **no 2xx without a successful sync**: a write sent after the fault
//!   struck is never acknowledged by the failing server (the first sync
//!   that fails answers its whole group 503); the window closes when that
//!   server is stopped, since a client's retry may be acknowledged by the
//!   restarted one the moment it listens;
//! - **fail-stop**: from the first failed sync (or write) the server
//!   answers every request 503 `storage_unavailable`, reads and marks
//!   included, with a message that names the error, and keeps doing so
//!   after the disk has healed, until it is restarted. So no answer ever
//!   reveals a mark that exists only in memory;
//! - **clean recovery**: after a restart every acknowledged write is
//!   there, each lock's mark is at least the highest acknowledged
//!   generation (a stale writer is still refused), and above it only by a
//!   write whose outcome was in doubt (a 503 or a lost connection): such a
//!   write may have reached the log before its sync failed.

use std::time::Duration;

use palisade::client::ClientError;
use palisade_testkit::process::require_binary;
use palisade_testkit::redis::RedisServer;
use palisade_tests::checker::CheckOptions;
use palisade_tests::fault::{
    ClientConfig, FaultRun, ResourceServerOptions, ResourceServerProcess, Scenario, scaled,
};
use palisade_tests::history::monotonic_us;

use crate::disk::{LoopExt4, Tmpfs, require_mount};
use crate::fiu::Fiu;
use crate::probe::{Probe, ProbeWrite, acknowledged_between, doubt_and_replays};
use crate::{
    ASSERTED, LIVE_BOUND, TTL, assert_marks_survived, recover_and_stop, spawn_clients,
    wait_acknowledged,
};

/// How long a failure stays in force once the server has fail-stopped:
/// the clients keep writing into it meanwhile. Time is the subject here.
const FAULT_WINDOW: Duration = Duration::from_millis(500);

/// How long the server may take to notice its failed disk: the clients
/// write continuously, so the next group's sync comes within milliseconds.
const FAIL_STOP_WAIT: Duration = Duration::from_secs(30);

/// The workload of scenario 12: steady writes with short pauses. A write
/// in doubt is retried with its idempotency key every 100 ms for up to
/// 5 s, so a write answered 503 during a fault is usually retried after
/// the restart, where the store must answer it from its record if the
/// first attempt reached the log (I-ONCE).
fn workload(redis: &RedisServer, server: &ResourceServerProcess) -> ClientConfig {
    ClientConfig::redis(&redis.url(), &server.base_url())
        .ttl(TTL)
        .writes_per_hold(4)
        .think(Duration::from_millis(5))
        .register_every(3)
        .write_timeout(Duration::from_secs(5))
        .retries(50)
}

/// While the server is fail-stopped: a write (generation 1, stale for any
/// lock in use, so it could never move a mark even if it were applied),
/// a plain read and the marks all get 503 `storage_unavailable`, and the
/// write's message names the disk's error.
async fn assert_refuses_everything(
    probe: &mut Probe,
    lock: &str,
    error_text: &str,
) -> anyhow::Result<()> {
    match probe.write(lock, 1).await? {
        ProbeWrite::Unavailable { code, message } => {
            assert_eq!(code, "storage_unavailable");
            assert!(
                message.contains(error_text),
                "the 503 does not say what failed (expected {error_text:?}): {message}"
            );
        }
        other => panic!("a write to a fail-stopped server was answered {other:?}"),
    }
    let read = probe.read(lock, "register").await?;
    assert!(
        matches!(read, Err(ClientError::Unavailable { .. })),
        "a plain read of a fail-stopped server was answered {read:?}"
    );
    let marks = probe.marks(lock).await?;
    assert!(
        matches!(marks, Err(ClientError::Unavailable { .. })),
        "the marks of a fail-stopped server were answered {marks:?}"
    );
    Ok(())
}

/// The verdict every variant shares: the checker's invariants, no write
/// acknowledged inside a fault window, and faults really struck writes.
async fn judge(
    run: &mut FaultRun,
    server: &ResourceServerProcess,
    scenario: Scenario,
    windows: &[(u64, u64)],
) -> anyhow::Result<()> {
    let events = run.events()?;
    for (from_us, to_us) in windows {
        let acknowledged = acknowledged_between(&events, *from_us, *to_us);
        assert!(
            acknowledged.is_empty(),
            "acknowledged without a successful sync:\n{}",
            acknowledged.join("\n")
        );
    }
    let report = run
        .verdict(
            &server.base_url(),
            &CheckOptions {
                live_bound: Some(LIVE_BOUND),
            },
            &scenario,
        )
        .await?;
    report.assert_holds(&ASSERTED);
    assert_eq!(report.faults, windows.len());
    assert!(report.accepted_writes > 0);
    Ok(())
}

const FIU_LOCKS: [&str; 2] = ["s12a/a", "s12a/b"];

/// Scenario 12a: fsync fails under the running server (libfiu), first with
/// EIO, then with ENOSPC.
///
/// Three clients (six in the soak) write steadily to a server started
/// under `fiu-run -x`. Twice (six times in the soak), for each errno in
/// turn: after 20 acknowledged writes (100) every `fsync` and
/// `fdatasync` of the server starts failing with it; the server must
/// fail-stop (503 to everything, the message naming the error); the
/// clients keep writing into it for half a second; the failure is
/// switched off and the server must *still* refuse (it cannot know which
/// pages the kernel dropped); then it is killed and restarted.
///
/// Asserts the module's guarantees (no write sent after the failure began
/// is acknowledged, fail-stop, clean recovery with marks intact) and
/// I-DUR, I-MONO, I-STALE, I-ONCE, I-LIVE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s12a_fsync_fails_with_eio_then_enospc() -> anyhow::Result<()> {
    let redis = RedisServer::start();
    Fiu::require();
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new("s12a")?;
    let fiu = Fiu::new(run.dir());
    let mut server = ResourceServerProcess::start(
        &binaries,
        &run,
        ResourceServerOptions::default().command_prefix(fiu.command_prefix()),
    )?;
    let mut clients = spawn_clients(
        &run,
        &binaries,
        &workload(&redis, &server),
        &FIU_LOCKS,
        scaled(3, 6),
    )?;
    let mut probe = Probe::new(&run, "probe", &server.base_url())?;

    let mut windows = Vec::new();
    let failures = [
        (5, "EIO", "Input/output error"),
        (28, "ENOSPC", "No space left on device"),
    ];
    for _round in 0..scaled(2, 6) {
        for (errno, name, error_text) in failures {
            wait_acknowledged(&mut run, scaled(20, 100)).await?;
            let fault = format!("fsync and fdatasync fail with {name}");
            run.inject(&fault)?;
            let pid = server.pid().expect("the server runs");
            fiu.fail_syncs(pid, errno)?;
            let opened_us = monotonic_us();
            probe.wait_fail_stopped(FAIL_STOP_WAIT).await?;
            assert_refuses_everything(&mut probe, FIU_LOCKS[0], error_text).await?;
            // The clients write into the failing disk for a while.
            tokio::time::sleep(FAULT_WINDOW).await;
            fiu.heal_syncs(pid)?;
            assert!(
                probe.is_fail_stopped().await,
                "the server resumed by itself after its syncs had failed"
            );
            let before = run.events()?;
            // The window closes when the failing server stops: what is
            // acknowledged after that comes from the restarted one.
            server.kill()?;
            windows.push((opened_us, monotonic_us()));
            server.restart()?;
            run.heal(&fault)?;
            assert_marks_survived(&mut probe, &before, &FIU_LOCKS).await?;
        }
    }

    recover_and_stop(&mut run, &mut clients, &probe, &FIU_LOCKS).await?;
    let (in_doubt, replayed) = doubt_and_replays(&run.events()?);
    let scenario = Scenario::new("12a fsync fails (libfiu): EIO, then ENOSPC", "redis; any disk, libfiu")
        .note(format!(
            "fail-stop on the first failed sync, 503 until restart; {in_doubt} writes in doubt, {replayed} replays; no 2xx inside a window"
        ));
    judge(&mut run, &server, scenario, &windows).await
}

const TMPFS_LOCKS: [&str; 2] = ["s12b/a", "s12b/b"];
/// The probe's own lock for its large writes, so they fence no client.
const TMPFS_PROBE_LOCK: &str = "s12b/probe";

/// Scenario 12b: the file system under the server fills up (a 32 MiB
/// tmpfs, filled to the last byte by another file).
///
/// Twice (six times in the soak): after 20 acknowledged writes (100) the
/// tmpfs is filled, and a large write (which needs new space) fails with
/// ENOSPC; the server must fail-stop (503 to everything, "No space left on
/// device"); the clients keep writing for half a
/// second; the space is freed and the server must still refuse; then it
/// is restarted on the same directory.
///
/// Asserts the module's guarantees (no write sent after the disk filled
/// is acknowledged once the server has fail-stopped, fail-stop, clean
/// recovery with marks intact) and I-DUR, I-MONO, I-STALE, I-ONCE,
/// I-LIVE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root to mount file systems: scripts/test.sh includes it when run as root, as CI does"]
async fn s12b_full_tmpfs() -> anyhow::Result<()> {
    let redis = RedisServer::start();
    require_mount();
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new("s12b")?;
    let tmpfs = Tmpfs::create(32 * 1024)?;
    let mut server = ResourceServerProcess::start(
        &binaries,
        &run,
        ResourceServerOptions::default().data_dir(tmpfs.path().join("data")),
    )?;
    let mut clients = spawn_clients(
        &run,
        &binaries,
        &workload(&redis, &server),
        &TMPFS_LOCKS,
        scaled(3, 6),
    )?;
    let mut probe = Probe::new(&run, "probe", &server.base_url())?;

    let mut windows = Vec::new();
    for round in 0..scaled(2, 6) {
        wait_acknowledged(&mut run, scaled(20, 100)).await?;
        run.inject("the file system is full")?;
        let filled = tmpfs.fill()?;
        eprintln!("[s12b] filled the tmpfs with {filled} bytes");
        // The clients' small writes may go on for a while in pages sled's
        // log already has (it reuses the space of segments it cleaned):
        // those are really written. A large value needs a new file, so the
        // probe writes large values, on a lock of its own, until the disk
        // refuses one (taking back any space sled frees meanwhile).
        let mut attempts = 0;
        loop {
            attempts += 1;
            match probe
                .write_padded(TMPFS_PROBE_LOCK, round + 1, 256 * 1024)
                .await?
            {
                ProbeWrite::Unavailable { .. } => break,
                ProbeWrite::Accepted { .. } if attempts < 50 => {
                    tmpfs.fill()?;
                }
                other => panic!(
                    "a large write to a full disk was answered {other:?} (attempt {attempts})"
                ),
            }
        }
        // The window of "no 2xx" opens once the server has seen the disk
        // full.
        probe.wait_fail_stopped(FAIL_STOP_WAIT).await?;
        let opened_us = monotonic_us();
        assert_refuses_everything(&mut probe, TMPFS_LOCKS[0], "No space left on device").await?;
        tokio::time::sleep(FAULT_WINDOW).await;
        tmpfs.free()?;
        assert!(
            probe.is_fail_stopped().await,
            "the server resumed by itself after its disk had filled"
        );
        let before = run.events()?;
        server.kill()?;
        windows.push((opened_us, monotonic_us()));
        server.restart()?;
        run.heal("the file system is full")?;
        assert_marks_survived(&mut probe, &before, &TMPFS_LOCKS).await?;
    }

    recover_and_stop(&mut run, &mut clients, &probe, &TMPFS_LOCKS).await?;
    let (in_doubt, replayed) = doubt_and_replays(&run.events()?);
    let scenario =
        Scenario::new("12b the file system fills up", "redis; 32 MiB tmpfs").note(format!(
            "ENOSPC fail-stops, 503 until restart; {in_doubt} writes in doubt, {replayed} replays"
        ));
    judge(&mut run, &server, scenario, &windows).await
}

const DIED_LOCKS: [&str; 2] = ["s12c/a", "s12c/b"];

/// Scenario 12c: the disk dies. The ext4 under the server is shut down
/// *without* writing its journal out (`xfs_io -x -c shutdown`), so
/// whatever was not committed to the journal is lost, as in a power cut;
/// then it is mounted again (the journal replays) and the server
/// restarted.
///
/// Twice (six times in the soak): after 40 acknowledged writes (150; the
/// ones that must survive) the disk dies; the server must fail-stop (503 "Input/output error" to
/// everything); it is killed, the file system remounted, the server
/// restarted on it.
///
/// Asserts the module's guarantees (no write acknowledged once the server
/// has fail-stopped, fail-stop, clean recovery with marks intact) and
/// I-DUR, I-MONO, I-STALE, I-ONCE, I-LIVE. This is the scenario that
/// showed sled's own flush is not durable (it syncs with
/// `sync_file_range`): without the store's fsync of sled's files every
/// acknowledged write and every mark was gone after the remount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root to mount file systems: scripts/test.sh includes it when run as root, as CI does"]
async fn s12c_disk_dies_without_flushing_its_journal() -> anyhow::Result<()> {
    let redis = RedisServer::start();
    require_mount();
    require_binary("xfs_io");
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new("s12c")?;
    let mut disk = LoopExt4::create(256)?;
    let mut server = ResourceServerProcess::start(
        &binaries,
        &run,
        ResourceServerOptions::default().data_dir(disk.path().join("data")),
    )?;
    let mut clients = spawn_clients(
        &run,
        &binaries,
        &workload(&redis, &server),
        &DIED_LOCKS,
        scaled(3, 6),
    )?;
    let mut probe = Probe::new(&run, "probe", &server.base_url())?;

    let mut windows = Vec::new();
    for _round in 0..scaled(2, 6) {
        wait_acknowledged(&mut run, scaled(40, 150)).await?;
        run.inject("the disk dies (ext4 shut down, journal not flushed)")?;
        disk.shut_down_without_journal_flush()?;
        let opened_us = monotonic_us();
        probe.wait_fail_stopped(FAIL_STOP_WAIT).await?;
        assert_refuses_everything(&mut probe, DIED_LOCKS[0], "Input/output error").await?;
        // Nothing may keep a file open on the dead file system.
        server.kill()?;
        windows.push((opened_us, monotonic_us()));
        let before = run.events()?;
        disk.remount()?;
        server.restart()?;
        run.heal("the disk dies (ext4 shut down, journal not flushed)")?;
        assert_marks_survived(&mut probe, &before, &DIED_LOCKS).await?;
    }

    recover_and_stop(&mut run, &mut clients, &probe, &DIED_LOCKS).await?;
    let (in_doubt, replayed) = doubt_and_replays(&run.events()?);
    let scenario = Scenario::new(
        "12c the disk dies (ext4 shut down without its journal), remount",
        "redis; ext4 on a loop device",
    )
    .note(format!(
        "503 Input/output error until restart; {in_doubt} writes in doubt, {replayed} replays"
    ));
    judge(&mut run, &server, scenario, &windows).await
}
