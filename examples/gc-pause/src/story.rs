//! The GC-pause story, told once per storage.
//!
//! 1. Client A takes the lock, reads the balance, and fetches its sequencer.
//! 2. A stops the world for longer than its lease (every thread stops, so
//!    its keep-alive stops too).
//! 3. The lease expires; client B takes the lock with a higher generation,
//!    deposits, and releases.
//! 4. A wakes and writes the balance it computed before the pause.
//!
//! Without fencing, A's write lands and B's deposit is lost. With fencing,
//! the resource server refuses A's write (409 stale), and A retries the
//! right way: take the lock again, read again, apply again.

use std::time::Duration;

use palisade::embedded::EmbeddedLockService;
use palisade::{LeaseState, Lock, LockGuard, LockName, Mode, SessionOptions};
use tokio::time::Instant;

use crate::storage::{Storage, WriteOutcome};
use crate::timeline::{Lane, Timeline};

/// The balance before the story starts.
const OPENING_BALANCE: i64 = 100;
/// What A deposits.
const DEPOSIT_A: i64 = 30;
/// What B deposits.
const DEPOSIT_B: i64 = 50;

/// How the story is timed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// The lease TTL of every client session.
    pub(crate) ttl: Duration,
    /// How long A is stopped. Must exceed the TTL for the story to happen.
    pub(crate) pause: Duration,
}

/// What one run ended with.
#[derive(Debug)]
pub(crate) struct Report {
    /// The balance read at the end.
    pub(crate) final_balance: i64,
    /// The balance if both deposits were applied once.
    pub(crate) expected_balance: i64,
    /// The storage applied A's write after B's newer generation had written.
    pub(crate) stale_write_accepted: bool,
    /// The resource server refused A's late write as stale.
    pub(crate) stale_write_refused: bool,
    /// A's guard signalled lease lost before A wrote.
    pub(crate) lease_lost_signalled: bool,
}

impl Report {
    /// Every deposit is in the final balance exactly once.
    pub(crate) fn is_correct(&self) -> bool {
        self.final_balance == self.expected_balance
    }
}

