//! `guarded-service`: an inventory service fenced by `palisade-guard`.
//!
//! Run with: `cargo run -p example-guarded-service -- --data-dir /tmp/inventory`

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use example_guarded_service::{AppState, Options, run};
use palisade_core::{KeyRing, Verifier};
use tracing_subscriber::EnvFilter;

/// An inventory service whose writes must carry a current Palisade
/// sequencer for lock `items/<sku>`.
#[derive(Debug, Parser)]
#[command(name = "guarded-service", version)]
struct Args {
    /// Where the service keeps its sled database (items, ledger, marks).
    #[arg(long, env = "GUARDED_SERVICE_DATA_DIR")]
    data_dir: PathBuf,
    /// The address to listen on (`:0` picks a free port).
    #[arg(long, env = "GUARDED_SERVICE_LISTEN", default_value = "127.0.0.1:7420")]
    listen: String,
    /// Require signed sequencers: a key ring file, one `<key id> <hex
    /// secret>` per line.
    #[arg(long, env = "GUARDED_SERVICE_KEYS_FILE")]
    keys_file: Option<PathBuf>,
    /// With `--keys-file`: accept only sequencers from this issuer (may be
    /// given several times).
    #[arg(long, requires = "keys_file")]
    issuer: Vec<String>,
    /// Refuse a generation more than this far above an item's mark.
    #[arg(long, env = "GUARDED_SERVICE_MAX_RAISE")]
    max_raise: Option<u64>,
}

fn verifier(args: &Args) -> anyhow::Result<Option<Verifier>> {
    let Some(path) = &args.keys_file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the key ring {}", path.display()))?;
    let keys: KeyRing = text
        .parse()
        .with_context(|| format!("parsing the key ring {}", path.display()))?;
    anyhow::ensure!(
        !keys.is_empty(),
        "the key ring {} has no keys",
        path.display()
    );
    let mut verifier = Verifier::from_keys(keys);
    for issuer in &args.issuer {
        verifier = verifier.with_issuer(issuer)?;
    }
    Ok(Some(verifier))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let options = Options {
        verifier: verifier(&args)?,
        max_raise: args.max_raise,
    };
    let signatures = options.verifier.is_some();
    let state = AppState::open(&args.data_dir, options)
        .with_context(|| format!("opening {}", args.data_dir.display()))?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let address = listener.local_addr()?;
    // One line on stdout, so scripts and tests learn a port chosen with :0.
    println!("guarded-service listening on {address}");
    tracing::info!(%address, signatures, "serving");
    run(listener, state, shutdown_signal()).await?;
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
