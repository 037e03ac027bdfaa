//! Pauses between retries, the same for every backend.

use std::time::Duration;

use backon::BackoffBuilder as _;

/// Retry pauses: exponential back-off with jitter (`backon`). Pause `n` is
/// drawn from `[d, 2d)` with `d` doubling from `first / 2` to `cap / 2`, so
/// no pause exceeds `cap`, and clients that failed together spread out
/// instead of retrying in step. Endless: the caller's loop keeps its own
/// deadline and reason to stop. Nothing is built until the first pause is
/// asked for: request paths make one per request, and most never retry.
///
/// ```
/// use std::time::Duration;
///
/// let cap = Duration::from_secs(1);
/// let pauses: Vec<_> = palisade_core::retry_pauses(Duration::from_millis(50), cap).take(20).collect();
/// assert!(pauses[0] >= Duration::from_millis(25) && pauses[0] < Duration::from_millis(50));
/// assert!(pauses.iter().all(|pause| *pause <= cap));
/// assert!(pauses[19] >= cap / 2);
/// ```
pub fn retry_pauses(first: Duration, cap: Duration) -> impl Iterator<Item = Duration> + Send {
    let mut pauses = None;
    std::iter::from_fn(move || {
        pauses
            .get_or_insert_with(|| {
                backon::ExponentialBuilder::new()
                    .with_min_delay(first / 2)
                    .with_max_delay(cap / 2)
                    .with_jitter()
                    .without_max_times()
                    .build()
            })
            .next()
    })
}
