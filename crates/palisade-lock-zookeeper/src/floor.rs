//! The generation and its floor.
//!
//! A generation is `czxid + floor(czxid)`: the creation zxid of the
//! holder's node plus the floor in force when that node was created.
//!
//! **Why the zxid.** ZooKeeper orders every write of the ensemble by one
//! zxid, `epoch << 32 | counter`: a new leader starts a higher epoch, and
//! a restarted server recovers the zxid from its log and snapshot, so a
//! zxid never repeats nor goes back while the ensemble keeps its data.
//! Contenders are granted in sequence order, which within one directory is
//! creation order, so an exclusive grant's `czxid` is above every earlier
//! grant's, across leader changes, restarts, session expiry, and a lock
//! directory deleted and created again. (The sequence suffix is not: it is
//! the directory's own 32-bit counter and starts over with the directory.)
//!
//! **Why a floor.** An ensemble whose data is wiped starts its zxids over,
//! below the generations resource servers already honoured; they then
//! refuse every new holder (a regression, named in the 409). Zxids cannot
//! be spent past an old epoch (2^32 writes each), so recovery adds a floor
//! instead: `raise_floor(above)` records `floor = above` in
//! `<root>/palisade:generation-floor`, and every node created afterwards
//! gets a generation above `above`.
//!
//! **Why a history.** A floor applies to nodes created after it was
//! raised, never to older ones, or an old holder would jump above a newer
//! one. So the node keeps every raise: `(zxid of the raise, floor)`, and a
//! node created at `c` takes the floor of the last raise before `c`. Floors
//! only grow and zxids only grow, so `c + floor(c)` strictly grows with
//! `c`. The history is read in the same pipeline as, and after, the
//! holder's create, so the server that answers has applied every raise
//! ordered before the create. The last raise's zxid is the node's own
//! `mzxid`; earlier ones are written in its data.

use palisade_core::{FloorRaised, LockError, LockName, RaiseFloor, RaiseFloorError};
use zookeeper_client as zk;

use crate::ZkLockClient;
use crate::errors::{self, BACKEND};

/// The first line of the floor node's data.
const HEADER: &str = "palisade generation floor v1";

/// The largest floor accepted: generations stay below `u64::MAX` for any
/// zxid (which is below `2^63`).
pub const MAX_FLOOR: u64 = u64::MAX / 2;

/// Every raise so far, oldest first: `(zxid of the raise, floor)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FloorHistory {
    raises: Vec<(u64, u64)>,
}

impl FloorHistory {
    /// The history in a floor node's `data`, whose last raise happened at
    /// `mzxid`. Absent node: the empty history.
    pub(crate) fn parse(data: &[u8], mzxid: i64) -> Result<Self, String> {
        let text = std::str::from_utf8(data).map_err(|_| "not UTF-8".to_owned())?;
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            return Err(format!("does not start with `{HEADER}`"));
        }
        let mut raises = Vec::new();
        let mut last_floor = None;
        for line in lines {
            if let Some(floor) = last_floor.take() {
                return Err(format!("floor `{floor}` without a zxid before `{line}`"));
            }
            let parsed: Vec<u64> = line
                .split(' ')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .map_err(|_| format!("bad line `{line}`"))?;
            match parsed.as_slice() {
                [zxid, floor] => raises.push((*zxid, *floor)),
                [floor] => last_floor = Some(*floor),
                _ => return Err(format!("bad line `{line}`")),
            }
        }
        let floor = last_floor.ok_or("no current floor")?;
        raises.push((u64::try_from(mzxid).map_err(|_| "negative mzxid")?, floor));
        let history = FloorHistory { raises };
        let ordered = history
            .raises
            .windows(2)
            .all(|pair| pair[0].0 < pair[1].0 && pair[0].1 < pair[1].1);
        if !ordered {
            return Err("raises out of order".into());
        }
        Ok(history)
    }

    /// The data for this history plus a raise to `floor` (whose zxid will
    /// be the node's next `mzxid`).
    fn with_raise(&self, floor: u64) -> Vec<u8> {
        let mut text = format!("{HEADER}\n");
        for (zxid, floor) in &self.raises {
            text.push_str(&format!("{zxid} {floor}\n"));
        }
        text.push_str(&format!("{floor}\n"));
        text.into_bytes()
    }

    /// The floor now in force (0 without a raise).
    pub(crate) fn current(&self) -> u64 {
        self.raises.last().map_or(0, |(_, floor)| *floor)
    }

    /// The generation of a node created at `czxid`.
    pub(crate) fn generation(&self, czxid: i64) -> Option<u64> {
        let czxid = u64::try_from(czxid).ok().filter(|czxid| *czxid > 0)?;
        let floor = self
            .raises
            .iter()
            .rev()
            .find(|(zxid, _)| *zxid < czxid)
            .map_or(0, |(_, floor)| *floor);
        czxid.checked_add(floor)
    }
}

