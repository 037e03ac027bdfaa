//! One connection to Redis, single server or cluster, and how scripts are
//! called on it. Also how a URL (with its TLS material) becomes a client,
//! for this connection and for the inbox's subscription alike.

use std::time::Duration;

use palisade_core::LockError;
use palisade_core::redact::redact_url;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, RedisError, Value};

use crate::config::{Endpoints, TlsMaterial};
use crate::error::{BACKEND, from_redis};
use crate::keys::LockKeys;
use crate::scripts::{LuaScript, Scripts};
use crate::{RedisConfig, RedisLockError};

/// A multiplexed, self-reconnecting connection.
///
/// Both variants are cheap to clone and share one socket (per node), so
/// every session and guard of a client sends through the same pipe.
#[derive(Clone)]
pub(crate) enum Connection {
    /// One server, reconnected in the background after a failure.
    Single(ConnectionManager),
    /// A Redis Cluster; requests are routed by the key's slot.
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Connection::Single(_) => f.write_str("Connection::Single"),
            Connection::Cluster(_) => f.write_str("Connection::Cluster"),
        }
    }
}

/// The client for a URL and its TLS material, with the URL's password kept
/// out of errors.
pub(crate) fn open_client(url: &str, tls: &TlsMaterial) -> Result<redis::Client, RedisLockError> {
    let info = connection_info(url)?;
    #[cfg(feature = "tls")]
    if let Some(certificates) = tls.certificates() {
        return redis::Client::build_with_tls(info, certificates).map_err(|error| {
            RedisLockError::InvalidConfig {
                reason: format!("TLS certificates for `{}`: {error}", redact_url(url)),
            }
        });
    }
    #[cfg(not(feature = "tls"))]
    let _ = tls;
    redis::Client::open(info).map_err(|source| RedisLockError::InvalidUrl {
        url: redact_url(url),
        source,
    })
}

/// Maps a failed connect or subscribe to `url` (redacted) to a lock error,
/// telling TLS refusals apart from other connection failures: retrying
/// cannot fix a certificate, so the message says what to change.
///
/// - the server's certificate is not trusted (unknown CA, wrong host name,
///   expired): `Unavailable`, since the trusted service cannot be reached;
/// - the server refused this client's certificate, or its absence (mutual
///   TLS): `PermissionDenied`, like a refused password;
/// - anything else: as [`from_redis`] says.
pub(crate) fn connect_error(
    url: &str,
    operation: &'static str,
    timeout: Duration,
    error: RedisError,
) -> LockError {
    #[cfg(feature = "tls")]
    if let Some(tls_error) = tls::rustls_error(&error) {
        return tls::refusal(url, tls_error.clone());
    }
    #[cfg(not(feature = "tls"))]
    let _ = url;
    from_redis(operation, timeout, error)
}

#[cfg(feature = "tls")]
mod tls {
    use std::sync::Arc;

    use palisade_core::LockError;
    use redis::RedisError;
    use rustls::AlertDescription as Alert;

    use crate::error::BACKEND;

    /// A TLS handshake refused over a certificate.
    #[derive(Debug, thiserror::Error)]
    #[error("TLS handshake with `{url}` failed: {error} ({hint})")]
    pub(super) struct TlsRefused {
        /// The URL, with any password removed.
        url: String,
        /// What rustls said.
        #[source]
        error: rustls::Error,
        /// What to check.
        hint: &'static str,
    }

