//! The resource server's live check on whichever lock service a
//! [`LockSpec`] names: before applying a request, ask the lock service
//! whether the sequencer's holder still holds the lock.

use palisade_core::{LiveCheck, SharedLiveCheck};

use crate::connect::AnyClient;
use crate::error::SelectError;
use crate::spec::{BackendKind, LockSpec};

/// A live check on `spec`'s service. `issuer` is the one the lock side
/// stamps (any other is answered `not_held`); without it, the id the lock
/// service derives for itself. The spec's key prefix must be the lock
/// side's.
pub async fn live_check(
    spec: &LockSpec,
    issuer: Option<&str>,
) -> Result<SharedLiveCheck, SelectError> {
    let unsupported = |kind: BackendKind| {
        SelectError::Unsupported(format!(
            "the live check does not support {kind}: use etcd, redis, postgres, mariadb or zookeeper"
        ))
    };
    if matches!(spec.kind(), BackendKind::Redlock | BackendKind::Embedded) {
        return Err(unsupported(spec.kind()));
    }
    // The lock side's settings, with the issuer its sequencers carry.
    let mut lock_side = spec.unsigned();
    if let Some(issuer) = issuer {
        lock_side = lock_side.with_issuer(issuer);
    }
    #[cfg(feature = "sql")]
    if matches!(spec.service(), crate::spec::Service::Sql { .. }) {
        // The SQL live check compares a sequencer's issuer with its
        // client's signer. It never signs, so the signer carries the
        // issuer with a key of throwaway random bytes.
        let carrier =
            palisade_core::SigningKey::new("live-check", rand::random::<[u8; 32]>().to_vec())
                .map_err(|error| SelectError::invalid(error.to_string()))?;
        if let Some(issuer) = issuer {
            palisade_core::Signer::new(issuer, carrier.clone()).map_err(|error| {
                SelectError::invalid(format!("--live-check-issuer {issuer:?}: {error}"))
            })?;
        }
        lock_side = lock_side.with_signing_key(carrier);
    }
    let check: SharedLiveCheck = match AnyClient::connect(&lock_side).await? {
        #[cfg(feature = "etcd")]
        AnyClient::Etcd(client) => client.live_check().into_shared(),
        #[cfg(feature = "redis")]
        AnyClient::Redis(client) => palisade_lock_redis::RedisLiveCheck::new(client).into_shared(),
        #[cfg(feature = "sql")]
        AnyClient::Sql(client, _) => palisade_lock_sql::SqlLiveCheck::new(client).into_shared(),
        #[cfg(feature = "zookeeper")]
        AnyClient::ZooKeeper(client) => client.live_check().into_shared(),
        #[allow(unreachable_patterns)]
        other => return Err(unsupported(other.kind())),
    };
    tracing::info!(service = %spec, "live check on");
    Ok(check)
}