/// Runs the story against `storage`, with locks from `locks`.
pub(crate) async fn run(
    storage: Storage,
    locks: EmbeddedLockService,
    timing: Timing,
    timeline: Timeline,
) -> anyhow::Result<Report> {
    let name = LockName::new("accounts/alice")?;
    let options = SessionOptions::default()
        .with_ttl(timing.ttl)
        .with_keepalive_interval(timing.ttl / 4)
        .with_safety_margin(timing.ttl / 5);

    // Opening balance, written under the lock like every other write.
    let opener = locks.session(options.clone())?;
    let guard = opener.acquire(&name, Mode::Exclusive).await?;
    storage.write(&guard.sequencer()?, OPENING_BALANCE).await?;
    guard.release().await?;
    timeline.record(
        Lane::Storage,
        format!("balance = {OPENING_BALANCE} (opening balance)"),
    );

    // 1. A takes the lock and reads.
    let client_a = locks.session(options.clone())?;
    let guard_a = client_a.acquire(&name, Mode::Exclusive).await?;
    let sequencer_a = guard_a.sequencer()?;
    timeline.record(
        Lane::ClientA,
        format!(
            "acquired `{name}`, generation {}; sequencer `{sequencer_a}`",
            sequencer_a.generation()
        ),
    );
    let seen_by_a = storage.read(&sequencer_a).await?;
    timeline.record(
        Lane::ClientA,
        format!(
            "read balance = {seen_by_a}; will write {} (+{DEPOSIT_A})",
            seen_by_a + DEPOSIT_A
        ),
    );

    // What the lock side sees while A is stopped: the guard's lease-lost
    // signal fires at the validity deadline, without A's help.
    let mut lease_a = guard_a.lease();
    let lease_monitor = tokio::spawn(async move {
        let why = match lease_a.lost().await {
            LeaseState::Lost(reason) => reason.to_string(),
            other => format!("{other:?}"),
        };
        timeline.record(
            Lane::Lock,
            format!("A's lease lapsed; A's guard signals lease lost ({why})"),
        );
    });

    // 3. B wants the lock from now on and gets it when A's lease expires.
    let client_b = locks.session(options.clone())?;
    let storage_b = storage.clone();
    let name_b = name.clone();
    let client_b_task = tokio::spawn(async move {
        let asked_at = Instant::now();
        timeline.record(Lane::ClientB, "asks for the lock; queued behind A");
        let guard_b = client_b.acquire(&name_b, Mode::Exclusive).await?;
        let sequencer_b = guard_b.sequencer()?;
        timeline.record(
            Lane::ClientB,
            format!(
                "acquired `{name_b}`, generation {} (waited {} ms for A's lease to expire)",
                sequencer_b.generation(),
                asked_at.elapsed().as_millis()
            ),
        );
        let seen_by_b = storage_b.read(&sequencer_b).await?;
        let new_balance = seen_by_b + DEPOSIT_B;
        match storage_b.write(&sequencer_b, new_balance).await? {
            WriteOutcome::Accepted => timeline.record(
                Lane::Storage,
                format!(
                    "accepted B's write: balance = {new_balance} (generation {})",
                    sequencer_b.generation()
                ),
            ),
            WriteOutcome::RefusedStale { presented, mark } => anyhow::bail!(
                "B's write with generation {presented} was refused (mark {mark}); B held the newest grant"
            ),
        }
        guard_b.release().await?;
        timeline.record(Lane::ClientB, "released the lock");
        anyhow::Ok(())
    });

    // 2. A stops the world. A real GC pause stops every thread, the
    //    keep-alive included: stop it, then sleep this task.
    client_a.stop_keepalive();
    timeline.record(
        Lane::ClientA,
        format!(
            "stop-the-world pause for {} ms (lease TTL {} ms); its keep-alive stops too",
            timing.pause.as_millis(),
            timing.ttl.as_millis()
        ),
    );
    tokio::time::sleep(timing.pause).await;

    // B is long done by now (the pause is several TTLs); joining it here
    // only makes the printed order deterministic.
    client_b_task.await??;

    // 4. A wakes up and finishes the write it started before the pause.
    let lease_lost_signalled = match guard_a.sequencer() {
        Ok(_) => false,
        Err(error) => {
            timeline.record(Lane::ClientA, format!("wakes up; its guard says: {error}"));
            true
        }
    };
    timeline.record(
        Lane::ClientA,
        format!(
            "writes balance = {} with the sequencer it fetched before the pause (generation {})",
            seen_by_a + DEPOSIT_A,
            sequencer_a.generation()
        ),
    );
    let late_write = storage.write(&sequencer_a, seen_by_a + DEPOSIT_A).await?;
    let (stale_write_accepted, stale_write_refused) = match late_write {
        WriteOutcome::Accepted => {
            timeline.record(
                Lane::Storage,
                format!(
                    "accepted A's write: balance = {} (generation {}, older than B's)",
                    seen_by_a + DEPOSIT_A,
                    sequencer_a.generation()
                ),
            );
            (true, false)
        }
        WriteOutcome::RefusedStale { presented, mark } => {
            timeline.record(
                Lane::Storage,
                format!("refused A's write: 409 stale, generation {presented} < mark {mark}"),
            );
            (false, true)
        }
    };
    lease_monitor.await?;
    if let Err(error) = guard_a.release().await {
        timeline.record(Lane::ClientA, format!("release refused: {error}"));
    }

    // A correct client treats the refusal as "you no longer hold the lock":
    // take it again, read again, apply again.
    if stale_write_refused {
        let client_a_again = locks.session(options.clone())?;
        let guard = client_a_again.acquire(&name, Mode::Exclusive).await?;
        let sequencer = guard.sequencer()?;
        let seen = storage.read(&sequencer).await?;
        storage.write(&sequencer, seen + DEPOSIT_A).await?;
        guard.release().await?;
        timeline.record(
            Lane::ClientA,
            format!(
                "retried the right way: re-acquired (generation {}), read {seen}, wrote {}",
                sequencer.generation(),
                seen + DEPOSIT_A
            ),
        );
    }

    let auditor = locks.session(options)?;
    let guard = auditor.acquire(&name, Mode::Shared).await?;
    let final_balance = storage.read(&guard.sequencer()?).await?;
    guard.release().await?;

    Ok(Report {
        final_balance,
        expected_balance: OPENING_BALANCE + DEPOSIT_A + DEPOSIT_B,
        stale_write_accepted,
        stale_write_refused,
        lease_lost_signalled,
    })
}
