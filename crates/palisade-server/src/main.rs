//! `palisade-server`: the resource server binary.
//!
//! Every setting comes from a flag or an environment variable (see
//! `--help` and docs/http-api.md). Prints `palisade-server listening on
//! ADDR` on standard output once bound; SIGINT/SIGTERM shut it down
//! gracefully.

use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;

use clap::Parser;
use palisade_server::{ServerConfig, run, shutdown_signal};
use tracing_subscriber::EnvFilter;

/// The Palisade resource server: a fenced key-value store over HTTP.
#[derive(Debug, Parser)]
#[command(name = "palisade-server", version)]
struct Cli {
    #[command(flatten)]
    server: ServerConfig,
}

/// glibc's allocator cost a durable write a third more CPU in `malloc` and
/// `free` (docs/benchmarks.md, "A lean way in").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let runtime = match cli.server.runtime() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("palisade-server: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(start(cli.server)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One line, on standard error, where the log goes too: a log
            // event as well would say it twice.
            eprintln!("palisade-server: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn start(config: ServerConfig) -> Result<(), palisade_server::ServerError> {
    let state = config.open_state(None)?;
    let listener = config.bind().await?;
    let addr = listener.local_addr()?;
    {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "palisade-server listening on {addr}");
        let _ = stdout.flush();
    }
    run(listener, state, shutdown_signal()).await
}
