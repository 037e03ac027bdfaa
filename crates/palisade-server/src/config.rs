//! The server's configuration: flags and environment variables.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;

use palisade_core::{KeyRing, Verifier};
use palisade_store::{Durability, Limits, StoreConfig};

use crate::{ServerError, ServerLimits, StoreSpec, TlsConfig, TokenTable};

/// The `--durability` flag: see [`Durability`] for what each one means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum DurabilityMode {
    /// A 2xx means fsynced (group commit).
    Flushed,
    /// A 2xx means in sled's memory, flushed in the background.
    Buffered,
}

/// Everything the server needs to start, from flags or environment
/// variables. With the `cli` feature it is a `clap::Args`, so the
/// `palisade` CLI can flatten it into its own `serve` command and add what
/// it needs (a live check); without it, build one with [`ServerConfig::new`].
///
/// ```
/// # #[cfg(feature = "cli")] {
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
/// # }
/// ```
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct ServerConfig {
    /// Directory of the sled database (created if missing): the same as
    /// `--store sled:DIR`.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "PALISADE_DATA_DIR", required_unless_present = "store")
    )]
    pub data_dir: Option<PathBuf>,

    /// Where marks and data live: `sled:DIR`, `postgres://...` or
    /// `etcd://host:port,...[/prefix]`. Instead of --data-dir.
    #[cfg_attr(feature = "cli", arg(
        long,
        env = "PALISADE_STORE",
        conflicts_with = "data_dir",
        value_name = "SPEC",
        // A PostgreSQL URL may carry a password: never echo it in --help,
        // and parse it in `store_spec` (clap would quote it in its error).
        hide_env_values = true
    ))]
    pub store: Option<String>,

    /// Address to listen on; port 0 picks a free port.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "PALISADE_LISTEN", default_value = "127.0.0.1:7411")
    )]
    pub listen: SocketAddr,

    /// What a 2xx means with sled: `flushed` (on disk, group commit) or
    /// `buffered` (in memory, flushed in the background every
    /// --buffered-flush-ms). Other engines acknowledge only what their
    /// database committed durably: `buffered` is refused with them.
    #[cfg_attr(feature = "cli", arg(long, env = "PALISADE_DURABILITY", value_enum, default_value_t = DurabilityMode::Flushed))]
    pub durability: DurabilityMode,

    /// Background flush period in `buffered` mode, in milliseconds.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "PALISADE_BUFFERED_FLUSH_MS", default_value_t = 500)
    )]
    pub buffered_flush_ms: u64,

    /// Longest key, in bytes.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "PALISADE_MAX_KEY_BYTES", default_value_t = 1024)
    )]
    pub max_key_bytes: usize,

    /// Longest value, in bytes.
    #[cfg_attr(feature = "cli", arg(long, env = "PALISADE_MAX_VALUE_BYTES", default_value_t = 1024 * 1024))]
    pub max_value_bytes: usize,

    /// Most ops in one batch.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "PALISADE_MAX_BATCH_OPS", default_value_t = 1000)
    )]
    pub max_batch_ops: usize,

    /// Largest request body, in bytes.
    #[cfg_attr(feature = "cli", arg(long, env = "PALISADE_MAX_BODY_BYTES", default_value_t = 8 * 1024 * 1024))]
    pub max_body_bytes: usize,

    /// How many idempotency keys each lock remembers.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "PALISADE_IDEMPOTENCY_WINDOW", default_value_t = 1024)
    )]
    pub idempotency_window: u32,

    /// The most connections the PostgreSQL engine opens (PostgreSQL
    /// store only; default 16). Each request in flight holds one for its
    /// one statement. The URL parameter `max_connections` says the same;
    /// give one of the two.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            env = "PALISADE_STORE_CONNECTIONS",
            value_name = "N",
            help_heading = "PostgreSQL store"
        )
    )]
    pub store_connections: Option<u32>,

    /// PostgreSQL's `statement_timeout` for the engine's sessions: the
    /// longest one request's statement runs, lock waits included; a write
    /// cut off by it answers in doubt (PostgreSQL store only; default 5s).
    /// The URL parameter `statement_timeout` says the same; give one.
    #[cfg_attr(feature = "cli", arg(
        long,
        env = "PALISADE_STORE_STATEMENT_TIMEOUT",
        value_parser = palisade_core::parse_duration,
        value_name = "DURATION",
        help_heading = "PostgreSQL store"
    ))]
    pub store_statement_timeout: Option<Duration>,

    /// sled's page cache size, in bytes (sled only).
    #[cfg_attr(feature = "cli", arg(long, env = "PALISADE_CACHE_CAPACITY_BYTES", default_value_t = ServerConfig::DEFAULT_CACHE_CAPACITY_BYTES))]
    pub cache_capacity_bytes: u64,

    /// Key ring of the sequencer signing keys this server accepts: one
    /// `<key id> <hex secret>` per line. With it, sequencers are verified
    /// before the store sees them.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            env = "PALISADE_VERIFY_KEYS_FILE",
            value_name = "PATH",
            help_heading = "Security"
        )
    )]
    pub verify_keys_file: Option<PathBuf>,

    /// A trusted issuer (repeat the flag, or comma-separate in the
    /// environment). Without any, every issuer whose sequencer verifies
    /// under a known key is trusted. Needs --verify-keys-file.
    #[cfg_attr(
        feature = "cli",
        arg(
            long = "issuer",
            env = "PALISADE_ISSUERS",
            value_delimiter = ',',
            value_name = "ID",
            help_heading = "Security"
        )
    )]
    pub issuers: Vec<String>,

    /// Refuse unsigned sequencers (401 `unsigned`). Default: true when
    /// --verify-keys-file is given. `--require-signatures=false` with a
    /// key ring verifies signed sequencers and lets unsigned ones pass
    /// (for a rollout).
    #[cfg_attr(feature = "cli", arg(
        long,
        env = "PALISADE_REQUIRE_SIGNATURES",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL",
        help_heading = "Security"
    ))]
    pub require_signatures: Option<bool>,

    /// Refuse (409 `raise_too_large`) a sequencer more than N above its
    /// lock's highest mark, when that mark is a counter (etcd revisions,
    /// Redis's counter scheme). Off by default. Turns on
    /// --max-mark-raise-time for clock generations too.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            env = "PALISADE_MAX_MARK_RAISE",
            value_name = "N",
            help_heading = "Security"
        )
    )]
    pub max_mark_raise: Option<u64>,

    /// With --max-mark-raise: refuse a clock generation (Redis's default
    /// scheme, microseconds; a lock whose mark is at or after 2020 in µs,
    /// or has no mark yet) more than this far ahead of this server's clock.
    /// `90s`, `10m`, `1h`; must exceed the clock difference between the
    /// lock service and this server.
    #[cfg_attr(feature = "cli", arg(
        long,
        env = "PALISADE_MAX_MARK_RAISE_TIME",
        value_name = "DURATION",
        default_value = "1h",
        value_parser = palisade_core::parse_duration,
        requires = "max_mark_raise",
        help_heading = "Security"
    ))]
    pub max_mark_raise_time: Duration,

    /// Bearer tokens: one `<token> <prefix>,<prefix>...` (or `<token> *`)
    /// per line. With it, every /v1/locks request needs
    /// `authorization: Bearer <token>` for a lock under its prefixes.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            env = "PALISADE_TOKENS_FILE",
            value_name = "PATH",
            help_heading = "Security"
        )
    )]
    pub tokens_file: Option<PathBuf>,

    /// TLS certificate chain, PEM (server certificate first). Needs
    /// --tls-key.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            env = "PALISADE_TLS_CERT",
            requires = "tls_key",
            value_name = "PEM",
            help_heading = "Security"
        )
    )]
    pub tls_cert: Option<PathBuf>,

    /// TLS private key, PEM. Needs --tls-cert.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            env = "PALISADE_TLS_KEY",
            requires = "tls_cert",
            value_name = "PEM",
            help_heading = "Security"
        )
    )]
    pub tls_key: Option<PathBuf>,

    /// Time a client has to send a request's headers (and the TLS
    /// handshake); also the keep-alive idle timeout.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            env = "PALISADE_HEADER_READ_TIMEOUT_MS",
            default_value_t = 10_000,
            value_name = "MS",
            help_heading = "Limits"
        )
    )]
    pub header_read_timeout_ms: u64,

    /// Time a request's body has to arrive (else 408 `body_timeout`).
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            env = "PALISADE_BODY_READ_TIMEOUT_MS",
            default_value_t = 30_000,
            value_name = "MS",
            help_heading = "Limits"
        )
    )]
    pub body_read_timeout_ms: u64,

    /// How long one request may wait on the store and the lock service
    /// once it is in hand (else 503 `deadline_exceeded`). `500ms`, `10s`.
    #[cfg_attr(feature = "cli", arg(
        long,
        env = "PALISADE_REQUEST_TIMEOUT",
        default_value = "10s",
        value_parser = palisade_core::parse_duration,
        value_name = "DURATION",
        help_heading = "Limits"
    ))]
    pub request_timeout: Duration,

    /// Most connections served at once; at the bound a new connection
    /// takes the place of the one outside a request the longest.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            env = "PALISADE_MAX_CONNECTIONS",
            default_value_t = 1024,
            value_name = "N",
            help_heading = "Limits"
        )
    )]
    pub max_connections: usize,

    /// Most lock requests handled at once; more get 503 `overloaded`.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            env = "PALISADE_MAX_IN_FLIGHT",
            default_value_t = 256,
            value_name = "N",
            help_heading = "Limits"
        )
    )]
    pub max_in_flight: usize,

    /// Largest request line plus headers, in bytes (else 431).
    #[cfg_attr(feature = "cli", arg(long, env = "PALISADE_MAX_HEADER_BYTES", default_value_t = 16 * 1024, value_name = "BYTES", help_heading = "Limits"))]
    pub max_header_bytes: usize,

    /// Most header fields in one request (else 431).
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            env = "PALISADE_MAX_HEADERS",
            default_value_t = 100,
            value_name = "N",
            help_heading = "Limits"
        )
    )]
    pub max_headers: usize,

    /// Threads that serve requests (the async runtime's workers). By
    /// default one fewer than the machine's cores, and at least one: the
    /// store's committer (sled, `flushed`) wants a core of its own while it
    /// decides and syncs a group (docs/benchmarks.md, "A lean way in").
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            env = "PALISADE_WORKER_THREADS",
            value_name = "N",
            help_heading = "Limits"
        )
    )]
    pub worker_threads: Option<NonZeroUsize>,
}

