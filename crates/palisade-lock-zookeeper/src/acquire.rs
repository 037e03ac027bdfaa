//! The recipe: queue a contender node, wait for the one node that matters,
//! grant.
//!
//! 1. Create `<dir>/<prefix>` as an ephemeral sequential node of the
//!    session, in one transaction with a write of the directory's (empty)
//!    data, whose answer counts the directory's children after the create:
//!    one, and nobody is ahead (no listing); more, and the directory is
//!    listed. In the same pipeline (ZooKeeper answers one session's
//!    requests in order, so it sees the create) read the floor history,
//!    unless the session keeps a copy of it under a watch (floor_cache.rs).
//!    A missing directory is created (a container: ZooKeeper deletes it
//!    once it is empty) and the create sent again.
//! 2. Decide from the listing (`queue::turn`): granted, or behind one node
//!    (the contender just ahead for a writer, the last writer ahead for a
//!    reader), or delayed by an orphaned lock-delay marker.
//! 3. Watch that one node (`exists` with a watch) and list again when it
//!    is deleted. No herd: a release wakes only the contender behind it.
//! 4. Grant: the generation is `czxid + floor(czxid)` (floor.rs), checked
//!    against what this process saw before; with a lock-delay, a marker is
//!    created on the lock-delay session before the guard is handed out.
//!
//! Cancellation: the create is sent when the future is first polled and
//! cannot be called back, so a dropped acquire leaves its `Attempt` to a
//! clean-up task: it deletes the node if its name is known, or else lists
//! the directory and deletes whatever carries the attempt's random prefix
//! (the list is answered after the create, so it sees the node if the
//! create happened).

use std::sync::Arc;

use palisade_core::holds::Turn;
use palisade_core::{Generation, LeaseState, LeaseTracker, LockError, LockName, Mode, Sequencer};
use zookeeper_client as zk;

use crate::client::lock;
use crate::errors::{BACKEND, ZkLockError};
use crate::floor::{FloorHistory, parse_floor};
use crate::floor_cache::FloorPlan;
use crate::guard::ZkGuard;
use crate::names::marker_name;
use crate::node_watch::NodeWatch;
use crate::queue;
use crate::session::{Session, ZkHold};

/// What the create step learnt.
struct Created {
    /// The node's name in its directory.
    node: String,
    czxid: i64,
    sequence: i64,
    children: Vec<String>,
    /// A one-shot watch on the directory's children, set by a listing;
    /// none when the create found the directory empty (nothing was
    /// listed).
    children_watch: Option<zk::OneshotWatcher>,
    floor: FloorHistory,
}

