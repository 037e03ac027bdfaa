//! `Inspect` and `ForceRelease` on the client, for operators.

use std::future::Future;
use std::time::Duration;

use palisade_core::{
    Changes, ForceRelease, Generation, Holder, Inspect, LockError, LockInfo, LockName, Waiter,
    name_has_prefix,
};
use zookeeper_client as zk;

use crate::ZkLockClient;
use crate::errors::BACKEND;
use crate::floor::{FloorHistory, parse_floor};
use crate::names::{Contender, marker_name, name_of_segment};
use crate::queue::{holders, orphan_markers};
use crate::session::lease_hex;

/// One lock directory read after a `sync`.
pub(crate) struct Snapshot {
    pub(crate) dir: String,
    pub(crate) children: Vec<String>,
    pub(crate) floor: FloorHistory,
    /// The stat of the node asked for, `None` when it does not exist.
    pub(crate) node: Option<zk::Stat>,
}

impl ZkLockClient {
    /// Syncs, lists `name`'s directory, reads the floor and, with `node`,
    /// the stat of that child, in one pipeline answered in order after the
    /// sync. `None` when the directory does not exist. `op` names the
    /// requests in errors and timeouts.
    pub(crate) async fn snapshot(
        &self,
        name: &LockName,
        node: Option<&str>,
        op: &'static str,
    ) -> Result<Option<Snapshot>, LockError> {
        let inner = &self.inner;
        let dir = inner.layout.dir(name);
        let floor_path = inner.layout.floor();
        let node_path = node.map(|node| format!("{dir}/{node}"));
        let reader = inner.reader().await?;
        let sync = reader.sync(&dir);
        let listed = reader.list_children(&dir);
        let stat = node_path.as_deref().map(|path| reader.check_stat(path));
        let floor = reader.get_data(&floor_path);
        match inner.bounded(op, sync).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(error) => return Err(inner.error(op, error)),
        }
        let children = match inner.bounded(op, listed).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(error) => return Err(inner.error(op, error)),
        };
        let node = match stat {
            Some(stat) => inner
                .bounded(op, stat)
                .await
                .map_err(|error| inner.error(op, error))?,
            None => None,
        };
        let floor = match inner.bounded(op, floor).await {
            Ok((data, stat)) => parse_floor(&floor_path, &data, stat.mzxid)?,
            Err(zk::Error::NoNode) => FloorHistory::default(),
            Err(error) => return Err(inner.error(op, error)),
        };
        Ok(Some(Snapshot {
            dir,
            children,
            floor,
            node,
        }))
    }

    /// The data and stat of each of `contenders` (pipelined); `None` for a
    /// node deleted meanwhile.
    async fn read_nodes(
        &self,
        dir: &str,
        contenders: &[Contender],
    ) -> Result<Vec<Option<(Vec<u8>, zk::Stat)>>, LockError> {
        let inner = &self.inner;
        let paths: Vec<String> = contenders
            .iter()
            .map(|contender| format!("{dir}/{}", contender.name))
            .collect();
        let reader = inner.reader().await?;
        let reads: Vec<_> = paths.iter().map(|path| reader.get_data(path)).collect();
        let mut nodes = Vec::with_capacity(reads.len());
        for read in reads {
            nodes.push(match inner.bounded("inspect", read).await {
                Ok(node) => Some(node),
                Err(zk::Error::NoNode) => None,
                Err(error) => return Err(inner.error("inspect", error)),
            });
        }
        Ok(nodes)
    }

    /// The most a lock-delay in force can still last: the longest
    /// `ttl + delay` among the orphaned markers (ZooKeeper does not say
    /// when the lock-delay session last heard from its owner).
    async fn lock_delay_left(&self, snapshot: &Snapshot) -> Result<Option<Duration>, LockError> {
        let inner = &self.inner;
        let mut longest = None;
        let reader = inner.reader().await?;
        for marker in orphan_markers(&snapshot.children) {
            let read = reader.get_data(&format!("{}/{marker}", snapshot.dir));
            let data = match inner.bounded("inspect", read).await {
                Ok((data, _)) => data,
                Err(zk::Error::NoNode) => continue,
                Err(error) => return Err(inner.error("inspect", error)),
            };
            let millis: u64 = String::from_utf8_lossy(&data)
                .split(' ')
                .filter_map(|part| part.parse::<u64>().ok())
                .sum();
            let left = Duration::from_millis(millis);
            longest = Some(longest.map_or(left, |longest: Duration| longest.max(left)));
        }
        Ok(longest)
    }
}

