//! `resource-server`: the Palisade resource server as a child process of the
//! fault suite, with the same flags as `palisade-server` (it flattens the
//! same `ServerConfig`) and two more, the mutation switches `--unfenced`
//! and `--unsynced`.
//!
//! It prints `palisade-server listening on ADDR` on standard output once
//! bound, logs to standard error, and shuts down gracefully (with a flush)
//! on SIGINT/SIGTERM, exactly as `palisade-server` does. A test kills it
//! with SIGKILL when a crash is the point.
//!
//! # `--unfenced` (the mutation check)
//!
//! The fault suite must show that its checker *can* fail: with fencing
//! switched off, the GC-pause scenarios have to report stale writes
//! accepted. `--unfenced` switches fencing off from the outside, without a
//! line of production code: every request's sequencer is rewritten to
//! generation 1 before the server sees it, so the store's marks never rise
//! above 1 and every write is accepted whatever generation its client
//! holds. The clients still record the generation they really presented,
//! so the checker sees the late writes land after newer ones.
//!
//! The flag only exists in this binary, which lives in the unpublished
//! `palisade-tests` crate, and it also demands `PALISADE_TEST_UNFENCED=1`
//! in the environment, so a stray flag alone cannot turn fencing off.
//!
//! # `--unsynced` (the mutation check for I-DUR)
//!
//! The same for lost acknowledged writes: `--unsynced` makes the store
//! acknowledge each group after sled's own flush without syncing sled's
//! files (`Store::skip_file_sync_unsafe_for_mutation_tests`, a hidden hook
//! `palisade-server` never calls). Acknowledged writes then survive
//! `kill -9` (the page cache keeps them) but not a disk that dies before
//! its journal commits, and the "disk dies" scenario must report them lost.
//! It demands `PALISADE_TEST_UNSYNCED=1` in the environment as well.
//!
//! # `--held-transactions` (the mutation check of scenario 20)
//!
//! With `--store postgres://...`, opens the PostgreSQL engine with
//! `PostgresConfig::hold_transactions_unsafe_for_mutation_tests`: each
//! fenced read and admit is again a transaction that holds the lock's row
//! across round trips to this process, so pausing the process stalls every
//! other replica's writes to that lock, and scenario 20's bound must fail.
//! It demands `PALISADE_TEST_HELD_TRANSACTIONS=1` in the environment.

use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::HeaderValue;
use clap::Parser;
use palisade::server::{AppState, ServerConfig, StoreSpec, app, shutdown_signal};
use palisade::store::Store;
use palisade::{Generation, Sequencer};
use palisade_store_postgres::{PostgresConfig, PostgresEngine};
use tracing_subscriber::EnvFilter;

/// The environment variable that must be `1` for `--unfenced` to start.
const UNFENCED_ENV: &str = "PALISADE_TEST_UNFENCED";
/// The environment variable that must be `1` for `--unsynced` to start.
const UNSYNCED_ENV: &str = "PALISADE_TEST_UNSYNCED";
/// The environment variable that must be `1` for `--held-transactions`.
const HELD_TRANSACTIONS_ENV: &str = "PALISADE_TEST_HELD_TRANSACTIONS";

/// The Palisade resource server, for the fault suite.
#[derive(Debug, Parser)]
#[command(name = "resource-server")]
struct Cli {
    #[command(flatten)]
    server: ServerConfig,

    /// Test only: accept every write whatever its generation (needs
    /// PALISADE_TEST_UNFENCED=1).
    #[arg(long)]
    unfenced: bool,

    /// Test only: acknowledge writes without syncing the data files (needs
    /// PALISADE_TEST_UNSYNCED=1).
    #[arg(long)]
    unsynced: bool,

    /// Test only: the PostgreSQL engine's fenced reads hold their lock's
    /// row across round trips (needs PALISADE_TEST_HELD_TRANSACTIONS=1).
    #[arg(long)]
    held_transactions: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    if cli.unfenced && std::env::var(UNFENCED_ENV).as_deref() != Ok("1") {
        eprintln!("resource-server: --unfenced needs {UNFENCED_ENV}=1");
        return ExitCode::FAILURE;
    }
    if cli.unsynced && std::env::var(UNSYNCED_ENV).as_deref() != Ok("1") {
        eprintln!("resource-server: --unsynced needs {UNSYNCED_ENV}=1");
        return ExitCode::FAILURE;
    }
    if cli.held_transactions && std::env::var(HELD_TRANSACTIONS_ENV).as_deref() != Ok("1") {
        eprintln!("resource-server: --held-transactions needs {HELD_TRANSACTIONS_ENV}=1");
        return ExitCode::FAILURE;
    }
    match serve(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "resource-server failed");
            eprintln!("resource-server: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(cli: Cli) -> anyhow::Result<()> {
    let state = if cli.held_transactions {
        held_transactions_state(&cli.server).await?
    } else {
        cli.server.open_state(None)?
    };
    let store = state.store().clone();
    if cli.unsynced {
        tracing::warn!("durability is OFF: writes are acknowledged before any fsync (test only)");
        store.skip_file_sync_unsafe_for_mutation_tests();
    }
    let listener = cli.server.bind().await?;
    let addr = listener.local_addr()?;
    let mut router = app(state);
    if cli.unfenced {
        tracing::warn!("fencing is OFF: every sequencer is rewritten to generation 1 (test only)");
        router = router.layer(axum::middleware::map_request(unfence));
    }
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "palisade-server listening on {addr}")?;
        stdout.flush()?;
    }
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    tracing::info!("shutting down: flushing the store");
    tokio::task::spawn_blocking(move || store.flush()).await??;
    Ok(())
}

/// Rewrites the request's sequencer to generation 1 (keeping its lock and
/// mode), which every mark admits forever. A header that does not parse is
/// left alone for the server to refuse as usual.
async fn unfence(mut request: Request) -> Request {
    let rewritten = request
        .headers()
        .get(Sequencer::HTTP_HEADER)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.parse::<Sequencer>().ok())
        .map(|sequencer| {
            Sequencer::new(
                sequencer.lock().clone(),
                sequencer.mode(),
                Generation::new(1).expect("1 is a valid generation"),
            )
        })
        .and_then(|sequencer| HeaderValue::from_str(&sequencer.to_string()).ok());
    if let Some(value) = rewritten {
        request.headers_mut().insert(Sequencer::HTTP_HEADER, value);
    }
    request
}

/// The server's state over a PostgreSQL engine whose fenced reads hold
/// their lock's row across round trips (the mutation check), with the
/// default limits: what scenario 20 runs with otherwise.
async fn held_transactions_state(config: &ServerConfig) -> anyhow::Result<AppState> {
    let StoreSpec::Postgres { url } = config.store_spec()? else {
        anyhow::bail!("--held-transactions needs --store postgres://...");
    };
    let store_config = config.store_config();
    let engine = PostgresEngine::open(
        PostgresConfig::new(url)
            .with_idempotency_window(store_config.idempotency_window)
            .hold_transactions_unsafe_for_mutation_tests(),
    )
    .await?;
    Ok(AppState::new(Store::with_engine(
        Arc::new(engine),
        store_config,
    )))
}
