//! Whose turn it is: the whole mutex decided from one consistent read.
//!
//! Every decision (grant, wait, and for whom) is a pure function of a
//! [`Snapshot`]: the contenders of one lock name and its lock-delay markers,
//! read in one linearizable transaction at one revision. Keeping it pure
//! keeps the rules in one place, shared by `acquire`, `try_acquire` and the
//! live check, and testable without etcd.
//!
//! The rules:
//!
//! 1. Contenders are ordered by their key's create-revision (FIFO: etcd
//!    assigns revisions in commit order).
//! 2. An exclusive contender waits for every contender before it; a shared
//!    one waits only for exclusive contenders before it. It watches only the
//!    *last* such contender (its immediate blocker), so a release wakes one
//!    waiter, or the run of readers behind one writer, never the whole queue.
//! 3. A contender with nobody to wait for also waits for every *orphaned*
//!    lock-delay marker (a marker whose session's contender key is gone:
//!    that holder lost its lease without releasing) that conflicts with its
//!    mode. The marker disappears by itself when the delay has passed.
//! 4. A contender whose own key is missing, or has another create-revision,
//!    is never granted: its lease ended while it waited (etcd issue 11456
//!    was a mutex that forgot to check this).

use palisade_core::Mode;

/// One contender key as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Contender {
    /// The session's lease, from the key.
    pub(crate) lease: i64,
    /// The key's create-revision: its place in the queue, and the
    /// generation if it is granted.
    pub(crate) create_revision: i64,
    /// The mode it asked for, from the value.
    pub(crate) mode: Mode,
}

/// One lock-delay marker as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Marker {
    /// The lease of the session that wrote it (from the key).
    pub(crate) lease: i64,
    /// The mode that session held.
    pub(crate) mode: Mode,
}

/// The contenders and markers of one lock name at one revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// The store revision the read saw.
    pub(crate) revision: i64,
    /// All contenders, sorted by create-revision.
    pub(crate) contenders: Vec<Contender>,
    /// All markers.
    pub(crate) markers: Vec<Marker>,
}

/// What a contender must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// It holds the lock.
    Granted,
    /// It must wait for the deletion of one key.
    Wait(Blocker),
    /// Its own key is gone: it must not be granted.
    Gone,
}

/// The one key a waiter watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blocker {
    /// The contender immediately ahead that conflicts.
    Predecessor(Contender),
    /// An orphaned lock-delay marker of this session's lease.
    LockDelay {
        /// The lease in the marker's key.
        lease: i64,
    },
}

impl Snapshot {
    /// The contender of `lease`, if its key exists.
    pub(crate) fn by_lease(&self, lease: i64) -> Option<Contender> {
        self.contenders.iter().copied().find(|c| c.lease == lease)
    }

    /// The contender whose key has this create-revision.
    pub(crate) fn by_revision(&self, create_revision: i64) -> Option<Contender> {
        self.contenders
            .iter()
            .copied()
            .find(|c| c.create_revision == create_revision)
    }

