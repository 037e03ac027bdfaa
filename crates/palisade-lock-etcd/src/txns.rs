//! Every transaction the mutex sends, in one place.
//!
//! All of them but the claim of a free lock end with the same read (the
//! lock's directory: its contenders and lock-delay markers, sorted by
//! create-revision), so that every answer carries a complete [`Snapshot`]
//! at the transaction's revision; a successful claim's answer implies its
//! snapshot (see [`enqueued`]). All reads
//! are linearizable (etcd's default): ownership is never decided from a
//! serializable read, which an isolated member can answer stale.

use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse,
};

use palisade_core::Mode;

use crate::keys::{self, KeyKind, LockKeys};
use crate::queue::{Contender, Marker, Snapshot};

/// The read every transaction ends with.
fn snapshot_read(keys: &LockKeys) -> TxnOp {
    TxnOp::get(
        keys.dir(),
        Some(
            GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend),
        ),
    )
}

fn ops(first: impl IntoIterator<Item = TxnOp>, keys: &LockKeys) -> Vec<TxnOp> {
    first.into_iter().chain([snapshot_read(keys)]).collect()
}

/// The condition "the lock's directory is empty": nobody queued, no
/// lock-delay marker. A range compare holds when every key in the range
/// satisfies it, and an empty range compares as a key that does not exist
/// (version 0).
fn directory_empty(keys: &LockKeys) -> Compare {
    Compare::version(keys.dir(), CompareOp::Equal, 0).with_prefix()
}

/// The put of this session's contender key (`key`, formatted by the
/// caller, which may need it more than once).
fn put_key(key: String, lease: i64, value: &str) -> TxnOp {
    TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease)))
}

/// Queues this session. If the lock's directory is empty, only the put:
/// its success alone shows this session first in line (see [`enqueued`]),
/// so an uncontended acquire reads nothing. Otherwise the contender key is
/// put if it does not exist (create-revision 0), or an existing one is left
/// alone (a retry after an answer was lost reuses its place), and the queue
/// is read.
pub(crate) fn enqueue(keys: &LockKeys, lease: i64, value: &str) -> Txn {
    let own = keys.contender(lease);
    let put_if_absent = Txn::new()
        .when([Compare::create_revision(own.clone(), CompareOp::Equal, 0)])
        .and_then([put_key(own, lease, value)]);
    claim_if_free(keys, lease, value).or_else(ops([TxnOp::txn(put_if_absent)], keys))
}

/// Claims a free lock: the put alone, if the lock's directory is empty,
/// and nothing otherwise. The first try of a waiting acquire: most locks
/// are free when asked for, and this request is a third the size of
/// [`enqueue`]'s (etcd logs and applies every request whole, its unused
/// branch too). A busy lock then costs one more round trip, [`enqueue`],
/// to queue behind its holder.
pub(crate) fn claim_if_free(keys: &LockKeys, lease: i64, value: &str) -> Txn {
    Txn::new().when([directory_empty(keys)]).and_then([put_key(
        keys.contender(lease),
        lease,
        value,
    )])
}

/// Like [`enqueue`], but only if the lock's directory is empty: an
/// exclusive `try_acquire` on a busy lock then costs one round trip and
/// never writes a key it would have to delete again.
pub(crate) fn enqueue_if_free(keys: &LockKeys, lease: i64, value: &str) -> Txn {
    claim_if_free(keys, lease, value).or_else(ops([], keys))
}

/// The snapshot after [`enqueue`] or [`enqueue_if_free`]. When the
/// directory was empty (the compare succeeded), the snapshot is known
/// without a read: this session's key, created by the transaction (so at
/// its revision, with its lease alive: a put with a lease that is gone
/// fails the whole transaction), is the only key of the lock.
pub(crate) fn enqueued(
    keys: &LockKeys,
    lease: i64,
    mode: Mode,
    response: &TxnResponse,
) -> Snapshot {
    if !response.succeeded() {
        return snapshot(keys, response);
    }
    let revision = response
        .header()
        .map(|header| header.revision())
        .unwrap_or_default();
    Snapshot {
        revision,
        contenders: vec![Contender {
            lease,
            create_revision: revision,
            mode,
        }],
        markers: Vec::new(),
    }
}

