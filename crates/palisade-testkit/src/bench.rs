//! What the benchmarks share: their knobs come from the environment.

use std::str::FromStr;

/// The value of the environment variable `name` (a round count, seconds,
/// clients), or `default` when it is unset or does not parse.
pub fn env_number<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}
