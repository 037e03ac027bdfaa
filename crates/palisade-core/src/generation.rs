//! Generations: the fencing token.

use std::fmt;
use std::num::NonZeroU64;

/// A fencing token: strictly increasing per lock name over successive
/// grants, never reused, never 0.
///
/// Backends mint generations (an etcd create-revision, a Redis counter, an
/// in-process counter); the resource server compares them against its
/// high-water marks. Comparing generations needs no clock, which is why
/// safety rests on them and not on leases.
///
/// ```
/// use palisade_core::Generation;
///
/// let g = Generation::new(33).unwrap();
/// assert_eq!(g.get(), 33);
/// assert!(Generation::new(0).is_none());
/// assert!(g < Generation::new(34).unwrap());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Generation(NonZeroU64);

impl Generation {
    /// The smallest generation, 1.
    pub const MIN: Generation = Generation(NonZeroU64::MIN);

    /// The largest generation, `u64::MAX`.
    pub const MAX: Generation = Generation(NonZeroU64::MAX);

    /// Wraps `value`, or `None` if it is 0.
    pub const fn new(value: u64) -> Option<Self> {
        match NonZeroU64::new(value) {
            Some(value) => Some(Generation(value)),
            None => None,
        }
    }

    /// The generation as a number.
    pub const fn get(self) -> u64 {
        self.0.get()
    }

    /// The next generation, or `None` after `u64::MAX`.
    pub const fn next(self) -> Option<Self> {
        match self.0.checked_add(1) {
            Some(value) => Some(Generation(value)),
            None => None,
        }
    }
}

impl From<Generation> for u64 {
    fn from(generation: Generation) -> u64 {
        generation.get()
    }
}

impl From<NonZeroU64> for Generation {
    fn from(value: NonZeroU64) -> Self {
        Generation(value)
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Generation({})", self.0)
    }
}