impl Session {
    /// Takes the turn's lock; without waiting, gives up (and withdraws)
    /// instead of queueing.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        turn: Turn<Session>,
    ) -> Result<Option<ZkGuard>, LockError> {
        let (name, mode, wait) = (&turn.name().clone(), turn.mode(), turn.patience().waits());
        self.check_open()?;
        let node_names = self.client.config().node_names();
        if node_names.prefix(mode, 0).is_none() {
            return Err(LockError::Backend {
                backend: BACKEND,
                source: Box::new(ZkLockError::UnsupportedMode {
                    name: name.clone(),
                    mode,
                    node_names: node_names.as_str(),
                }),
            });
        }
        let mut attempt = Attempt::new(self, name, mode);
        let mut created = attempt.create().await?;
        let mut children = std::mem::take(&mut created.children);
        loop {
            match queue::turn(&children, &created.node, mode) {
                queue::Turn::Granted => break,
                queue::Turn::Gone => {
                    self.check_open()?;
                    return Err(LockError::Backend {
                        backend: BACKEND,
                        source: format!(
                            "the contender node {} was deleted while it waited",
                            created.node
                        )
                        .into(),
                    });
                }
                queue::Turn::Behind(node) | queue::Turn::Delayed(node) if !wait => {
                    tracing::debug!(lock = %name, behind = %node, "not granted now");
                    attempt.withdraw().await?;
                    return Ok(None);
                }
                queue::Turn::Behind(node) | queue::Turn::Delayed(node) => {
                    tracing::debug!(lock = %name, behind = %node, "waiting");
                    self.wait_deleted(&format!("{}/{node}", attempt.dir))
                        .await?;
                    let (listed, watch) = self
                        .list_and_watch_children(&attempt.dir)
                        .await
                        .map_err(|error| self.client.inner.error("list contenders", error))?;
                    (children, created.children_watch) = (listed, Some(watch));
                }
            }
        }
        self.grant(turn, attempt, created).await.map(Some)
    }

    /// The children of `dir`, within the request timeout.
    async fn list_children(&self, dir: &str) -> Result<Vec<String>, zk::Error> {
        let zk = self.zk().map_err(|_| zk::Error::ClientClosed)?;
        let listed = zk.list_children(dir);
        self.client.inner.bounded("list contenders", listed).await
    }

    /// The children of `dir` and a one-shot watch on them, within the
    /// request timeout.
    async fn list_and_watch_children(
        &self,
        dir: &str,
    ) -> Result<(Vec<String>, zk::OneshotWatcher), zk::Error> {
        let zk = self.zk().map_err(|_| zk::Error::ClientClosed)?;
        let listed = zk.list_and_watch_children(dir);
        self.client.inner.bounded("list contenders", listed).await
    }

    /// Waits until the node at `path` is gone (at once if it already is),
    /// or the session's lease is lost.
    async fn wait_deleted(&self, path: &str) -> Result<(), LockError> {
        let inner = &self.client.inner;
        // No handle of the session's client outlives a request: closing
        // the session drops the last one.
        let zk = self.zk()?;
        let watch = zk.check_and_watch_stat(path);
        let (stat, watcher) = inner
            .bounded("watch", watch)
            .await
            .map_err(|error| inner.error("watch", error))?;
        drop(zk);
        if stat.is_none() {
            return Ok(());
        }
        let mut lease = self.lease.clone();
        tokio::select! {
            event = watcher.changed() => {
                if event.event_type == zk::EventType::Session {
                    self.check_open()?;
                }
                Ok(())
            }
            _ = lease.lost() => Err(LockError::SessionClosed),
        }
    }

    /// Turns a granted attempt into a hold and its first guard.
    async fn grant(
        self: &Arc<Self>,
        turn: Turn<Session>,
        mut attempt: Attempt,
        created: Created,
    ) -> Result<ZkGuard, LockError> {
        let name = attempt.name.clone();
        let generation = self.generation_of(&created);
        let Some(generation) = generation.and_then(Generation::new) else {
            return Err(LockError::Backend {
                backend: BACKEND,
                source: format!("no generation for czxid {}", created.czxid).into(),
            });
        };
        if let Err(seen) = self.client.observe(&name, generation.get()) {
            // The ensemble's zxids went back (its data was wiped): lift the
            // floor above what this process saw, give this grant back, and
            // refuse; the next attempt is granted above it.
            tracing::error!(backend = BACKEND, lock = %name, offered = generation.get(), floor = seen, "generation regression: ZooKeeper's zxids went back");
            if let Ok(zk) = self.zk() {
                let _ = self.client.raise_floor_on(&zk, seen).await;
            }
            attempt.withdraw().await?;
            return Err(LockError::GenerationRegression {
                name,
                offered: generation.get(),
                floor: seen,
            });
        }
        let marker = if self.options.lock_delay().is_zero() {
            None
        } else {
            Some(self.create_marker(&attempt, created.sequence).await?)
        };
        attempt.marker = marker.clone();
        let valid_until = match self.lease.state() {
            LeaseState::Held { valid_until } => valid_until,
            _ => return Err(LockError::SessionClosed),
        };
        let node_path = format!("{}/{}", attempt.dir, created.node);
        let sequencer = self.sequencer(&name, attempt.mode, generation, &created.node)?;
        let tracker = Arc::new(LeaseTracker::new(valid_until));
        let node = NodeWatch::new(node_path, tracker.clone());
        match created.children_watch {
            Some(children) => node.arm(self, Some(children)),
            None => lock(&self.unwatched).push(Arc::downgrade(&node)),
        }
        let data = ZkHold { node, marker };
        let guard = turn.grant(sequencer, tracker, data)?;
        attempt.defuse();
        tracing::info!(backend = BACKEND, lock = %name, generation = generation.get(), mode = %attempt.mode, node = %created.node, czxid = created.czxid, "granted");
        Ok(ZkGuard(guard))
    }

    /// `czxid + floor(czxid)`; the fault suite's mutation uses the sequence
    /// suffix instead, to show what that breaks.
    fn generation_of(&self, created: &Created) -> Option<u64> {
        #[cfg(feature = "testing")]
        if self.client.config().mutation == crate::Mutation::GenerationFromSequence {
            return u64::try_from(created.sequence + 1).ok();
        }
        created.floor.generation(created.czxid)
    }

    /// The sequencer of a hold on `node`.
    fn sequencer(
        &self,
        name: &LockName,
        mode: Mode,
        generation: Generation,
        node: &str,
    ) -> Result<Sequencer, LockError> {
        let inner = &self.client.inner;
        let holder = format!("{}/{node}", inner.config.holder_name());
        let sequencer = Sequencer::new(name.clone(), mode, generation)
            .with_issuer(&inner.issuer)
            .and_then(|sequencer| sequencer.with_holder(&holder))
            .and_then(|sequencer| sequencer.with_lease(&self.lease_id))
            .map_err(|error| LockError::Backend {
                backend: BACKEND,
                source: Box::new(error),
            })?;
        Ok(match inner.config.signer() {
            Some(signer) => {
                tracing::debug!(lock = %name, generation = generation.get(), key_id = signer.key_id(), "sequencer signed");
                signer.sign(sequencer)
            }
            None => sequencer,
        })
    }

    /// Creates the lock-delay marker of the holder with `sequence`, on the
    /// lock-delay session. Its data: the delay and the TTL in ms, for
    /// inspection.
    async fn create_marker(&self, attempt: &Attempt, sequence: i64) -> Result<String, LockError> {
        let Some(delay_zk) = self.delay_zk() else {
            return Err(LockError::SessionClosed);
        };
        let path = format!("{}/{}", attempt.dir, marker_name(sequence));
        let data = format!(
            "{} {}",
            self.options.lock_delay().as_millis(),
            self.options.ttl().as_millis()
        );
        let inner = &self.client.inner;
        let create = delay_zk.create(
            &path,
            data.as_bytes(),
            &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()),
        );
        match inner.bounded("create lock-delay marker", create).await {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(path),
            Err(error) => Err(inner.error("create lock-delay marker", error)),
        }
    }
}

