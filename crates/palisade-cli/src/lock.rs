//! `palisade lock <name> -- <command>`: take a lock, run a command under
//! it, release it afterwards.
//!
//! Like `etcdctl lock`, with differences that matter for fencing:
//!
//! - the command gets the lock's **sequencer** in `PALISADE_SEQUENCER`, so
//!   it can send it with every write (`palisade put` reads it from there);
//! - when the lease is **lost** while the command runs (the lock service
//!   revoked or expired it, renewals failed, the holder key was deleted),
//!   the command is sent SIGTERM at once and SIGKILL after `--grace`, so it
//!   does not go on working as if it still held the lock. `palisade lock`
//!   then exits with code 7, whatever the command returned;
//! - with a resource server known, the lock's marks are raised to the new
//!   generation before the command starts (`fence.rs`);
//! - if `palisade lock` itself is killed (SIGKILL included), the command
//!   and its process group die with it (Linux; `parent_death.rs`).
//!
//! Progress goes to standard error, which keeps standard output for the
//! command alone.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, ValueEnum};
use nix::sys::signal::Signal;
use palisade_core::{
    Generation, LeaseState, LeaseWatch, Lock, LockError, LockGuard, LockName, Mode,
    format_duration as human, parse_duration,
};
use palisade_lock_any::{AnyGuard, AnyLock, lock_error_text};
use tokio::time::Instant;

use crate::child::{self, Child, Signals};
use crate::exit::{self, Failure};
use crate::fence::FenceArgs;
use palisade_metrics::{Metered, MeteredGuard};

/// The lock mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ModeArg {
    /// A writer: alone.
    Exclusive,
    /// A reader: together with other readers, never with a writer.
    Shared,
}

impl From<ModeArg> for Mode {
    fn from(mode: ModeArg) -> Mode {
        match mode {
            ModeArg::Exclusive => Mode::Exclusive,
            ModeArg::Shared => Mode::Shared,
        }
    }
}

/// Arguments of `palisade lock`.
#[derive(Debug, Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct LockArgs {
    /// The lock to take, e.g. `orders/42`.
    name: String,

    /// The lock mode.
    #[arg(long, value_enum, default_value_t = ModeArg::Exclusive)]
    mode: ModeArg,

    /// Give up after waiting this long for the lock (exit code 6; the
    /// command does not run). `0` takes the lock only if it is free now.
    /// Without it, wait as long as it takes.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    wait: Option<Duration>,

    /// When the lease is lost, how long the command has between SIGTERM
    /// and SIGKILL.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    grace: Duration,

    /// Run the command in this process's process group instead of a new
    /// one. Signals then reach the command only, not the processes it
    /// started; use it for interactive commands that read the terminal.
    /// If `palisade lock` is killed, only the command itself dies with it.
    #[arg(long)]
    no_process_group: bool,

    /// No progress lines (waiting, acquired); errors are still printed.
    #[arg(short, long)]
    quiet: bool,

    /// Serve the lock side's metrics (acquire latency, waits, hand-offs,
    /// lease losses, refusals) at `http://ADDR/metrics` while this runs.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,

    #[command(flatten)]
    backend: crate::service::SessionArgs,

    #[command(flatten)]
    fence: FenceArgs,

    /// The command to run while holding the lock, and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

const EXAMPLES: &str = "\
The command gets PALISADE_SEQUENCER (the sequencer's text form), PALISADE_LOCK,
PALISADE_MODE, PALISADE_GENERATION and PALISADE_LEASE in its environment.
Progress and the sequencer are printed on standard error.

With --server (or PALISADE_SERVER), the lock's marks are raised on that
resource server before the command starts (one line on standard error), so
older holders are refused at once; the command does not run if that fails.

Examples:
  palisade lock --backend etcd --etcd-endpoints 127.0.0.1:2379 \\
      --server http://127.0.0.1:7411 orders/42 -- palisade put orders/42 stock 7
  PALISADE_BACKEND=redis PALISADE_REDIS_URL=redis://127.0.0.1:6379 \\
      palisade lock --wait 30s --grace 5s nightly-report -- ./report.sh

Exit codes: the command's own; 4 if the fence was refused as stale (the lock
service's generations went backwards), 5 if refused otherwise, 1 if the
server could not be reached (the command did not run in these three cases);
6 if the lock was not granted within --wait;
7 if the lease was lost while the command ran; 126/127 if the command could
not be run; 1 on other errors; 128+N if interrupted by signal N while waiting.";

