//! [`AnyInspector`]: the inspection API ([`Inspect`], [`ForceRelease`]) of
//! whichever lock service a [`LockSpec`] chose. No session, no signing key.

use std::time::Duration;

use palisade_core::{Changes, ForceRelease, Generation, Inspect, LockError, LockInfo, LockName};

use crate::connect::{AnyClient, each_service};
use crate::error::{SelectError, refuse};
use crate::spec::{BackendKind, LockSpec};

/// A lock service's inspection API: who holds a lock, who waits, and
/// ending a stuck hold. A connected client of a service that has one
/// (etcd, Redis, PostgreSQL, MariaDB, ZooKeeper).
#[derive(Clone)]
pub struct AnyInspector(AnyClient);

impl AnyInspector {
    /// Connects to the service `spec` names. Redlock (inspect each master
    /// as a Redis) and the embedded backend (nothing outside the process
    /// to inspect) are refused.
    pub async fn connect(spec: &LockSpec) -> Result<AnyInspector, SelectError> {
        refuse(
            spec.kind(),
            &[
                (
                    BackendKind::Redlock,
                    "inspecting and force-releasing locks is not available for redlock yet; inspect each master with --backend redis",
                ),
                (
                    BackendKind::Embedded,
                    "the embedded backend lives inside one process: there is nothing outside it to inspect",
                ),
            ],
        )?;
        // Inspection mints no sequencer: no signing key is read or used.
        Ok(AnyInspector(AnyClient::connect(&spec.unsigned()).await?))
    }
}

impl Inspect for AnyInspector {
    async fn inspect(&self, name: &LockName) -> Result<LockInfo, LockError> {
        each_service!(&self.0, inner => inner.inspect(name).await)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockInfo>, LockError> {
        each_service!(&self.0, inner => inner.list(prefix).await)
    }

    async fn changes(&self, prefix: &str, every: Duration) -> Result<Changes, LockError> {
        each_service!(&self.0, inner => inner.changes(prefix, every).await)
    }
}

impl ForceRelease for AnyInspector {
    async fn force_release(
        &self,
        name: &LockName,
        generation: Generation,
    ) -> Result<bool, LockError> {
        each_service!(&self.0, inner => inner.force_release(name, generation).await)
    }
}
