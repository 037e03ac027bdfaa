//! Scenario 9: a client's clocks jump while it works (libfaketime on the
//! `fault-client` binary only; the lock services and the resource server
//! keep real time).
//!
//! The faked client reads its offset from a timestamp file the test
//! rewrites while it runs (`FAKETIME_TIMESTAMP_FILE`, re-read on every
//! call with `FAKETIME_NO_CACHE=1`). `fault-client` uses the system
//! allocator (no jemalloc), which libfaketime needs.
//!
//! - **Wall clock only** (`DONT_FAKE_MONOTONIC=1`), Redis: the wall clock
//!   jumps by ±3 TTL and ±1 h. Leases are measured on the monotonic clock,
//!   so nothing should change. Every invariant is asserted: I-MONO,
//!   I-STALE, I-DUR, I-ONCE, I-TOKEN, I-LIVE.
//! - **Wall and monotonic clocks**, etcd: the holder's monotonic clock
//!   jumps forward by 3 TTL (its guard then sees its lease lapse at once,
//!   the safe direction) and back by 3 TTL while it is stopped past its
//!   lease (its guard then believes a lapsed lease is still valid: the
//!   unsafe direction, where only the resource server's check stands
//!   between the late writes and the data). The history's `mono_us` of the
//!   faked client is then not comparable with the others' (libfaketime
//!   even moves its monotonic clock onto the wall clock's scale), so the
//!   faked client's operations are judged only by the invariants that do
//!   not use time: I-MONO (generations in the server's commit order, which
//!   also covers every stale write I-STALE would catch: a lower generation
//!   accepted after a higher one is a decrease in commit order), I-DUR and
//!   I-ONCE. I-STALE, I-TOKEN and I-LIVE are asserted over the other
//!   clients' operations.

use std::path::{Path, PathBuf};
use std::time::Duration;

use palisade_testkit::etcd::EtcdServer;
use palisade_testkit::process::{install_hint, require_binary};
use palisade_testkit::redis::RedisServer;
use palisade_tests::fault::{
    ClientConfig, ClientLine, FaultRun, Invariant, ResourceServerOptions, ResourceServerProcess,
    Scenario, scaled, stop_clients,
};

use crate::{EXIT, STEP, TTL, live_within};

/// Where Debian's `faketime` package puts the library.
const LIBFAKETIME_CANDIDATES: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
];

/// The libfaketime library; the test fails with an install hint when the
/// `faketime` package is missing.
fn libfaketime() -> PathBuf {
    require_binary("faketime");
    LIBFAKETIME_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{}", install_hint("libfaketime.so.1", "faketime")))
}

/// A client config running under libfaketime with its offset in
/// `timestamp_file` (seconds, `+N` or `-N`).
fn faked(
    config: ClientConfig,
    library: &Path,
    timestamp_file: &Path,
    monotonic_too: bool,
) -> ClientConfig {
    let config = config
        .env("LD_PRELOAD", library)
        .env("FAKETIME_TIMESTAMP_FILE", timestamp_file)
        .env("FAKETIME_NO_CACHE", "1");
    if monotonic_too {
        config
    } else {
        config.env("DONT_FAKE_MONOTONIC", "1")
    }
}

