//! The lease a guard stands on, and the lease-lost signal.
//!
//! A backend owns a [`LeaseTracker`] per hold and moves it forward as its
//! keep-alive succeeds; guards and their users read it through
//! [`LeaseWatch`]. The validity deadline is kept on this process's
//! *monotonic* clock and already has the safety margin taken off, so:
//!
//! - [`LeaseWatch::is_valid`] is true only while the lease is provably
//!   alive by local reckoning;
//! - [`LeaseWatch::lost`] resolves at the deadline even if the backend's
//!   keep-alive task is starved and never gets to report, so a paused or
//!   overloaded process learns about the loss the moment it runs again.
//!
//! The monotonic clock stops while the machine is suspended; the lock
//! service's does not. So every reading of a deadline adds the time the
//! machine has spent suspended since the tracker was created (Linux's
//! `CLOCK_BOOTTIME` against the monotonic clock, `suspend_clock.rs`): a
//! laptop or VM resumed after its lease ran out sees `Lost(Expired)` on its
//! first look, and [`LeaseWatch::lost`] fires within a second
//! (`SUSPEND_RECHECK`) of the resume. Counting from the tracker's creation
//! rather than from the last renewal also covers a suspend while a
//! renewal was in flight; after a short suspend it makes every later
//! deadline of that hold that much earlier, which errs towards reporting
//! the loss. On systems without such a clock the monotonic clock alone
//! decides.

use std::fmt;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

#[cfg(test)]
use crate::suspend_clock::SUSPEND_NOISE;
use crate::suspend_clock::SuspendClock;

/// The longest [`LeaseWatch::lost`] sleeps without looking at the suspend
/// clock: how late, at most, it reports a lease that ran out while the
/// machine was suspended.
const SUSPEND_RECHECK: Duration = Duration::from_secs(1);

/// Why a lease is no longer valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// The local validity deadline passed without a successful renewal.
    Expired,
    /// A renewal failed and the lease cannot be shown to be alive.
    KeepAliveFailed,
    /// The lock service says the lease no longer exists (revoked, expired
    /// on the server).
    Revoked,
    /// The holder's key was deleted or taken over by someone else.
    KeyDeleted,
    /// The session behind the lease was closed.
    SessionClosed,
}

impl LostReason {
    /// A short stable name: `expired`, `keepalive_failed`, `revoked`,
    /// `key_deleted`, `session_closed`.
    pub const fn as_str(self) -> &'static str {
        match self {
            LostReason::Expired => "expired",
            LostReason::KeepAliveFailed => "keepalive_failed",
            LostReason::Revoked => "revoked",
            LostReason::KeyDeleted => "key_deleted",
            LostReason::SessionClosed => "session_closed",
        }
    }
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::Expired => "the lease's validity deadline passed without a renewal",
            LostReason::KeepAliveFailed => "renewing the lease failed",
            LostReason::Revoked => "the lock service no longer has the lease",
            LostReason::KeyDeleted => "the holder's key was deleted",
            LostReason::SessionClosed => "the session was closed",
        })
    }
}

/// Where a hold stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// Held, and provably valid until `valid_until` on the local monotonic
    /// clock (the safety margin already subtracted).
    Held {
        /// The validity deadline.
        valid_until: Instant,
    },
    /// Validity can no longer be guaranteed. Final.
    Lost(LostReason),
    /// Released cleanly by its holder. Final.
    Released,
}

impl LeaseState {
    /// This state as seen at `now`: a `Held` state past its deadline is
    /// `Lost(Expired)`.
    pub fn at(self, now: Instant) -> LeaseState {
        match self {
            LeaseState::Held { valid_until } if now >= valid_until => {
                LeaseState::Lost(LostReason::Expired)
            }
            other => other,
        }
    }
}

/// The backend's side of a lease: extend it, declare it lost, release it.
///
/// Transitions out of `Held` are final: the first `lose` or `release` wins
/// and later calls return `false`. Dropping the tracker while still `Held`
/// counts as `Lost(SessionClosed)` for watchers, because nobody is left to
/// renew the lease.
#[derive(Debug)]
pub struct LeaseTracker {
    sender: watch::Sender<LeaseState>,
    suspend: SuspendClock,
}

