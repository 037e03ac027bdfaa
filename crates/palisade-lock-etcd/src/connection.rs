//! One gRPC connection to an etcd cluster, shared by many sessions.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, GetOptions, Txn, TxnResponse};
use palisade_core::LockError;

use crate::errors::{self, BACKEND};
use crate::metrics::{Counters, RpcCounts};
use crate::{EtcdConfig, EtcdLiveCheck};

/// A connection to an etcd cluster: the gRPC channel (balanced over the
/// configured endpoints), the cluster's identity, and request counters.
///
/// Cheap to clone. Open sessions on it with
/// [`EtcdConnection::session`]: each session has its own lease and identity,
/// so tasks that must exclude each other need separate sessions, and many
/// sessions can share one connection.
///
/// ```no_run
/// use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
/// use palisade_lock_etcd::{EtcdConfig, EtcdConnection};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let connection = EtcdConnection::connect(EtcdConfig::new(["127.0.0.1:2379"])?).await?;
/// let session = connection.session(SessionOptions::default()).await?;
/// let guard = session.acquire(&LockName::new("orders/42")?, Mode::Exclusive).await?;
/// println!("{}", guard.sequencer()?);
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EtcdConnection {
    pub(crate) inner: Arc<ConnectionInner>,
}

pub(crate) struct ConnectionInner {
    pub(crate) client: Client,
    pub(crate) config: EtcdConfig,
    /// The etcd cluster id from the first response header. Every
    /// generation this connection hands out is a revision of this cluster.
    pub(crate) cluster_id: u64,
    /// The issuer written into sequencers (configured, or derived from the
    /// cluster id).
    pub(crate) issuer: String,
    pub(crate) counters: Counters,
}

impl fmt::Debug for EtcdConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdConnection")
            .field("endpoints", &self.inner.config.endpoints())
            .field("prefix", &self.inner.config.prefix())
            .field("issuer", &self.inner.issuer)
            .finish_non_exhaustive()
    }
}

impl EtcdConnection {
    /// Connects and makes one read under the key prefix, so that an
    /// unreachable cluster, a wrong password or a missing permission is
    /// reported here, typed (`Unavailable`, `BackendTimeout`,
    /// `PermissionDenied`), rather than at the first `acquire`.
    ///
    /// An invalid configuration is reported as `LockError::Backend` whose
    /// source is a [`ConfigError`](crate::ConfigError).
    pub async fn connect(config: EtcdConfig) -> Result<EtcdConnection, LockError> {
        config.validate().map_err(errors::config)?;
        let connect_within = config.connect_timeout() + config.request_timeout();
        let client = match tokio::time::timeout(
            connect_within,
            Client::connect(config.endpoints(), Some(config.connect_options())),
        )
        .await
        {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return Err(errors::from_etcd("connect", connect_within, error)),
            Err(_elapsed) => return Err(errors::timed_out("connect", connect_within)),
        };
        let probe_key = format!("{}/", config.prefix());
        let kv = client.kv_client();
        let response = within("connect", config.request_timeout(), || {
            let (mut kv, probe_key) = (kv.clone(), probe_key.clone());
            async move {
                kv.get(
                    probe_key,
                    Some(GetOptions::new().with_prefix().with_count_only()),
                )
                .await
            }
        })
        .await?;
        let cluster_id = response
            .header()
            .map(|header| header.cluster_id())
            .unwrap_or_default();
        let issuer = config
            .issuer()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("etcd-{cluster_id:016x}"));
        tracing::debug!(endpoints = ?config.endpoints(), %issuer, "connected to etcd");
        let counters = Counters::default();
        Counters::bump(&counters.txns);
        Ok(EtcdConnection {
            inner: Arc::new(ConnectionInner {
                client,
                config,
                cluster_id,
                issuer,
                counters,
            }),
        })
    }

    /// A live check answering from this connection (see [`EtcdLiveCheck`]).
    pub fn live_check(&self) -> EtcdLiveCheck {
        EtcdLiveCheck {
            connection: self.clone(),
        }
    }

    /// The issuer id written into the sequencers of this connection's
    /// sessions.
    pub fn issuer(&self) -> &str {
        &self.inner.issuer
    }

    /// The etcd cluster id.
    pub fn cluster_id(&self) -> u64 {
        self.inner.cluster_id
    }

    /// The configuration.
    pub fn config(&self) -> &EtcdConfig {
        &self.inner.config
    }

    /// The requests made so far, by kind.
    pub fn rpc_counts(&self) -> RpcCounts {
        self.inner.counters.snapshot()
    }
}

