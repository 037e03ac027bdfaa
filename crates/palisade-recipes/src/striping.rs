//! Lock striping: a quantity (stock, quota) split over N segments, each a
//! fenced key under a lock of its own, so N takers work at once where one
//! lock would serialize them all.
//!
//! Segment `i` of `BASE` is the lock `BASE/segment-<i>` (with one stripe,
//! `BASE` itself: the quantity unstriped). A taker takes a random segment
//! that is not known empty; one that turns out empty costs a lock round
//! and is not tried again by that taker ([`Hunt`]). Every read and write of
//! a segment carries that segment's sequencer, so a paused taker's late
//! write is refused by the store once a newer holder has written.
//! [`Striped::rebalance`] evens the segments out under all their locks,
//! taken in index order (two rebalances never deadlock; takers hold one
//! lock at a time).

use std::future::Future;

use palisade_core::{BoxError, Generation, Lock, LockGuard, LockName, Mode, Sequencer};

use crate::error::RecipeError;

/// Where the segments' quantities live: a fenced store (the resource
/// server, a SQL table behind the SQL fence, a Redis function).
///
/// ### To ensure correctness
///
/// - Both calls are fenced on `sequencer` (its lock is the segment's): a
///   write whose generation is below the segment's mark is refused and
///   changes nothing; a read raises the mark as a write does, so a holder
///   that read cannot be overtaken by an older one's late write.
/// - A refusal is an `Err`, never a silent drop.
pub trait SegmentStore: Send + Sync {
    /// The quantity of the segment `sequencer` holds; `None` if never set.
    fn read(
        &self,
        sequencer: &Sequencer,
    ) -> impl Future<Output = Result<Option<u64>, BoxError>> + Send;

    /// Sets the quantity of the segment `sequencer` holds.
    fn write(
        &self,
        sequencer: &Sequencer,
        quantity: u64,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;
}

/// A striped quantity: its segments' lock names.
#[derive(Debug, Clone)]
pub struct Striped {
    base: LockName,
    segments: Vec<LockName>,
}

/// What one [`Striped::take`] took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    /// The segment it came from.
    pub segment: usize,
    /// What the segment had left after it.
    pub left: u64,
    /// The generation it was written with.
    pub generation: Generation,
}

/// One taker's search for a non-empty segment: the segments it has not
/// yet found empty.
#[derive(Debug, Clone)]
pub struct Hunt {
    open: Vec<usize>,
}

impl Hunt {
    /// A search over segments `0..segments`, none known empty.
    pub fn new(segments: usize) -> Hunt {
        Hunt {
            open: (0..segments).collect(),
        }
    }

    /// The next segment to try, chosen among the open ones by `below(n)`
    /// (a number below `n`; not called when one is left); `None` once
    /// every segment was found empty.
    pub fn next(&mut self, below: impl FnOnce(u64) -> u64) -> Option<usize> {
        let pick = match self.open.len() {
            0 => return None,
            1 => 0,
            n => usize::try_from(below(n as u64)).map_or(n - 1, |pick| pick.min(n - 1)),
        };
        Some(self.open[pick])
    }

    /// `segment` turned out empty: not tried again.
    pub fn empty(&mut self, segment: usize) {
        if let Some(at) = self.open.iter().position(|&open| open == segment) {
            self.open.swap_remove(at);
        }
    }

    /// The segments still open.
    pub fn open(&self) -> &[usize] {
        &self.open
    }
}

impl Striped {
    /// The most stripes.
    pub const MAX_STRIPES: u32 = 4096;

    /// `base` split into `stripes` segments (1 to [`Striped::MAX_STRIPES`]).
    pub fn new(base: LockName, stripes: u32) -> Result<Self, RecipeError> {
        if !(1..=Self::MAX_STRIPES).contains(&stripes) {
            return Err(RecipeError::Invalid(format!(
                "{base}: {stripes} stripes; it takes 1 to {} (1 is one lock for the whole quantity)",
                Self::MAX_STRIPES
            )));
        }
        let segments = if stripes == 1 {
            vec![base.clone()]
        } else {
            (0..stripes)
                .map(|segment| LockName::new(format!("{base}/segment-{segment}")))
                .collect::<Result<_, _>>()?
        };
        Ok(Striped { base, segments })
    }

