//! The `main` of a binary that hosts a demo (`examples/gc-pause`,
//! `examples/flash-sale`): the same few steps for each.

use std::future::Future;
use std::process::ExitCode;

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::{ChildLauncher, DemoError};

/// Runs a demo binary: logs to stderr at `error` unless `RUST_LOG` says
/// otherwise; when started as one of the demo's own client processes
/// (`child_spec`, from a hidden `--demo-child` flag), plays that client;
/// otherwise runs `demo` with a launcher that re-runs this binary with
/// `--demo-child`, and maps its outcome to the exit code: the report's
/// code (0 safe, 1 fencing failed), or 2 when it could not run.
pub async fn host_main<F, Fut>(name: &str, child_spec: Option<String>, demo: F) -> ExitCode
where
    F: FnOnce(ChildLauncher) -> Fut,
    Fut: Future<Output = Result<u8, DemoError>>,
{
    // `RUST_LOG` as `target=level` directives (`Targets`: no regex engine
    // to compile for a demo).
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|directives| directives.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::ERROR));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .finish()
        .with(filter)
        .init();
    if let Some(spec) = child_spec {
        return match crate::run_child(&spec).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("{name} client process failed: {error}");
                ExitCode::FAILURE
            }
        };
    }
    let launcher = match ChildLauncher::current_exe(["--demo-child"]) {
        Ok(launcher) => launcher,
        Err(error) => {
            eprintln!("{name} demo failed: {error}");
            return ExitCode::from(2);
        }
    };
    match demo(launcher).await {
        Ok(code) => ExitCode::from(code),
        Err(error) if error.is_usage() => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
        Err(error) => {
            eprintln!("{name} demo failed: {error}");
            ExitCode::from(2)
        }
    }
}
