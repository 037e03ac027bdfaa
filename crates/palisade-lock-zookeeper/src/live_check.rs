//! Chubby's CheckSequencer against ZooKeeper.

use std::future::Future;

use palisade_core::{LiveCheck, Liveness, LockError, Sequencer};

use crate::names::{Child, parse_child};
use crate::queue::{Turn, turn};
use crate::session::lease_hex;
use crate::{ZkConfig, ZkLockClient};

/// Answers whether a sequencer's holder still holds its lock, for a
/// resource server that wants to refuse a lapsed holder before any newer
/// generation has written (`--live-check zookeeper`).
///
/// `Held` means: after a `sync` (so the server answering has applied every
/// write the leader committed before it), the node the sequencer's
/// `holder` field names exists in the lock's directory, in the
/// sequencer's mode and session, its generation is the sequencer's, and
/// the queue rules grant it. A sequencer from another issuer, a released
/// or expired hold, or a generation that never held: `NotHeld`. A
/// ZooKeeper that cannot be asked: an error, never `NotHeld`.
#[derive(Clone, Debug)]
pub struct ZkLiveCheck {
    pub(crate) client: ZkLockClient,
}

impl ZkLiveCheck {
    /// Connects with `config`, which must name the root (and issuer, if
    /// overridden) of the lock side whose sequencers are checked.
    pub async fn connect(config: ZkConfig) -> Result<ZkLiveCheck, LockError> {
        Ok(ZkLockClient::connect(config).await?.live_check())
    }

    /// The issuer this check accepts.
    pub fn issuer(&self) -> &str {
        self.client.issuer()
    }
}

impl LiveCheck for ZkLiveCheck {
    fn check(
        &self,
        sequencer: &Sequencer,
    ) -> impl Future<Output = Result<Liveness, LockError>> + Send {
        let client = self.client.clone();
        let sequencer = sequencer.clone();
        async move {
            let inner = &client.inner;
            if sequencer
                .issuer()
                .is_some_and(|issuer| issuer != inner.issuer)
            {
                return Ok(Liveness::NotHeld);
            }
            let Some(node) = sequencer
                .holder()
                .and_then(|holder| holder.rsplit_once('/'))
                .map(|(_, node)| node.to_owned())
            else {
                return Ok(Liveness::NotHeld);
            };
            let Some(snapshot) = client
                .snapshot(sequencer.lock(), Some(&node), "live check")
                .await?
            else {
                return Ok(Liveness::NotHeld);
            };
            let Some(stat) = snapshot.node else {
                return Ok(Liveness::NotHeld);
            };
            let same_session = sequencer
                .lease()
                .is_none_or(|lease| lease == lease_hex(stat.ephemeral_owner));
            let same_mode = matches!(
                parse_child(&node),
                Child::Contender(contender) if contender.mode == sequencer.mode()
            );
            let held = snapshot.floor.generation(stat.czxid) == Some(sequencer.generation().get())
                && same_session
                && same_mode
                && turn(&snapshot.children, &node, sequencer.mode()) == Turn::Granted;
            tracing::debug!(lock = %sequencer.lock(), generation = sequencer.generation().get(), held, "live check");
            Ok(if held {
                Liveness::Held
            } else {
                Liveness::NotHeld
            })
        }
    }
}