    /// The quantity's name.
    pub fn base(&self) -> &LockName {
        &self.base
    }

    /// The segments' lock names, by index.
    pub fn segments(&self) -> &[LockName] {
        &self.segments
    }

    /// The number of stripes.
    pub fn stripes(&self) -> u32 {
        self.segments.len() as u32
    }

    /// `total` split as evenly as it goes, the first `total % stripes`
    /// segments one more. Refused when some segment would open empty.
    pub fn split(&self, total: u64) -> Result<Vec<u64>, RecipeError> {
        if total < u64::from(self.stripes()) {
            return Err(RecipeError::Invalid(format!(
                "{}: {} stripes for a quantity of {total}: every segment must open with at least one",
                self.base,
                self.stripes()
            )));
        }
        Ok(self.even(total))
    }

    /// A new search over every segment.
    pub fn hunt(&self) -> Hunt {
        Hunt::new(self.segments.len())
    }

    /// Sets the quantity to `total`, split by [`Striped::split`], under
    /// every segment's lock.
    pub async fn fill<L: Lock, S: SegmentStore>(
        &self,
        session: &L,
        store: &S,
        total: u64,
    ) -> Result<(), RecipeError> {
        let amounts = self.split(total)?;
        let guards = self.lock_all(session).await?;
        self.write_all(store, &guards, &amounts).await?;
        release_all(guards).await
    }

    /// Takes `amount` from one random segment that has at least that much,
    /// moving on from each that has less; `None` when none has.
    pub async fn take<L: Lock, S: SegmentStore>(
        &self,
        session: &L,
        store: &S,
        amount: u64,
    ) -> Result<Option<Taken>, RecipeError> {
        let mut hunt = self.hunt();
        while let Some(segment) = hunt.next(|n| rand::random_range(0..n)) {
            let guard = session
                .acquire(&self.segments[segment], Mode::Exclusive)
                .await?;
            let sequencer = guard.sequencer()?;
            let have = self.read(store, &sequencer).await?.unwrap_or(0);
            if have < amount.max(1) {
                guard.release().await?;
                hunt.empty(segment);
                continue;
            }
            let left = have - amount;
            self.write(store, &sequencer, left).await?;
            guard.release().await?;
            tracing::debug!(quantity = %self.base, segment, amount, left, generation = sequencer.generation().get(), "took");
            return Ok(Some(Taken {
                segment,
                left,
                generation: sequencer.generation(),
            }));
        }
        Ok(None)
    }

    /// Evens the segments out under all their locks; returns the new
    /// amounts by segment. The total does not change.
    pub async fn rebalance<L: Lock, S: SegmentStore>(
        &self,
        session: &L,
        store: &S,
    ) -> Result<Vec<u64>, RecipeError> {
        let guards = self.lock_all(session).await?;
        let mut total = 0u64;
        for guard in &guards {
            let have = self.read(store, &guard.sequencer()?).await?.unwrap_or(0);
            total = total.checked_add(have).ok_or_else(|| {
                RecipeError::Invalid(format!("{}: the total overflows a u64", self.base))
            })?;
        }
        let amounts = self.even(total);
        self.write_all(store, &guards, &amounts).await?;
        release_all(guards).await?;
        tracing::info!(quantity = %self.base, total, "rebalanced");
        Ok(amounts)
    }

    /// The amounts of every segment, each read under its lock in turn (a
    /// sum of them is exact only while nobody takes).
    pub async fn amounts<L: Lock, S: SegmentStore>(
        &self,
        session: &L,
        store: &S,
    ) -> Result<Vec<u64>, RecipeError> {
        let mut amounts = Vec::with_capacity(self.segments.len());
        for name in &self.segments {
            let guard = session.acquire(name, Mode::Exclusive).await?;
            amounts.push(self.read(store, &guard.sequencer()?).await?.unwrap_or(0));
            guard.release().await?;
        }
        Ok(amounts)
    }

