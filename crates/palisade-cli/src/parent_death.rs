//! The command must never outlive `palisade lock`.
//!
//! If `palisade lock` dies without a chance to clean up (SIGKILL from the
//! OOM killer, an operator or a container runtime), nobody renews the lease
//! and nobody stops the command when it runs out: the command would go on
//! writing with a sequencer whose lock someone else may soon hold. Two
//! mechanisms, both armed before the command runs a single instruction of
//! its own, make it die with `palisade lock`:
//!
//! 1. **The parent-death signal.** The command is started through a tiny
//!    launcher, `palisade` itself re-executed (hidden `launch`
//!    subcommand), which sets `PR_SET_PDEATHSIG` to SIGKILL on itself,
//!    checks that its parent is still the `palisade lock` that started it
//!    (if that died before the signal was armed, the launcher has been
//!    reparented already), and then `exec`s the command in its place: same
//!    pid, same process group, and the parent-death signal survives `exec`.
//!    The kernel sends it when the *thread* that forked the launcher exits,
//!    so it is forked from the main thread only ([`check_main_thread`]).
//! 2. **A watchdog for the process group.** The parent-death signal
//!    reaches the command only, not what it started (`sh -c 'job & ...'`).
//!    A second re-executed `palisade` (hidden `watchdog` subcommand) holds
//!    the read end of a pipe whose only write end `palisade lock` keeps;
//!    `palisade lock` writes the command's process group id into it. When
//!    `palisade lock` dies, the kernel closes the write end, the watchdog
//!    reads end-of-file and sends SIGKILL to the whole group. Once the
//!    command has finished normally, `palisade lock` disarms the watchdog
//!    with one byte, so background jobs of a command that exited on its
//!    own are left alone, as documented. A pipe rather than a signal,
//!    because end-of-file cannot be lost, does not depend on which thread
//!    started the watchdog, and comes even if `palisade lock` died before
//!    the watchdog began to read. The launcher waits (on a second pipe)
//!    until the watchdog knows the group before it `exec`s the command, so
//!    there is no moment in which the command runs and the group is not
//!    watched.
//!
//! Out of reach: processes that leave the command's process group
//! (`setsid`, daemons that double-fork into a group of their own). On other
//! platforms than Linux there is no parent-death signal and none of this is
//! armed: the command is not protected (docs/cli.md says so).
//!
//! No `unsafe`: descriptors cross `exec` by clearing their close-on-exec
//! flag in the parent, and the child opens them again through
//! `/proc/self/fd` and closes the inherited number.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd as _, OwnedFd, RawFd};
use std::os::unix::process::CommandExt as _;
use std::process::{ExitCode, Stdio};

use clap::Args;
use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use nix::sys::prctl::set_pdeathsig;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg, sigprocmask};
use nix::unistd::{Pid, getpid, getppid, gettid, pipe2};

use crate::exit;

/// The byte that tells the watchdog the command has finished normally.
const DISARM: &[u8] = b"d";
/// The byte that tells the launcher the watchdog knows the group.
const GO: &[u8] = b"g";

/// This binary, as the kernel knows it (even if the file was replaced).
const SELF_EXE: &str = "/proc/self/exe";

/// Refuses to fork from any thread but the main one. The parent-death
/// signal fires when the forking *thread* exits, and a worker thread of a
/// multi-threaded tokio runtime may exit at any time; the main thread lives
/// as long as the process. `palisade lock` runs on the main thread (`main`
/// drives it with `block_on`, and `tokio::process` forks from the calling
/// thread), so this holds unless that changes; if it does, the command
/// does not run unprotected.
pub(crate) fn check_main_thread() -> io::Result<()> {
    if gettid() == getpid() {
        Ok(())
    } else {
        Err(io::Error::other(
            "the command must be started from the main thread, which its parent-death signal is tied to",
        ))
    }
}