impl LeaseTracker {
    /// A tracker for a lease valid until `valid_until`.
    pub fn new(valid_until: Instant) -> Self {
        Self::with_suspend_clock(valid_until, SuspendClock::start())
    }

    fn with_suspend_clock(valid_until: Instant, suspend: SuspendClock) -> Self {
        LeaseTracker {
            sender: watch::Sender::new(LeaseState::Held { valid_until }),
            suspend,
        }
    }

    /// A watch for guards and users.
    pub fn watch(&self) -> LeaseWatch {
        LeaseWatch {
            receiver: self.sender.subscribe(),
            suspend: self.suspend,
        }
    }

    /// The state now (a passed deadline reads as `Lost(Expired)`, counting
    /// the time the machine was suspended).
    pub fn state(&self) -> LeaseState {
        self.sender.borrow().at(now_counting_suspend(&self.suspend))
    }

    /// Moves the validity deadline to `valid_until` after a successful
    /// renewal. Returns `false`, changing nothing, if the lease is already
    /// lost or released, or if the old deadline has already passed: a lease
    /// that lapsed locally stays lapsed, because someone else may have been
    /// granted the lock in the gap.
    pub fn extend(&self, valid_until: Instant) -> bool {
        let now = now_counting_suspend(&self.suspend);
        let mut extended = false;
        self.sender.send_if_modified(|state| match *state {
            LeaseState::Held { valid_until: old } if now < old => {
                *state = LeaseState::Held { valid_until };
                extended = true;
                true
            }
            LeaseState::Held { .. } => {
                *state = LeaseState::Lost(LostReason::Expired);
                true
            }
            _ => false,
        });
        extended
    }

    /// Declares the lease lost for `reason`. Returns `true` if this call
    /// made the transition.
    pub fn lose(&self, reason: LostReason) -> bool {
        self.finish(LeaseState::Lost(reason))
    }

    /// Marks a clean release. Returns `true` if this call made the
    /// transition (it was still held).
    pub fn release(&self) -> bool {
        self.finish(LeaseState::Released)
    }

    fn finish(&self, final_state: LeaseState) -> bool {
        self.sender.send_if_modified(|state| match *state {
            LeaseState::Held { .. } => {
                *state = final_state;
                true
            }
            _ => false,
        })
    }
}

impl Drop for LeaseTracker {
    fn drop(&mut self) {
        self.lose(LostReason::SessionClosed);
    }
}

/// A read-only view of a lease: the lease-lost signal guards expose.
///
/// Cheap to clone; every clone sees the same state.
///
/// ```
/// use std::time::Duration;
/// use palisade_core::{LeaseState, LeaseTracker, LostReason};
/// use tokio::time::Instant;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let tracker = LeaseTracker::new(Instant::now() + Duration::from_secs(3));
/// let mut watch = tracker.watch();
/// assert!(watch.is_valid());
///
/// // Nobody renews: the signal fires at the deadline by itself.
/// assert_eq!(watch.lost().await, LeaseState::Lost(LostReason::Expired));
/// assert!(!watch.is_valid());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LeaseWatch {
    receiver: watch::Receiver<LeaseState>,
    suspend: SuspendClock,
}

impl LeaseWatch {
    /// The state now (a passed deadline reads as `Lost(Expired)`, counting
    /// the time the machine was suspended).
    pub fn state(&self) -> LeaseState {
        let state = *self.receiver.borrow();
        match state {
            LeaseState::Held { .. } if self.receiver.has_changed().is_err() => {
                // The tracker is gone without a final word.
                LeaseState::Lost(LostReason::SessionClosed)
            }
            state => state.at(now_counting_suspend(&self.suspend)),
        }
    }

    /// Whether the hold is still provably valid.
    pub fn is_valid(&self) -> bool {
        matches!(self.state(), LeaseState::Held { .. })
    }