/// Sets the faked client's clock offset, in seconds.
fn set_offset(timestamp_file: &Path, offset_seconds: i64) -> anyhow::Result<()> {
    // Written whole and renamed, so libfaketime never reads half a line.
    let temporary = timestamp_file.with_extension("new");
    std::fs::write(&temporary, format!("{offset_seconds:+}\n"))?;
    std::fs::rename(&temporary, timestamp_file)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wall_clock_jumps_change_nothing() -> anyhow::Result<()> {
    let library = libfaketime();
    let redis = RedisServer::start();
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new("s09-wall")?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let timestamp_file = run.dir().join("faketime-a");
    set_offset(&timestamp_file, 0)?;
    let base = ClientConfig::redis(&redis.url(), &server.base_url())
        .lock("faults/s09/wall")
        .ttl(TTL);
    let mut clients = vec![run.spawn_client(
        &binaries,
        "a",
        &faked(base.clone(), &library, &timestamp_file, false),
    )?];
    for index in 0..scaled(2, 4) {
        clients.push(run.spawn_client(&binaries, &format!("c{index}"), &base)?);
    }

    let ttl_seconds = TTL.as_secs() as i64;
    let mut offsets = vec![3 * ttl_seconds, -3 * ttl_seconds, 3600, -3600];
    if palisade_tests::fault::soak() {
        offsets.extend([86_400, -86_400, 7, -7]);
    }
    for offset in offsets {
        let fault = format!("client a's wall clock {offset:+} s");
        run.inject(&fault)?;
        set_offset(&timestamp_file, offset)?;
        // The faked client keeps working: a grant and a write of its own.
        run.drain_feed();
        let mut granted = None;
        run.wait_any(STEP, |client, line| match line {
            ClientLine::Granted { generation, .. } if client == "a" => {
                granted = Some(*generation);
                None
            }
            ClientLine::Wrote { generation, .. }
                if client == "a" && granted == Some(*generation) =>
            {
                Some(())
            }
            _ => None,
        })
        .await?;
        run.heal(&fault)?;
    }
    set_offset(&timestamp_file, 0)?;
    run.wait_recovered(STEP).await?;
    stop_clients(clients.iter_mut(), EXIT).await?;

    let report = run
        .verdict(
            &server.base_url(),
            &live_within(TTL + Duration::from_secs(20)),
            &Scenario::new("9 client wall clock jumps", "redis")
                .note("libfaketime, DONT_FAKE_MONOTONIC=1"),
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monotonic_clock_jumps_are_caught_by_the_fence() -> anyhow::Result<()> {
    let library = libfaketime();
    let etcd = EtcdServer::start();
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new("s09-monotonic")?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let timestamp_file = run.dir().join("faketime-a");
    set_offset(&timestamp_file, 0)?;
    let base = ClientConfig::etcd(&etcd.endpoints(), &server.base_url())
        .lock("faults/s09/monotonic")
        .ttl(TTL);
    // A clock set back by 3 TTL makes every timer the client starts in
    // the next 3 TTL fire at once (tokio's timer wheel does not go back):
    // a write timeout well above the jump keeps its late write answered.
    let holder_config = faked(base.clone(), &library, &timestamp_file, true)
        .gate()
        .writes_per_hold(3)
        .write_timeout(Duration::from_secs(15));
    let mut holder = run.spawn_client(&binaries, "a", &holder_config)?;
    let mut others = Vec::new();
    for index in 0..scaled(2, 4) {
        others.push(run.spawn_client(&binaries, &format!("c{index}"), &base)?);
    }

    let ttl_seconds = TTL.as_secs() as i64;
    let mut cumulative = 0;
    for round in 1..=scaled(2, 6) {
        let held = holder.wait_holding(STEP).await?;
        if round % 2 == 1 {
            // Forward: the holder's lease looks lapsed to it at once.
            cumulative += 3 * ttl_seconds;
            let fault = format!(
                "round {round}: client a's clocks {:+} s (wall and monotonic)",
                3 * ttl_seconds
            );
            run.inject(&fault)?;
            set_offset(&timestamp_file, cumulative)?;
            holder.go()?;
            // Its held write goes (its sequencer was taken before the
            // jump); the next lease check fails locally.
            holder
                .wait_for(STEP, |line| match line {
                    ClientLine::Wrote { generation, .. }
                    | ClientLine::Refused { generation, .. }
                    | ClientLine::GaveUp { generation, .. }
                        if *generation == held =>
                    {
                        Some(())
                    }
                    _ => None,
                })
                .await?;
            run.heal(&fault)?;
        } else {
            // Backward while stopped past its lease: its guard believes the
            // lease is still valid after it resumes.
            cumulative -= 3 * ttl_seconds;
            let fault = format!(
                "round {round}: SIGSTOP client a past its lease, its clocks {:+} s (wall and monotonic)",
                -3 * ttl_seconds
            );
            holder.pause()?;
            run.inject(&fault)?;
            set_offset(&timestamp_file, cumulative)?;
            run.wait_any(STEP, |client, line| match line {
                ClientLine::Wrote { generation, .. } if client != "a" && *generation > held => {
                    Some(())
                }
                _ => None,
            })
            .await?;
            holder.resume()?;
            holder.go()?;
            let refused = holder
                .wait_for(STEP, |line| match line {
                    ClientLine::Refused {
                        generation, detail, ..
                    } if *generation == held => Some(detail.clone()),
                    ClientLine::Wrote { generation, .. } if *generation == held => {
                        Some("accepted".to_owned())
                    }
                    ClientLine::GaveUp {
                        generation, detail, ..
                    } if *generation == held => Some(format!("no answer ({detail})")),
                    _ => None,
                })
                .await?;
            run.heal(&fault)?;
            assert_eq!(
                refused, "stale",
                "a write of generation {held} after a newer one must be refused"
            );
        }
    }
    set_offset(&timestamp_file, 0)?;
    holder.stop_and_wait(EXIT).await?;
    run.wait_recovered(STEP).await?;
    stop_clients(others.iter_mut(), EXIT).await?;

    let report = run
        .verdict(
            &server.base_url(),
            &live_within(TTL + Duration::from_secs(20)),
            &Scenario::new("9 client wall + monotonic clock jumps", "etcd")
                .untimed_client("a")
                .note("libfaketime"),
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    assert!(
        report.fenced_writes > 0,
        "the late writes were refused: {report}"
    );
    Ok(())
}