/// A pipe whose read end the next child inherits (and no later one: the
/// parent closes it once that child is started).
fn pipe_for_child() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read_end, write_end) = pipe2(OFlag::O_CLOEXEC)?;
    fcntl(&read_end, FcntlArg::F_SETFD(FdFlag::empty()))?;
    Ok((read_end, write_end))
}

/// Opens an inherited descriptor again (close-on-exec, owned) and closes
/// the inherited number, so nothing `exec`ed later inherits it.
fn adopt(fd: RawFd, write: bool) -> io::Result<File> {
    if fd < 3 {
        return Err(io::Error::other(format!("descriptor {fd} is not a pipe")));
    }
    let file = std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .open(format!("/proc/self/fd/{fd}"))?;
    nix::unistd::close(fd)?;
    Ok(file)
}

/// `palisade lock`'s side, between preparing the command and starting it.
#[derive(Debug)]
pub(crate) struct Launch {
    watchdog: Option<Watchdog>,
    go_read: OwnedFd,
    go_write: OwnedFd,
}

impl Launch {
    /// Starts the watchdog (when the command gets a group of its own) and
    /// creates the pipe the launcher waits on.
    pub(crate) fn prepare(group: bool) -> io::Result<Launch> {
        check_main_thread()?;
        // The watchdog first: its pipe's read end must not reach the
        // launcher, nor the launcher's the watchdog.
        let watchdog = if group {
            Some(Watchdog::start()?)
        } else {
            None
        };
        let (go_read, go_write) = pipe_for_child()?;
        Ok(Launch {
            watchdog,
            go_read,
            go_write,
        })
    }

    /// The command to spawn instead of `command`: the launcher, which
    /// `exec`s it once armed.
    pub(crate) fn command(&self, command: &[OsString]) -> tokio::process::Command {
        let mut launcher = tokio::process::Command::new(SELF_EXE);
        launcher
            .arg("launch")
            .arg("--parent")
            .arg(std::process::id().to_string())
            .arg("--go-fd")
            .arg(self.go_read.as_raw_fd().to_string())
            .arg("--")
            .args(command);
        launcher
    }

    /// The launcher runs as `pid`: tell the watchdog the group, then let the
    /// launcher `exec` the command. Returns the watchdog, to be disarmed
    /// once the command has finished.
    pub(crate) fn started(self, pid: Pid, group: bool) -> io::Result<Option<Watchdog>> {
        let Launch {
            mut watchdog,
            go_read,
            go_write,
        } = self;
        drop(go_read);
        if let Some(watchdog) = &mut watchdog {
            debug_assert!(group, "a watchdog only for a group of its own");
            watchdog.watch(pid)?;
        }
        File::from(go_write).write_all(GO)?;
        Ok(watchdog)
    }
}

/// The watchdog process and the write end of its pipe. Dropping it
/// disarms the watchdog.
#[derive(Debug)]
pub(crate) struct Watchdog {
    pipe: Option<File>,
    _process: tokio::process::Child,
}