    fn even(&self, total: u64) -> Vec<u64> {
        let stripes = u64::from(self.stripes());
        (0..stripes)
            .map(|segment| total / stripes + u64::from(segment < total % stripes))
            .collect()
    }

    async fn lock_all<L: Lock>(&self, session: &L) -> Result<Vec<L::Guard>, RecipeError> {
        let mut guards = Vec::with_capacity(self.segments.len());
        for name in &self.segments {
            guards.push(session.acquire(name, Mode::Exclusive).await?);
        }
        Ok(guards)
    }

    async fn write_all<S: SegmentStore, G: LockGuard>(
        &self,
        store: &S,
        guards: &[G],
        amounts: &[u64],
    ) -> Result<(), RecipeError> {
        for (guard, &amount) in guards.iter().zip(amounts) {
            self.write(store, &guard.sequencer()?, amount).await?;
        }
        Ok(())
    }

    async fn read<S: SegmentStore>(
        &self,
        store: &S,
        sequencer: &Sequencer,
    ) -> Result<Option<u64>, RecipeError> {
        store
            .read(sequencer)
            .await
            .map_err(|error| store_error(sequencer, &error))
    }

    async fn write<S: SegmentStore>(
        &self,
        store: &S,
        sequencer: &Sequencer,
        quantity: u64,
    ) -> Result<(), RecipeError> {
        store
            .write(sequencer, quantity)
            .await
            .map_err(|error| store_error(sequencer, &error))
    }
}

fn store_error(sequencer: &Sequencer, error: &BoxError) -> RecipeError {
    RecipeError::Store {
        name: sequencer.lock().clone(),
        message: error.to_string(),
    }
}

async fn release_all<G: LockGuard>(guards: Vec<G>) -> Result<(), RecipeError> {
    for guard in guards {
        guard.release().await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn striped(stripes: u32) -> Striped {
        Striped::new(LockName::new("flash-sale/sku-42").unwrap(), stripes).unwrap()
    }

    #[test]
    fn segments_split_evenly_and_one_stripe_keeps_the_name() {
        for (total, stripes) in [(10, 4), (20, 1), (16, 16), (7, 3), (1000, 8)] {
            let amounts = striped(stripes).split(total).unwrap();
            assert_eq!(amounts.len(), stripes as usize);
            assert_eq!(amounts.iter().sum::<u64>(), total, "{total} over {stripes}");
            assert!(amounts.iter().all(|amount| *amount >= 1), "{amounts:?}");
            let spread = amounts.iter().max().unwrap() - amounts.iter().min().unwrap();
            assert!(spread <= 1, "{amounts:?}");
        }
        assert_eq!(striped(1).segments()[0].as_str(), "flash-sale/sku-42");
        let four = striped(4);
        assert_eq!(four.segments()[0].as_str(), "flash-sale/sku-42/segment-0");
        assert_eq!(four.segments()[3].as_str(), "flash-sale/sku-42/segment-3");
    }

    #[test]
    fn impossible_splits_are_refused() {
        assert!(matches!(striped(4).split(3), Err(RecipeError::Invalid(_))));
        for stripes in [0, Striped::MAX_STRIPES + 1] {
            let refused = Striped::new(LockName::new("x").unwrap(), stripes);
            assert!(matches!(refused, Err(RecipeError::Invalid(_))), "{stripes}");
        }
    }

    #[test]
    fn a_hunt_tries_open_segments_until_all_are_empty() {
        let mut hunt = Hunt::new(3);
        assert_eq!(hunt.next(|n| n - 1), Some(2));
        hunt.empty(2);
        assert_eq!(hunt.open(), &[0, 1]);
        assert_eq!(hunt.next(|_| 0), Some(0));
        hunt.empty(0);
        // One left: no draw.
        assert_eq!(hunt.next(|_| unreachable!()), Some(1));
        hunt.empty(1);
        assert_eq!(hunt.next(|_| 0), None);
    }
}
