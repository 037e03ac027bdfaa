//! Raising a lock service's generation floor, so the next grant of a lock
//! is above a given generation: the recovery after a lock service lost its
//! counter (`palisade raise-floor`).
//!
//! One function, [`raise_floor`], over every backend that can: one generic
//! call of core's `RaiseFloor` per backend, except etcd's own method, which
//! takes `--max-gap` and reports its puts as they go (the trait has no room
//! for either).

use palisade_core::{LockName, RaiseFloor, RaiseFloorError};

use crate::connect::AnyClient;
use crate::error::{SelectError, refuse};
use crate::spec::{BackendKind, LockSpec};

/// Settings of a floor raise.
#[derive(Debug, Clone, Copy)]
pub struct FloorOptions {
    /// etcd: the largest revision gap closed with puts; a larger one is
    /// refused before anything is written.
    pub max_gap: u64,
}

/// Where a floor raise stands (etcd's puts can take a while).
#[derive(Debug, Clone, Copy)]
pub struct FloorStep {
    /// The revision reached so far.
    pub revision: u64,
    /// The revision to reach.
    pub target: u64,
    /// Puts acknowledged.
    pub puts: u64,
}

/// What a floor raise did: the floor before and after. The next holder's
/// generation is above `after`.
#[derive(Debug, Clone, Copy)]
pub struct FloorRaised {
    /// The backend raised.
    pub backend: BackendKind,
    /// The floor before (etcd: the store revision; Redis: the lock's
    /// counter, 0 when it was lost; SQL: the lock row's generation).
    pub before: u64,
    /// The floor after.
    pub after: u64,
}

/// Raises the floor of `name` on the service `spec` names so that the next
/// grant is above `above`. `progress` hears of etcd's puts as they go.
///
/// Redlock is refused: each grant takes max(floor + 1, the clock in µs),
/// which passes a mark minted earlier by the clock anyway. So is the
/// embedded backend, whose generations live and die with its process.
pub async fn raise_floor(
    spec: &LockSpec,
    name: &LockName,
    above: u64,
    options: FloorOptions,
    progress: &mut (dyn FnMut(FloorStep) + Send),
) -> Result<FloorRaised, SelectError> {
    refuse(
        spec.kind(),
        &[
            (
                BackendKind::Redlock,
                "raise-floor is not available for redlock: each grant takes max(floor + 1, the clock in µs), which passes a mark minted earlier by the clock",
            ),
            (
                BackendKind::Embedded,
                "raise-floor does not apply to the embedded backend: its generations live and die with its process",
            ),
        ],
    )?;
    let client = AnyClient::connect(&spec.unsigned()).await?;
    let (before, after) = match &client {
        #[cfg(feature = "etcd")]
        AnyClient::Etcd(client) => raise_etcd(spec, client, above, options, progress).await?,
        #[cfg(feature = "redis")]
        AnyClient::Redis(client) => raise(spec, client, name, above).await?,
        #[cfg(feature = "sql")]
        AnyClient::Sql(client, _) => raise(spec, client, name, above).await?,
        #[cfg(feature = "zookeeper")]
        AnyClient::ZooKeeper(client) => raise(spec, client, name, above).await?,
        #[allow(unreachable_patterns)]
        _ => unreachable!("redlock and embedded are refused above"),
    };
    Ok(FloorRaised {
        backend: spec.kind(),
        before,
        after,
    })
}

/// Raises the floor through core's trait; each backend's raise is one
/// idempotent step, so a failure is simply run again.
async fn raise(
    spec: &LockSpec,
    service: &impl RaiseFloor,
    name: &LockName,
    above: u64,
) -> Result<(u64, u64), SelectError> {
    let raised = service
        .raise_floor(name, above)
        .await
        .map_err(|error| match error {
            RaiseFloorError::Lock(error) => SelectError::Failed(format!(
                "raising the floor of lock `{name}` on {spec} failed (nothing was lowered; run it again): {}",
                crate::error::scrub_spec(spec, &crate::error::lock_error_text(&error))
            )),
            other => SelectError::invalid(other.to_string()),
        })?;
    Ok((raised.before, raised.after))
}

#[cfg(feature = "etcd")]
async fn raise_etcd(
    spec: &LockSpec,
    client: &palisade_lock_etcd::EtcdLockClient,
    above: u64,
    options: FloorOptions,
    progress: &mut (dyn FnMut(FloorStep) + Send),
) -> Result<(u64, u64), SelectError> {
    use palisade_lock_etcd::{RaiseFloorError, RaiseFloorOptions};
    let floor_options = RaiseFloorOptions {
        max_gap: options.max_gap,
        ..RaiseFloorOptions::default()
    };
    let raised = client
        .raise_floor(above, floor_options, |step| {
            progress(FloorStep {
                revision: step.revision,
                target: step.target,
                puts: step.puts,
            })
        })
        .await
        .map_err(|error| match error {
            RaiseFloorError::Lock(error) => SelectError::Failed(format!(
                "raising the floor on {spec} failed (the revision may have moved part of the way; run it again): {}",
                crate::error::scrub_spec(spec, &crate::error::lock_error_text(&error))
            )),
            RaiseFloorError::GapTooLarge { .. } => {
                SelectError::invalid(format!("{error}; `--max-gap` sets the limit"))
            }
            other => SelectError::invalid(other.to_string()),
        })?;
    Ok((raised.before, raised.after))
}
