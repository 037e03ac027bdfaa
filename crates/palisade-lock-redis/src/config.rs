//! Configuration of a Redis lock client.

use std::time::Duration;

use derive_setters::Setters;
use palisade_core::Signer;
use palisade_core::redact::Redacted;

use crate::RedisLockError;

/// The nodes to talk to and how to reach them: everything the command
/// connection and the inbox's subscription need to open a socket.
///
/// It dereferences to the URLs, which is how most code reads it; the TLS
/// material travels with them so that no connection can be opened with
/// the URL but without the certificates.
#[derive(Clone, PartialEq, Eq, Default)]
pub(crate) struct Endpoints {
    /// Node URLs, as given (passwords included: shown only redacted).
    pub(crate) urls: Vec<String>,
    /// Certificates for `rediss://` URLs beyond what a URL can say.
    pub(crate) tls: TlsMaterial,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints")
            .field(
                "urls",
                &self
                    .urls
                    .iter()
                    .map(|url| Redacted(url))
                    .collect::<Vec<_>>(),
            )
            .field("tls", &self.tls)
            .finish()
    }
}

impl Endpoints {
    /// Whether the URLs ask for TLS.
    pub(crate) fn uses_tls(&self) -> bool {
        self.urls.iter().any(|url| is_tls_url(url))
    }
}

impl std::ops::Deref for Endpoints {
    type Target = [String];

    fn deref(&self) -> &[String] {
        &self.urls
    }
}

/// TLS settings a `rediss://` URL cannot carry.
///
/// Certificate verification is always on (unless the URL ends in
/// `#insecure`); these only say *whom* to trust and *who we are*.
#[derive(Clone, PartialEq, Eq, Default)]
pub(crate) struct TlsMaterial {
    /// CA certificates (PEM) trusted instead of the system's trust store.
    /// Redis deployments usually have certificates from a private CA, which
    /// no system store holds; with this set, *only* these CAs are trusted.
    pub(crate) root_certs_pem: Option<Vec<u8>>,
    /// The client's certificate chain and private key (both PEM), presented
    /// to servers that require mutual TLS (`tls-auth-clients yes`). The key
    /// is a secret: it is never printed.
    pub(crate) client_cert_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field(
                "root_certs_pem",
                &self
                    .root_certs_pem
                    .as_ref()
                    .map(|pem| format!("<{} bytes>", pem.len())),
            )
            .field(
                "client_cert_pem",
                &self.client_cert_pem.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl TlsMaterial {
    /// Whether nothing is set (the system's trust store, no client
    /// certificate).
    pub(crate) fn is_empty(&self) -> bool {
        self.root_certs_pem.is_none() && self.client_cert_pem.is_none()
    }

    /// The material in the `redis` crate's form, or `None` when nothing is
    /// set (then the URL alone decides).
    #[cfg(feature = "tls")]
    pub(crate) fn certificates(&self) -> Option<redis::TlsCertificates> {
        if self.is_empty() {
            return None;
        }
        Some(redis::TlsCertificates {
            client_tls: self.client_cert_pem.as_ref().map(|(cert_chain, key)| {
                redis::ClientTlsConfig {
                    client_cert: cert_chain.clone(),
                    client_key: key.clone(),
                }
            }),
            root_cert: self.root_certs_pem.clone(),
        })
    }

    /// Parses every PEM, so that a wrong file fails at configuration time
    /// with a message naming it, rather than as a handshake failure later.
    /// (An empty or garbled root PEM would otherwise trust nobody.)
    #[cfg(feature = "tls")]
    fn check(&self) -> Result<(), String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};

        let certificates = |what: &str, pem: &[u8]| {
            let certificates = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|error| format!("the TLS {what} PEM cannot be read: {error}"))?;
            if certificates.is_empty() {
                return Err(format!(
                    "the TLS {what} PEM holds no `BEGIN CERTIFICATE` block"
                ));
            }
            Ok(certificates)
        };
        if let Some(pem) = &self.root_certs_pem {
            let mut store = rustls::RootCertStore::empty();
            for certificate in certificates("root certificate", pem)? {
                store.add(certificate).map_err(|error| {
                    format!("a TLS root certificate is not a usable CA certificate: {error}")
                })?;
            }
        }
        if let Some((cert_chain, key)) = &self.client_cert_pem {
            certificates("client certificate", cert_chain)?;
            PrivateKeyDer::from_pem_slice(key).map_err(|error| {
                format!("the TLS client key PEM holds no usable private key: {error}")
            })?;
        }
        Ok(())
    }
}

