//! One gRPC connection to an etcd cluster, shared by many sessions.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, GetOptions, Txn, TxnResponse};
use palisade_core::LockError;
use palisade_core::holds::Waiters;
use palisade_etcd::KvHandles;

use crate::errors::{self, BACKEND};
use crate::metrics::{Counters, RpcCounts};
use crate::{EtcdConfig, EtcdLiveCheck};

/// A connection to an etcd cluster: the gRPC channel (balanced over the
/// configured endpoints), the cluster's identity, and request counters.
///
/// Cheap to clone. Open sessions on it with
/// [`EtcdLockClient::session`]: each session has its own lease and identity,
/// so tasks that must exclude each other need separate sessions, and many
/// sessions can share one connection.
///
/// ```no_run
/// use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
/// use palisade_lock_etcd::{EtcdConfig, EtcdLockClient};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let connection = EtcdLockClient::connect(EtcdConfig::new(["127.0.0.1:2379"])?).await?;
/// let session = connection.session(SessionOptions::default()).await?;
/// let guard = session.acquire(&LockName::new("orders/42")?, Mode::Exclusive).await?;
/// println!("{}", guard.sequencer()?);
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EtcdLockClient {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) client: Client,
    /// KV handles kept between the sessions' requests.
    kv: KvHandles,
    pub(crate) config: EtcdConfig,
    /// The etcd cluster id from the first response header. Every
    /// generation this connection hands out is a revision of this cluster.
    pub(crate) cluster_id: u64,
    /// The issuer written into sequencers (configured, or derived from the
    /// cluster id).
    pub(crate) issuer: String,
    pub(crate) counters: Counters,
    /// Waiters per lock over this connection's sessions: the per-process
    /// bound (`SessionOptions::max_waiters`), one connection being the
    /// normal shape of a process.
    pub(crate) waiters: Waiters,
}

impl fmt::Debug for EtcdLockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLockClient")
            .field("endpoints", &self.inner.config.endpoints())
            .field("prefix", &self.inner.config.prefix())
            .field("issuer", &self.inner.issuer)
            .finish_non_exhaustive()
    }
}

