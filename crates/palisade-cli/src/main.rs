//! `palisade`: the command-line entry point.
//!
//! The one place that picks a lock backend at runtime. Today it has one
//! subcommand, `serve`: the resource server of `palisade-server`, plus an
//! optional live check (Chubby's CheckSequencer) against etcd or Redis.
//!
//! ```text
//! palisade serve --data-dir /var/lib/palisade --live-check etcd --etcd-endpoints 127.0.0.1:2379
//! palisade serve --data-dir /var/lib/palisade --live-check redis --redis-url redis://127.0.0.1:6379
//! ```

mod demo;
mod serve;

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// Palisade: fencing-aware guarded storage.
#[derive(Debug, Parser)]
#[command(name = "palisade", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the resource server (a fenced key-value store over HTTP).
    Serve(serve::ServeArgs),
    /// Run a demo: `gc-pause` or `flash-sale`.
    Demo(demo::DemoArgs),
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
    let result = match cli.command {
        Command::Serve(args) => serve::run(args).await,
        Command::Demo(args) => demo::run(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("palisade: {error:#}");
            ExitCode::FAILURE
        }
    }
}