    /// The rustls error under a failed connect, if it was one. The `redis`
    /// crate wraps it in an `io::Error`, behind an `Arc`.
    pub(super) fn rustls_error(error: &RedisError) -> Option<&rustls::Error> {
        let source = std::error::Error::source(error)?;
        let inner: &(dyn std::error::Error + 'static) =
            match source.downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>() {
                Some(shared) => &**shared,
                None => source,
            };
        inner
            .downcast_ref::<std::io::Error>()?
            .get_ref()?
            .downcast_ref::<rustls::Error>()
    }

    pub(super) fn refusal(url: &str, error: rustls::Error) -> LockError {
        let refused = |hint| TlsRefused {
            url: url.to_owned(),
            error: error.clone(),
            hint,
        };
        match &error {
            rustls::Error::InvalidCertificate(_)
            | rustls::Error::NoCertificatesPresented
            | rustls::Error::UnsupportedNameType => LockError::Unavailable {
                backend: BACKEND,
                source: Box::new(refused(
                    "the server's certificate is not trusted: check the host in the URL against the certificate, and trust the CA that signed it with RedisConfig::with_tls_root_cert_pem",
                )),
            },
            rustls::Error::AlertReceived(
                Alert::CertificateRequired
                | Alert::NoCertificate
                | Alert::BadCertificate
                | Alert::UnsupportedCertificate
                | Alert::CertificateRevoked
                | Alert::CertificateExpired
                | Alert::CertificateUnknown
                | Alert::UnknownCA
                | Alert::AccessDenied,
            ) => LockError::PermissionDenied {
                backend: BACKEND,
                message: refused(
                    "the server refused this client's certificate, or its absence: present one signed by a CA the server trusts with RedisConfig::with_tls_client_cert_pem",
                )
                .to_string(),
            },
            _ => LockError::Unavailable {
                backend: BACKEND,
                source: Box::new(refused("TLS could not be negotiated with the server")),
            },
        }
    }
}

/// Makes sure rustls has a crypto provider before the first TLS handshake.
///
/// rustls 0.23 needs one process-wide provider and cannot pick one by
/// itself when several are compiled in (an application may pull in
/// `aws-lc-rs` through another crate). If the application installed one,
/// it is used; otherwise `ring`'s is installed. Idempotent, and losing a
/// race against another installer is fine: either way a provider is in
/// place. Plain `redis://` endpoints leave the process untouched.
pub(crate) fn ensure_crypto_provider(endpoints: &Endpoints) {
    #[cfg(feature = "tls")]
    if endpoints.uses_tls() && rustls::crypto::CryptoProvider::get_default().is_none() {
        let _already_installed = rustls::crypto::ring::default_provider().install_default();
    }
    #[cfg(not(feature = "tls"))]
    let _ = endpoints;
}

/// A URL's connection settings; an invalid URL is reported with its
/// password masked.
fn connection_info(url: &str) -> Result<redis::ConnectionInfo, RedisLockError> {
    url.into_connection_info()
        .map_err(|source| RedisLockError::InvalidUrl {
            url: redact_url(url),
            source,
        })
}

/// `host:port` of a URL, for the default issuer id.
pub(crate) fn host_port(url: &str) -> Result<String, RedisLockError> {
    let info = connection_info(url)?;
    Ok(match info.addr() {
        redis::ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
        redis::ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}"),
        redis::ConnectionAddr::Unix(path) => path.display().to_string(),
        other => format!("{other:?}"),
    })
}

/// Waits for `connected`, a single server's or a cluster's first
/// connection, at most twice the connect timeout.
async fn within_connect_timeout<T>(
    config: &RedisConfig,
    connected: impl Future<Output = Result<T, RedisError>>,
    unavailable: impl FnOnce(RedisError) -> RedisLockError,
) -> Result<T, RedisLockError> {
    let within = config.connect_timeout * 2;
    tokio::time::timeout(within, connected)
        .await
        .map_err(|_elapsed| {
            RedisLockError::Lock(LockError::BackendTimeout {
                backend: BACKEND,
                operation: "connect",
                after: within,
            })
        })?
        .map_err(unavailable)
}