/// Rewrites this session's existing contender key with a new value (a new
/// mode), keeping its create-revision, if it still has `create_revision`.
pub(crate) fn requeue_mode(keys: &LockKeys, lease: i64, create_revision: i64, value: &str) -> Txn {
    let own = keys.contender(lease);
    Txn::new()
        .when([Compare::create_revision(
            own.clone(),
            CompareOp::Equal,
            create_revision,
        )])
        .and_then(ops(
            [TxnOp::put(
                own,
                value,
                Some(PutOptions::new().with_lease(lease)),
            )],
            keys,
        ))
        .or_else(ops([], keys))
}

/// Reads the queue. Re-reading after every wake-up is also the check that
/// this session's own key (and so its lease) still exists before it reports
/// the lock as held.
pub(crate) fn read(keys: &LockKeys) -> Txn {
    Txn::new().and_then(ops([], keys))
}

/// Writes this session's lock-delay marker, with the delay lease, if its
/// contender key still has `create_revision` (the grant is still valid).
pub(crate) fn mark(
    keys: &LockKeys,
    lease: i64,
    create_revision: i64,
    delay_lease: i64,
    value: &str,
) -> Txn {
    Txn::new()
        .when([Compare::create_revision(
            keys.contender(lease),
            CompareOp::Equal,
            create_revision,
        )])
        .and_then([TxnOp::put(
            keys.marker(lease),
            value,
            Some(PutOptions::new().with_lease(delay_lease)),
        )])
}

/// Releases or withdraws: deletes this session's contender key and (for a
/// session with a lock-delay, `marked`) its marker together, only if the
/// key still has `create_revision` (compare-and-delete by owner). `None`
/// deletes whatever this session has queued, for a retry whose first answer
/// was lost; the caller holds the session's gate for the name, so nothing
/// else of this session can own the key meanwhile.
pub(crate) fn remove(
    keys: &LockKeys,
    lease: i64,
    create_revision: Option<i64>,
    marked: bool,
) -> Txn {
    let own = keys.contender(lease);
    let compares = match create_revision {
        Some(revision) => vec![Compare::create_revision(
            own.clone(),
            CompareOp::Equal,
            revision,
        )],
        None => Vec::new(),
    };
    let mut deletes = vec![TxnOp::delete(own, None::<DeleteOptions>)];
    if marked {
        deletes.push(TxnOp::delete(keys.marker(lease), None::<DeleteOptions>));
    }
    Txn::new().when(compares).and_then(deletes)
}

/// The snapshot at the end of a transaction built here.
pub(crate) fn snapshot(keys: &LockKeys, response: &TxnResponse) -> Snapshot {
    let revision = response
        .header()
        .map(|header| header.revision())
        .unwrap_or_default();
    let mut snapshot = Snapshot {
        revision,
        ..Snapshot::default()
    };
    let responses = response.op_responses();
    let Some(directory) = responses.iter().rev().find_map(|op| match op {
        TxnOpResponse::Get(get) => Some(get),
        _ => None,
    }) else {
        return snapshot;
    };
    for kv in directory.kvs() {
        match keys.classify(kv.key()) {
            Some(KeyKind::Contender(lease)) => snapshot.contenders.push(Contender {
                lease,
                create_revision: kv.create_revision(),
                mode: keys::mode_of(kv.value()),
            }),
            Some(KeyKind::Marker(lease)) => snapshot.markers.push(Marker {
                lease,
                mode: keys::mode_of(kv.value()),
            }),
            None => {}
        }
    }
    // The server sorted them; sorting again costs nothing and makes the
    // queue order independent of that option.
    snapshot
        .contenders
        .sort_by_key(|contender| contender.create_revision);
    snapshot
}
