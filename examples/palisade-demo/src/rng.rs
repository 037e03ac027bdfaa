//! A small seeded random number generator, so a demo run can be repeated
//! pause for pause (`--seed`).

/// SplitMix64 (Steele, Lea and Flood): one `u64` of state, good enough to
/// spread pauses, and identical on every platform and in every process.
#[derive(Debug, Clone)]
pub(crate) struct DemoRng {
    state: u64,
}

impl DemoRng {
    /// A generator for `seed`; `stream` tells apart generators that share a
    /// seed (one per buyer).
    pub(crate) fn new(seed: u64, stream: u64) -> Self {
        let mut rng = DemoRng {
            state: seed ^ stream.wrapping_mul(0xD6E8_FEB8_6659_FD93),
        };
        // Mix once so that neighbouring seeds start far apart.
        rng.next_u64();
        rng
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`bound` > 0).
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }

    /// A number in `low..=high`.
    pub(crate) fn between(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.below(high - low + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_numbers_and_streams_differ() {
        let first: Vec<u64> = (0..5).map(|_| DemoRng::new(7, 0).next_u64()).collect();
        assert!(first.windows(2).all(|pair| pair[0] == pair[1]));
        let mut a = DemoRng::new(7, 0);
        let mut b = DemoRng::new(7, 1);
        assert_ne!(a.next_u64(), b.next_u64());
    }

    #[test]
    fn between_stays_in_range() {
        let mut rng = DemoRng::new(1, 2);
        for _ in 0..1000 {
            let n = rng.between(10, 20);
            assert!((10..=20).contains(&n), "{n}");
        }
        assert_eq!(rng.between(5, 5), 5);
        assert_eq!(rng.between(9, 3), 9);
    }
}