/// When the first "waiting" line is printed, and how often after that.
const FIRST_PROGRESS: Duration = Duration::from_secs(1);
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// How long a best-effort release may take once the lease is lost, and a
/// closing session may take to revoke its lease.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(3);

/// Runs `palisade lock`; returns the exit code.
pub(crate) async fn run(args: LockArgs) -> anyhow::Result<u8> {
    let name = LockName::new(args.name.clone())
        .map_err(|error| anyhow::anyhow!("invalid lock name `{}`: {error}", args.name))?;
    let mode = Mode::from(args.mode);
    // Installed before anything slow, so Ctrl-C while connecting or waiting
    // abandons cleanly instead of killing the process mid-request.
    let mut signals = Signals::install()?;

    // Bound before connecting: a taken address fails at once.
    let metrics = match args.metrics_listen {
        Some(addr) => Some(crate::metrics::serve(addr).await?),
        None => None,
    };

    let mut lock = tokio::select! {
        lock = args.backend.connect() => lock?,
        signal = signals.recv() => return Err(interrupted(signal, &name, "connecting to the lock service for").into()),
    };
    let acquired = match metrics {
        Some(metrics) => {
            let metered = Metered::new(lock, metrics);
            let acquired = acquire(&metered, &name, mode, &args, &mut signals)
                .await
                .map(MeteredGuard::into_inner);
            lock = metered.into_inner();
            acquired
        }
        None => acquire(&lock, &name, mode, &args, &mut signals).await,
    };
    let guard = match acquired {
        Ok(guard) => guard,
        Err(error) => {
            close(lock, true).await;
            return Err(error);
        }
    };

    // `sequencer()` refuses once the lease may have lapsed (a slow grant, a
    // pause right after it): then the command never starts.
    let sequencer = match guard.sequencer() {
        Ok(sequencer) => sequencer,
        Err(error) => return Ok(not_started(&error, guard, lock).await),
    };
    let generation = sequencer.generation();
    tracing::info!(lock = %name, %mode, generation = generation.get(), backend = lock.kind().name(), "lock acquired");
    if !args.quiet {
        say!(
            "palisade: acquired lock `{name}` ({mode}, generation {generation}), sequencer {sequencer}"
        );
    }

    // Before the command starts, raise the marks to this generation, so an
    // older holder paused past its lease is refused from now on.
    let fenced = tokio::select! {
        fenced = args.fence.fence(&sequencer, args.quiet) => fenced,
        signal = signals.recv() => Err(interrupted(signal, &name, "fencing").into()),
    };
    if let Err(error) = fenced {
        release(guard, &name).await;
        close(lock, false).await;
        return Err(error);
    }
    // A slow fence may have outlasted the lease: then the command never
    // starts either.
    if let Err(error) = guard.sequencer() {
        return Ok(not_started(&error, guard, lock).await);
    }

    let mut env = vec![
        ("PALISADE_SEQUENCER", sequencer.to_string()),
        ("PALISADE_LOCK", name.to_string()),
        ("PALISADE_MODE", mode.to_string()),
        ("PALISADE_GENERATION", generation.to_string()),
    ];
    if let Some(lease) = sequencer.lease() {
        env.push(("PALISADE_LEASE", lease.to_owned()));
    }
    // The server just fenced is the one the command's writes should go to.
    if let Some(server) = args.fence.single_server() {
        env.push(("PALISADE_SERVER", server.to_owned()));
    }
    let run = Run {
        command: &args.command,
        env: &env,
        process_group: !args.no_process_group,
        grace: args.grace,
    };
    let holding = (guard.generation(), guard.lease());
    run_held(
        run,
        holding,
        &name,
        lock,
        &mut signals,
        async |ending| match ending {
            Ending::GiveBack => release(guard, &name).await,
            // Best effort: if the lock service still has the hold (the loss was
            // local, e.g. renewals failing), give it back so the next holder
            // need not wait for the TTL.
            Ending::LeaseLost => {
                let _ = tokio::time::timeout(CLEANUP_TIMEOUT, guard.release()).await;
            }
        },
    )
    .await
}

/// The command to run under a hold, and how.
pub(crate) struct Run<'a> {
    pub(crate) command: &'a [OsString],
    pub(crate) env: &'a [(&'a str, String)],
    /// Start it in a process group of its own.
    pub(crate) process_group: bool,
    /// Between SIGTERM and SIGKILL once the lease is lost.
    pub(crate) grace: Duration,
}

