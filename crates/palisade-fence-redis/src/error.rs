//! What can go wrong, apart from a refusal.

use std::time::Duration;

use palisade_core::{LockError, LockName, SignatureError};

use crate::library::Found;

/// A call that failed or was not sent. A fencing refusal is not one of
/// these: it is the inner `Err(Refused)` of every call.
///
/// Unless the variant says otherwise, nothing was changed in Redis.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisFenceError {
    /// The guard would not hand out its sequencer (its lease is lost):
    /// nothing was sent.
    #[error("no sequencer to send: {0}")]
    Sequencer(#[from] LockError),
    /// The sequencer's signature or issuer did not verify; nothing was
    /// sent.
    #[error("lock `{lock}`: {source}")]
    Signature {
        /// The lock.
        lock: LockName,
        /// Why the signature was refused.
        #[source]
        source: SignatureError,
    },
    /// A data key does not hash to the lock's slot, so on a Redis Cluster
    /// the call could not be atomic (and Redis would refuse it with
    /// `CROSSSLOT`). Refused before anything is sent, on a single server
    /// too, so code that works on one server works on a cluster. Build
    /// data keys with `RedisFence::data_key`, or put the lock's hash tag
    /// in them.
    #[error(
        "key `{key}` is in hash slot {key_slot}, but lock `{lock}` keeps its marks in slot {lock_slot}: a fenced key must carry the lock's hash tag `{tag}`"
    )]
    WrongSlot {
        /// The lock.
        lock: LockName,
        /// The key (at most 64 bytes of it, lossy UTF-8).
        key: String,
        /// The key's slot.
        key_slot: u16,
        /// The slot of the lock's marks record.
        lock_slot: u16,
        /// The lock's hash tag, `{<key segment>}`.
        tag: String,
    },
    /// An argument the function cannot take: an empty batch of a write,
    /// an increment or floor beyond ±(2^53 − 1), too many ops.
    #[error("invalid request: {reason}")]
    Invalid {
        /// What is wrong.
        reason: String,
    },
    /// Op `op_index` names a key that holds another kind of value (a
    /// string op on a hash, or the reverse).
    #[error("op {op_index}: the key holds the wrong kind of value")]
    WrongType {
        /// Which op (0-based).
        op_index: usize,
    },
    /// Op `op_index` increments a value that is not an integer, or would
    /// leave ±(2^53 − 1).
    #[error("op {op_index}: the value is not an integer, or the result would leave ±(2^53 − 1)")]
    NotInteger {
        /// Which op (0-based).
        op_index: usize,
    },
    /// The library on a node is not this crate's: nothing was loaded over
    /// it. An older Palisade version is replaced only with
    /// `FenceOptions::with_library_upgrade`.
    #[error("the `palisade_fence` library on {node} is {found}; this client needs version {ours}")]
    Library {
        /// The node (`host:port`, or `server` for a single server).
        node: String,
        /// What is there.
        found: Found,
        /// This crate's version.
        ours: u32,
    },
    /// Redis refused or failed (the connection, a server error).
    #[error("redis {operation}: {message}")]
    Redis {
        /// What was being done.
        operation: &'static str,
        /// Redis's message, with any connection secret masked.
        message: String,
        /// `false` when Redis answered with an error (nothing was
        /// applied); `true` when the connection failed after the call may
        /// have been sent.
        may_have_applied: bool,
    },
    /// No answer within the call's bound: the call may or may not have
    /// been applied.
    #[error("redis {operation}: no answer within {after:?}; it may or may not have been applied")]
    Timeout {
        /// What was being done.
        operation: &'static str,
        /// The bound.
        after: Duration,
    },
    /// The write was applied on the primary but fewer replicas than asked
    /// acknowledged it within the timeout (`WAIT`): a failover now may lose
    /// it, and the mark raise with it. Treat as an unknown outcome.
    #[error(
        "lock `{lock}`: applied on the primary, acknowledged by {acknowledged} of the {wanted} replicas asked for"
    )]
    NotReplicated {
        /// The lock.
        lock: LockName,
        /// Replicas that acknowledged.
        acknowledged: u64,
        /// Replicas asked for.
        wanted: u64,
    },
    /// Redis answered something this crate does not understand (another
    /// library under the same function names, or a corrupt marks record).
    #[error("unexpected answer from redis: {0}")]
    Protocol(String),
}

impl RedisFenceError {
    /// Whether the call may have been applied although it failed (a
    /// timeout, a lost connection, a write not replicated).
    pub fn is_unknown_outcome(&self) -> bool {
        match self {
            RedisFenceError::Timeout { .. } | RedisFenceError::NotReplicated { .. } => true,
            RedisFenceError::Redis {
                may_have_applied, ..
            } => *may_have_applied,
            _ => false,
        }
    }
}

impl RedisFenceError {
    /// This error as told to each request of a grouped call that failed
    /// as a whole (`lock`: the request's own).
    pub(crate) fn for_lock(&self, lock: &LockName) -> RedisFenceError {
        match self {
            RedisFenceError::Redis {
                operation,
                message,
                may_have_applied,
            } => RedisFenceError::Redis {
                operation,
                message: message.clone(),
                may_have_applied: *may_have_applied,
            },
            RedisFenceError::Timeout { operation, after } => RedisFenceError::Timeout {
                operation,
                after: *after,
            },
            RedisFenceError::NotReplicated {
                acknowledged,
                wanted,
                ..
            } => RedisFenceError::NotReplicated {
                lock: lock.clone(),
                acknowledged: *acknowledged,
                wanted: *wanted,
            },
            RedisFenceError::Library { node, found, ours } => RedisFenceError::Library {
                node: node.clone(),
                found: *found,
                ours: *ours,
            },
            other => RedisFenceError::Protocol(other.to_string()),
        }
    }
}

/// A Redis error as this crate's, with what was being done.
pub(crate) fn from_redis(operation: &'static str, error: redis::RedisError) -> RedisFenceError {
    let may_have_applied = error.is_io_error()
        || error.is_connection_dropped()
        || error.is_timeout()
        || error.is_unrecoverable_error();
    RedisFenceError::Redis {
        operation,
        message: error.to_string(),
        may_have_applied,
    }
}
