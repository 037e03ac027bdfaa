//! Configuration of a Redis lock client.

use std::time::Duration;

use crate::RedisLockError;

/// How generations are minted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum GenerationScheme {
    /// Each grant takes `max(counter + 1, server time in µs)`. A counter lost
    /// with Redis's data (restart without persistence, failover to a replica
    /// that missed the last increments) restarts above every generation
    /// issued before, as long as the Redis clock did not go backwards and
    /// the lock was granted less than once per microsecond on average. The
    /// default; see `docs/SAFETY.md`.
    #[default]
    ServerClock,
    /// A plain counter: 1, 2, 3, ... (`INCR`). Small numbers, but a counter
    /// lost with Redis's data restarts at 1; the resource server then
    /// refuses the new holders until
    /// [`RedisLockClient::raise_floor`](crate::RedisLockClient::raise_floor)
    /// lifts it above its mark.
    Counter,
}

/// Where Redis is and how to talk to it: everything shared by the sessions
/// of one [`RedisLockClient`](crate::RedisLockClient).
///
/// ```
/// use std::time::Duration;
/// use palisade_lock_redis::RedisConfig;
///
/// let config = RedisConfig::new("redis://127.0.0.1:6379")
///     .with_key_prefix("orders:")
///     .with_issuer("redis-orders-prod")
///     .with_response_timeout(Duration::from_secs(2));
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// Node URLs (`redis://[user:password@]host:port[/db]`, `rediss://` for
    /// TLS). One URL means a single server; several, or
    /// [`RedisConfig::with_cluster`], a Redis Cluster seeded from them.
    pub(crate) urls: Vec<String>,
    /// Talk the cluster protocol even with a single seed URL.
    pub(crate) cluster: bool,
    /// Prepended to every key and channel. Must not contain `{` or `}`,
    /// which would move the hash tag.
    pub(crate) key_prefix: String,
    /// The issuer id put in every sequencer; defaults to `redis@<host:port>`
    /// of the first URL. Set it to the deployment's name in production, so a
    /// resource server can refuse sequencers from another deployment.
    pub(crate) issuer: Option<String>,
    /// How long one request may wait for its reply. A request that times out
    /// has an unknown effect: an acquire that times out is treated as maybe
    /// granted and released by its owner token.
    pub(crate) response_timeout: Duration,
    /// How long connecting may take.
    pub(crate) connect_timeout: Duration,
    /// The longest a waiter sleeps without looking at the lock again, in
    /// case a notification was lost. `None`: a quarter of the session TTL,
    /// between 50 ms and 2 s.
    pub(crate) waiter_recheck: Option<Duration>,
    /// How generations are minted.
    pub(crate) generation_scheme: GenerationScheme,
}

impl RedisConfig {
    /// The key prefix used unless set: `palisade:`.
    pub const DEFAULT_KEY_PREFIX: &'static str = "palisade:";

    /// A configuration for one server (or one cluster seed) at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            urls: vec![url.into()],
            cluster: false,
            key_prefix: Self::DEFAULT_KEY_PREFIX.to_owned(),
            issuer: None,
            response_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(2),
            waiter_recheck: None,
            generation_scheme: GenerationScheme::default(),
        }
    }

    /// A Redis Cluster seeded from `urls`.
    pub fn cluster<I, S>(urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut config = RedisConfig::new(String::new());
        config.urls = urls.into_iter().map(Into::into).collect();
        config.cluster = true;
        config
    }

    /// Talks the cluster protocol (`true`) or to one server (`false`).
    pub fn with_cluster(mut self, cluster: bool) -> Self {
        self.cluster = cluster;
        self
    }

    /// Sets the key prefix.
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Sets the issuer id put in sequencers.
    pub fn with_issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// Sets the per-request response timeout.
    pub fn with_response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Sets the connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the longest sleep of a waiter between two looks at the lock.
    pub fn with_waiter_recheck(mut self, interval: Duration) -> Self {
        self.waiter_recheck = Some(interval);
        self
    }

    /// Sets how generations are minted.
    pub fn with_generation_scheme(mut self, scheme: GenerationScheme) -> Self {
        self.generation_scheme = scheme;
        self
    }

    /// The node URLs.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Whether the cluster protocol is used.
    pub fn is_cluster(&self) -> bool {
        self.cluster || self.urls.len() > 1
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The configured issuer id, if any (see [`RedisConfig::with_issuer`]).
    pub fn issuer(&self) -> Option<&str> {
        self.issuer.as_deref()
    }

    /// The per-request response timeout.
    pub fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// How generations are minted.
    pub fn generation_scheme(&self) -> GenerationScheme {
        self.generation_scheme
    }

    /// The waiter re-check interval for sessions with lease `ttl`.
    pub fn waiter_recheck_for(&self, ttl: Duration) -> Duration {
        self.waiter_recheck
            .unwrap_or_else(|| (ttl / 4).clamp(Duration::from_millis(50), Duration::from_secs(2)))
    }

    /// Checks what can be checked without connecting.
    pub fn validate(&self) -> Result<(), RedisLockError> {
        let invalid = |reason: String| Err(RedisLockError::InvalidConfig { reason });
        if self.urls.is_empty() || self.urls.iter().any(|url| url.is_empty()) {
            return invalid("at least one Redis URL is required".into());
        }
        if self.key_prefix.contains(['{', '}']) || self.key_prefix.contains(char::is_whitespace) {
            return invalid(format!(
                "key prefix {:?} must not contain `{{`, `}}` or whitespace (the hash tag is the lock name)",
                self.key_prefix
            ));
        }
        if let Some(issuer) = &self.issuer
            && palisade_core::Sequencer::new(
                palisade_core::LockName::new("x").expect("valid"),
                palisade_core::Mode::Exclusive,
                palisade_core::Generation::MIN,
            )
            .with_issuer(issuer)
            .is_err()
        {
            return invalid(format!(
                "issuer {issuer:?} must be 1 to 128 bytes without control characters"
            ));
        }
        if self.response_timeout.is_zero() || self.connect_timeout.is_zero() {
            return invalid("timeouts must be positive".into());
        }
        if self
            .waiter_recheck
            .is_some_and(|interval| interval.is_zero())
        {
            return invalid("the waiter re-check interval must be positive".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        assert!(RedisConfig::new("redis://127.0.0.1:1").validate().is_ok());
        assert!(RedisConfig::new("").validate().is_err());
        assert!(
            RedisConfig::new("redis://x")
                .with_key_prefix("a{b")
                .validate()
                .is_err()
        );
        assert!(
            RedisConfig::new("redis://x")
                .with_issuer("bad\nissuer")
                .validate()
                .is_err()
        );
        assert!(
            RedisConfig::new("redis://x")
                .with_response_timeout(Duration::ZERO)
                .validate()
                .is_err()
        );
        assert!(RedisConfig::cluster(["redis://a", "redis://b"]).is_cluster());
    }

    #[test]
    fn waiter_recheck_scales_with_the_ttl() {
        let config = RedisConfig::new("redis://x");
        assert_eq!(
            config.waiter_recheck_for(Duration::from_secs(10)),
            Duration::from_secs(2)
        );
        assert_eq!(
            config.waiter_recheck_for(Duration::from_secs(1)),
            Duration::from_millis(250)
        );
        let config = config.with_waiter_recheck(Duration::from_secs(7));
        assert_eq!(
            config.waiter_recheck_for(Duration::from_secs(1)),
            Duration::from_secs(7)
        );
    }
}