    /// What `me` must do. `me` is the contender as the caller knows it (its
    /// lease and create-revision); it is looked up again in the snapshot.
    pub(crate) fn turn(&self, me: Contender) -> Turn {
        let Some(current) = self.by_lease(me.lease) else {
            return Turn::Gone;
        };
        if current.create_revision != me.create_revision {
            return Turn::Gone;
        }
        let mode = current.mode;
        let predecessor = self.contenders.iter().copied().rfind(|other| {
            other.create_revision < me.create_revision && !mode.compatible_with(other.mode)
        });
        if let Some(predecessor) = predecessor {
            return Turn::Wait(Blocker::Predecessor(predecessor));
        }
        let orphan = self.markers.iter().find(|marker| {
            marker.lease != me.lease
                && self.by_lease(marker.lease).is_none()
                && !mode.compatible_with(marker.mode)
        });
        match orphan {
            Some(marker) => Turn::Wait(Blocker::LockDelay {
                lease: marker.lease,
            }),
            None => Turn::Granted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Mode::{Exclusive as X, Shared as S};

    fn contender(lease: i64, create_revision: i64, mode: Mode) -> Contender {
        Contender {
            lease,
            create_revision,
            mode,
        }
    }

    /// Builds a snapshot from `(lease, revision, mode)` contenders and
    /// `(lease, mode)` markers, then asks for `lease`'s turn.
    fn check(
        contenders: &[(i64, i64, Mode)],
        markers: &[(i64, Mode)],
        me: (i64, i64),
        expected: Turn,
    ) {
        let snapshot = Snapshot {
            revision: 100,
            contenders: contenders
                .iter()
                .map(|&(l, r, m)| contender(l, r, m))
                .collect(),
            markers: markers
                .iter()
                .map(|&(lease, mode)| Marker { lease, mode })
                .collect(),
        };
        let me = Contender {
            lease: me.0,
            create_revision: me.1,
            mode: X,
        };
        assert_eq!(
            snapshot.turn(me),
            expected,
            "{contenders:?} {markers:?} me={me:?}"
        );
    }

    fn waits_for(lease: i64, revision: i64, mode: Mode) -> Turn {
        Turn::Wait(Blocker::Predecessor(contender(lease, revision, mode)))
    }

    #[test]
    fn exclusive_queue_is_fifo_and_watches_only_the_predecessor() {
        let queue = [(1, 10, X), (2, 11, X), (3, 12, X)];
        check(&queue, &[], (1, 10), Turn::Granted);
        check(&queue, &[], (2, 11), waits_for(1, 10, X));
        check(&queue, &[], (3, 12), waits_for(2, 11, X));
    }

    #[test]
    fn readers_wait_only_for_writers_writers_for_everyone() {
        let queue = [(1, 10, S), (2, 11, S), (3, 12, X), (4, 13, S), (5, 14, S)];
        check(&queue, &[], (1, 10), Turn::Granted);
        check(&queue, &[], (2, 11), Turn::Granted);
        // The writer waits for the last reader ahead of it.
        check(&queue, &[], (3, 12), waits_for(2, 11, S));
        // Readers behind a writer wait for that writer, not for each other.
        check(&queue, &[], (4, 13), waits_for(3, 12, X));
        check(&queue, &[], (5, 14), waits_for(3, 12, X));
    }

    #[test]
    fn a_missing_or_recreated_own_key_is_never_granted() {
        check(&[(2, 11, X)], &[], (1, 10), Turn::Gone);
        // The same lease re-created its key: the old create-revision is gone.
        check(&[(1, 15, X)], &[], (1, 10), Turn::Gone);
    }

    #[test]
    fn orphaned_markers_hold_the_lock_for_the_delay() {
        // Lease 9 held exclusively and lost its lease: only its marker is left.
        check(
            &[(1, 10, X)],
            &[(9, X)],
            (1, 10),
            Turn::Wait(Blocker::LockDelay { lease: 9 }),
        );
        check(
            &[(1, 10, S)],
            &[(9, X)],
            (1, 10),
            Turn::Wait(Blocker::LockDelay { lease: 9 }),
        );
        // A lost reader delays writers, not readers.
        check(&[(1, 10, S)], &[(9, S)], (1, 10), Turn::Granted);
        check(
            &[(1, 10, X)],
            &[(9, S)],
            (1, 10),
            Turn::Wait(Blocker::LockDelay { lease: 9 }),
        );
        // A marker whose session still has its key is not orphaned: that
        // holder is simply ahead (or beside, for readers).
        check(&[(9, 5, S), (1, 10, S)], &[(9, S)], (1, 10), Turn::Granted);
        // One's own marker never blocks.
        check(&[(1, 10, X)], &[(1, X)], (1, 10), Turn::Granted);
        // Predecessors come first: the queue head alone watches markers.
        check(
            &[(1, 10, X), (2, 11, X)],
            &[(9, X)],
            (2, 11),
            waits_for(1, 10, X),
        );
    }

    #[test]
    fn lookups() {
        let snapshot = Snapshot {
            revision: 7,
            contenders: vec![contender(1, 3, X), contender(2, 5, S)],
            markers: vec![],
        };
        assert_eq!(snapshot.by_lease(2), Some(contender(2, 5, S)));
        assert_eq!(snapshot.by_revision(3), Some(contender(1, 3, X)));
        assert_eq!(snapshot.by_revision(4), None);
    }
}
