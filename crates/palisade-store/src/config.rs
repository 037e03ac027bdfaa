//! How a store is opened: durability mode, limits, idempotency window.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// What an acknowledged request means.
///
/// An acknowledgement is the return of [`Store::apply`](crate::Store::apply)
/// (or the resolution of a [`Pending`](crate::Pending)); over HTTP, a 2xx.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// Acknowledged ⇒ fsynced. The default.
    ///
    /// The store's committer thread applies every request queued since its
    /// last flush in one sled transaction, then calls sled's `flush()`
    /// (write the log) and `fsync`s sled's files once (sled 0.34's flush
    /// alone does not reach the disk), and only then answers them all: one
    /// flush acknowledges every request committed before it started (group
    /// commit). A response that reports state (a read, a refusal with marks)
    /// also waits until what it saw is flushed. Survives `kill -9` and power
    /// loss, as far as the disk honours fsync.
    #[default]
    Flushed,
    /// Acknowledged ⇒ committed in sled's in-memory log buffers. Every
    /// `flush_every` the store's interval sync writes sled's log and fsyncs
    /// sled's files, the same sync `Flushed` does after each group; a
    /// failed one fail-stops the store.
    ///
    /// So a write acknowledged at time t is on disk by t + `flush_every` +
    /// the length of one sync. A `kill -9`, kernel crash or power loss
    /// before then can lose the writes *and the mark updates* acknowledged
    /// in that window (all of them, or the newest part: sled keeps its log
    /// buffers in this process's memory and writes a buffer out only when
    /// it fills or is flushed, so even the OS page cache may not have
    /// them). After such a crash a stale holder
    /// whose generation lies in the lost window can be accepted again. Use
    /// it where throughput matters more than that.
    Buffered {
        /// How often the interval sync runs ([`FlushStats::background_syncs`]
        /// counts them).
        ///
        /// [`FlushStats::background_syncs`]: crate::FlushStats::background_syncs
        flush_every: Duration,
    },
}

impl Durability {
    /// The name used in flags and reports: `flushed` or `buffered`.
    pub fn name(self) -> &'static str {
        match self {
            Durability::Flushed => "flushed",
            Durability::Buffered { .. } => "buffered",
        }
    }

    /// `Buffered` with an interval sync every 500 ms.
    pub const fn buffered() -> Durability {
        Durability::Buffered {
            flush_every: Duration::from_millis(500),
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Durability::Flushed => f.write_str("flushed"),
            Durability::Buffered { flush_every } => {
                write!(f, "buffered (synced every {flush_every:?})")
            }
        }
    }
}

/// The text was not `flushed` or `buffered`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown durability `{found}`; expected `flushed` or `buffered`")]
pub struct DurabilityParseError {
    /// What was offered.
    pub found: String,
}

impl FromStr for Durability {
    type Err = DurabilityParseError;

    /// `flushed`, or `buffered` (with the default 500 ms period).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "flushed" => Ok(Durability::Flushed),
            "buffered" => Ok(Durability::buffered()),
            other => Err(DurabilityParseError {
                found: other.chars().take(64).collect(),
            }),
        }
    }
}

/// Size limits, checked before any transaction starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest key, in bytes. Default 1 KiB.
    pub max_key_bytes: usize,
    /// The longest value, in bytes. Default 1 MiB.
    pub max_value_bytes: usize,
    /// The most ops in one batch. Default 1000.
    pub max_batch_ops: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_key_bytes: 1024,
            max_value_bytes: 1024 * 1024,
            max_batch_ops: 1000,
        }
    }
}

/// Which limit a request exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitKind {
    /// [`Limits::max_key_bytes`].
    Key,
    /// [`Limits::max_value_bytes`].
    Value,
    /// [`Limits::max_batch_ops`].
    BatchOps,
    /// The whole request, as the engine would send it: an engine with a
    /// request size limit of its own (etcd's `--max-request-bytes`).
    RequestBytes,
}

impl LimitKind {
    /// A short stable name: `key`, `value`, `batch_ops`, `request_bytes`.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::Key => "key",
            LimitKind::Value => "value",
            LimitKind::BatchOps => "batch_ops",
            LimitKind::RequestBytes => "request_bytes",
        }
    }
}

impl LimitKind {
    /// What the limit counts: `bytes`, or `ops` for a batch.
    pub fn unit(self) -> &'static str {
        match self {
            LimitKind::Key | LimitKind::Value | LimitKind::RequestBytes => "bytes",
            LimitKind::BatchOps => "ops",
        }
    }
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LimitKind::Key => "the key",
            LimitKind::Value => "the value",
            LimitKind::BatchOps => "the batch",
            LimitKind::RequestBytes => "the request",
        })
    }
}

/// Everything [`Store::open`](crate::Store::open) needs besides the path:
/// set the fields over the defaults,
/// `StoreConfig { durability: Durability::buffered(), ..StoreConfig::default() }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// What an acknowledgement means. Default [`Durability::Flushed`].
    pub durability: Durability,
    /// Size limits.
    pub limits: Limits,
    /// How many idempotency keys each lock remembers (the last N writes that
    /// carried one). Default 1024. See the crate docs for what happens after
    /// a key is evicted.
    pub idempotency_window: u32,
    /// sled's page cache size in bytes. Default 256 MiB.
    pub cache_capacity_bytes: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            durability: Durability::Flushed,
            limits: Limits::default(),
            idempotency_window: 1024,
            cache_capacity_bytes: 256 * 1024 * 1024,
        }
    }
}

impl StoreConfig {
    /// Sets the idempotency window (at least 1).
    pub fn with_idempotency_window(mut self, window: u32) -> Self {
        self.idempotency_window = window.max(1);
        self
    }
}