/// Whether `url` asks for TLS: `rediss://` (or `valkeys://`), as the
/// `redis` crate reads it.
pub(crate) fn is_tls_url(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
    })
}

/// Refuses `#insecure` URLs unless this build `allows` them (the
/// `insecure-tls` feature): a production build's configuration must not be
/// able to turn certificate verification off.
fn refuse_insecure_urls<'a>(
    mut urls: impl Iterator<Item = &'a str>,
    allows: bool,
) -> Result<(), String> {
    if !allows && urls.any(is_insecure_url) {
        return Err("a URL ends in #insecure, which turns TLS certificate verification off: this build refuses it (the `insecure-tls` feature of palisade-lock-redis allows it, for tests)".into());
    }
    Ok(())
}

/// Whether `url` turns certificate verification off (`rediss://...#insecure`).
pub(crate) fn is_insecure_url(url: &str) -> bool {
    is_tls_url(url)
        && url
            .split_once('#')
            .is_some_and(|(_, fragment)| fragment == "insecure")
}

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

/// How a release tells the next waiter that it was granted the lock.
///
/// Either way a lost message costs only time: a waiter looks at the lock
/// again after a bounded interval (`waiter_recheck`), and the acquire
/// script reports a grant made meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WakeUps {
    /// The topology's default: [`WakeUps::ClientChannel`] on a single
    /// server, [`WakeUps::ShardChannels`] on a cluster.
    #[default]
    Default,
    /// One pub/sub channel per client (its inbox), subscribed once on one
    /// node: every hand-off is a `PUBLISH`, which a cluster copies to every
    /// node over its bus.
    ClientChannel,
    /// A shard channel per lock and client (Redis 7 `SSUBSCRIBE`/
    /// `SPUBLISH`, named with the lock's hash tag), subscribed while a
    /// waiter of this client waits on that lock: a hand-off is delivered
    /// by the lock's own shard only. Cluster only.
    ShardChannels,
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
///
/// The plain setters (`with_key_prefix`, `with_response_timeout`, ...) are
/// derived from the fields below and carry their documentation.
#[derive(Debug, Clone, PartialEq, Eq, Setters)]
#[setters(prefix = "with_", generate = false)]
pub struct RedisConfig {
    /// Node URLs (`redis://[user:password@]host:port[/db]`, `rediss://` for
    /// TLS) and the TLS certificates to use with them. One URL means a
    /// single server; several, or [`RedisConfig::with_cluster`], a Redis
    /// Cluster seeded from them.
    pub(crate) endpoints: Endpoints,
    /// Talks the cluster protocol (`true`, even with a single seed URL) or
    /// to one server (`false`).
    #[setters(generate)]
    pub(crate) cluster: bool,
    /// Prepended to every key and channel. Must not contain `{` or `}`,
    /// which would move the hash tag.
    #[setters(generate, into)]
    pub(crate) key_prefix: String,
    /// The issuer id put in every sequencer; defaults to `redis@<host:port>`
    /// of the first URL. Set it to the deployment's name in production, so a
    /// resource server can refuse sequencers from another deployment.
    #[setters(generate, into, strip_option)]
    pub(crate) issuer: Option<String>,
    /// How long one request may wait for its reply. A request that times out
    /// has an unknown effect: an acquire that times out is treated as maybe
    /// granted and released by its owner token.
    #[setters(generate)]
    pub(crate) response_timeout: Duration,
    /// How long connecting may take.
    #[setters(generate)]
    pub(crate) connect_timeout: Duration,
    /// The longest a waiter sleeps without looking at the lock again, in
    /// case a notification was lost. `None`: a quarter of the session TTL,
    /// between 50 ms and 2 s.
    #[setters(generate, strip_option)]
    pub(crate) waiter_recheck: Option<Duration>,
    /// How generations are minted.
    #[setters(generate)]
    pub(crate) generation_scheme: GenerationScheme,
    /// Signs every sequencer handed out, when set: the signer's issuer is
    /// stamped on it and an HMAC covers every field, so a resource server
    /// holding the key refuses forged sequencers (say generation
    /// `u64::MAX`) before they can move a mark. The key id travels in the
    /// signature, so keys can be rotated.
    pub(crate) signer: Option<ConfiguredSigner>,
    /// Counter generations on a cluster, which [`RedisConfig::validate`]
    /// refuses otherwise: only for tests that show why.
    pub(crate) counter_on_cluster: bool,
    /// How waiters hear of their grants.
    #[setters(generate)]
    pub(crate) wake_ups: WakeUps,
}

