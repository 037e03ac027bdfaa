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
//! With no flags it runs on the in-process lock backend, needs no server,
//! and compiles no etcd, Redis or SQL client. Each of those is a cargo
//! feature of this crate (`etcd`, `redis`, `sql`), asked for with the
//! backend it runs:
//!
//! ```text
//! cargo run -p example-gc-pause --features etcd -- --backend etcd --etcd-endpoints 127.0.0.1:2379
//! cargo run -p example-gc-pause --features redis -- --backend redis://127.0.0.1:6379 --pause sigstop
//! cargo run -p example-gc-pause --features sql -- --backend postgres --database-url postgres://postgres@127.0.0.1:5432/postgres
//! cargo run -p example-gc-pause -- --help
//! ```
//!
//! It prints both timelines, writes them as an SVG picture (the path is
//! printed), and exits 1 if the fenced run ever accepts the stale write or
//! ends with a wrong balance (2 if it could not run).

use std::process::ExitCode;

use clap::Parser;
use palisade_demo::{GcPauseArgs, gc_pause};

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
    let cli = Cli::parse();
    palisade_demo::host_main("gc-pause", cli.demo_child, |launcher| async move {
        gc_pause::run(&cli.demo, &launcher)
            .await
            .map(|report| report.exit_code())
    })
    .await
}
