//! One connection to Redis, single server or cluster, and how scripts are
//! called on it.

use std::time::Duration;

use palisade_core::LockError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, RedisError, Value};

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

/// The client for a URL, with the URL's password kept out of errors.
pub(crate) fn open_client(url: &str) -> Result<redis::Client, RedisLockError> {
    redis::Client::open(url).map_err(|source| RedisLockError::InvalidUrl {
        url: redacted(url),
        source,
    })
}

/// `host:port` of a URL, for the default issuer id.
pub(crate) fn host_port(url: &str) -> Result<String, RedisLockError> {
    let info = url
        .into_connection_info()
        .map_err(|source| RedisLockError::InvalidUrl {
            url: redacted(url),
            source,
        })?;
    Ok(match info.addr() {
        redis::ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
        redis::ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}"),
        redis::ConnectionAddr::Unix(path) => path.display().to_string(),
        other => format!("{other:?}"),
    })
}

/// The URL without its password, for messages.
pub(crate) fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}://***@{}", &url[..scheme_end], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

impl Connection {
    /// Connects as `config` says. Fails if no node answers.
    pub(crate) async fn connect(config: &RedisConfig) -> Result<Self, RedisLockError> {
        let unavailable = |error: RedisError| {
            RedisLockError::Lock(from_redis("connect", config.connect_timeout, error))
        };
        if config.is_cluster() {
            let client = ClusterClientBuilder::new(config.urls.clone())
                .connection_timeout(config.connect_timeout)
                .response_timeout(config.response_timeout)
                .retries(2)
                .build()
                .map_err(|source| RedisLockError::InvalidUrl {
                    url: config
                        .urls
                        .iter()
                        .map(|u| redacted(u))
                        .collect::<Vec<_>>()
                        .join(","),
                    source,
                })?;
            let connection =
                tokio::time::timeout(config.connect_timeout * 2, client.get_async_connection())
                    .await
                    .map_err(|_elapsed| {
                        RedisLockError::Lock(LockError::BackendTimeout {
                            backend: BACKEND,
                            operation: "connect",
                            after: config.connect_timeout * 2,
                        })
                    })?
                    .map_err(unavailable)?;
            Ok(Connection::Cluster(connection))
        } else {
            let client = open_client(&config.urls[0])?;
            let manager_config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(config.connect_timeout))
                .set_response_timeout(Some(config.response_timeout))
                .set_number_of_retries(3)
                .set_max_delay(Duration::from_millis(500));
            let manager = tokio::time::timeout(
                config.connect_timeout * 2,
                client.get_connection_manager_with_config(manager_config),
            )
            .await
            .map_err(|_elapsed| {
                RedisLockError::Lock(LockError::BackendTimeout {
                    backend: BACKEND,
                    operation: "connect",
                    after: config.connect_timeout * 2,
                })
            })?
            .map_err(unavailable)?;
            Ok(Connection::Single(manager))
        }
    }

    /// Sends one command and waits for its reply.
    pub(crate) async fn query(&self, command: &Cmd) -> Result<Value, RedisError> {
        match self {
            Connection::Single(manager) => command.query_async(&mut manager.clone()).await,
            Connection::Cluster(cluster) => command.query_async(&mut cluster.clone()).await,
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
            let mut evalsha = redis::cmd("EVALSHA");
            evalsha
                .arg(&script.sha)
                .arg(keys.all().len())
                .arg(keys.all())
                .arg(args);
            match self.query(&evalsha).await {
                Err(error)
                    if error.kind()
                        == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
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
        };
        // The connection has its own response timeout; this one bounds the
        // NOSCRIPT fallback and the cluster's redirects as well.
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(
            redacted("redis://user:secret@host:6379/0"),
            "redis://***@host:6379/0"
        );
        assert_eq!(redacted("redis://host:6379"), "redis://host:6379");
        assert_eq!(
            host_port("redis://127.0.0.1:7000/2").unwrap(),
            "127.0.0.1:7000"
        );
    }
}
