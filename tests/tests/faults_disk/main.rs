//! The fault suite, part three: the resource server's own process and its
//! disk (scenarios 11 and 12 of docs/SAFETY.md's "Fault suite").
//!
//! The resource server runs as a child process (the harness's
//! `resource-server`), its data on a file system the test can break: an
//! ext4 image on a loop device, a small tmpfs, or any directory under
//! libfiu. Workload clients are `fault-client` processes taking real Redis
//! locks and writing with idempotency keys, retrying writes whose outcome
//! is unknown with the same key. Everything they do is recorded and judged
//! offline by the shared checker, plus the checks of `probe.rs` that only
//! these scenarios need.
//!
//! Every scenario proves the two losses cannot happen: no stale write is
//! accepted (I-MONO, I-STALE, and a stale probe refused after every
//! restart), and no acknowledged write is lost (I-DUR, and a mark never
//! goes back). Each one's doc comment says what it injects and what it
//! asserts.
//!
//! - `s11_server_crash`: kill -9 mid-burst, restarted on the same disk.
//! - `s12_disk_faults`: fsync failing (libfiu, EIO then ENOSPC), a full
//!   tmpfs, and an ext4 that dies without flushing its journal.
//! - `mutation`: scenario 12c cut short, against a server that acknowledges
//!   before it syncs (`--unsynced`): the checker must report I-DUR broken.
//! - `buffered_sync`: `--durability buffered` fsyncs every period and
//!   fail-stops when that sync fails (libfiu).
//! - `disk`, `fiu`: the disks and the failure injection, cleaned up on drop.
//! - `probe`: the test's own recorded client, and the extra checks.
//!
//! Root, `mount`, `losetup`, `mkfs.ext4`, `xfs_io` (xfsprogs) and
//! `fiu-run`/`fiu-ctrl` (fiu-utils) are needed; the README's test command
//! installs them. Without a tool a scenario fails with a message saying
//! how to install it. The five scenarios that mount a file system are
//! ignored with the reason "needs root": the test command includes
//! them when it runs as root (as CI does) and counts them as skipped
//! otherwise; run by hand without root they fail saying so. No scenario
//! passes by skipping.

mod buffered_sync;
mod disk;
mod fiu;
mod mutation;
mod probe;
mod s11_server_crash;
mod s12_disk_faults;

use std::time::Duration;

use palisade_tests::checker::Invariant;
use palisade_tests::fault::{ClientConfig, ClientLine, ClientProcess, FaultBinaries, FaultRun};

use crate::probe::{Probe, ProbeWrite, highest_acknowledged, mark_violations};

/// The lease TTL of every client.
const TTL: Duration = Duration::from_secs(2);

/// I-LIVE: from the last heal to an acquire and a write. A restart of the
/// server takes well under a second and a lease TTL is 2 s; the rest is
/// margin for a loaded 2-core machine.
const LIVE_BOUND: Duration = Duration::from_secs(30);

/// The longest wait for any one thing the clients do.
const STEP_WAIT: Duration = Duration::from_secs(60);

/// Starts `n_clients` workload clients named `c0`, `c1`, ..., taking
/// `locks` round-robin (each starting at a different one, so every lock is
/// contended) and writing in bursts.
fn spawn_clients(
    run: &FaultRun,
    binaries: &FaultBinaries,
    base: &ClientConfig,
    locks: &[&str],
    n_clients: usize,
) -> anyhow::Result<Vec<ClientProcess>> {
    (0..n_clients)
        .map(|index| {
            let mut config = base.clone();
            for offset in 0..locks.len() {
                config = config.lock(locks[(index + offset) % locks.len()]);
            }
            run.spawn_client(binaries, &format!("c{index}"), &config)
        })
        .collect()
}

/// Waits until the clients have had `n_writes` more writes acknowledged.
async fn wait_acknowledged(run: &mut FaultRun, n_writes: usize) -> anyhow::Result<()> {
    run.drain_feed();
    let mut acknowledged = 0;
    run.wait_any(STEP_WAIT, |_, line| {
        if matches!(line, ClientLine::Wrote { .. }) {
            acknowledged += 1;
        }
        (acknowledged >= n_writes).then_some(())
    })
    .await
}

/// Right after a restart: for every lock, the mark is at least the highest
/// generation acknowledged before the fault (`before`), and a writer one
/// generation below the mark is still refused as stale.
async fn assert_marks_survived(
    probe: &mut Probe,
    before: &[palisade_tests::history::Event],
    locks: &[&str],
) -> anyhow::Result<()> {
    for lock in locks {
        let highest = highest_acknowledged(before, lock);
        let marks = probe
            .marks(lock)
            .await?
            .map_err(|error| anyhow::anyhow!("marks of {lock} after the restart: {error}"))?;
        assert!(
            marks.exclusive >= highest,
            "lock {lock}: the mark went back to {} after the restart; generation {highest} was acknowledged before",
            marks.exclusive
        );
        if marks.exclusive > 1 {
            let outcome = probe.write(lock, marks.exclusive - 1).await?;
            assert!(
                matches!(outcome, ProbeWrite::Stale { .. }),
                "lock {lock}: a write one generation below the mark {} was not refused as stale after the restart: {outcome:?}",
                marks.exclusive
            );
        }
    }
    Ok(())
}

/// The end of every scenario: waits for recovery (a grant and a write after
/// the last heal), stops the clients, and checks what only a quiet server
/// can show: every lock's final mark is the highest acknowledged
/// generation, or that of a write in doubt.
async fn recover_and_stop(
    run: &mut FaultRun,
    clients: &mut [ClientProcess],
    probe: &Probe,
    locks: &[&str],
) -> anyhow::Result<()> {
    run.wait_recovered(LIVE_BOUND).await?;
    for client in clients.iter_mut() {
        client.stop_and_wait(STEP_WAIT).await?;
    }
    let events = run.events()?;
    for lock in locks {
        let marks = probe
            .marks(lock)
            .await?
            .map_err(|error| anyhow::anyhow!("final marks of {lock}: {error}"))?;
        let violations = mark_violations(&events, lock, marks.exclusive);
        assert!(violations.is_empty(), "{}", violations.join("\n"));
    }
    Ok(())
}

/// The invariants every scenario here asserts with the checker.
const ASSERTED: [Invariant; 5] = [
    Invariant::Mono,
    Invariant::Stale,
    Invariant::Dur,
    Invariant::Once,
    Invariant::Live,
];
