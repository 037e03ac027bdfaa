//! How far one request may raise a lock's mark: the raise cap of the
//! resource server (`--max-mark-raise`, `--max-mark-raise-time`) and of
//! `palisade-guard` (`max_raise`, `max_raise_time`).
//!
//! Two kinds of generation reach a server, and a sequencer does not say
//! which it carries:
//!
//! - **counters**: etcd revisions, the Redis backend's `Counter` scheme.
//!   The honest gap between two grants is a number of grants (or of
//!   cluster writes), so the cap is a count: at most `max_raise` above the
//!   lock's highest mark.
//! - **clock generations**: the Redis backend's default `ServerClock`
//!   scheme mints Redis's time in microseconds. The honest gap is the time
//!   the lock sat idle, unbounded by any count, so the cap is this
//!   server's clock: at most `clock_lead` ahead of now.
//!
//! The kind is read from the lock's own mark, never from the request: a
//! mark at or above [`CLOCK_GENERATION_FLOOR`] (2020-01-01 in microseconds)
//! can only come from a clock, since a counter would need 1.5 × 10^15
//! grants to get there. A forger cannot switch a counter lock to the clock
//! rule: the cap lets it move the mark by `max_raise` per request, far
//! from that floor. And on a clock lock the allowance does not grow with
//! the mark, so however often a runaway generation is sent, it fences
//! honest holders for at most `clock_lead` of Redis time. A lock with no
//! mark yet is held to the clock rule as well: no honest first generation
//! of any scheme is ahead of the clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The raise cap: a count for counter generations, a lead over the local
/// clock for clock generations.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use palisade_core::RaiseCap;
///
/// let cap = RaiseCap::new(10_000).with_clock_lead(Duration::from_secs(3600));
/// let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
/// // An etcd revision may rise by 10 000.
/// assert_eq!(cap.allowed_up_to(42, now), 10_042);
/// // A Redis clock generation may be an hour ahead of the clock, however
/// // long the lock was idle.
/// let day_old = 1_800_000_000_000_000 - 86_400_000_000;
/// assert_eq!(cap.allowed_up_to(day_old, now), 1_800_000_000_000_000 + 3_600_000_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaiseCap {
    max_raise: u64,
    clock_lead: Duration,
}

impl RaiseCap {
    /// 2020-01-01T00:00:00Z in microseconds since the Unix epoch. A mark at
    /// or above it is a clock generation.
    pub const CLOCK_GENERATION_FLOOR: u64 = 1_577_836_800_000_000;

    /// The clock lead unless [`RaiseCap::with_clock_lead`] says otherwise:
    /// one hour.
    pub const DEFAULT_CLOCK_LEAD: Duration = Duration::from_secs(3600);

    /// A counter mark may rise by at most `max_raise` per request; a clock
    /// generation may be at most [`RaiseCap::DEFAULT_CLOCK_LEAD`] ahead of
    /// the clock.
    pub const fn new(max_raise: u64) -> Self {
        RaiseCap {
            max_raise,
            clock_lead: Self::DEFAULT_CLOCK_LEAD,
        }
    }

    /// How far ahead of the local clock a clock generation may be. It must
    /// exceed the clock difference between the lock service and this
    /// machine; it is also the longest a runaway clock generation can fence
    /// a lock's honest holders.
    pub const fn with_clock_lead(mut self, clock_lead: Duration) -> Self {
        self.clock_lead = clock_lead;
        self
    }

    /// How far a counter mark may rise in one request.
    pub const fn max_raise(&self) -> u64 {
        self.max_raise
    }

    /// How far ahead of the local clock a clock generation may be.
    pub const fn clock_lead(&self) -> Duration {
        self.clock_lead
    }

    /// The highest generation a lock whose highest mark is `highest` may
    /// be raised to, when the local clock reads `now`.
    pub fn allowed_up_to(&self, highest: u64, now: SystemTime) -> u64 {
        if !Self::by_clock(highest) {
            return highest.saturating_add(self.max_raise);
        }
        let now_us = micros(now.duration_since(UNIX_EPOCH).unwrap_or_default());
        now_us.saturating_add(micros(self.clock_lead))
    }

    /// Whether a lock whose highest mark is `highest` is judged by the
    /// clock rule (its mark is a clock generation, or it has none).
    pub const fn by_clock(highest: u64) -> bool {
        highest == 0 || highest >= Self::CLOCK_GENERATION_FLOOR
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: RaiseCap = RaiseCap::new(10_000).with_clock_lead(Duration::from_secs(3600));
    const CLOCK_GENERATION_FLOOR: u64 = RaiseCap::CLOCK_GENERATION_FLOOR;

    fn at_micros(us: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_micros(us)
    }

    #[test]
    fn a_counter_mark_is_capped_by_the_count() {
        let now = at_micros(1_800_000_000_000_000);
        assert_eq!(CAP.allowed_up_to(42, now), 10_042);
        assert_eq!(
            CAP.allowed_up_to(CLOCK_GENERATION_FLOOR - 1, now),
            CLOCK_GENERATION_FLOOR - 1 + 10_000
        );
    }

    #[test]
    fn a_clock_mark_may_rise_to_the_clock_plus_the_lead_however_old_it_is() {
        let now_us = 1_800_000_000_000_000;
        let day_old = now_us - 86_400_000_000;
        let allowed = CAP.allowed_up_to(day_old, at_micros(now_us));
        assert_eq!(allowed, now_us + 3_600_000_000);
    }

    #[test]
    fn a_clock_mark_already_ahead_does_not_extend_the_allowance() {
        let now_us = 1_800_000_000_000_000;
        let ahead = now_us + 3_600_000_000;
        assert_eq!(CAP.allowed_up_to(ahead, at_micros(now_us)), ahead);
    }

    #[test]
    fn a_lock_without_marks_is_held_to_the_clock() {
        let now_us = 1_800_000_000_000_000;
        assert_eq!(
            CAP.allowed_up_to(0, at_micros(now_us)),
            now_us + 3_600_000_000
        );
    }
}