/// How a hold ends once its command is done.
pub(crate) enum Ending {
    /// The command exited, or could not be started or watched: give the
    /// hold back.
    GiveBack,
    /// The lease was lost while it ran; the command has been stopped.
    LeaseLost,
}

/// Runs the command under a hold of `name` (its generation and lease),
/// supervised on the lease, then ends the hold with `end` and the session
/// with it; the command's exit code, or [`exit::LEASE_LOST`]. `palisade
/// lock` gives back by releasing, `palisade elect` by resigning.
pub(crate) async fn run_held(
    run: Run<'_>,
    (generation, lease): (Generation, LeaseWatch),
    name: &LockName,
    lock: AnyLock,
    signals: &mut Signals,
    end: impl AsyncFnOnce(Ending),
) -> anyhow::Result<u8> {
    let mut child = match Child::spawn(run.command, run.env, run.process_group) {
        Ok(child) => child,
        Err(failure) => {
            end(Ending::GiveBack).await;
            close(lock, false).await;
            return Err(failure.into());
        }
    };
    tracing::debug!(lock = %name, pid = child.pid(), "command started");
    let outcome = supervise(&mut child, generation, lease, name, run.grace, signals).await;
    if outcome.is_ok() {
        child.disarm();
    }
    let code = match outcome {
        Ok(Outcome::Exited(code)) => {
            tracing::info!(lock = %name, generation = generation.get(), code, "command exited");
            end(Ending::GiveBack).await;
            code
        }
        Ok(Outcome::LeaseLost) => {
            end(Ending::LeaseLost).await;
            exit::LEASE_LOST
        }
        Err(error) => {
            child.signal(Signal::SIGKILL);
            end(Ending::GiveBack).await;
            close(lock, false).await;
            return Err(anyhow::anyhow!("lost track of the command: {error}"));
        }
    };
    close(lock, false).await;
    Ok(code)
}

/// Waits for the lock, printing progress, giving up after `--wait` or on a
/// signal.
async fn acquire<L: Lock>(
    lock: &L,
    name: &LockName,
    mode: Mode,
    args: &LockArgs,
    signals: &mut Signals,
) -> anyhow::Result<L::Guard> {
    if args.wait == Some(Duration::ZERO) {
        let attempt = tokio::select! {
            attempt = lock.try_acquire(name, mode) => attempt,
            signal = signals.recv() => return Err(interrupted(signal, name, "trying to take").into()),
        };
        return match attempt {
            Ok(Some(guard)) => Ok(guard),
            Ok(None) => Err(Failure::new(
                exit::LOCK_NOT_ACQUIRED,
                format!("lock `{name}` is taken (--wait 0 does not wait); the command did not run"),
            )
            .into()),
            Err(error) => Err(acquire_failed(error, name)),
        };
    }

    let started = Instant::now();
    let acquiring = async {
        match args.wait {
            Some(wait) => lock.acquire_timeout(name, mode, wait).await,
            None => lock.acquire(name, mode).await,
        }
    };
    tokio::pin!(acquiring);
    let mut next_progress = started + FIRST_PROGRESS;
    loop {
        tokio::select! {
            result = &mut acquiring => {
                return result.map_err(|error| match error {
                    LockError::Timeout { .. } => Failure::new(
                        exit::LOCK_NOT_ACQUIRED,
                        format!(
                            "lock `{name}` was not granted within {}; the command did not run",
                            human(args.wait.unwrap_or_default())
                        ),
                    )
                    .into(),
                    other => acquire_failed(other, name),
                });
            }
            () = tokio::time::sleep_until(next_progress) => {
                let waited = started.elapsed();
                tracing::debug!(lock = %name, waited_s = waited.as_secs(), "waiting for the lock");
                if !args.quiet {
                    say!("palisade: waiting for lock `{name}` ({} s)", waited.as_secs());
                }
                let periods = waited.as_secs() / PROGRESS_EVERY.as_secs() + 1;
                next_progress = started + PROGRESS_EVERY * u32::try_from(periods).unwrap_or(u32::MAX);
            }
            signal = signals.recv() => {
                // Dropping `acquiring` abandons the wait; the backend removes
                // the queue entry (see `close`).
                return Err(interrupted(signal, name, "waiting for").into());
            }
        }
    }
}

fn acquire_failed(error: LockError, name: &LockName) -> anyhow::Error {
    anyhow::anyhow!("cannot acquire lock `{name}`: {}", lock_error_text(&error))
}