/// A [`Signer`] inside a configuration that compares by value.
///
/// `Signer` has no `PartialEq` (its key is secret); two signers are taken
/// as equal when they have the same issuer and key id and sign the same
/// probe sequencer identically, which only the same secret does.
#[derive(Debug, Clone)]
pub(crate) struct ConfiguredSigner(pub(crate) Signer);

impl ConfiguredSigner {
    fn probe_signature(&self) -> String {
        let probe = palisade_core::Sequencer::new(
            palisade_core::LockName::new("signer-probe").expect("a constant, valid lock name"),
            palisade_core::Mode::Exclusive,
            palisade_core::Generation::MIN,
        );
        self.0.sign(probe).to_string()
    }
}

impl PartialEq for ConfiguredSigner {
    fn eq(&self, other: &Self) -> bool {
        self.0.issuer() == other.0.issuer()
            && self.0.key_id() == other.0.key_id()
            && self.probe_signature() == other.probe_signature()
    }
}

impl Eq for ConfiguredSigner {}

impl RedisConfig {
    /// The key prefix used unless set: `palisade:`.
    pub const DEFAULT_KEY_PREFIX: &'static str = "palisade:";

    /// A configuration for one server (or one cluster seed) at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            endpoints: Endpoints {
                urls: vec![url.into()],
                tls: TlsMaterial::default(),
            },
            cluster: false,
            key_prefix: Self::DEFAULT_KEY_PREFIX.to_owned(),
            issuer: None,
            response_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(2),
            waiter_recheck: None,
            generation_scheme: GenerationScheme::default(),
            signer: None,
            counter_on_cluster: false,
            wake_ups: WakeUps::Default,
        }
    }

    /// A Redis Cluster seeded from `urls`.
    pub fn cluster<I, S>(urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut config = RedisConfig::new(String::new());
        config.endpoints.urls = urls.into_iter().map(Into::into).collect();
        config.cluster = true;
        config
    }

    /// Trusts the CA certificates in `pem` (one or more PEM `CERTIFICATE`
    /// blocks) for `rediss://` servers, *instead of* the system's trust
    /// store. The usual setting for a Redis whose certificate comes from a
    /// private CA. Certificate and host name verification stay on.
    ///
    /// ```no_run
    /// use palisade_lock_redis::RedisConfig;
    ///
    /// # fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = RedisConfig::new("rediss://:password@redis.internal:6380")
    ///     .with_tls_root_cert_pem(std::fs::read("/etc/palisade/redis-ca.pem")?);
    /// config.validate()?; // reads the PEM: a wrong file fails here
    /// # Ok(()) }
    /// ```
    pub fn with_tls_root_cert_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.endpoints.tls.root_certs_pem = Some(pem.into());
        self
    }

    /// Presents a client certificate to `rediss://` servers: mutual TLS,
    /// for a Redis with `tls-auth-clients yes`. `cert_chain_pem` is the
    /// certificate (then any intermediates), `key_pem` its private key
    /// (PKCS#8, PKCS#1 or SEC1, unencrypted).
    pub fn with_tls_client_cert_pem(
        mut self,
        cert_chain_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.endpoints.tls.client_cert_pem = Some((cert_chain_pem.into(), key_pem.into()));
        self
    }

    /// Signs every sequencer with `signer`. Its issuer becomes this
    /// configuration's issuer (in place of `redis@<host:port>`), so a live
    /// check built from the same configuration recognizes the sequencers;
    /// another issuer set with [`RedisConfig::with_issuer`] as well is an
    /// invalid configuration.
    ///
    /// ```
    /// use palisade_core::{Signer, SigningKey};
    /// use palisade_lock_redis::RedisConfig;
    ///
    /// let key = SigningKey::from_hex("k1", "000102030405060708090a0b0c0d0e0f")?;
    /// let config = RedisConfig::new("redis://127.0.0.1:6379")
    ///     .with_signer(Signer::new("redis-orders", key)?);
    /// assert_eq!(config.issuer(), Some("redis-orders"));
    /// assert!(config.validate().is_ok());
    /// assert!(config.with_issuer("redis-other").validate().is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_signer(mut self, signer: Signer) -> Self {
        self.signer = Some(ConfiguredSigner(signer));
        self
    }

    /// The node URLs.
    pub fn urls(&self) -> &[String] {
        &self.endpoints
    }

    /// Whether the URLs ask for TLS (`rediss://`).
    pub fn uses_tls(&self) -> bool {
        self.endpoints.uses_tls()
    }

    /// The CA certificates trusted instead of the system's store, if set
    /// (see [`RedisConfig::with_tls_root_cert_pem`]).
    pub fn tls_root_cert_pem(&self) -> Option<&[u8]> {
        self.endpoints.tls.root_certs_pem.as_deref()
    }

    /// Whether a client certificate is configured (see
    /// [`RedisConfig::with_tls_client_cert_pem`]).
    pub fn has_tls_client_cert(&self) -> bool {
        self.endpoints.tls.client_cert_pem.is_some()
    }

    /// Whether the cluster protocol is used.
    pub fn is_cluster(&self) -> bool {
        self.cluster || self.endpoints.len() > 1
    }

    /// The wake-up path in use: [`WakeUps::Default`] resolved for the
    /// topology.
    pub fn wake_ups(&self) -> WakeUps {
        match self.wake_ups {
            WakeUps::Default if self.is_cluster() => WakeUps::ShardChannels,
            WakeUps::Default => WakeUps::ClientChannel,
            chosen => chosen,
        }
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The configured issuer id, if any: the one given to
    /// [`RedisConfig::with_issuer`], else the signer's.
    pub fn issuer(&self) -> Option<&str> {
        self.issuer
            .as_deref()
            .or_else(|| self.signer().map(Signer::issuer))
    }

    /// The signer of this configuration's sequencers, if any (see
    /// [`RedisConfig::with_signer`]).
    pub fn signer(&self) -> Option<&Signer> {
        self.signer.as_ref().map(|configured| &configured.0)
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

    /// Allows counter generations on a cluster, which [`RedisConfig::validate`]
    /// refuses: for the tests that show a failover handing out a
    /// generation twice.
    #[cfg(feature = "testing")]
    pub fn with_counter_on_cluster_unsafe(mut self) -> Self {
        self.counter_on_cluster = true;
        self
    }

    /// Checks what can be checked without connecting.
    pub fn validate(&self) -> Result<(), RedisLockError> {
        let invalid = |reason: String| Err(RedisLockError::InvalidConfig { reason });
        if self.endpoints.is_empty() || self.endpoints.iter().any(|url| url.is_empty()) {
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
        if let (Some(configured), Some(signer)) = (&self.issuer, self.signer()) {
            if configured != signer.issuer() {
                return invalid(format!(
                    "issuer {configured:?} is configured, but the signer signs as {:?}",
                    signer.issuer()
                ));
            }
        }
        self.validate_tls().or_else(invalid)?;
        if self.response_timeout.is_zero() || self.connect_timeout.is_zero() {
            return invalid("timeouts must be positive".into());
        }
        if self
            .waiter_recheck
            .is_some_and(|interval| interval.is_zero())
        {
            return invalid("the waiter re-check interval must be positive".into());
        }
        if self.wake_ups == WakeUps::ShardChannels && !self.is_cluster() {
            return invalid(
                "shard-channel wake-ups need a Redis Cluster (a single server has one inbox channel per client)".into(),
            );
        }
        if self.is_cluster()
            && self.generation_scheme == GenerationScheme::Counter
            && !self.counter_on_cluster
        {
            return invalid(
                "counter generations on a Redis Cluster are refused: a failover to a replica that missed the last increments hands out the same generation again, to a second holder the resource server cannot tell apart; use the clock scheme (the default)"
                    .into(),
            );
        }
        Ok(())
    }
}

impl RedisConfig {
    fn validate_tls(&self) -> Result<(), String> {
        let n_tls = self.endpoints.iter().filter(|url| is_tls_url(url)).count();
        if n_tls != 0 && n_tls != self.endpoints.len() {
            return Err(
                "some URLs are rediss:// and some redis://: use TLS for every node or for none"
                    .into(),
            );
        }
        if n_tls != 0 && cfg!(not(feature = "tls")) {
            return Err(
                "rediss:// URLs need the `tls` feature of palisade-lock-redis (on by default)"
                    .into(),
            );
        }
        if n_tls == 0 && !self.endpoints.tls.is_empty() {
            return Err(
                "TLS certificates are configured but the URLs are not rediss://, so they would not be used"
                    .into(),
            );
        }
        refuse_insecure_urls(
            self.endpoints.iter().map(String::as_str),
            cfg!(feature = "insecure-tls"),
        )?;
        if self.endpoints.tls.root_certs_pem.is_some()
            && self.endpoints.iter().any(|url| is_insecure_url(url))
        {
            return Err("a URL ends in #insecure, which turns certificate verification off, and a root certificate to verify with is configured: remove one of them".into());
        }
        #[cfg(feature = "tls")]
        self.endpoints.tls.check()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signers_compare_by_issuer_key_id_and_secret() {
        let signer = |issuer: &str, key_id: &str, fill: u8| {
            Signer::new(
                issuer,
                palisade_core::SigningKey::new(key_id, [fill; 32]).unwrap(),
            )
            .unwrap()
        };
        let config = RedisConfig::new("redis://x").with_signer(signer("r", "k1", 1));
        assert_eq!(config.issuer(), Some("r"));
        assert_eq!(
            config,
            RedisConfig::new("redis://x").with_signer(signer("r", "k1", 1))
        );
        for other in [
            signer("q", "k1", 1),
            signer("r", "k2", 1),
            signer("r", "k1", 2),
        ] {
            assert_ne!(config, RedisConfig::new("redis://x").with_signer(other));
        }
        assert_ne!(config, RedisConfig::new("redis://x"));
        assert!(config.clone().with_issuer("r").validate().is_ok());
        assert!(config.with_issuer("q").validate().is_err());
    }

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
        let counter = RedisConfig::cluster(["redis://a"])
            .with_generation_scheme(GenerationScheme::Counter)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            counter.contains("counter generations on a Redis Cluster"),
            "{counter}"
        );
        assert!(
            RedisConfig::new("redis://a")
                .with_generation_scheme(GenerationScheme::Counter)
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn insecure_urls_need_the_insecure_tls_feature() {
        let urls = ["rediss://a:6380/", "rediss://b:6380/#insecure"];
        let error = refuse_insecure_urls(urls.into_iter(), false).unwrap_err();
        assert!(error.contains("insecure-tls"), "{error}");
        assert_eq!(refuse_insecure_urls(urls.into_iter(), true), Ok(()));
        assert_eq!(
            refuse_insecure_urls(["rediss://a:6380/"].into_iter(), false),
            Ok(())
        );
    }

    #[test]
    fn tls_urls_are_recognised() {
        assert!(is_tls_url("rediss://127.0.0.1:6380"));
        assert!(is_tls_url("REDISS://host"));
        assert!(is_tls_url("valkeys://host"));
        assert!(!is_tls_url("redis://host"));
        assert!(!is_tls_url("unix:///tmp/redis.sock"));
        assert!(is_insecure_url("rediss://host:6380/#insecure"));
        assert!(!is_insecure_url("rediss://host:6380/"));
        assert!(!is_insecure_url("redis://host:6380/#insecure"));
        assert!(RedisConfig::new("rediss://h").uses_tls());
        assert!(!RedisConfig::new("redis://h").uses_tls());
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_urls_need_the_feature() {
        let error = RedisConfig::new("rediss://127.0.0.1:6380")
            .validate()
            .unwrap_err();
        assert!(error.to_string().contains("`tls` feature"), "{error}");
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
