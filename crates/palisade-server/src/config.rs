//! The server's configuration: flags and environment variables.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use palisade_store::{Durability, Limits, StoreConfig};

/// The `--durability` flag: see [`Durability`] for what each one means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DurabilityMode {
    /// A 2xx means fsynced (group commit).
    Flushed,
    /// A 2xx means in sled's memory, flushed in the background.
    Buffered,
}

/// Everything the server needs to start, from flags or environment
/// variables. A `clap::Args`, so the `palisade` CLI can flatten it into its
/// own `serve` command and add what it needs (a live check).
///
/// ```
/// use clap::Parser;
/// use palisade_server::ServerConfig;
///
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     server: ServerConfig,
/// }
///
/// let cli = Cli::parse_from(["palisade-server", "--data-dir", "/tmp/p", "--durability", "buffered"]);
/// assert_eq!(cli.server.store_config().durability.name(), "buffered");
/// assert_eq!(cli.server.listen.port(), 7411);
/// ```
#[derive(Debug, Clone, clap::Args)]
pub struct ServerConfig {
    /// Directory of the sled database (created if missing).
    #[arg(long, env = "PALISADE_DATA_DIR")]
    pub data_dir: PathBuf,

    /// Address to listen on; port 0 picks a free port.
    #[arg(long, env = "PALISADE_LISTEN", default_value = "127.0.0.1:7411")]
    pub listen: SocketAddr,

    /// What a 2xx means: `flushed` (on disk, group commit) or `buffered`
    /// (in memory, flushed in the background every --buffered-flush-ms).
    #[arg(long, env = "PALISADE_DURABILITY", value_enum, default_value_t = DurabilityMode::Flushed)]
    pub durability: DurabilityMode,

    /// Background flush period in `buffered` mode, in milliseconds.
    #[arg(long, env = "PALISADE_BUFFERED_FLUSH_MS", default_value_t = 500)]
    pub buffered_flush_ms: u64,

    /// Longest key, in bytes.
    #[arg(long, env = "PALISADE_MAX_KEY_BYTES", default_value_t = 1024)]
    pub max_key_bytes: usize,

    /// Longest value, in bytes.
    #[arg(long, env = "PALISADE_MAX_VALUE_BYTES", default_value_t = 1024 * 1024)]
    pub max_value_bytes: usize,

    /// Most ops in one batch.
    #[arg(long, env = "PALISADE_MAX_BATCH_OPS", default_value_t = 1000)]
    pub max_batch_ops: usize,

    /// Largest request body, in bytes.
    #[arg(long, env = "PALISADE_MAX_BODY_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// How many idempotency keys each lock remembers.
    #[arg(long, env = "PALISADE_IDEMPOTENCY_WINDOW", default_value_t = 1024)]
    pub idempotency_window: u32,

    /// sled's page cache size, in bytes.
    #[arg(long, env = "PALISADE_CACHE_CAPACITY_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub cache_capacity_bytes: u64,
}

impl ServerConfig {
    /// A configuration with every default and the given data directory.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        ServerConfig {
            data_dir: data_dir.into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 7411)),
            durability: DurabilityMode::Flushed,
            buffered_flush_ms: 500,
            max_key_bytes: 1024,
            max_value_bytes: 1024 * 1024,
            max_batch_ops: 1000,
            max_body_bytes: 8 * 1024 * 1024,
            idempotency_window: 1024,
            cache_capacity_bytes: 256 * 1024 * 1024,
        }
    }

    /// The durability mode named by `durability`.
    pub fn durability(&self) -> Durability {
        match self.durability {
            DurabilityMode::Buffered => Durability::Buffered {
                flush_every: Duration::from_millis(self.buffered_flush_ms.max(1)),
            },
            DurabilityMode::Flushed => Durability::Flushed,
        }
    }

    /// The store part of the configuration.
    pub fn store_config(&self) -> StoreConfig {
        StoreConfig {
            durability: self.durability(),
            limits: Limits {
                max_key_bytes: self.max_key_bytes,
                max_value_bytes: self.max_value_bytes,
                max_batch_ops: self.max_batch_ops,
            },
            idempotency_window: self.idempotency_window.max(1),
            cache_capacity_bytes: self.cache_capacity_bytes,
        }
    }
}