impl Inspect for ZkLockClient {
    fn inspect(&self, name: &LockName) -> impl Future<Output = Result<LockInfo, LockError>> + Send {
        let client = self.clone();
        let name = name.clone();
        async move {
            let Some(snapshot) = client.snapshot(&name, None, "inspect").await? else {
                return Ok(LockInfo::free(name));
            };
            let (holding, waiting) = holders(&snapshot.children);
            let nodes = client.read_nodes(&snapshot.dir, &holding).await?;
            let mut info = LockInfo::free(name);
            for (contender, node) in holding.iter().zip(nodes) {
                let Some((data, stat)) = node else { continue };
                let Some(generation) = snapshot
                    .floor
                    .generation(stat.czxid)
                    .and_then(Generation::new)
                else {
                    continue;
                };
                let holder_name = String::from_utf8_lossy(&data);
                info.holders.push(
                    Holder::new(contender.mode, generation)
                        .with_lease(Some(lease_hex(stat.ephemeral_owner)))
                        .with_holder(Some(format!("{holder_name}/{}", contender.name))),
                );
            }
            info.waiters = Some(
                waiting
                    .iter()
                    .map(|contender| Waiter::new(contender.mode, None, None))
                    .collect(),
            );
            info.lock_delay_left = client.lock_delay_left(&snapshot).await?;
            Ok(info)
        }
    }

    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<LockInfo>, LockError>> + Send {
        let client = self.clone();
        let prefix = prefix.to_owned();
        async move {
            let inner = &client.inner;
            let root = inner.layout.root().to_owned();
            let reader = inner.reader().await?;
            let listed = reader.list_children(&root);
            let segments = match inner.bounded("list locks", listed).await {
                Ok(segments) => segments,
                Err(zk::Error::NoNode) => return Ok(Vec::new()),
                Err(error) => return Err(inner.error("list locks", error)),
            };
            let mut names: Vec<LockName> = segments
                .iter()
                .filter_map(|segment| name_of_segment(segment))
                .filter(|name| name_has_prefix(name, &prefix))
                .collect();
            names.sort();
            client.inspect_active(names).await
        }
    }

    /// A persistent recursive watch on the lock root, on the reader
    /// session, keeping the events of the locks `prefix` selects.
    fn changes(
        &self,
        prefix: &str,
        every: Duration,
    ) -> impl Future<Output = Result<Changes, LockError>> + Send {
        crate::changes::changes(self.inner.clone(), prefix.to_owned(), every)
    }
}

impl ForceRelease for ZkLockClient {
    /// Deletes the node whose generation is `generation`, and its
    /// lock-delay marker, in one multi-op conditional on the node's
    /// version, so no lock-delay starts and the contender behind it wakes.
    fn force_release(
        &self,
        name: &LockName,
        generation: Generation,
    ) -> impl Future<Output = Result<bool, LockError>> + Send {
        let client = self.clone();
        let name = name.clone();
        async move {
            let inner = &client.inner;
            let Some(snapshot) = client.snapshot(&name, None, "inspect").await? else {
                return Ok(false);
            };
            let (holding, _) = holders(&snapshot.children);
            let nodes = client.read_nodes(&snapshot.dir, &holding).await?;
            for (contender, node) in holding.iter().zip(nodes) {
                let Some((_, stat)) = node else { continue };
                if snapshot.floor.generation(stat.czxid) != Some(generation.get()) {
                    continue;
                }
                let path = format!("{}/{}", snapshot.dir, contender.name);
                let marker = marker_name(contender.sequence);
                let reader = inner.reader().await?;
                let mut multi = reader.new_multi_writer();
                let added = multi.add_delete(&path, Some(stat.version)).and_then(|()| {
                    if snapshot.children.contains(&marker) {
                        multi.add_delete(&format!("{}/{marker}", snapshot.dir), None)
                    } else {
                        Ok(())
                    }
                });
                added.map_err(|error| inner.error("force release", error))?;
                return match inner
                    .bounded("force release", async {
                        multi.commit().await.map_err(zk::Error::from)
                    })
                    .await
                {
                    Ok(_) => {
                        tracing::warn!(backend = BACKEND, lock = %name, generation = generation.get(), "hold ended by force");
                        Ok(true)
                    }
                    Err(zk::Error::NoNode | zk::Error::BadVersion) => Ok(false),
                    Err(error) => Err(inner.error("force release", error)),
                };
            }
            Ok(false)
        }
    }
}
