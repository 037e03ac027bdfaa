//! `palisade`: the command-line entry point.
//!
//! The lock backend is picked at run time by `palisade-lock-any` (the one
//! place that does); the subcommands:
//!
//! ```text
//! palisade lock orders/42 -- <command>      take a lock, run a command with its sequencer, release
//! palisade put|get|del <lock> <key> ...     the resource server, with the sequencer from the environment
//! palisade marks <lock>                     the lock's high-water marks on the resource server
//! palisade fence <lock>                     raise the marks to the sequencer without writing
//! palisade put|get|del|marks|fence ... --redis-fence URL   the same on data kept in Redis
//! palisade incr <lock> <key> -n -1 --at-least 0 --redis-fence URL   a fenced counter in Redis
//! palisade object put|get|rm ... --location s3://bucket/prefix    objects in S3, fenced at the store
//! palisade locks ls [PREFIX] | show <lock>   who holds a lock, who waits (table or --json)
//! palisade unlock --force <lock> --server U  end a stuck hold and fence it at the servers
//! palisade raise-floor <lock>               lift the lock service's generations above the marks
//! palisade serve --data-dir DIR             run the resource server (or --store SPEC; optionally with a live check)
//! palisade dev [-- bash]                   a throw-away local etcd (or Redis) to try it with
//! palisade keygen --key-id k2               a fresh signing key, as a key ring line
//! palisade completions bash|zsh|fish         a shell completion script
//! palisade man [--out-dir DIR]               manual pages (docs/man/ holds them)
//! ```
//!
//! # Where to start
//!
//! - `lock.rs`: `palisade lock`: acquire with progress, fence, run the
//!   command, stop it when the lease is lost (SIGTERM, then SIGKILL);
//!   `fence.rs` raises the lock's marks on the resource servers before the
//!   command starts; `child.rs` spawns and signals the command.
//! - `data.rs`: `put`, `get`, `del`, `fence`, `marks` over `palisade-client`;
//!   `redis_data.rs`: the same with `--redis-fence` over
//!   `palisade-fence-redis`, and `incr`; `object.rs`: `object put|get|rm`
//!   over `palisade-fence-object`.
//! - `service.rs`: the backend flags of `palisade-lock-any`, refusing the
//!   in-process backend, and the session and signing flags of the
//!   commands that take locks.
//! - `exit.rs`: the exit codes, which are part of the contract
//!   (`docs/cli.md`).
//! - `raise_floor.rs`: `raise-floor`, recovery after a lock service lost
//!   its counter.
//! - `serve.rs`: the resource server with `--live-check etcd|redis`.
//! - `signing.rs`: the lock side's `--sign-key-file`, `--sign-key-id` and
//!   `--issuer` (flattened into the backend flags), and `keygen`.

/// `eprintln!` in one `write(2)`: the command under `palisade lock` shares
/// our stderr, and `eprintln!` writes a formatted line in pieces, so the
/// command's output could land inside one of our lines.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say_line(format!($($arg)*))
    };
}

mod child;
mod completions;
mod data;
mod dev;
mod elect;
mod exit;
mod fence;
mod lock;
mod locks;
mod man;
mod metrics;
mod object;
#[cfg(target_os = "linux")]
mod parent_death;
mod raise_floor;
mod redis_data;
mod serve;
mod service;
mod signing;
mod unlock;

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// The server's allocator (see `palisade-server`'s binary), for `palisade
/// serve`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Palisade: fencing-aware guarded storage.
///
/// Take a lock and run a command under it (`lock`), read and write the
/// resource server with the lock's sequencer (`put`, `get`, `del`,
/// `marks`), or run the resource server (`serve`). Errors are one line on standard error, `palisade: ...`.
#[derive(Debug, Parser)]
#[command(name = "palisade", version = env!("PALISADE_VERSION"), after_help = exit::HELP_TABLE)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Take a lock, run a command with its sequencer, release the lock; stop
    /// the command if the lease is lost.
    Lock(lock::LockArgs),
    /// Campaign in a leader election and run a command while leading (a
    /// hot standby); stop the command if the leadership is lost.
    Elect(elect::ElectArgs),
    /// Show who leads an election (`--watch`: every change).
    Leader(elect::LeaderArgs),
    /// Write a value under a lock's keyspace, with a sequencer.
    Put(data::PutArgs),
    /// Read a value (raw bytes to standard output).
    Get(data::GetArgs),
    /// Delete a key, with a sequencer.
    Del(data::DelArgs),
    /// Show a lock's high-water marks on the resource server.
    Marks(data::MarksArgs),
    /// Raise a lock's marks to the sequencer's generation without writing
    /// (fence on acquire), so older holders are refused from now on.
    Fence(data::FenceArgs),
    /// Add to a counter kept in Redis under a lock's fence
    /// (`--redis-fence`); `-n -1 --at-least 0` never goes below zero.
    Incr(redis_data::IncrArgs),
    /// Write, read and delete objects in S3-compatible storage, fenced at
    /// the store by the lock's sequencer.
    Object(object::ObjectArgs),
    /// See the locks on the lock service: `ls [PREFIX]`, `show NAME`.
    Locks(locks::LocksArgs),
    /// End someone else's hold of a lock (`--force`) and fence it at the
    /// resource servers, so the evicted holder can no longer write.
    Unlock(unlock::UnlockArgs),
    /// Lift the lock service's generation floor above a lock's marks on the
    /// resource server(s): the recovery after the lock service lost its
    /// counter.
    RaiseFloor(raise_floor::RaiseFloorArgs),
    /// Run the resource server (a fenced key-value store over HTTP).
    Serve(serve::ServeArgs),
    /// Start a throw-away local etcd or Redis to try palisade with: print
    /// its environment, or run a command with it (`palisade dev -- bash`).
    Dev(dev::DevArgs),
    /// Print a fresh signing key as a key ring line, `<key id> <hex secret>`.
    Keygen(signing::KeygenArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(completions::CompletionsArgs),
    /// Print the manual page, or write every command's page into a directory.
    Man(man::ManArgs),
    /// Internal: starts `palisade lock`'s command so that it dies with
    /// `palisade lock` (see `parent_death.rs`).
    #[cfg(target_os = "linux")]
    #[command(hide = true)]
    Launch(parent_death::LaunchArgs),
    /// Internal: kills `palisade lock`'s command group if `palisade lock`
    /// dies (see `parent_death.rs`).
    #[cfg(target_os = "linux")]
    #[command(hide = true)]
    Watchdog(parent_death::WatchdogArgs),
}

