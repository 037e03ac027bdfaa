//! How far one request may raise a lock's mark (`--max-mark-raise`,
//! `--max-mark-raise-time`).
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

/// 2020-01-01T00:00:00Z in microseconds since the Unix epoch. A mark at or
/// above it is a clock generation.
pub(crate) const CLOCK_GENERATION_FLOOR: u64 = 1_577_836_800_000_000;

/// The default `--max-mark-raise-time`.
pub(crate) const DEFAULT_CLOCK_LEAD: Duration = Duration::from_secs(3600);

/// The raise cap: a count for counter generations, a lead over this
/// server's clock for clock generations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RaiseCap {
    /// How far a counter lock's mark may rise in one request.
    pub(crate) max_raise: u64,
    /// How far ahead of this server's clock a clock generation may be.
    pub(crate) clock_lead: Duration,
}

impl RaiseCap {
    /// The highest generation a lock whose highest mark is `highest` may
    /// be raised to, when this server's clock reads `now`.
    pub(crate) fn allowed_up_to(&self, highest: u64, now: SystemTime) -> u64 {
        if highest != 0 && highest < CLOCK_GENERATION_FLOOR {
            return highest.saturating_add(self.max_raise);
        }
        let now_us = micros(now.duration_since(UNIX_EPOCH).unwrap_or_default());
        now_us.saturating_add(micros(self.clock_lead))
    }

    /// Whether the lock's marks are judged by the clock rule.
    pub(crate) fn by_clock(highest: u64) -> bool {
        highest == 0 || highest >= CLOCK_GENERATION_FLOOR
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: RaiseCap = RaiseCap {
        max_raise: 10_000,
        clock_lead: Duration::from_secs(3600),
    };

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
