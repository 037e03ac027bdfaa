//! The GC-pause demo: why a lock needs fencing, in one run.
//!
//! Run with: `cargo run -p example-gc-pause`
//!
//! Client A takes a lock, reads a balance, and stops the world for longer
//! than its lease. The lease expires, client B takes the lock with a newer
//! generation and deposits. A wakes and writes the balance it computed
//! before the pause. The story runs twice:
//!
//! 1. against a plain store that trusts the lock: A's late write lands and
//!    B's deposit is lost;
//! 2. against Palisade's resource server (sled behind HTTP, started here on
//!    a free port with a temporary directory): A's late write is refused
//!    with 409 stale, and A retries the right way.
//!
//! With no flags it runs on the in-process lock backend and needs no
//! server. Other ways to run it:
//!
//! ```text
//! cargo run -p example-gc-pause -- --backend etcd --etcd-endpoints 127.0.0.1:2379
//! cargo run -p example-gc-pause -- --backend redis --redis-url redis://127.0.0.1:6379 --pause sigstop
//! cargo run -p example-gc-pause -- --help
//! ```
//!
//! It prints both timelines, writes them as an SVG picture (the path is
//! printed), and exits 1 if the fenced run ever accepts the stale write or
//! ends with a wrong balance (2 if it could not run).

use std::process::ExitCode;

use clap::Parser;
use palisade_demo::{ChildLauncher, GcPauseArgs, gc_pause};
use tracing_subscriber::EnvFilter;

/// The GC-pause demo: a paused lock holder's late write, without and with
/// fencing.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    demo: GcPauseArgs,

    /// Internal: run as one of the demo's client processes.
    #[arg(long, hide = true)]
    demo_child: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    if let Some(spec) = cli.demo_child {
        return match palisade_demo::run_child(&spec).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("gc-pause client process failed: {error}");
                ExitCode::FAILURE
            }
        };
    }
    let launcher = match ChildLauncher::current_exe(["--demo-child"]) {
        Ok(launcher) => launcher,
        Err(error) => {
            eprintln!("gc-pause demo failed: {error}");
            return ExitCode::from(2);
        }
    };
    match gc_pause::run(&cli.demo, &launcher).await {
        Ok(report) => ExitCode::from(report.exit_code()),
        Err(error) if error.is_usage() => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
        Err(error) => {
            eprintln!("gc-pause demo failed: {error}");
            ExitCode::from(2)
        }
    }
}