impl ZkLockClient {
    /// The floor history in force, read from ZooKeeper.
    pub(crate) async fn floor_history(&self) -> Result<FloorHistory, LockError> {
        let path = self.inner.layout.floor();
        let reader = self.inner.reader().await?;
        let read = reader.get_data(&path);
        match self.inner.bounded("read floor", read).await {
            Ok((data, stat)) => parse_floor(&path, &data, stat.mzxid),
            Err(zk::Error::NoNode) => Ok(FloorHistory::default()),
            Err(error) => Err(errors::from_zk("read floor", error)),
        }
    }

    /// The generation floor now in force: every lock node created from now
    /// on has a generation above it (0 when none was ever raised).
    pub async fn floor(&self) -> Result<u64, LockError> {
        Ok(self.floor_history().await?.current())
    }

    /// [`RaiseFloor::raise_floor`] through the ZooKeeper session `reader`
    /// (a lock session's own, when the client's may be stale).
    pub(crate) async fn raise_floor_on(
        &self,
        reader: &zk::Client,
        above: u64,
    ) -> Result<FloorRaised, RaiseFloorError> {
        if above > MAX_FLOOR {
            return Err(RaiseFloorError::OutOfRange {
                mark: above,
                limit: MAX_FLOOR,
            });
        }
        let path = self.inner.layout.floor();
        self.ensure_root(reader).await?;
        loop {
            let read = reader.get_data(&path);
            let current = match self.inner.bounded("read floor", read).await {
                Ok((data, stat)) => Some((parse_floor(&path, &data, stat.mzxid)?, stat.version)),
                Err(zk::Error::NoNode) => None,
                Err(error) => return Err(errors::from_zk("read floor", error).into()),
            };
            let history = current
                .as_ref()
                .map(|(history, _)| history.clone())
                .unwrap_or_default();
            let before = history.current();
            if above <= before {
                return Ok(FloorRaised::new(before, before));
            }
            let data = history.with_raise(above);
            let written = match current {
                Some((_, version)) => {
                    let write = reader.set_data(&path, &data, Some(version));
                    self.inner.bounded("raise floor", write).await.map(|_| ())
                }
                None => {
                    let create = reader.create(
                        &path,
                        &data,
                        &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
                    );
                    self.inner.bounded("raise floor", create).await.map(|_| ())
                }
            };
            match written {
                Ok(()) => {
                    tracing::warn!(
                        backend = BACKEND,
                        before,
                        after = above,
                        "generation floor raised"
                    );
                    return Ok(FloorRaised::new(before, above));
                }
                // Someone else raised it meanwhile: read again.
                Err(zk::Error::BadVersion | zk::Error::NodeExists) => continue,
                Err(error) => return Err(errors::from_zk("raise floor", error).into()),
            }
        }
    }
}

/// ZooKeeper's generations are zxids, global to the ensemble, so one floor
/// serves every lock name: raising it for `name` raises it for all, as on
/// etcd. One conditional write; idempotent; never lowers the floor, and
/// never changes a generation already handed out.
impl RaiseFloor for ZkLockClient {
    async fn raise_floor(
        &self,
        _name: &LockName,
        mark: u64,
    ) -> Result<FloorRaised, RaiseFloorError> {
        let reader = self.inner.reader().await?;
        self.raise_floor_on(&reader, mark).await
    }
}

/// Reads a floor node, or reports it as a backend failure naming the node.
pub(crate) fn parse_floor(path: &str, data: &[u8], mzxid: i64) -> Result<FloorHistory, LockError> {
    FloorHistory::parse(data, mzxid).map_err(|reason| LockError::Backend {
        backend: BACKEND,
        source: format!("the floor node {path} is not Palisade's: {reason}").into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_raise_the_generation_is_the_czxid() {
        let history = FloorHistory::default();
        assert_eq!(history.generation(7), Some(7));
        assert_eq!(history.generation(0), None);
        assert_eq!(history.generation(-1), None);
        assert_eq!(history.current(), 0);
    }

    #[test]
    fn a_raise_applies_to_nodes_created_after_it_only() {
        // Raised to 1000 at zxid 10, then to 5000 at zxid 20.
        let first = FloorHistory::default().with_raise(1000);
        let history = FloorHistory::parse(&first, 10).unwrap();
        let second = history.with_raise(5000);
        let history = FloorHistory::parse(&second, 20).unwrap();
        assert_eq!(history.current(), 5000);
        assert_eq!(history.generation(9), Some(9));
        assert_eq!(history.generation(11), Some(1011));
        assert_eq!(history.generation(19), Some(1019));
        assert_eq!(history.generation(21), Some(5021));
        // Strictly increasing in the creation zxid, across both raises.
        let generations: Vec<u64> = (1..40).map(|c| history.generation(c).unwrap()).collect();
        assert!(generations.windows(2).all(|pair| pair[0] < pair[1]));
    }

    #[test]
    fn foreign_or_damaged_data_is_refused() {
        for data in [
            &b""[..],
            b"hello",
            b"palisade generation floor v1\n",
            b"palisade generation floor v1\n5\n6\n",
            b"palisade generation floor v1\n10 5\n3\n",
            b"palisade generation floor v1\nx\n",
        ] {
            assert!(
                FloorHistory::parse(data, 20).is_err(),
                "{:?}",
                String::from_utf8_lossy(data)
            );
        }
    }
}
