//! How long this machine has been suspended, so lease deadlines count it.
//!
//! A lease's validity deadline is kept on the monotonic clock (tokio's
//! `Instant`, `CLOCK_MONOTONIC` on Linux), which stops while the machine is
//! suspended. The lock service's clock does not stop: a laptop or a VM
//! suspended past its lease wakes up with the monotonic deadline still in
//! the future, although the lease is long gone. On Linux `CLOCK_BOOTTIME`
//! keeps counting through a suspend; the difference between it and the
//! monotonic clock grows by exactly the time spent suspended (both are
//! slewed by NTP alike), which is what this module measures.
//!
//! Elsewhere there is no such clock in reach without `unsafe`, so the
//! suspend time reads as zero: the monotonic clock alone decides, as
//! before (docs/SAFETY.md says what still protects the data then: the
//! generation check at the resource server).

use std::sync::OnceLock;
use std::time::{Duration, Instant as StdInstant};

/// Reads a clock that keeps counting while the machine is suspended, as the
/// time since some fixed origin.
pub(crate) type BootClock = fn() -> Duration;

/// Suspends shorter than this are not counted: two clocks are never read
/// at one instant, and a thread preempted between the reads must not look
/// suspended. A real suspend lasts seconds.
pub(crate) const SUSPEND_NOISE: Duration = Duration::from_millis(50);

/// The suspend time accrued since a starting point.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SuspendClock {
    read_boottime: BootClock,
    gap_at_start: Duration,
}

impl SuspendClock {
    /// Starts counting now, with the system's clock.
    pub(crate) fn start() -> Self {
        Self::start_with(read_boottime)
    }

    /// Starts counting now, reading `read_boottime`.
    pub(crate) fn start_with(read_boottime: BootClock) -> Self {
        SuspendClock {
            read_boottime,
            gap_at_start: gap(read_boottime),
        }
    }

    /// How long the machine has been suspended since [`SuspendClock::start`]
    /// (less [`SUSPEND_NOISE`]).
    ///
    /// Measured against the real monotonic clock (`std`'s), not tokio's, so
    /// tokio's paused test time does not read as a suspend.
    pub(crate) fn suspended(&self) -> Duration {
        gap(self.read_boottime)
            .saturating_sub(self.gap_at_start)
            .saturating_sub(SUSPEND_NOISE)
    }
}

/// The boot clock minus the monotonic clock (from a fixed origin): constant
/// while the machine runs, larger by the time spent suspended.
fn gap(read_boottime: BootClock) -> Duration {
    // The boot clock read between two monotonic reads; a pair far apart
    // (the thread was preempted) is read again, a few times at most.
    let mut gap = Duration::ZERO;
    for _ in 0..3 {
        let before = origin().elapsed();
        gap = read_boottime().saturating_sub(before);
        // Saturating: a monotonic clock seen going back (libfaketime, a
        // broken VM clock) must not panic the lease tracker.
        if origin().elapsed().saturating_sub(before) < Duration::from_millis(1) {
            break;
        }
    }
    gap
}

/// A fixed point on the monotonic clock, taken at the first use.
fn origin() -> StdInstant {
    static ORIGIN: OnceLock<StdInstant> = OnceLock::new();
    *ORIGIN.get_or_init(StdInstant::now)
}

/// `CLOCK_BOOTTIME`; if it cannot be read, the monotonic clock (no suspend
/// is seen, as on other systems).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn read_boottime() -> Duration {
    use nix::time::{ClockId, clock_gettime};
    match clock_gettime(ClockId::CLOCK_BOOTTIME) {
        Ok(now) => Duration::from(now),
        Err(_) => monotonic_fallback(),
    }
}

/// No suspend-counting clock here: the monotonic clock, so no suspend is
/// ever seen.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn read_boottime() -> Duration {
    monotonic_fallback()
}

/// A boot clock that never counts a suspend. Its origin is far enough
/// from [`origin`] that the gap never saturates at zero.
fn monotonic_fallback() -> Duration {
    Duration::from_secs(1) + origin().elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_machine_accrues_no_suspend() {
        let clock = SuspendClock::start();
        std::thread::sleep(Duration::from_millis(20));
        // Both clocks moved by the same 20 ms.
        assert_eq!(clock.suspended(), Duration::ZERO);
    }
}