impl Connection {
    /// Connects as `config` says. Fails if no node answers.
    pub(crate) async fn connect(config: &RedisConfig) -> Result<Self, RedisLockError> {
        let unavailable = |error: RedisError| {
            let urls = config
                .endpoints
                .iter()
                .map(|url| redact_url(url))
                .collect::<Vec<_>>();
            RedisLockError::Lock(connect_error(
                &urls.join(","),
                "connect",
                config.connect_timeout,
                error,
            ))
        };

        ensure_crypto_provider(&config.endpoints);
        for url in config.endpoints.iter() {
            if crate::config::is_insecure_url(url) {
                tracing::warn!(
                    backend = BACKEND,
                    url = %redact_url(url),
                    "TLS certificate verification is OFF (`#insecure` in the URL): anyone on the path can impersonate Redis; for tests only"
                );
            }
        }
        if config.is_cluster() {
            let client = cluster_client(config, |builder| builder)?;
            let connected = client.get_async_connection();
            Ok(Connection::Cluster(
                within_connect_timeout(config, connected, unavailable).await?,
            ))
        } else {
            let client = open_client(&config.endpoints[0], &config.endpoints.tls)?;
            let manager_config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(config.connect_timeout))
                .set_response_timeout(Some(config.response_timeout))
                .set_number_of_retries(3)
                .set_max_delay(Duration::from_millis(500));
            let connected = client.get_connection_manager_with_config(manager_config);
            Ok(Connection::Single(
                within_connect_timeout(config, connected, unavailable).await?,
            ))
        }
    }

    /// Sends one command and waits for its reply.
    pub(crate) async fn query(&self, command: &Cmd) -> Result<Value, RedisError> {
        match self {
            Connection::Single(manager) => command.query_async(&mut manager.clone()).await,
            Connection::Cluster(cluster) => command.query_async(&mut cluster.clone()).await,
        }
    }

    /// The address of every master of a cluster, from `CLUSTER SLOTS`; one
    /// `None` for a single server (the server itself).
    pub(crate) async fn masters(&self) -> Result<Vec<Option<(String, u16)>>, RedisError> {
        let Connection::Cluster(_) = self else {
            return Ok(vec![None]);
        };
        let reply = self
            .query(&redis::cmd("CLUSTER").arg("SLOTS").clone())
            .await?;
        let mut masters: Vec<Option<(String, u16)>> = Vec::new();
        if let Value::Array(ranges) = reply {
            for range in ranges {
                // [first slot, last slot, [host, port, id, ...], replicas...]
                let Value::Array(parts) = range else { continue };
                let Some(Value::Array(master)) = parts.get(2) else {
                    continue;
                };
                let (Some(host), Some(Value::Int(port))) = (master.first(), master.get(1)) else {
                    continue;
                };
                let host = match host {
                    Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    Value::SimpleString(text) => text.clone(),
                    _ => continue,
                };
                let address = Some((host, u16::try_from(*port).unwrap_or_default()));
                if !masters.contains(&address) {
                    masters.push(address);
                }
            }
        }
        Ok(masters)
    }

    /// Sends `command` to the cluster node at `node` (host, port), or to the
    /// single server when `node` is `None`.
    pub(crate) async fn query_on(
        &self,
        node: Option<&(String, u16)>,
        command: Cmd,
    ) -> Result<Value, RedisError> {
        match (self, node) {
            (Connection::Cluster(cluster), Some((host, port))) => {
                use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                });
                cluster.clone().route_command(command, routing).await
            }
            _ => self.query(&command).await,
        }
    }

    /// Puts every script in the server's script cache, so the first calls
    /// are `EVALSHA` hits. Only for a single server: a cluster node gets a
    /// script the first time one of its locks needs it (`EVAL` fallback).
    pub(crate) async fn load_scripts(
        &self,
        scripts: &Scripts,
        timeout: Duration,
    ) -> Result<(), LockError> {
        if let Connection::Single(_) = self {
            for script in scripts.all() {
                let mut load = redis::cmd("SCRIPT");
                load.arg("LOAD").arg(&script.source);
                self.query(&load)
                    .await
                    .map_err(|error| from_redis("script load", timeout, error))?;
            }
        }
        Ok(())
    }

    /// Runs `script` on the lock's keys: `EVALSHA`, and `EVAL` with the
    /// full source if the server's script cache does not have it
    /// (`NOSCRIPT` after a restart, a failover or `SCRIPT FLUSH`).
    ///
    /// Bounded by `timeout` in all cases; a timed-out call may still be
    /// applied by the server later.
    pub(crate) async fn eval(
        &self,
        script: &LuaScript,
        keys: &LockKeys,
        args: &[&str],
        timeout: Duration,
    ) -> Result<Value, LockError> {
        let call = async {
            let mut pauses = palisade_core::retry_pauses(RESEND_FIRST_PAUSE, RESEND_MAX_PAUSE);
            loop {
                match self.eval_once(script, keys, args).await {
                    Err(error) if resend_after(script, &error) => {
                        let pause = pauses.next().unwrap_or(RESEND_MAX_PAUSE);
                        // The connection to the node dropped (a killed
                        // connection, a restarted node), or the cluster
                        // asked to try again (a slot in migration, a
                        // failover): send again once it may be over.
                        // Bounded by the timeout below.
                        tracing::debug!(backend = BACKEND, script = script.name, %error, ?pause, "not answered; sending again");
                        tokio::time::sleep(pause).await;
                    }
                    other => return other,
                }
            }
        };
        // The connection has its own response timeout; this one bounds the
        // NOSCRIPT fallback, the cluster's redirects and the resends as well.
        match tokio::time::timeout(timeout * 2, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(from_redis(script.name, timeout, error)),
            Err(_elapsed) => Err(LockError::BackendTimeout {
                backend: BACKEND,
                operation: script.name,
                after: timeout * 2,
            }),
        }
    }

    /// One `EVALSHA`, with the `EVAL` fallback on `NOSCRIPT`.
    async fn eval_once(
        &self,
        script: &LuaScript,
        keys: &LockKeys,
        args: &[&str],
    ) -> Result<Value, RedisError> {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha
            .arg(&script.sha)
            .arg(keys.all().len())
            .arg(keys.all())
            .arg(args);
        match self.query(&evalsha).await {
            Err(error)
                if error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                tracing::debug!(
                    script = script.name,
                    "script not cached; sending it with EVAL"
                );
                let mut eval = redis::cmd("EVAL");
                eval.arg(&script.source)
                    .arg(keys.all().len())
                    .arg(keys.all())
                    .arg(args);
                self.query(&eval).await
            }
            other => other,
        }
    }
}