    /// The validity deadline, while held.
    pub fn valid_until(&self) -> Option<Instant> {
        match self.state() {
            LeaseState::Held { valid_until } => Some(valid_until),
            _ => None,
        }
    }

    /// How long the hold is still provably valid (zero once it is not).
    pub fn remaining(&self) -> Duration {
        self.valid_until()
            .map(|deadline| deadline.saturating_duration_since(now_counting_suspend(&self.suspend)))
            .unwrap_or(Duration::ZERO)
    }

    /// Waits until the backend publishes a new state (a renewal moved the
    /// deadline, or a final state), or the tracker is gone. Does not wait
    /// for the deadline itself: use [`LeaseWatch::lost`] for that. For
    /// leases built on other leases (a quorum of holds follows its
    /// members' renewals). Cancel-safe.
    pub async fn changed(&mut self) {
        let _ = self.receiver.changed().await;
    }

    /// Waits until the hold is no longer valid and returns the final state:
    /// `Lost(reason)` or `Released`.
    ///
    /// Resolves at the validity deadline by itself, without waiting for the
    /// backend to notice, and within a second of a resume that finds the
    /// deadline passed (the machine was suspended past it). Cancel-safe.
    pub async fn lost(&mut self) -> LeaseState {
        loop {
            let state = self.state();
            let valid_until = match state {
                LeaseState::Held { valid_until } => valid_until,
                final_state => return final_state,
            };
            // The deadline as the timer sees it (the suspend time so far
            // taken off), and a look at the suspend clock every
            // SUSPEND_RECHECK, since a later suspend does not move timers.
            let deadline = valid_until
                .checked_sub(self.suspend.suspended())
                .unwrap_or_else(Instant::now)
                .min(Instant::now() + SUSPEND_RECHECK);
            tokio::select! {
                changed = self.receiver.changed() => {
                    if changed.is_err() {
                        // Sender dropped: its Drop already published a final
                        // state, which `state()` reads on the next turn.
                        return match *self.receiver.borrow() {
                            LeaseState::Held { .. } => LeaseState::Lost(LostReason::SessionClosed),
                            final_state => final_state,
                        };
                    }
                }
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}

/// Now on the monotonic clock, plus the time the machine has spent
/// suspended since `suspend` started: the instant to compare a monotonic
/// deadline with.
fn now_counting_suspend(suspend: &SuspendClock) -> Instant {
    Instant::now() + suspend.suspended()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[tokio::test(start_paused = true)]
    async fn extend_moves_the_deadline_while_valid() {
        let tracker = LeaseTracker::new(Instant::now() + secs(3));
        let watch = tracker.watch();
        tokio::time::advance(secs(2)).await;
        assert!(tracker.extend(Instant::now() + secs(3)));
        tokio::time::advance(secs(2)).await;
        assert!(watch.is_valid());
        assert_eq!(watch.remaining(), secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lapsed_lease_cannot_be_revived() {
        let tracker = LeaseTracker::new(Instant::now() + secs(1));
        let mut watch = tracker.watch();
        tokio::time::advance(secs(2)).await;
        assert!(!tracker.extend(Instant::now() + secs(10)));
        assert_eq!(watch.lost().await, LeaseState::Lost(LostReason::Expired));
        assert_eq!(tracker.state(), LeaseState::Lost(LostReason::Expired));
    }

    #[tokio::test(start_paused = true)]
    async fn first_final_state_wins() {
        let tracker = LeaseTracker::new(Instant::now() + secs(10));
        let mut watch = tracker.watch();
        let waiter = tokio::spawn(async move { watch.lost().await });
        assert!(tracker.lose(LostReason::Revoked));
        assert!(!tracker.release());
        assert!(!tracker.lose(LostReason::KeyDeleted));
        assert_eq!(waiter.await.unwrap(), LeaseState::Lost(LostReason::Revoked));
    }

    #[tokio::test(start_paused = true)]
    async fn release_is_not_loss() {
        let tracker = LeaseTracker::new(Instant::now() + secs(10));
        let mut watch = tracker.watch();
        assert!(tracker.release());
        assert_eq!(watch.lost().await, LeaseState::Released);
        assert!(!watch.is_valid());
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_tracker_while_held_is_a_loss() {
        let tracker = LeaseTracker::new(Instant::now() + secs(10));
        let mut watch = tracker.watch();
        drop(tracker);
        assert_eq!(
            watch.lost().await,
            LeaseState::Lost(LostReason::SessionClosed)
        );
        assert!(!watch.is_valid());
    }

    /// `$tracker`, a lease tracker valid for `$lease` on a boot clock of
    /// its own (the real one plus `$jump`, which `suspend_for` moves), for
    /// the tests below: each test has its own, as tests run in parallel.
    macro_rules! tracker_with_jump {
        ($jump:ident, $tracker:ident, $lease:expr) => {
            static $jump: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            fn boot_clock() -> Duration {
                crate::suspend_clock::read_boottime()
                    + Duration::from_millis($jump.load(std::sync::atomic::Ordering::SeqCst))
            }
            let $tracker = LeaseTracker::with_suspend_clock(
                Instant::now() + $lease,
                SuspendClock::start_with(boot_clock),
            );
        };
    }

    fn suspend_for(jump: &std::sync::atomic::AtomicU64, how_long: Duration) {
        let millis = u64::try_from(how_long.as_millis()).unwrap();
        jump.fetch_add(millis, std::sync::atomic::Ordering::SeqCst);
    }

    #[tokio::test(start_paused = true)]
    async fn a_suspend_past_the_lease_is_a_loss_although_the_monotonic_clock_stood_still() {
        tracker_with_jump!(JUMP, tracker, secs(10));
        let watch = tracker.watch();
        let before = Instant::now();

        // The machine sleeps 11 s: CLOCK_BOOTTIME moves, the monotonic
        // clock (here tokio's paused one) does not.
        suspend_for(&JUMP, secs(11));
        assert_eq!(Instant::now(), before, "the monotonic clock stood still");
        assert_eq!(tracker.state(), LeaseState::Lost(LostReason::Expired));
        assert!(
            !watch.is_valid(),
            "no sequencer is handed out after the resume"
        );
        assert_eq!(watch.remaining(), Duration::ZERO);
        assert!(
            !tracker.extend(Instant::now() + secs(10)),
            "a lease lapsed during a suspend cannot be revived"
        );
        assert_eq!(
            watch.clone().lost().await,
            LeaseState::Lost(LostReason::Expired)
        );
        assert_eq!(Instant::now(), before, "lost() answered at once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_suspend_shortens_the_lease_by_its_length() {
        tracker_with_jump!(JUMP, tracker, secs(10));
        let watch = tracker.watch();
        suspend_for(&JUMP, secs(3));
        assert!(watch.is_valid());
        let remaining = watch.remaining();
        assert!(
            // Reading two clocks is not one instant: a millisecond of slack.
            remaining >= secs(7) - ms(1) && remaining <= secs(7) + SUSPEND_NOISE + ms(1),
            "{remaining:?} left of 10 s after a 3 s suspend"
        );
        tokio::time::advance(secs(7) + SUSPEND_NOISE + ms(1)).await;
        assert_eq!(watch.state(), LeaseState::Lost(LostReason::Expired));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_learns_of_a_suspend_within_the_recheck_period() {
        tracker_with_jump!(JUMP, tracker, secs(30));
        let mut watch = tracker.watch();
        let waiter = tokio::spawn(async move { watch.lost().await });
        tokio::task::yield_now().await;
        let suspended_at = Instant::now();
        suspend_for(&JUMP, secs(31));
        let lost = waiter.await.unwrap();
        assert_eq!(lost, LeaseState::Lost(LostReason::Expired));
        assert!(
            Instant::now() - suspended_at <= SUSPEND_RECHECK,
            "reported {:?} after the resume",
            Instant::now() - suspended_at
        );
    }
}
