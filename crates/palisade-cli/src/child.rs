//! The command `palisade lock` runs: spawning it, signalling it, and the
//! signals `palisade lock` itself receives.
//!
//! The command runs in a **process group of its own** (unless
//! `--no-process-group`), and every signal goes to the whole group. This
//! is what makes `sh -c '...'` work: a shell runs its commands as children
//! and runs a `trap` only after the current one finishes, so a SIGTERM to
//! the shell alone would wait behind a `sleep 600`. Signalling the group
//! reaches the shell and everything it started.
//!
//! On Linux the command never outlives `palisade lock`, however that dies:
//! see `parent_death.rs`.

use std::ffi::OsString;
use std::io;
use std::process::ExitStatus;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};

use crate::exit::{self, Failure};

/// The running command.
#[derive(Debug)]
pub(crate) struct Child {
    child: tokio::process::Child,
    /// The command's pid, which is also its process group id when `group`.
    pid: Pid,
    /// Whether the command leads its own process group, so signals go to
    /// the group (the command and everything it started).
    group: bool,
    /// Kills the group if `palisade lock` dies first; disarmed once the
    /// command has finished.
    #[cfg(target_os = "linux")]
    watchdog: Option<crate::parent_death::Watchdog>,
}

impl Child {
    /// Starts `command` (program and arguments) with `env` added to this
    /// process's environment. Standard input, output and error are
    /// inherited.
    ///
    /// A command that cannot be started is a [`Failure`] with the codes of
    /// `env` and `timeout`: 127 when it does not exist, 126 otherwise.
    pub(crate) fn spawn(
        command: &[OsString],
        env: &[(&str, String)],
        group: bool,
    ) -> Result<Child, Failure> {
        #[cfg(not(target_os = "linux"))]
        let (program, args) = command
            .split_first()
            .ok_or_else(|| Failure::new(exit::USAGE, "no command given after `--`"))?;
        #[cfg(target_os = "linux")]
        if command.is_empty() {
            return Err(Failure::new(exit::USAGE, "no command given after `--`"));
        }
        #[cfg(target_os = "linux")]
        let launch = crate::parent_death::Launch::prepare(group).map_err(cannot_protect)?;
        // On Linux a launcher runs first and `exec`s the command once it
        // cannot outlive `palisade lock` (see `parent_death.rs`): same pid,
        // same process group.
        #[cfg(target_os = "linux")]
        let mut process = launch.command(command);
        #[cfg(not(target_os = "linux"))]
        let mut process = tokio::process::Command::new(program);
        #[cfg(not(target_os = "linux"))]
        process.args(args);
        for (key, value) in env {
            process.env(key, value);
        }
        if group {
            process.process_group(0);
        }
        // On Linux this starts the launcher; a command that cannot be run
        // is reported by the launcher itself, with the same codes.
        #[cfg(target_os = "linux")]
        let child = process.spawn().map_err(cannot_protect)?;
        #[cfg(not(target_os = "linux"))]
        let child = process.spawn().map_err(|error| {
            let shown = program.to_string_lossy();
            match error.kind() {
                io::ErrorKind::NotFound => Failure::new(
                    exit::COMMAND_NOT_FOUND,
                    format!("`{shown}`: command not found"),
                ),
                _ => Failure::new(exit::CANNOT_RUN, format!("cannot run `{shown}`: {error}")),
            }
        })?;
        let pid = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .map(Pid::from_raw)
            .ok_or_else(|| {
                Failure::new(
                    exit::CANNOT_RUN,
                    "the command exited before it could be watched",
                )
            })?;
        #[cfg(target_os = "linux")]
        let watchdog = launch.started(pid, group).map_err(cannot_protect)?;
        Ok(Child {
            child,
            pid,
            group,
            #[cfg(target_os = "linux")]
            watchdog,
        })
    }

    /// The command has finished (and, after a lease loss, its group too):
    /// from now on `palisade lock` dying must not touch what is left of the
    /// group (background jobs of a command that exited on its own).
    pub(crate) fn disarm(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(watchdog) = &mut self.watchdog {
            watchdog.disarm();
        }
    }

    /// The command's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid.as_raw().unsigned_abs()
    }

    /// Sends `signal` to the command (its whole process group when it has
    /// one). A command that is already gone is not an error.
    pub(crate) fn signal(&self, signal: Signal) {
        let sent = if self.group {
            killpg(self.pid, signal)
        } else {
            kill(self.pid, signal)
        };
        match sent {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(error) => {
                tracing::warn!(pid = self.pid.as_raw(), %signal, %error, "signalling the command failed");
            }
        }
    }

    /// Whether anything of the command's process group is still there (a
    /// background job of a shell that has exited, say). Always `false`
    /// without a group of its own: then only the command itself is ours.
    pub(crate) fn group_alive(&self) -> bool {
        self.group && killpg(self.pid, None).is_ok()
    }

    /// Waits for the command to exit. Cancel-safe.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.child.wait().await
    }
}

#[cfg(target_os = "linux")]
fn cannot_protect(error: io::Error) -> Failure {
    Failure::new(
        exit::CANNOT_RUN,
        format!(
            "cannot make sure the command dies with palisade lock: {error}; the command did not run"
        ),
    )
}

/// The exit code that reports `status` the way a shell would: the code, or
/// 128 + the signal that ended it.
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(exit::ERROR),
        (None, Some(signal)) => exit::by_signal(signal),
        (None, None) => exit::ERROR,
    }
}

/// The signals `palisade lock` handles instead of dying: SIGINT, SIGTERM
/// and SIGHUP. While waiting for the lock they abandon the wait; while the
/// command runs they are forwarded to it.
#[derive(Debug)]
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers. From here on these signals no longer end
    /// the process by themselves.
    pub(crate) fn install() -> io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal received. Cancel-safe.
    pub(crate) async fn recv(&mut self) -> Signal {
        tokio::select! {
            Some(()) = self.interrupt.recv() => Signal::SIGINT,
            Some(()) = self.terminate.recv() => Signal::SIGTERM,
            Some(()) = self.hangup.recv() => Signal::SIGHUP,
            else => std::future::pending().await,
        }
    }
}
