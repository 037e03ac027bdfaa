//! The resource server's live check on whichever lock service a
//! [`LockSpec`] names: before applying a request, ask the lock service
//! whether the sequencer's holder still holds the lock.

use palisade_core::SharedLiveCheck;

use crate::error::SelectError;
use crate::spec::{LockSpec, Service};

/// A live check on `spec`'s service. `issuer` is the one the lock side
/// stamps (any other is answered `not_held`); without it, the id the lock
/// service derives for itself. The spec's key prefix must be the lock
/// side's.
pub async fn live_check(
    spec: &LockSpec,
    issuer: Option<&str>,
) -> Result<SharedLiveCheck, SelectError> {
    if !spec.kind().is_compiled() {
        return Err(SelectError::NotCompiled(spec.kind()));
    }
    let unreachable = |reason: String| {
        SelectError::Unreachable(format!(
            "cannot reach {spec} for the live check: {}",
            crate::error::scrub_spec(spec, &reason)
        ))
    };
    let check: SharedLiveCheck = match spec.service() {
        #[cfg(feature = "etcd")]
        Service::Etcd { endpoints } => {
            let mut config = crate::connect::etcd_config(&spec.unsigned(), endpoints)?;
            if let Some(issuer) = issuer {
                config = config
                    .with_issuer(issuer)
                    .map_err(|error| SelectError::invalid(error.to_string()))?;
            }
            palisade_lock_etcd::EtcdLiveCheck::connect(config)
                .await
                .map_err(|error| unreachable(crate::error::lock_error_text(&error)))?
                .into_shared()
        }
        #[cfg(feature = "redis")]
        Service::Redis { url } => {
            let mut config = crate::connect::redis_config(&spec.unsigned(), url);
            if let Some(issuer) = issuer {
                config = config.with_issuer(issuer);
            }
            std::sync::Arc::new(
                palisade_lock_redis::RedisLiveCheck::connect(config)
                    .await
                    .map_err(|error| unreachable(crate::connect::redis_error_text(&error)))?,
            )
        }
        #[cfg(feature = "sql")]
        Service::Sql { kind, url } => {
            use palisade_core::{Signer, SigningKey};
            use palisade_lock_sql::{SqlConfig, SqlLiveCheck};
            crate::connect::refuse_sql_prefix(spec, *kind)?;
            let issuer = issuer.map_or_else(
                || crate::connect::sql_default_issuer(*kind, url),
                str::to_owned,
            );
            // The SQL live check compares a sequencer's issuer with its
            // client's signer. It never signs, so the signer carries the
            // issuer with a key of throwaway random bytes.
            let carrier = SigningKey::new("live-check", rand::random::<[u8; 32]>().to_vec())
                .and_then(|key| Signer::new(&issuer, key))
                .map_err(|error| {
                    SelectError::invalid(format!("--live-check-issuer {issuer:?}: {error}"))
                })?;
            let config = SqlConfig::new(url.clone()).with_signer(carrier);
            std::sync::Arc::new(
                SqlLiveCheck::connect(config)
                    .await
                    .map_err(|error| unreachable(crate::connect::sql_error_text(&error)))?,
            )
        }
        #[cfg(feature = "zookeeper")]
        Service::ZooKeeper { connect } => {
            let mut config = crate::connect::zookeeper_config(&spec.unsigned(), connect)?;
            if let Some(issuer) = issuer {
                config = config
                    .with_issuer(issuer)
                    .map_err(|error| SelectError::invalid(error.to_string()))?;
            }
            palisade_lock_zookeeper::ZkLockClient::connect(config)
                .await
                .map_err(|error| unreachable(crate::error::lock_error_text(&error)))?
                .live_check()
                .into_shared()
        }
        _ => {
            return Err(SelectError::Unsupported(format!(
                "the live check does not support {}: use etcd, redis, postgres, mariadb or zookeeper",
                spec.kind()
            )));
        }
    };
    tracing::info!(service = %spec, "live check on");
    Ok(check)
}
