//! The two high-water marks of a lock, and the fencing rule.
//!
//! The rule lives here, in core, so every place that fences (the fenced
//! store, the SQL fence of `palisade-fence-sql`) applies the same function, and
//! [`RULE_CASES`] is the one table of cases all of them are tested against.

use std::fmt;

use crate::{Generation, Mode};

/// A lock's high-water marks: the highest generations honoured so far.
///
/// Both start at 0 for a lock never seen (no generation is ever 0, so every
/// first request passes). They only ever rise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Marks {
    /// `H_excl`: the highest exclusive generation honoured. An exclusive
    /// request below it comes from a holder that has been superseded by a
    /// newer writer; a shared request below it from a reader that started
    /// before the latest writer was granted.
    pub exclusive: u64,
    /// `H_shared`: the highest shared generation honoured. An exclusive
    /// request below it was granted before a reader that has already read:
    /// letting it write now would change data under that reader.
    pub shared: u64,
}

impl Marks {
    /// The marks of a lock never seen: both 0.
    pub const ZERO: Marks = Marks {
        exclusive: 0,
        shared: 0,
    };

    /// The smallest generation a request in `mode` must present to be
    /// accepted: `max(H_excl, H_shared)` for exclusive, `H_excl` for shared.
    pub fn required(self, mode: Mode) -> u64 {
        match mode {
            Mode::Exclusive => self.highest(),
            Mode::Shared => self.exclusive,
        }
    }

    /// The higher of the two marks: `max(H_excl, H_shared)`, what a raise
    /// is measured from.
    pub fn highest(self) -> u64 {
        self.exclusive.max(self.shared)
    }

    /// The fencing rule of DESIGN.md.
    ///
    /// - exclusive `g` is accepted iff `g >= max(H_excl, H_shared)`, and then
    ///   `H_excl = g`;
    /// - shared `g` is accepted iff `g >= H_excl`, and then
    ///   `H_shared = max(H_shared, g)`.
    ///
    /// Equal generations are accepted: one holder writes many times.
    /// Returns the marks after the request, or `None` if it is stale.
    ///
    /// ```
    /// use palisade_core::{Generation, Mode};
    /// use palisade_core::marks::Marks;
    ///
    /// let g = |n| Generation::new(n).unwrap();
    /// let marks = Marks::ZERO.admit(Mode::Exclusive, g(5)).unwrap();
    /// assert_eq!(marks, Marks { exclusive: 5, shared: 0 });
    /// let marks = marks.admit(Mode::Shared, g(7)).unwrap();
    /// assert_eq!(marks, Marks { exclusive: 5, shared: 7 });
    /// // A writer granted before that reader is now stale.
    /// assert_eq!(marks.admit(Mode::Exclusive, g(6)), None);
    /// assert!(marks.admit(Mode::Exclusive, g(7)).is_some());
    /// ```
    pub fn admit(self, mode: Mode, generation: Generation) -> Option<Marks> {
        let presented = generation.get();
        if presented < self.required(mode) {
            return None;
        }
        Some(match mode {
            Mode::Exclusive => Marks {
                exclusive: presented,
                shared: self.shared,
            },
            Mode::Shared => Marks {
                exclusive: self.exclusive,
                shared: self.shared.max(presented),
            },
        })
    }
}

impl fmt::Display for Marks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "H_excl={} H_shared={}", self.exclusive, self.shared)
    }
}

/// One case of the fencing rule: the marks before, a request, and the marks
/// after (`None`: the request is stale and nothing changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleCase {
    /// `(H_excl, H_shared)` before the request.
    pub before: (u64, u64),
    /// The mode of the request.
    pub mode: Mode,
    /// The generation presented (never 0).
    pub generation: u64,
    /// `(H_excl, H_shared)` after, or `None` when the request is refused.
    pub expected: Option<(u64, u64)>,
}

impl RuleCase {
    /// The marks before the request.
    pub fn before_marks(&self) -> Marks {
        Marks {
            exclusive: self.before.0,
            shared: self.before.1,
        }
    }

    /// The marks after the request, `None` when it must be refused.
    pub fn expected_marks(&self) -> Option<Marks> {
        self.expected
            .map(|(exclusive, shared)| Marks { exclusive, shared })
    }

    /// The generation presented.
    pub fn generation(&self) -> Generation {
        Generation::new(self.generation).expect("rule cases never present generation 0")
    }
}

const fn case(
    before: (u64, u64),
    mode: Mode,
    generation: u64,
    expected: Option<(u64, u64)>,
) -> RuleCase {
    RuleCase {
        before,
        mode,
        generation,
        expected,
    }
}

/// The rules of DESIGN.md as a table. Every implementation of the rule runs
/// all of it: [`Marks::admit`] here, the fenced store, and the SQL fence
/// against real databases. Marks fit in a signed 64-bit column, so the
/// extremes stop at `i64::MAX`.
pub const RULE_CASES: &[RuleCase] = {
    use Mode::{Exclusive as X, Shared as S};
    const TOP: u64 = i64::MAX as u64;
    &[
        // A lock never seen accepts anything.
        case((0, 0), X, 1, Some((1, 0))),
        case((0, 0), S, 1, Some((0, 1))),
        // Exclusive: g >= max(H_excl, H_shared), then H_excl = g.
        case((5, 0), X, 5, Some((5, 0))),
        case((5, 0), X, 6, Some((6, 0))),
        case((5, 0), X, 4, None),
        case((5, 9), X, 8, None),
        // At H_excl but below H_shared: granted before a reader that read.
        case((5, 9), X, 5, None),
        case((5, 9), X, 9, Some((9, 9))),
        case((5, 9), X, 10, Some((10, 9))),
        // Shared: g >= H_excl, then H_shared = max(H_shared, g).
        case((5, 0), S, 4, None),
        case((5, 0), S, 5, Some((5, 5))),
        case((5, 9), S, 7, Some((5, 9))),
        case((5, 9), S, 12, Some((5, 12))),
        // Extremes.
        case((TOP, 0), X, TOP, Some((TOP, 0))),
        case((TOP, 0), S, TOP - 1, None),
    ]
};
#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn g(n: u64) -> Generation {
        Generation::new(n).unwrap()
    }

    #[test]
    fn the_rules_of_design_md() {
        for case in RULE_CASES {
            assert_eq!(
                case.before_marks().admit(case.mode, case.generation()),
                case.expected_marks(),
                "{case:?}"
            );
        }
        // Beyond what a signed SQL column holds.
        let top = Marks {
            exclusive: u64::MAX,
            shared: 0,
        };
        assert_eq!(top.admit(Mode::Exclusive, g(u64::MAX)), Some(top));
        assert_eq!(top.admit(Mode::Shared, g(u64::MAX - 1)), None);
    }

    proptest! {
        #[test]
        fn marks_never_go_down_and_accepted_is_at_least_required(
            exclusive in 0u64..100, shared in 0u64..100, generation in 1u64..100, shared_mode: bool,
        ) {
            let mode = if shared_mode { Mode::Shared } else { Mode::Exclusive };
            let before = Marks { exclusive, shared };
            match before.admit(mode, g(generation)) {
                Some(after) => {
                    prop_assert!(generation >= before.required(mode));
                    prop_assert!(after.shared >= before.shared);
                    // H_excl moves only on exclusive requests, and only up.
                    prop_assert!(after.exclusive >= before.exclusive);
                    prop_assert_eq!(after.admit(mode, g(generation)), Some(after));
                }
                None => prop_assert!(generation < before.required(mode)),
            }
        }
    }
}