/// The floor history in the answer to a read of the floor node.
async fn read_floor(
    inner: &crate::client::ClientInner,
    read: impl std::future::Future<Output = Result<(Vec<u8>, zk::Stat), zk::Error>>,
    floor_path: &str,
) -> Result<FloorHistory, LockError> {
    match inner.bounded("read floor", read).await {
        Ok((data, stat)) => parse_floor(floor_path, &data, stat.mzxid),
        Err(zk::Error::NoNode) => Ok(FloorHistory::default()),
        Err(error) => Err(inner.error("read floor", error)),
    }
}

/// One attempt's node in ZooKeeper, cleaned up when dropped before it was
/// granted or withdrawn.
struct Attempt {
    session: Arc<Session>,
    name: LockName,
    mode: Mode,
    dir: String,
    /// The random part of the node's name: finds the node when the create
    /// was sent but its answer never read.
    prefix: String,
    /// Whether a create was sent.
    sent: bool,
    /// The node's name once known.
    node: Option<String>,
    marker: Option<String>,
    /// Granted or withdrawn: nothing to clean.
    done: bool,
}

impl Attempt {
    fn new(session: &Arc<Session>, name: &LockName, mode: Mode) -> Self {
        let node_names = session.client.config().node_names();
        let prefix = node_names
            .prefix(mode, rand::random::<u128>())
            .expect("the mode was checked against the node names");
        Attempt {
            session: session.clone(),
            name: name.clone(),
            mode,
            dir: session.client.inner.layout.dir(name),
            prefix,
            sent: false,
            node: None,
            marker: None,
            done: false,
        }
    }

    /// Step 1: create (listing only when the directory was not empty) and
    /// read the floor in one pipeline.
    async fn create(&mut self) -> Result<Created, LockError> {
        let session = self.session.clone();
        let inner = &session.client.inner;
        let data = inner.config.holder_name();
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let path = format!("{}/{}", self.dir, self.prefix);
        let floor_path = inner.layout.floor();
        loop {
            let zk = session.zk()?;
            let (plan, register) = session.floor_cache.plan(&zk, &floor_path);
            // The create and a write of the directory's (empty) data, in one
            // transaction: the write's answer is the directory as the
            // create left it, so one child means no contender of any mode
            // was queued ahead (SAFETY.md C2c), and its mzxid is the
            // transaction's zxid, which is the node's czxid.
            let mut multi = zk.new_multi_writer();
            multi
                .add_create(&path, data.as_bytes(), &options)
                .and_then(|()| multi.add_set_data(&self.dir, &[], None))
                .map_err(|error| inner.error("create contender", error))?;
            // Either failure of the one transaction is the create's.
            let create = multi.commit();
            let create = async { create.await.map_err(zk::Error::from) };
            let read = matches!(plan, FloorPlan::Read { .. }).then(|| zk.get_data(&floor_path));
            self.sent = true;
            let results = match inner.bounded("create contender", create).await {
                Ok(results) => results,
                Err(zk::Error::NoNode) => {
                    self.ensure_dir().await?;
                    continue;
                }
                Err(error) => return Err(inner.error("create contender", error)),
            };
            let (created_path, dir) = match results.as_slice() {
                [
                    zk::MultiWriteResult::Create { path, .. },
                    zk::MultiWriteResult::SetData { stat },
                ] => (path.clone(), *stat),
                other => {
                    return Err(LockError::Backend {
                        backend: BACKEND,
                        source: format!("unexpected answer to the contender's create: {other:?}")
                            .into(),
                    });
                }
            };
            let node = created_path
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            self.node = Some(node.clone());
            let Some(sequence) = node
                .strip_prefix(&self.prefix)
                .and_then(|digits| digits.parse::<i64>().ok())
            else {
                return Err(LockError::Backend {
                    backend: BACKEND,
                    source: format!("no sequence number in the created node {created_path}").into(),
                });
            };
            let (children, children_watch) = if dir.num_children == 1 {
                (vec![node.clone()], None)
            } else {
                let (children, watch) = inner
                    .bounded("list contenders", zk.list_and_watch_children(&self.dir))
                    .await
                    .map_err(|error| inner.error("list contenders", error))?;
                (children, Some(watch))
            };
            let floor = match plan {
                FloorPlan::Cached { history, events } => {
                    if session.floor_cache.still_holds(events) {
                        history
                    } else {
                        // Changed since: read it after the create, as the
                        // pipeline would have.
                        read_floor(inner, zk.get_data(&floor_path), &floor_path).await?
                    }
                }
                FloorPlan::Read { events } => {
                    let read = read.expect("a read was sent for this plan");
                    let history = read_floor(inner, read, &floor_path).await?;
                    let registered = match register {
                        Some(register) => Some(inner.bounded("watch floor", register).await),
                        None => None,
                    };
                    session.floor_cache.read(events, registered, &history);
                    history
                }
            };
            return Ok(Created {
                node,
                czxid: dir.mzxid,
                sequence,
                children,
                children_watch,
                floor,
            });
        }
    }

