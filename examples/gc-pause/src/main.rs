//! The GC-pause demo: why a lock needs fencing, in one run.
//!
//! Run with: `cargo run -p example-gc-pause`
//!
//! Client A takes a lock, reads a balance, and stops the world for longer
//! than its lease. The lease expires, client B takes the lock with a newer
//! generation and deposits. A wakes and writes the balance it computed
//! before the pause. The story runs twice on the in-process lock backend (a fresh one per run):
//!
//! 1. against a plain store that trusts the lock: A's late write lands and
//!    B's deposit is lost;
//! 2. against Palisade's resource server (sled behind HTTP, started here on
//!    a free port with a temporary directory): A's late write is refused
//!    with 409 stale, and A retries the right way.
//!
//! Exits non-zero if the fenced run ever accepts the stale write or ends
//! with a wrong balance.

mod storage;
mod story;
mod timeline;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use palisade::client::Client;
use palisade::embedded::EmbeddedLockService;
use palisade::server::{ServerConfig, run};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::storage::Storage;
use crate::story::{Report, Timing};
use crate::timeline::Timeline;

/// The GC-pause demo: a paused lock holder's late write, without and with
/// fencing.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Lease TTL of every client, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    ttl_ms: u64,

    /// How long client A is stopped, in milliseconds (must exceed the TTL).
    #[arg(long, default_value_t = 3000)]
    pause_ms: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match demo(&args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("gc-pause demo failed: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs both stories; `Ok(true)` when the fenced one was safe.
async fn demo(args: &Args) -> anyhow::Result<bool> {
    let timing = Timing {
        ttl: Duration::from_millis(args.ttl_ms),
        pause: Duration::from_millis(args.pause_ms),
    };
    anyhow::ensure!(
        timing.pause > timing.ttl,
        "--pause-ms ({}) must exceed --ttl-ms ({}) for the lease to expire during the pause",
        args.pause_ms,
        args.ttl_ms
    );
    println!("Run 1: without fencing (the store applies whatever it is sent)");
    let unfenced = story::run(
        Storage::Unfenced(Arc::new(Mutex::new(0))),
        EmbeddedLockService::new(),
        timing,
        Timeline::new(),
    )
    .await?;
    let unfenced_verdict = verdict_unfenced(&unfenced);
    println!("  verdict: {unfenced_verdict}\n");

    println!("Run 2: with fencing (Palisade resource server checks every sequencer)");
    let data_dir = tempfile::tempdir()?;
    let state = ServerConfig::new(data_dir.path()).open_state(None)?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base_url = format!("http://{}", listener.local_addr()?);
    let (stop_server, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(run(listener, state, async {
        let _ = stopped.await;
    }));
    println!(
        "  (resource server on {base_url}, data in {})",
        data_dir.path().display()
    );
    let fenced = story::run(
        Storage::Fenced(Client::new(&base_url)?),
        EmbeddedLockService::new(),
        timing,
        Timeline::new(),
    )
    .await?;
    let fenced_safe = fenced.stale_write_refused
        && !fenced.stale_write_accepted
        && fenced.lease_lost_signalled
        && fenced.is_correct();
    println!(
        "  verdict: {}",
        if fenced_safe {
            format!(
                "SAFE: A's guard signalled lease lost, A's stale write was refused (409), final balance {} as expected",
                fenced.final_balance
            )
        } else {
            format!(
                "FENCING FAILED: stale write refused = {}, accepted = {}, lease lost signalled = {}, final balance {} (expected {})",
                fenced.stale_write_refused,
                fenced.stale_write_accepted,
                fenced.lease_lost_signalled,
                fenced.final_balance,
                fenced.expected_balance
            )
        }
    );
    let _ = stop_server.send(());
    server.await??;

    println!();
    println!("unfenced: {unfenced_verdict}");
    println!(
        "fenced:   {}",
        if fenced_safe {
            "safe"
        } else {
            "FENCING FAILED"
        }
    );
    Ok(fenced_safe)
}

fn verdict_unfenced(report: &Report) -> String {
    if report.stale_write_accepted && !report.is_correct() {
        format!(
            "LOST UPDATE: final balance {}, expected {}: B's deposit was overwritten by A's stale write",
            report.final_balance, report.expected_balance
        )
    } else {
        format!(
            "anomaly not reproduced this time (final balance {}, expected {}); try a longer --pause-ms",
            report.final_balance, report.expected_balance
        )
    }
}