impl ConnectionInner {
    pub(crate) fn request_timeout(&self) -> Duration {
        self.config.request_timeout()
    }

    /// Runs one KV transaction with the request timeout.
    ///
    /// "Lease not found" becomes `SessionClosed`: every transaction that
    /// names a lease names the session's own, so the session is over.
    pub(crate) async fn txn(
        &self,
        operation: &'static str,
        txn: Txn,
    ) -> Result<TxnResponse, LockError> {
        Counters::bump(&self.counters.txns);
        let kv = self.client.kv_client();
        self.bounded(operation, || {
            let (mut kv, txn) = (kv.clone(), txn.clone());
            async move { kv.txn(txn).await }
        })
        .await
    }

    /// Grants a lease of `ttl_seconds`; returns its id and granted TTL.
    pub(crate) async fn lease_grant(&self, ttl_seconds: i64) -> Result<(i64, i64), LockError> {
        Counters::bump(&self.counters.lease_grants_and_revokes);
        let lease = self.client.lease_client();
        let response = self
            .bounded("lease grant", || {
                let mut lease = lease.clone();
                async move { lease.grant(ttl_seconds, None).await }
            })
            .await?;
        Ok((response.id(), response.ttl()))
    }

    /// Revokes a lease, deleting every key attached to it. A lease that is
    /// already gone counts as revoked.
    pub(crate) async fn lease_revoke(&self, lease_id: i64) -> Result<(), LockError> {
        Counters::bump(&self.counters.lease_grants_and_revokes);
        let lease = self.client.lease_client();
        let revoke = || {
            let mut lease = lease.clone();
            async move { lease.revoke(lease_id).await }
        };
        match self.bounded("lease revoke", revoke).await {
            Ok(_) | Err(LockError::SessionClosed) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Runs a request within the request timeout (see [`within`]).
    pub(crate) async fn bounded<T, F>(
        &self,
        operation: &'static str,
        make: impl FnMut() -> F,
    ) -> Result<T, LockError>
    where
        F: Future<Output = Result<T, etcd_client::Error>>,
    {
        within(operation, self.request_timeout(), make).await
    }
}

/// Runs `request` (made afresh by `make` for each attempt) within `after`.
/// Attempts that could not connect to the member they were routed to are
/// sent again at once (they never left), until the time is up: that is how
/// a request finds a live member while another is down.
///
/// "Lease not found" becomes `SessionClosed`: every request that names a
/// lease names the session's own, so the session is over.
pub(crate) async fn within<T, F>(
    operation: &'static str,
    after: Duration,
    mut make: impl FnMut() -> F,
) -> Result<T, LockError>
where
    F: Future<Output = Result<T, etcd_client::Error>>,
{
    let deadline = tokio::time::Instant::now() + after;
    let mut pause = Duration::from_millis(2);
    loop {
        match tokio::time::timeout_at(deadline, make()).await {
            Ok(Ok(response)) => return Ok(response),
            Ok(Err(error)) if errors::is_connect_failure(&error) => {
                let retry_at = tokio::time::Instant::now() + pause;
                if retry_at >= deadline {
                    // No member could be reached at all: `Unavailable`.
                    return Err(errors::from_etcd(operation, after, error));
                }
                tracing::trace!(operation, %error, "member unreachable; sending again");
                tokio::time::sleep_until(retry_at).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Ok(Err(error)) if errors::is_lease_not_found(&error) => {
                return Err(LockError::SessionClosed);
            }
            Ok(Err(error)) => return Err(errors::from_etcd(operation, after, error)),
            Err(_elapsed) => {
                tracing::debug!(
                    backend = BACKEND,
                    operation,
                    ?after,
                    "etcd request timed out"
                );
                return Err(errors::timed_out(operation, after));
            }
        }
    }
}