impl EtcdLockClient {
    /// Connects and makes one read under the key prefix, so that an
    /// unreachable cluster, a wrong password or a missing permission is
    /// reported here, typed (`Unavailable`, `BackendTimeout`,
    /// `PermissionDenied`), rather than at the first `acquire`.
    ///
    /// An invalid configuration is reported as `LockError::Backend` whose
    /// source is a [`ConfigError`](crate::ConfigError).
    pub async fn connect(config: EtcdConfig) -> Result<EtcdLockClient, LockError> {
        config.validate().map_err(errors::config)?;
        if let Some(refused) = config.connection().every_endpoint_refuses().await {
            return Err(LockError::Unavailable {
                backend: BACKEND,
                source: Box::new(refused),
            });
        }
        let request_timeout = config.connection().request_timeout();
        let connect_within = config.connection().connect_timeout() + request_timeout;
        let client = match tokio::time::timeout(
            connect_within,
            Client::connect(
                config.endpoints(),
                Some(config.connection().connect_options()),
            ),
        )
        .await
        {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return Err(errors::from_etcd("connect", connect_within, error)),
            Err(_elapsed) => return Err(errors::timed_out("connect", connect_within)),
        };
        let probe_key = format!("{}/", config.prefix());
        let kv = client.kv_client();
        let response = within("connect", request_timeout, Resend::Always, || {
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
        counters.bump(|counts| &mut counts.txns);
        Ok(EtcdLockClient {
            inner: Arc::new(ClientInner {
                kv: KvHandles::new(client.kv_client()),
                client,
                config,
                cluster_id,
                issuer,
                counters,
                waiters: Waiters::default(),
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

    /// Adds a member's client endpoint to the set this connection balances
    /// over (a member added to the cluster, or one that was left out at
    /// connect). Streams already open stay on their member; new requests and
    /// re-opened streams may go to the new one.
    pub async fn add_endpoint(&self, endpoint: &str) -> Result<(), LockError> {
        self.inner
            .client
            .add_endpoint(endpoint)
            .await
            .map_err(|error| errors::from_etcd("add endpoint", Duration::ZERO, error))
    }

    /// The requests made so far, by kind.
    pub fn rpc_counts(&self) -> RpcCounts {
        self.inner.counters.snapshot()
    }
}

impl ClientInner {
    pub(crate) fn request_timeout(&self) -> Duration {
        self.config.connection().request_timeout()
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
        self.txn_made(operation, Resend::Always, || txn.clone())
            .await
    }

    /// A transaction built by `make` for each attempt, resending as
    /// `resend` says: a request path that builds its transaction anyway
    /// builds it once per attempt instead of building and then copying it.
    pub(crate) async fn txn_made(
        &self,
        operation: &'static str,
        resend: Resend,
        make: impl Fn() -> Txn,
    ) -> Result<TxnResponse, LockError> {
        self.counters.bump(|counts| &mut counts.txns);
        // One client handle per attempt: `txn` needs it mutably.
        self.bounded(operation, resend, || {
            let (mut kv, txn) = (self.kv.take(), make());
            async move { kv.txn(txn).await }
        })
        .await
    }

    /// Deletes `key`, resending as `resend` says; returns how many keys
    /// were deleted (0 or 1). Counted with the transactions.
    pub(crate) async fn delete_resending(
        &self,
        operation: &'static str,
        resend: Resend,
        key: &str,
    ) -> Result<i64, LockError> {
        self.counters.bump(|counts| &mut counts.txns);
        let response = self
            .bounded(operation, resend, || {
                let mut kv = self.kv.take();
                async move { kv.delete(key, None).await }
            })
            .await?;
        Ok(response.deleted())
    }

    /// Grants a lease of `ttl_seconds`; returns its id and granted TTL.
    pub(crate) async fn lease_grant(&self, ttl_seconds: i64) -> Result<(i64, i64), LockError> {
        self.counters
            .bump(|counts| &mut counts.lease_grants_and_revokes);
        let lease = self.client.lease_client();
        let response = self
            .bounded("lease grant", Resend::Always, || {
                let mut lease = lease.clone();
                async move { lease.grant(ttl_seconds, None).await }
            })
            .await?;
        Ok((response.id(), response.ttl()))
    }

    /// Revokes a lease, deleting every key attached to it. A lease that is
    /// already gone counts as revoked.
    pub(crate) async fn lease_revoke(&self, lease_id: i64) -> Result<(), LockError> {
        self.counters
            .bump(|counts| &mut counts.lease_grants_and_revokes);
        let lease = self.client.lease_client();
        let revoke = || {
            let mut lease = lease.clone();
            async move { lease.revoke(lease_id).await }
        };
        match self.bounded("lease revoke", Resend::Always, revoke).await {
            Ok(_) | Err(LockError::SessionClosed) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Runs a request within the request timeout (see [`within`]).
    pub(crate) async fn bounded<T, F>(
        &self,
        operation: &'static str,
        resend: Resend,
        make: impl FnMut() -> F,
    ) -> Result<T, LockError>
    where
        F: Future<Output = Result<T, etcd_client::Error>>,
    {
        within(operation, self.request_timeout(), resend, make).await
    }
}

/// Whether a request may be sent again after an attempt that may have
/// reached etcd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// Sending it twice does what sending it once does (a read, a
    /// conditional write, a lease grant whose twin expires unused): resend
    /// after any failure of the service or the connection.
    Always,
    /// A second attempt could answer differently (a release whose first
    /// attempt deleted the key would find it gone): resend only attempts
    /// that never left.
    OnlyUnsent,
}

/// Runs `request` (made afresh by `make` for each attempt) within `after`.
///
/// Attempts that could not connect to the member they were routed to are
/// sent again at once (they never left): that is how a request finds a live
/// member while another is down. With [`Resend::Always`], attempts that
/// failed for a reason that says nothing about the request itself (the
/// connection broke while the answer was on its way because the member
/// died, the member has no leader during an election) are sent again too,
/// after a short back-off: the gRPC channel routes the new attempt afresh,
/// and a dead member is skipped on its connect failure. Only refusals, and
/// the deadline, are returned.
///
/// "Lease not found" becomes `SessionClosed`: every request that names a
/// lease names the session's own, so the session is over.
pub(crate) async fn within<T, F>(
    operation: &'static str,
    after: Duration,
    resend: Resend,
    mut make: impl FnMut() -> F,
) -> Result<T, LockError>
where
    F: Future<Output = Result<T, etcd_client::Error>>,
{
    let deadline = tokio::time::Instant::now() + after;
    let mut pauses =
        palisade_core::retry_pauses(Duration::from_millis(2), Duration::from_millis(100));
    loop {
        // Boxed: a gRPC call's future is over 2 KB, and every future above
        // this one (the acquire's, the release's) would carry it inline and
        // copy it at each layer; one allocation is cheaper.
        let error = match tokio::time::timeout_at(deadline, Box::pin(make())).await {
            Ok(Ok(response)) => return Ok(response),
            Ok(Err(error)) if errors::is_lease_not_found(&error) => {
                return Err(LockError::SessionClosed);
            }
            Ok(Err(error)) => error,
            Err(_elapsed) => {
                tracing::debug!(
                    backend = BACKEND,
                    operation,
                    ?after,
                    "etcd request timed out"
                );
                return Err(errors::timed_out(operation, after));
            }
        };
        let unsent = errors::is_unsent(&error);
        let mapped = errors::from_etcd(operation, after, error);
        let again =
            unsent || (resend == Resend::Always && matches!(mapped, LockError::Unavailable { .. }));
        let pause = pauses.next().unwrap_or(Duration::from_millis(100));
        let retry_at = tokio::time::Instant::now() + pause;
        if !again || retry_at >= deadline {
            return Err(mapped);
        }
        tracing::debug!(operation, error = %mapped, ?pause, "etcd request failed; sending again");
        tokio::time::sleep_until(retry_at).await;
    }
}
