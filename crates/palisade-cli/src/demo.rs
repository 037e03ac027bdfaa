//! `palisade demo gc-pause|flash-sale`: the demos of `palisade-demo`, with
//! the same flags as `cargo run -p example-gc-pause` and
//! `cargo run -p example-flash-sale`.
//!
//! The exit code is 0 when the fenced run was safe, 1 when it accepted a
//! stale write or oversold (or the demo could not run), 2 for flags that
//! cannot work together.

use clap::{Args, Subcommand};
use palisade_demo::{ChildLauncher, DemoError, FlashSaleArgs, GcPauseArgs, flash_sale, gc_pause};

use crate::exit::{self, Failure};

/// Arguments of `palisade demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    #[command(subcommand)]
    which: Which,
}

#[derive(Debug, Subcommand)]
enum Which {
    /// A lock holder pauses past its lease; its late write is refused. Runs
    /// twice, without and with fencing, and draws the timeline as SVG.
    GcPause(GcPauseArgs),
    /// Many buyers, paused lock holders: oversold without fencing, never
    /// with it. Three runs side by side.
    FlashSale(FlashSaleArgs),
    /// Internal: one of the demos' client processes.
    #[command(hide = true)]
    Child {
        /// The client's specification (JSON), written by the demo.
        spec: String,
    },
}

pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    // Client processes re-run this binary as `palisade demo child <spec>`.
    let launcher = || ChildLauncher::current_exe(["demo", "child"]).map_err(into_anyhow);
    match args.which {
        Which::GcPause(args) => {
            let report = gc_pause::run(&args, &launcher()?)
                .await
                .map_err(into_anyhow)?;
            if !report.fenced_safe() {
                anyhow::bail!("fencing failed: {}", report.fenced.verdict());
            }
        }
        Which::FlashSale(args) => {
            let report = flash_sale::run(&args, &launcher()?)
                .await
                .map_err(into_anyhow)?;
            if !report.fenced_safe() {
                anyhow::bail!("fencing failed: {}", report.lock_with_fencing.verdict());
            }
        }
        Which::Child { spec } => palisade_demo::run_child(&spec).await.map_err(into_anyhow)?,
    }
    Ok(())
}

/// Usage errors keep the usage exit code; everything else is an error.
fn into_anyhow(error: DemoError) -> anyhow::Error {
    if error.is_usage() {
        anyhow::Error::new(Failure::new(exit::USAGE, error.to_string()))
    } else {
        anyhow::Error::new(error).context("demo")
    }
}