impl Command {
    /// The log level when `RUST_LOG` is not set. The server narrates at `info`; the client commands stay quiet, because their
    /// standard error is for progress and one-line errors only.
    fn default_log_filter(&self) -> &'static str {
        match self {
            Command::Serve(_) => "info",
            // The fence logs the probe's refusal at `error`; the command's
            // one line already says it.
            Command::Object(_) => "error,palisade_fence_object=off",
            _ => "error",
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The launcher and the watchdog are a few system calls each: no
    // runtime, no logging.
    #[cfg(target_os = "linux")]
    match &cli.command {
        Command::Launch(args) => return parent_death::launch(args),
        Command::Watchdog(args) => return parent_death::watchdog(args),
        _ => {}
    }
    // `block_on` drives the command on this, the main thread; `palisade
    // lock` relies on it (see `parent_death::check_main_thread`).
    // `palisade serve` runs on the server's own runtime (its
    // `--worker-threads`).
    let runtime = match &cli.command {
        Command::Serve(args) => args.runtime(),
        _ => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
    };
    match runtime {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(error) => {
            say!("palisade: cannot start the async runtime: {error}");
            ExitCode::from(exit::ERROR)
        }
    }
}

async fn run(cli: Cli) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new(cli.command.default_log_filter())),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let result = match cli.command {
        Command::Lock(args) => lock::run(args).await,
        Command::Elect(args) => elect::elect(args).await,
        Command::Leader(args) => elect::leader(args).await,
        Command::Put(args) => data::put(args).await.map(|()| exit::OK),
        Command::Get(args) => data::get(args).await.map(|()| exit::OK),
        Command::Del(args) => data::del(args).await.map(|()| exit::OK),
        Command::Marks(args) => data::marks(args).await.map(|()| exit::OK),
        Command::Fence(args) => data::fence(args).await.map(|()| exit::OK),
        Command::Incr(args) => redis_data::incr(args).await.map(|()| exit::OK),
        Command::Object(args) => object::run(args).await.map(|()| exit::OK),
        Command::Locks(args) => locks::run(args).await.map(|()| exit::OK),
        Command::Unlock(args) => unlock::run(args).await.map(|()| exit::OK),
        Command::RaiseFloor(args) => raise_floor::run(args).await.map(|()| exit::OK),
        Command::Serve(args) => serve::run(args).await.map(|()| exit::OK),
        Command::Dev(args) => dev::run(args).await,
        Command::Keygen(args) => signing::keygen(args).map(|()| exit::OK),
        Command::Completions(args) => completions::run(&args).map(|()| exit::OK),
        Command::Man(args) => man::run(&args).map(|()| exit::OK),
        #[cfg(target_os = "linux")]
        // Handled in `main`, before any runtime exists.
        #[cfg(target_os = "linux")]
        Command::Launch(_) | Command::Watchdog(_) => Err(anyhow::anyhow!(
            "internal subcommand run inside the runtime"
        )),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            let (code, line) = exit::describe(&error);
            say!("palisade: {line}");
            ExitCode::from(code)
        }
    }
}

/// Writes `line` and a newline to stderr at once; a line shorter than
/// `PIPE_BUF` (4 KiB) reaches a shared pipe whole.
pub(crate) fn say_line(mut line: String) {
    use std::io::Write as _;
    line.push('\n');
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

#[cfg(test)]
#[path = "../build_revision.rs"]
mod build_revision;

#[cfg(test)]
mod version_tests {
    use super::build_revision::{revision_files, short_revision, version_text};

    /// A source tarball has no `.git`: the version is the crate version alone.
    #[test]
    fn outside_a_checkout_the_version_is_the_crate_version() {
        let dir = tempfile::tempdir().expect("temporary directory");
        assert_eq!(short_revision(dir.path()), None);
        assert!(revision_files(dir.path()).is_empty());
        assert_eq!(version_text("0.1.0", None), "0.1.0");
        assert_eq!(version_text("0.1.0", Some("5f41a9d")), "0.1.0 (5f41a9d)");
    }
}