    /// Creates the lock directory (a container) and, if need be, the root.
    async fn ensure_dir(&self) -> Result<(), LockError> {
        let session = &self.session;
        let inner = &session.client.inner;
        let options = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
        loop {
            let zk = session.zk()?;
            let create = zk.create(&self.dir, &[], &options);
            match inner.bounded("create lock directory", create).await {
                Ok(_) | Err(zk::Error::NodeExists) => return Ok(()),
                Err(zk::Error::NoNode) => session.client.ensure_root(&zk).await?,
                Err(error) => return Err(inner.error("create lock directory", error)),
            }
        }
    }

    /// Deletes the node (and marker) now, for a try-acquire that was not
    /// granted or a refused grant: nothing is left queued when this
    /// returns.
    async fn withdraw(&mut self) -> Result<(), LockError> {
        self.done = true;
        let node = self
            .node
            .as_ref()
            .map(|node| format!("{}/{node}", self.dir));
        let result = withdraw_paths(&self.session, node, self.marker.clone()).await;
        if result.is_err() {
            // Leave it to the background clean-up.
            self.done = false;
        }
        result
    }

    fn defuse(&mut self) {
        self.done = true;
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if self.done || !self.sent {
            return;
        }
        let session = self.session.clone();
        let (dir, prefix, node, marker) = (
            self.dir.clone(),
            self.prefix.clone(),
            self.node.clone(),
            self.marker.clone(),
        );
        let runtime = session.client.inner.runtime.clone();
        runtime.spawn(async move {
            for pause in palisade_core::retry_pauses(
                std::time::Duration::from_millis(20),
                std::time::Duration::from_secs(1),
            ) {
                if session.is_over() {
                    // The session's end takes its nodes with it.
                    return;
                }
                let node = match &node {
                    Some(node) => Some(node.clone()),
                    None => match session.list_children(&dir).await {
                        Ok(children) => children
                            .into_iter()
                            .find(|child| child.starts_with(&prefix)),
                        Err(zk::Error::NoNode) => None,
                        Err(_) => {
                            tokio::time::sleep(pause).await;
                            continue;
                        }
                    },
                };
                let node = node.map(|node| format!("{dir}/{node}"));
                match withdraw_paths(&session, node, marker.clone()).await {
                    Ok(()) => return,
                    Err(_) => tokio::time::sleep(pause).await,
                }
            }
        });
    }
}

/// Deletes `node` and `marker` (full paths), treating "already gone" as
/// done.
pub(crate) async fn withdraw_paths(
    session: &Session,
    node: Option<String>,
    marker: Option<String>,
) -> Result<(), LockError> {
    let inner = &session.client.inner;
    if let (Some(marker), Some(delay_zk)) = (marker, session.delay_zk()) {
        match inner
            .bounded("delete marker", delay_zk.delete(&marker, None))
            .await
        {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(error) => return Err(inner.error("delete marker", error)),
        }
    }
    if let Some(node) = node {
        match inner
            .bounded("delete contender", session.zk()?.delete(&node, None))
            .await
        {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(error) => return Err(inner.error("delete contender", error)),
        }
    }
    Ok(())
}