impl Watchdog {
    /// `palisade watchdog --fd N`, in a process group of its own so a
    /// terminal's Ctrl-C does not reach it.
    fn start() -> io::Result<Watchdog> {
        let (read_end, write_end) = pipe_for_child()?;
        let process = tokio::process::Command::new(SELF_EXE)
            .arg("watchdog")
            .arg("--fd")
            .arg(read_end.as_raw_fd().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        drop(read_end);
        Ok(Watchdog {
            pipe: Some(File::from(write_end)),
            _process: process,
        })
    }

    fn watch(&mut self, group: Pid) -> io::Result<()> {
        match &mut self.pipe {
            Some(pipe) => pipe.write_all(&group.as_raw().to_ne_bytes()),
            None => Err(io::Error::other("the watchdog was disarmed")),
        }
    }

    /// Tells the watchdog the command has finished: it exits without
    /// touching the process group.
    pub(crate) fn disarm(&mut self) {
        if let Some(mut pipe) = self.pipe.take() {
            if let Err(error) = pipe.write_all(DISARM) {
                tracing::warn!(%error, "disarming the watchdog failed");
            }
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.disarm();
    }
}

/// Arguments of the hidden `palisade launch`.
#[derive(Debug, Args)]
pub(crate) struct LaunchArgs {
    /// The pid of the `palisade lock` that started this launcher.
    #[arg(long)]
    parent: i32,
    /// The inherited read end of the pipe that says "go".
    #[arg(long)]
    go_fd: RawFd,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

/// The launcher: arms the parent-death signal, checks the parent, waits
/// for "go", and `exec`s the command. Returns only if it cannot.
pub(crate) fn launch(args: &LaunchArgs) -> ExitCode {
    let refuse = |why: String| {
        say!("palisade: {why}; the command did not run");
        ExitCode::from(exit::CANNOT_RUN)
    };
    if let Err(error) = set_pdeathsig(Signal::SIGKILL) {
        return refuse(format!("cannot set the parent-death signal: {error}"));
    }
    // After arming: a parent that died before is seen here, one that dies
    // later sends the signal.
    if getppid().as_raw() != args.parent {
        return refuse("palisade lock is gone".to_owned());
    }
    let mut go = [0u8; 1];
    match adopt(args.go_fd, false).and_then(|mut pipe| pipe.read_exact(&mut go)) {
        Ok(()) if go == GO => {}
        // End-of-file: `palisade lock` died before the watchdog knew the
        // group (the parent-death signal is on its way).
        _ => return refuse("palisade lock is gone".to_owned()),
    }
    let Some((program, rest)) = args.command.split_first() else {
        return refuse("no command given".to_owned());
    };
    let error = std::process::Command::new(program).args(rest).exec();
    let shown = program.to_string_lossy();
    if error.kind() == io::ErrorKind::NotFound {
        say!("palisade: `{shown}`: command not found");
        ExitCode::from(exit::COMMAND_NOT_FOUND)
    } else {
        say!("palisade: cannot run `{shown}`: {error}");
        ExitCode::from(exit::CANNOT_RUN)
    }
}

/// Arguments of the hidden `palisade watchdog`.
#[derive(Debug, Args)]
pub(crate) struct WatchdogArgs {
    /// The inherited read end of `palisade lock`'s pipe.
    #[arg(long)]
    fd: RawFd,
}

/// The watchdog: reads the command's process group id, then waits. The
/// disarm byte ends it quietly; end-of-file (`palisade lock` is gone
/// without disarming) sends SIGKILL to the group. One thread, blocking
/// reads, no runtime.
pub(crate) fn watchdog(args: &WatchdogArgs) -> ExitCode {
    // Only the pipe decides when this process ends: signals aimed at the
    // whole session must not take it down before it has done its job.
    // Blocked, not ignored: nothing is ever `exec`ed from here, and
    // blocking needs no handler.
    let mut blocked = SigSet::empty();
    for signal in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        blocked.add(signal);
    }
    if sigprocmask(SigmaskHow::SIG_BLOCK, Some(&blocked), None).is_err() {
        return ExitCode::FAILURE;
    }
    let Ok(mut pipe) = adopt(args.fd, false) else {
        return ExitCode::FAILURE;
    };
    let mut group = [0u8; 4];
    if pipe.read_exact(&mut group).is_err() {
        // `palisade lock` ended (or was disarmed) before it started the
        // command: nothing to stop.
        return ExitCode::SUCCESS;
    }
    let group = i32::from_ne_bytes(group);
    if group <= 1 {
        return ExitCode::FAILURE;
    }
    let mut byte = [0u8; 1];
    loop {
        match pipe.read(&mut byte) {
            Ok(1..) => return ExitCode::SUCCESS,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            // End-of-file, or the pipe failed: `palisade lock` can no
            // longer vouch for the command.
            Ok(0) | Err(_) => {
                let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
                return ExitCode::SUCCESS;
            }
        }
    }
}
