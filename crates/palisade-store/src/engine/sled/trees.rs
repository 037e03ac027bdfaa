//! Where the committer's jobs read and write while their group is decided:
//! inside a sled transaction (buffered mode), or in the group's pending
//! effects over sled's trees, which reach sled only after the group log
//! has them (flushed mode, see `group_log.rs`). Both run the same job code
//! (`committer.rs`), so the two modes cannot decide differently.

use std::cell::RefCell;
use std::collections::BTreeMap;

use sled::IVec;
use sled::transaction::{TransactionalTree, UnabortableTransactionError};

/// One of the engine's two trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Which {
    /// Key → value, keyed by lock segment and user key.
    Data = 0,
    /// Per-lock state and idempotency records.
    Meta = 1,
}

impl Which {
    /// The one of `data` and `meta` this names.
    fn pick<T>(self, data: T, meta: T) -> T {
        match self {
            Which::Data => data,
            Which::Meta => meta,
        }
    }
}

type TreeResult<T> = Result<T, UnabortableTransactionError>;

/// What a group's jobs read and write through.
pub(crate) trait GroupTrees {
    fn get(&self, which: Which, key: &[u8]) -> TreeResult<Option<IVec>>;
    /// Sets `key`.
    fn insert(&self, which: Which, key: &[u8], value: &[u8]) -> TreeResult<()>;
    /// Sets `key` and returns its value before: a read more than
    /// [`GroupTrees::insert`] over sled's trees, so only where that value
    /// is used.
    fn replace(&self, which: Which, key: &[u8], value: &[u8]) -> TreeResult<Option<IVec>>;
    /// Removes `key`.
    fn remove(&self, which: Which, key: &[u8]) -> TreeResult<()>;
}

/// The trees of a sled transaction.
pub(crate) struct InTransaction<'a> {
    pub(crate) data: &'a TransactionalTree,
    pub(crate) meta: &'a TransactionalTree,
}

impl InTransaction<'_> {
    fn tree(&self, which: Which) -> &TransactionalTree {
        which.pick(self.data, self.meta)
    }
}

impl GroupTrees for InTransaction<'_> {
    fn get(&self, which: Which, key: &[u8]) -> TreeResult<Option<IVec>> {
        self.tree(which).get(key)
    }

    fn insert(&self, which: Which, key: &[u8], value: &[u8]) -> TreeResult<()> {
        self.tree(which).insert(key, value).map(drop)
    }

    fn replace(&self, which: Which, key: &[u8], value: &[u8]) -> TreeResult<Option<IVec>> {
        self.tree(which).insert(key, value)
    }

    fn remove(&self, which: Which, key: &[u8]) -> TreeResult<()> {
        self.tree(which).remove(key).map(drop)
    }
}

/// A group's effects: the final value (or removal) of every key it wrote.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Effects {
    trees: [BTreeMap<Vec<u8>, Option<IVec>>; 2],
}

impl Effects {
    pub(crate) fn set(&mut self, which: Which, key: Vec<u8>, value: Option<IVec>) {
        self.trees[which as usize].insert(key, value);
    }

    fn get(&self, which: Which, key: &[u8]) -> Option<&Option<IVec>> {
        self.trees[which as usize].get(key)
    }

    pub(crate) fn len(&self) -> usize {
        self.trees.iter().map(BTreeMap::len).sum()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.trees.iter().all(BTreeMap::is_empty)
    }

    /// Every effect: the tree, the key, and the value (`None`: removed).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Which, &[u8], Option<&IVec>)> {
        [Which::Data, Which::Meta]
            .into_iter()
            .flat_map(move |which| {
                self.trees[which as usize]
                    .iter()
                    .map(move |(key, value)| (which, key.as_slice(), value.as_ref()))
            })
    }

    /// Writes the effects to sled's trees, one plain insert or removal
    /// each (no transaction: the group log makes them atomic, see
    /// `group_log.rs`).
    pub(crate) fn apply(&self, data: &sled::Tree, meta: &sled::Tree) -> sled::Result<()> {
        for (which, key, value) in self.iter() {
            let tree = which.pick(data, meta);
            match value {
                Some(value) => tree.insert(key, value.clone())?,
                None => tree.remove(key)?,
            };
        }
        Ok(())
    }
}

/// sled's trees as they stand, with the group's effects so far on top.
pub(crate) struct Pending<'a> {
    data: &'a sled::Tree,
    meta: &'a sled::Tree,
    effects: RefCell<Effects>,
}

impl<'a> Pending<'a> {
    pub(crate) fn new(data: &'a sled::Tree, meta: &'a sled::Tree) -> Self {
        Pending {
            data,
            meta,
            effects: RefCell::new(Effects::default()),
        }
    }

    pub(crate) fn into_effects(self) -> Effects {
        self.effects.into_inner()
    }

    fn set(&self, which: Which, key: &[u8], value: Option<IVec>) {
        self.effects.borrow_mut().set(which, key.to_vec(), value);
    }
}

impl GroupTrees for Pending<'_> {
    fn get(&self, which: Which, key: &[u8]) -> TreeResult<Option<IVec>> {
        if let Some(value) = self.effects.borrow().get(which, key) {
            return Ok(value.clone());
        }
        which
            .pick(self.data, self.meta)
            .get(key)
            .map_err(UnabortableTransactionError::Storage)
    }

    fn insert(&self, which: Which, key: &[u8], value: &[u8]) -> TreeResult<()> {
        self.set(which, key, Some(IVec::from(value)));
        Ok(())
    }

    fn replace(&self, which: Which, key: &[u8], value: &[u8]) -> TreeResult<Option<IVec>> {
        let before = self.get(which, key)?;
        self.set(which, key, Some(IVec::from(value)));
        Ok(before)
    }

    fn remove(&self, which: Which, key: &[u8]) -> TreeResult<()> {
        self.set(which, key, None);
        Ok(())
    }
}