impl ServerConfig {
    /// The threads that serve requests: `--worker-threads`, or one fewer
    /// than the cores this process may use, at least one.
    pub fn worker_threads(&self) -> usize {
        self.worker_threads.map_or_else(
            || {
                std::thread::available_parallelism()
                    .map_or(1, NonZeroUsize::get)
                    .saturating_sub(1)
                    .max(1)
            },
            NonZeroUsize::get,
        )
    }

    /// The async runtime the server runs on, with
    /// [`worker_threads`](ServerConfig::worker_threads) workers.
    pub fn runtime(&self) -> std::io::Result<tokio::runtime::Runtime> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.worker_threads())
            .enable_all()
            .build()
    }

    /// sled's page cache unless `--cache-capacity-bytes` says otherwise:
    /// 256 MiB.
    pub const DEFAULT_CACHE_CAPACITY_BYTES: u64 = 256 * 1024 * 1024;

    /// A configuration with every default and the given data directory
    /// (sled).
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        ServerConfig {
            data_dir: Some(data_dir.into()),
            store: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 7411)),
            durability: DurabilityMode::Flushed,
            buffered_flush_ms: 500,
            max_key_bytes: 1024,
            max_value_bytes: 1024 * 1024,
            max_batch_ops: 1000,
            max_body_bytes: 8 * 1024 * 1024,
            idempotency_window: 1024,
            store_connections: None,
            store_statement_timeout: None,
            cache_capacity_bytes: ServerConfig::DEFAULT_CACHE_CAPACITY_BYTES,
            verify_keys_file: None,
            issuers: Vec::new(),
            require_signatures: None,
            max_mark_raise: None,
            max_mark_raise_time: Duration::from_secs(3600),
            tokens_file: None,
            tls_cert: None,
            tls_key: None,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 30_000,
            request_timeout: ServerLimits::DEFAULT_REQUEST_TIMEOUT,
            max_connections: 1024,
            max_in_flight: 256,
            max_header_bytes: 16 * 1024,
            max_headers: 100,
            worker_threads: None,
        }
    }

    /// The connection and request limits, checked.
    pub fn limits(&self) -> Result<ServerLimits, ServerError> {
        let limits = ServerLimits {
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            body_read_timeout: Duration::from_millis(self.body_read_timeout_ms),
            request_timeout: self.request_timeout,
            max_connections: self.max_connections,
            max_in_flight: self.max_in_flight,
            max_header_bytes: self.max_header_bytes,
            max_headers: self.max_headers,
        };
        limits.validate()?;
        Ok(limits)
    }

    /// The signature verifier from `--verify-keys-file` and `--issuer`,
    /// and whether signatures are required; `None` without a key ring.
    pub fn verifier(&self) -> Result<Option<(Verifier, bool)>, ServerError> {
        let Some(path) = &self.verify_keys_file else {
            if !self.issuers.is_empty() {
                return Err(ServerError::Config(
                    "--issuer needs --verify-keys-file: an issuer is only known through a signature".into(),
                ));
            }
            if self.require_signatures == Some(true) {
                return Err(ServerError::Config(
                    "--require-signatures needs --verify-keys-file (without keys every sequencer would be refused)".into(),
                ));
            }
            return Ok(None);
        };
        let text = read_file("--verify-keys-file", path)?;
        let text = String::from_utf8(text).map_err(|_| {
            ServerError::Config(format!(
                "--verify-keys-file {} is not UTF-8 text",
                path.display()
            ))
        })?;
        let ring: KeyRing = text.parse().map_err(|source| ServerError::KeyRing {
            path: path.clone(),
            source,
        })?;
        if ring.is_empty() {
            return Err(ServerError::Config(format!(
                "--verify-keys-file {} holds no key",
                path.display()
            )));
        }
        let mut verifier = Verifier::from_keys(ring);
        for issuer in &self.issuers {
            verifier = verifier
                .with_issuer(issuer)
                .map_err(|source| ServerError::Issuer {
                    issuer: issuer.clone(),
                    source,
                })?;
        }
        Ok(Some((verifier, self.require_signatures.unwrap_or(true))))
    }

    /// The bearer tokens of `--tokens-file`, if given.
    pub fn tokens(&self) -> Result<Option<TokenTable>, ServerError> {
        let Some(path) = &self.tokens_file else {
            return Ok(None);
        };
        let text = read_file("--tokens-file", path)?;
        let text = String::from_utf8(text).map_err(|_| {
            ServerError::Config(format!(
                "--tokens-file {} is not UTF-8 text",
                path.display()
            ))
        })?;
        let tokens: TokenTable = text.parse()?;
        if tokens.is_empty() {
            return Err(ServerError::Config(format!(
                "--tokens-file {} holds no token (nobody could use the server)",
                path.display()
            )));
        }
        Ok(Some(tokens))
    }

    /// The TLS configuration of `--tls-cert` and `--tls-key`, if given.
    pub fn tls(&self) -> Result<Option<TlsConfig>, ServerError> {
        match (&self.tls_cert, &self.tls_key) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => TlsConfig::from_pem_files(cert, key).map(Some),
            _ => Err(ServerError::Config(
                "--tls-cert and --tls-key go together".into(),
            )),
        }
    }

    /// `--max-mark-raise`, checked.
    pub fn max_mark_raise(&self) -> Result<Option<u64>, ServerError> {
        match self.max_mark_raise {
            Some(0) => Err(ServerError::Config(
                "--max-mark-raise must be positive (0 would stop every new holder)".into(),
            )),
            other => Ok(other),
        }
    }

    /// `--max-mark-raise-time`, checked.
    pub fn max_mark_raise_time(&self) -> Result<Duration, ServerError> {
        if self.max_mark_raise_time.is_zero() {
            return Err(ServerError::Config(
                "--max-mark-raise-time must be positive (0 would refuse every clock generation)"
                    .into(),
            ));
        }
        Ok(self.max_mark_raise_time)
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

    /// Where the store lives: `--store`, or `--data-dir` as `sled:DIR`.
    /// Refuses an engine this build lacks (naming its feature) and sled's
    /// own settings (`--durability buffered`, `--cache-capacity-bytes`)
    /// with another engine.
    pub fn store_spec(&self) -> Result<StoreSpec, ServerError> {
        let spec = self.named_store()?;
        crate::engines::check(&spec, crate::engines::feature_of(&spec), self)?;
        Ok(spec)
    }

    fn named_store(&self) -> Result<StoreSpec, ServerError> {
        match (&self.store, &self.data_dir) {
            (Some(spec), None) => spec
                .parse()
                .map_err(|error: crate::StoreSpecError| ServerError::Config(error.to_string())),
            (None, Some(dir)) => Ok(StoreSpec::Sled { dir: dir.clone() }),
            (Some(_), Some(_)) => Err(ServerError::Config(
                "--store and --data-dir both name the store; give one".into(),
            )),
            (None, None) => Err(ServerError::Config(
                "no store: give --data-dir DIR or --store SPEC".into(),
            )),
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

/// Reads a file named by the configuration.
pub(crate) fn read_file(what: &'static str, path: &Path) -> Result<Vec<u8>, ServerError> {
    std::fs::read(path).map_err(|source| ServerError::ReadFile {
        what,
        path: path.to_owned(),
        source,
    })
}
