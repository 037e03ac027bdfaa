//! Chubby's CheckSequencer against etcd.

use std::future::Future;

use palisade_core::{LiveCheck, Liveness, LockError, Sequencer};

use crate::keys::{LockKeys, lease_hex};
use crate::queue::Turn;
use crate::{EtcdConfig, EtcdLockClient, txns};

/// Answers whether a sequencer's holder still holds its lock, for a
/// resource server that wants to refuse a lapsed holder before any newer
/// generation has written (`--live-check etcd`).
///
/// `Held` means: at the revision of one linearizable read, the contender
/// key with the sequencer's generation as create-revision exists, is in
/// the sequencer's mode (and lease, if the sequencer names one), and the
/// queue rules grant it (nobody conflicting ahead of it, no conflicting
/// lock-delay in force). A sequencer from another issuer, a released or
/// expired hold, or a generation that never held: `NotHeld`. An etcd that
/// cannot be asked: an error, never `NotHeld`.
///
/// ```no_run
/// use palisade_core::{LiveCheck, SharedLiveCheck};
/// use palisade_lock_etcd::{EtcdConfig, EtcdLiveCheck};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let config = EtcdConfig::from_endpoint_list("127.0.0.1:2379,127.0.0.1:22379")?;
/// let live_check: SharedLiveCheck = EtcdLiveCheck::connect(config).await?.into_shared();
/// # let _ = live_check;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct EtcdLiveCheck {
    pub(crate) connection: EtcdLockClient,
}

impl EtcdLiveCheck {
    /// Connects with `config`, which must use the prefix (and issuer, if
    /// overridden) of the lock side whose sequencers are checked.
    pub async fn connect(config: EtcdConfig) -> Result<EtcdLiveCheck, LockError> {
        Ok(EtcdLockClient::connect(config).await?.live_check())
    }

    /// The issuer this check accepts.
    pub fn issuer(&self) -> &str {
        self.connection.issuer()
    }
}

impl LiveCheck for EtcdLiveCheck {
    fn check(
        &self,
        sequencer: &Sequencer,
    ) -> impl Future<Output = Result<Liveness, LockError>> + Send {
        let connection = self.connection.clone();
        let sequencer = sequencer.clone();
        async move {
            let inner = &connection.inner;
            if sequencer
                .issuer()
                .is_some_and(|issuer| issuer != inner.issuer)
            {
                return Ok(Liveness::NotHeld);
            }
            let Ok(create_revision) = i64::try_from(sequencer.generation().get()) else {
                return Ok(Liveness::NotHeld);
            };
            let keys = LockKeys::new(inner.config.prefix(), sequencer.lock());
            let response = inner.txn("live check", txns::read(&keys)).await?;
            let snapshot = txns::snapshot(&keys, &response);
            let Some(holder) = snapshot.by_revision(create_revision) else {
                return Ok(Liveness::NotHeld);
            };
            let same_lease = sequencer
                .lease()
                .is_none_or(|lease| lease == lease_hex(holder.lease));
            let held = holder.mode == sequencer.mode()
                && same_lease
                && snapshot.turn(holder) == Turn::Granted;
            tracing::debug!(
                lock = %sequencer.lock(),
                generation = create_revision,
                held,
                revision = snapshot.revision,
                "live check"
            );
            Ok(if held {
                Liveness::Held
            } else {
                Liveness::NotHeld
            })
        }
    }
}