fn interrupted(signal: Signal, name: &LockName, doing: &str) -> Failure {
    Failure::new(
        exit::by_signal(signal as i32),
        format!("interrupted by {signal} while {doing} lock `{name}`; the command did not run"),
    )
}

/// How the command ended.
enum Outcome {
    /// It exited (or was ended by a signal) while the lease held; its code.
    Exited(u8),
    /// The lease was lost while it ran; it has been stopped.
    LeaseLost,
}

/// Waits for the command, forwarding signals, and stops it when the lease
/// is lost: SIGTERM at once, SIGKILL after `grace`.
async fn supervise(
    child: &mut Child,
    generation: Generation,
    mut lease: LeaseWatch,
    name: &LockName,
    grace: Duration,
    signals: &mut Signals,
) -> std::io::Result<Outcome> {
    // Set when the lease is lost: the moment SIGKILL is due.
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status?,
            state = lease.lost(), if kill_at.is_none() => {
                let reason = match state {
                    LeaseState::Lost(reason) => reason.to_string(),
                    LeaseState::Released => "the hold was released".to_owned(),
                    LeaseState::Held { .. } => "the lease ended".to_owned(),
                };
                tracing::warn!(lock = %name, generation = generation.get(), %reason, "lease lost; stopping the command");
                child.signal(Signal::SIGTERM);
                kill_at = Some(Instant::now() + grace);
                say!(
                    "palisade: lease lost on lock `{name}` (generation {generation}): {reason}; sent SIGTERM to the command (SIGKILL after {})",
                    human(grace)
                );
            }
            () = sleep_until_some(kill_at), if kill_at.is_some() && !killed => {
                kill(child, name, grace);
                killed = true;
            }
            signal = signals.recv() => {
                tracing::info!(lock = %name, %signal, "forwarding signal to the command");
                child.signal(signal);
            }
        }
    };
    let Some(kill_at) = kill_at else {
        return Ok(Outcome::Exited(child::exit_code(status)));
    };
    // The command itself has exited; what it started in its process group
    // must not go on either. Wait for it until the grace period is over.
    while !killed && child.group_alive() {
        if Instant::now() >= kill_at {
            kill(child, name, grace);
            killed = true;
        } else {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    tracing::info!(lock = %name, generation = generation.get(), code = child::exit_code(status), killed, "command stopped after lease loss");
    Ok(Outcome::LeaseLost)
}

fn kill(child: &Child, name: &LockName, grace: Duration) {
    tracing::warn!(lock = %name, "grace period over; sending SIGKILL");
    child.signal(Signal::SIGKILL);
    say!(
        "palisade: the command did not exit within {} of SIGTERM; sent SIGKILL",
        human(grace)
    );
}

async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Releases after a normal exit. A failed release is reported, not fatal:
/// the command's exit code is what the caller asked for, and the lock
/// service frees the lock when the lease runs out.
async fn release(guard: AnyGuard, name: &LockName) {
    let generation = guard.generation();
    match tokio::time::timeout(CLEANUP_TIMEOUT, guard.release()).await {
        Ok(Ok(())) => {
            tracing::info!(lock = %name, generation = generation.get(), "lock released");
        }
        Ok(Err(error)) => say!(
            "palisade: releasing lock `{name}` (generation {generation}) failed: {}; it ends with its lease",
            lock_error_text(&error)
        ),
        Err(_elapsed) => say!(
            "palisade: releasing lock `{name}` (generation {generation}) took longer than {}; it ends with its lease",
            human(CLEANUP_TIMEOUT)
        ),
    }
}

/// The lease may have lapsed before the command started (`error` says
/// why): says so, gives the hold back and ends the session; the command
/// never runs. The exit code is [`exit::LEASE_LOST`].
async fn not_started(error: &LockError, guard: AnyGuard, lock: AnyLock) -> u8 {
    say!(
        "palisade: {}; the command did not run",
        lock_error_text(error)
    );
    let _ = tokio::time::timeout(CLEANUP_TIMEOUT, guard.release()).await;
    close(lock, false).await;
    exit::LEASE_LOST
}

/// Ends the session, quietly: by now everything worth saying was said.
pub(crate) async fn close(lock: AnyLock, abandoned_attempt: bool) {
    match tokio::time::timeout(CLEANUP_TIMEOUT, lock.close(abandoned_attempt)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::debug!(%error, "closing the lock session failed"),
        Err(_elapsed) => tracing::debug!("closing the lock session timed out"),
    }
}
