//! The raise cap as an engine applies it: against the marks it reads in
//! the same atomic step as the fencing rule, so a capped write costs no
//! read of its own.

use std::time::SystemTime;

use palisade_core::{RaiseCap, Sequencer};

use crate::{Marks, Refused};

/// A [`RaiseCap`] and the clock reading it is judged against: what a write
/// carries ([`WriteRequest::raise_limit`](crate::WriteRequest::raise_limit))
/// so that its engine refuses a runaway generation in the step that checks
/// the fencing rule.
///
/// The clock is read once, when the request is made, not when the engine
/// decides: a request that queues a moment is judged by the earlier (and
/// so stricter) reading, a retry inside an engine by the same one, and an
/// engine that decides in its database (PostgreSQL) needs no clock of its
/// own.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use palisade_core::{Generation, LockName, Mode, RaiseCap, Sequencer};
/// use palisade_store::{Marks, RaiseLimit};
///
/// let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
/// let limit = RaiseLimit::new(RaiseCap::new(100), now);
/// let marks = Marks { exclusive: 40, shared: 50 };
/// // A counter mark: at most 100 above the highest mark.
/// assert_eq!(limit.allowed_up_to(marks), 150);
/// let lock = LockName::new("orders/42")?;
/// let sequencer = |g| Sequencer::new(lock.clone(), Mode::Exclusive, Generation::new(g).unwrap());
/// assert!(limit.check(&sequencer(150), marks).is_ok());
/// assert!(limit.check(&sequencer(151), marks).is_err());
/// # Ok::<(), palisade_core::LockNameError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaiseLimit {
    cap: RaiseCap,
    now: SystemTime,
}

impl RaiseLimit {
    /// `cap`, judged against the clock reading `now`.
    pub fn new(cap: RaiseCap, now: SystemTime) -> Self {
        RaiseLimit { cap, now }
    }

    /// `cap`, judged against this machine's clock now.
    pub fn now(cap: RaiseCap) -> Self {
        RaiseLimit::new(cap, SystemTime::now())
    }

    /// The cap.
    pub fn cap(&self) -> RaiseCap {
        self.cap
    }

    /// The clock reading the cap is judged against.
    pub fn clock(&self) -> SystemTime {
        self.now
    }

    /// The highest generation a request may present on a lock with
    /// `marks` ([`RaiseCap::allowed_up_to`] of the higher mark).
    pub fn allowed_up_to(&self, marks: Marks) -> u64 {
        self.cap.allowed_up_to(marks.highest(), self.now)
    }

    /// What the clock rule allows whatever the marks, in microseconds since
    /// the Unix epoch: the clock reading plus the cap's lead. For an engine
    /// that applies the cap inside its database, beside
    /// [`RaiseCap::max_raise`] and [`RaiseCap::CLOCK_GENERATION_FLOOR`].
    pub fn clock_limit(&self) -> u64 {
        // A lock without marks is judged by the clock rule alone.
        self.cap.allowed_up_to(0, self.now)
    }

    /// `Ok` if `sequencer`'s generation is within the cap on a lock with
    /// `marks`; otherwise the refusal ([`Refused::RaiseTooLarge`]).
    pub fn check(&self, sequencer: &Sequencer, marks: Marks) -> Result<(), Refused> {
        if sequencer.generation().get() <= self.allowed_up_to(marks) {
            Ok(())
        } else {
            Err(self.refusal(sequencer, marks))
        }
    }

    /// The refusal of `sequencer` on a lock with `marks`, for an engine
    /// whose database decided it (it reports the marks it decided on).
    pub fn refusal(&self, sequencer: &Sequencer, marks: Marks) -> Refused {
        let highest = marks.highest();
        Refused::RaiseTooLarge {
            lock: sequencer.lock().clone(),
            mode: sequencer.mode(),
            presented: sequencer.generation(),
            marks,
            max_raise: self.cap.max_raise(),
            clock_lead: self.cap.clock_lead(),
            by_clock: RaiseCap::by_clock(highest),
            allowed_up_to: self.allowed_up_to(marks),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use palisade_core::{Generation, LockName, Mode};

    use super::*;

    const NOW_US: u64 = 1_800_000_000_000_000;
    const LEAD_US: u64 = 3_600_000_000;

    fn limit() -> RaiseLimit {
        RaiseLimit::new(
            RaiseCap::new(10).with_clock_lead(Duration::from_micros(LEAD_US)),
            UNIX_EPOCH + Duration::from_micros(NOW_US),
        )
    }

    fn sequencer(generation: u64) -> Sequencer {
        Sequencer::new(
            LockName::new("L").unwrap(),
            Mode::Exclusive,
            Generation::new(generation).unwrap(),
        )
    }

    #[test]
    fn the_higher_mark_decides_and_the_refusal_says_how() {
        let marks = Marks {
            exclusive: 5,
            shared: 20,
        };
        assert_eq!(limit().allowed_up_to(marks), 30);
        assert_eq!(limit().check(&sequencer(30), marks), Ok(()));
        match limit().check(&sequencer(31), marks) {
            Err(Refused::RaiseTooLarge {
                marks: refused_marks,
                max_raise: 10,
                by_clock: false,
                allowed_up_to: 30,
                ..
            }) => assert_eq!(refused_marks, marks),
            other => panic!("expected a counter refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_lock_without_marks_is_held_to_the_clock_limit() {
        assert_eq!(limit().clock_limit(), NOW_US + LEAD_US);
        assert_eq!(limit().allowed_up_to(Marks::ZERO), NOW_US + LEAD_US);
        assert!(
            limit()
                .check(&sequencer(NOW_US + LEAD_US), Marks::ZERO)
                .is_ok()
        );
        assert!(matches!(
            limit().check(&sequencer(NOW_US + LEAD_US + 1), Marks::ZERO),
            Err(Refused::RaiseTooLarge { by_clock: true, .. })
        ));
    }
}
