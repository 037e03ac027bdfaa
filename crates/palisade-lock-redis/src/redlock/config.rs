//! [`RedlockConfig`]: the masters and the settings of a Redlock client.

use std::time::Duration;

use derive_setters::Setters;
use palisade_core::Signer;

use crate::{GenerationScheme, RedisConfig, RedisLockError};

/// The settings of a [`RedlockClient`](super::RedlockClient): N independent
/// Redis masters (no replication between them, no cluster) and how far to
/// trust their clocks.
///
/// ```
/// use palisade_lock_redis::RedlockConfig;
///
/// let config = RedlockConfig::new([
///     "redis://10.0.0.1:6379",
///     "redis://10.0.0.2:6379",
///     "redis://10.0.0.3:6379",
/// ])
/// .with_key_prefix("shop:")
/// .with_issuer("redlock@shop");
/// assert_eq!(config.majority(), 2);
/// assert!(config.validate().is_ok());
/// ```
///
/// The plain setters are derived from the fields below and carry their
/// documentation; the ones that set every master are written out.
#[derive(Debug, Clone, Setters)]
#[setters(prefix = "with_", strip_option)]
pub struct RedlockConfig {
    #[setters(skip)]
    pub(crate) masters: Vec<RedisConfig>,
    /// The clock drift factor (between 0 and 0.5).
    pub(crate) drift_factor: f64,
    /// The issuer put in every sequencer; by default `redlock@` and the
    /// masters' `host:port`s joined with `,`.
    #[setters(into)]
    pub(crate) issuer: Option<String>,
    /// Signs every sequencer (the signer's issuer is stamped on it).
    pub(crate) signer: Option<Signer>,
    /// How long a waiter that holds some masters but not a majority keeps
    /// them before giving them back (so that waiters split across masters
    /// cannot wait for each other forever). Randomised by up to 50 % each
    /// time. Default: an eighth of the session TTL, between 50 and 500 ms.
    pub(crate) split_timeout: Option<Duration>,
}

impl RedlockConfig {
    /// The clock drift allowed per unit of TTL, as in the Redlock
    /// description: validity loses `ttl × 0.01 + 2 ms`.
    pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;

    /// One master per URL, each with the defaults of [`RedisConfig::new`].
    pub fn new<I, S>(urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::from_masters(urls.into_iter().map(RedisConfig::new))
    }

    /// One master per configuration (for TLS settings or passwords per
    /// master). Each must be a single server; they must share one key
    /// prefix.
    pub fn from_masters(masters: impl IntoIterator<Item = RedisConfig>) -> Self {
        RedlockConfig {
            masters: masters.into_iter().collect(),
            drift_factor: Self::DEFAULT_DRIFT_FACTOR,
            issuer: None,
            signer: None,
            split_timeout: None,
        }
    }

    /// Sets the key prefix on every master.
    pub fn with_key_prefix(self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        self.each_master(|master| master.with_key_prefix(prefix.clone()))
    }

    /// Sets the response timeout on every master.
    pub fn with_response_timeout(self, timeout: Duration) -> Self {
        self.each_master(|master| master.with_response_timeout(timeout))
    }

    fn each_master(mut self, change: impl FnMut(RedisConfig) -> RedisConfig) -> Self {
        self.masters = self.masters.into_iter().map(change).collect();
        self
    }

    /// Sets how generations are minted on every master. Redlock mints its
    /// own, by a quorum (`max(floor + 1, the clock in µs)`, see
    /// `redlock/floor.rs`): only the default,
    /// [`GenerationScheme::ServerClock`], describes it, and
    /// [`RedlockConfig::validate`] refuses [`GenerationScheme::Counter`]
    /// rather than ignore it.
    pub fn with_generation_scheme(self, scheme: GenerationScheme) -> Self {
        self.each_master(|master| master.with_generation_scheme(scheme))
    }

    /// The masters' configurations.
    pub fn masters(&self) -> &[RedisConfig] {
        &self.masters
    }

    /// How many masters a grant needs: more than half.
    pub fn majority(&self) -> usize {
        self.masters.len() / 2 + 1
    }

    /// The clock drift factor.
    pub fn drift_factor(&self) -> f64 {
        self.drift_factor
    }

    /// What validity loses to clock drift for a lease of `ttl`.
    pub fn drift(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(self.drift_factor) + Duration::from_millis(2)
    }

    /// Checks what can be checked without connecting.
    pub fn validate(&self) -> Result<(), RedisLockError> {
        let invalid = |reason: String| Err(RedisLockError::InvalidConfig { reason });
        if self.masters.len() < 3 {
            return invalid(format!(
                "Redlock needs at least 3 independent masters, got {}: with fewer, one failure stops every grant",
                self.masters.len()
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for master in &self.masters {
            master.validate()?;
            if master.is_cluster() || master.urls().len() != 1 {
                return invalid(
                    "each Redlock master is one independent server (one URL, no cluster)".into(),
                );
            }
            if !seen.insert(master.urls()[0].clone()) {
                return invalid(format!(
                    "master {} is listed twice: a majority must be of distinct servers",
                    palisade_core::redact::redact_url(&master.urls()[0])
                ));
            }
            if master.key_prefix() != self.masters[0].key_prefix() {
                return invalid("every master must use the same key prefix".into());
            }
            if master.generation_scheme() == GenerationScheme::Counter {
                return invalid(
                    "the generation scheme `counter` (--redis-generations counter) cannot be honoured by Redlock: its generations are minted by a quorum of masters as max(floor + 1, the clock in µs); leave the scheme at `clock`"
                        .into(),
                );
            }
        }
        if !(0.0..=0.5).contains(&self.drift_factor) {
            return invalid(format!(
                "drift factor {} must be between 0 and 0.5",
                self.drift_factor
            ));
        }
        if let (Some(configured), Some(signer)) = (&self.issuer, &self.signer) {
            if configured != signer.issuer() {
                return invalid(format!(
                    "issuer {configured:?} is configured, but the signer signs as {:?}",
                    signer.issuer()
                ));
            }
        }
        if self.split_timeout.is_some_and(|timeout| timeout.is_zero()) {
            return invalid("the split timeout must be positive".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URLS: [&str; 3] = [
        "redis://10.0.0.1:6379",
        "redis://10.0.0.2:6379",
        "redis://10.0.0.3:6379",
    ];

    /// #25: `--redis-generations counter` with Redlock was accepted and
    /// ignored; it is refused, naming the setting.
    #[test]
    fn counter_generations_are_refused_naming_the_setting() {
        let refused = RedlockConfig::new(URLS)
            .with_generation_scheme(GenerationScheme::Counter)
            .validate()
            .unwrap_err();
        assert!(
            matches!(&refused, RedisLockError::InvalidConfig { reason } if reason.contains("--redis-generations counter")),
            "{refused}"
        );
        let one_master =
            RedlockConfig::from_masters(URLS.iter().enumerate().map(|(index, url)| {
                let master = RedisConfig::new(*url);
                if index == 1 {
                    master.with_generation_scheme(GenerationScheme::Counter)
                } else {
                    master
                }
            }));
        assert!(one_master.validate().is_err());
        assert!(
            RedlockConfig::new(URLS)
                .with_generation_scheme(GenerationScheme::ServerClock)
                .validate()
                .is_ok()
        );
    }
}
