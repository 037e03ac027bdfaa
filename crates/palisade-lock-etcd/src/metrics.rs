//! Counts of the requests a connection made, by kind.
//!
//! They exist to make "no polling" checkable: the benchmark reports requests
//! per hand-off, and an operator can see at a glance whether waiters are
//! woken by watches (`watch_creates`) or by the bounded fallback re-check
//! (`fallback_rechecks`, which should stay at zero).

use std::sync::{Mutex, PoisonError};

/// A snapshot of the requests one [`EtcdLockClient`](crate::EtcdLockClient)
/// has made since it was opened, over all its sessions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RpcCounts {
    /// KV transactions (enqueue, re-read, grant, release, cleanup, live
    /// check), and the plain delete of a current hold's release. Each is one
    /// round trip; writes are raft-committed.
    pub txns: u64,
    /// Lease grants and revokes.
    pub lease_grants_and_revokes: u64,
    /// Keep-alive rounds (one request and its answer on a keep-alive stream).
    pub keepalives: u64,
    /// Watches created on the session's watch stream.
    pub watch_creates: u64,
    /// Watch streams opened (one per session, reopened after a failure).
    pub watch_streams: u64,
    /// Re-reads made because a waiter had heard nothing for a full TTL (the
    /// bounded fallback for a lost notification). Zero in a healthy run.
    pub fallback_rechecks: u64,
}

impl RpcCounts {
    /// Every request counted here, keep-alives included.
    pub fn total(&self) -> u64 {
        self.txns
            + self.lease_grants_and_revokes
            + self.keepalives
            + self.watch_creates
            + self.watch_streams
            + self.fallback_rechecks
    }
}

impl std::ops::Add for RpcCounts {
    type Output = RpcCounts;

    fn add(self, other: RpcCounts) -> RpcCounts {
        RpcCounts {
            txns: self.txns + other.txns,
            lease_grants_and_revokes: self.lease_grants_and_revokes
                + other.lease_grants_and_revokes,
            keepalives: self.keepalives + other.keepalives,
            watch_creates: self.watch_creates + other.watch_creates,
            watch_streams: self.watch_streams + other.watch_streams,
            fallback_rechecks: self.fallback_rechecks + other.fallback_rechecks,
        }
    }
}

impl std::iter::Sum for RpcCounts {
    fn sum<I: Iterator<Item = RpcCounts>>(counts: I) -> RpcCounts {
        counts.fold(RpcCounts::default(), |total, more| total + more)
    }
}

/// The requests made between two snapshots (`later - earlier`).
impl std::ops::Sub for RpcCounts {
    type Output = RpcCounts;

    fn sub(self, earlier: RpcCounts) -> RpcCounts {
        RpcCounts {
            txns: self.txns - earlier.txns,
            lease_grants_and_revokes: self.lease_grants_and_revokes
                - earlier.lease_grants_and_revokes,
            keepalives: self.keepalives - earlier.keepalives,
            watch_creates: self.watch_creates - earlier.watch_creates,
            watch_streams: self.watch_streams - earlier.watch_streams,
            fallback_rechecks: self.fallback_rechecks - earlier.fallback_rechecks,
        }
    }
}

/// The live counts behind [`RpcCounts`]: each request bumps one field.
#[derive(Debug, Default)]
pub(crate) struct Counters(Mutex<RpcCounts>);

impl Counters {
    /// Counts one request of the kind `field` picks.
    pub(crate) fn bump(&self, field: fn(&mut RpcCounts) -> &mut u64) {
        *field(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner)) += 1;
    }

    pub(crate) fn snapshot(&self) -> RpcCounts {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