/// A cluster client for `config`'s seeds, timeouts and TLS material;
/// `adapt` adds what one use needs (the shard-channel inbox: RESP3 and a
/// push sender).
pub(crate) fn cluster_client(
    config: &RedisConfig,
    adapt: impl FnOnce(ClusterClientBuilder) -> ClusterClientBuilder,
) -> Result<redis::cluster::ClusterClient, RedisLockError> {
    let builder = ClusterClientBuilder::new(config.endpoints.urls.clone())
        .connection_timeout(config.connect_timeout)
        .response_timeout(config.response_timeout)
        .retries(2)
        // The driver's own waits before following TRYAGAIN or CLUSTERDOWN
        // start at 1.28 s, beyond a call's timeout; keep them as short as
        // this crate's resends (see `eval`).
        .min_retry_wait(millis(RESEND_FIRST_PAUSE))
        .max_retry_wait(millis(RESEND_MAX_PAUSE));
    #[cfg(feature = "tls")]
    let builder = match config.endpoints.tls.certificates() {
        Some(certificates) => builder.certs(certificates),
        None => builder,
    };
    adapt(builder)
        .build()
        .map_err(|source| RedisLockError::InvalidUrl {
            url: config
                .endpoints
                .iter()
                .map(|u| redact_url(u))
                .collect::<Vec<_>>()
                .join(","),
            source,
        })
}

fn millis(pause: Duration) -> u64 {
    u64::try_from(pause.as_millis()).unwrap_or(u64::MAX)
}

/// The first pause before a script is sent again on a dropped connection.
const RESEND_FIRST_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause between two resends.
const RESEND_MAX_PAUSE: Duration = Duration::from_millis(200);

/// Whether a script call that failed with `error` is sent again:
///
/// - when a cluster node refused to run it for now: `TRYAGAIN` (the lock's
///   slot is being migrated and its keys are split between two nodes),
///   `CLUSTERDOWN` or `MASTERDOWN` (a failover is under way), or sent it
///   elsewhere and the driver's own redirections ran out (`MOVED`, `ASK`,
///   while a slot's new owner is still settling). Redis ran nothing, so
///   any script may go again;
/// - when the connection dropped before an answer came (the client
///   reconnects on its own), and either the script answers the same when
///   run twice or Redis refused the connection (it cannot have run it).
fn resend_after(script: &LuaScript, error: &RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    let not_run = matches!(
        error.kind(),
        ErrorKind::Server(
            ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::Moved
                | ServerErrorKind::Ask
        )
    );
    let dropped = error.is_connection_dropped() || error.is_connection_refusal();
    not_run || (dropped && (script.resendable || error.is_connection_refusal()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_of_a_url() {
        assert_eq!(
            host_port("redis://127.0.0.1:7000/2").unwrap(),
            "127.0.0.1:7000"
        );
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_urls_are_parsed_and_a_crypto_provider_is_installed() {
        assert_eq!(
            host_port("rediss://127.0.0.1:6380").unwrap(),
            "127.0.0.1:6380"
        );
        let endpoints = Endpoints {
            urls: vec!["rediss://127.0.0.1:6380".into()],
            tls: TlsMaterial::default(),
        };
        // Nothing else in this test binary speaks TLS, so without this call
        // there would be no process-wide provider.
        ensure_crypto_provider(&endpoints);
        ensure_crypto_provider(&endpoints);
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
