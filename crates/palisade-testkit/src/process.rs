//! Child processes for tests: free ports, kill-on-drop, pause/resume.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// A free TCP port on 127.0.0.1, as chosen by the kernel.
///
/// The port is free when this returns; another process could take it before
/// the caller binds it, so spawners retry on a bind failure.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("binding 127.0.0.1:0 must work on a test machine")
}

/// Finds `binary` on `PATH`.
pub fn find_binary(binary: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(binary))
        .find(|candidate| candidate.is_file())
}

/// Whether a missing server is a failure rather than a skip: under CI (`CI`
/// set) and under the README's test command (`PALISADE_REQUIRE_SERVERS` set).
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some() || std::env::var_os("PALISADE_REQUIRE_SERVERS").is_some()
}

/// Finds `binary` for a test, or explains why the test is skipped.
///
/// Under CI or the README's test command (see [`in_ci`]) a missing binary panics: the test command installs
/// everything, so a missing server there is a broken setup. Locally it
/// prints `skipped: no <binary>` and returns `None`, so the caller returns
/// early instead of passing quietly.
pub fn require_binary(binary: &str) -> Option<PathBuf> {
    match find_binary(binary) {
        Some(path) => Some(path),
        None if in_ci() => {
            panic!("`{binary}` is not installed but CI is set; run the README's test command")
        }
        None => {
            eprintln!(
                "skipped: no {binary} on PATH (install it, or run the README's test command)"
            );
            None
        }
    }
}

/// Waits until something accepts TCP connections on `addr`.
pub fn wait_for_tcp(addr: SocketAddr, timeout: Duration) -> io::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("nothing listening on {addr} after {timeout:?}: {e}"),
                ));
            }
            // Waiting for a process we started to open its port: there is no
            // event to wait on, so poll with a short, bounded period.
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// A child process that is killed (SIGKILL, by PID) and reaped on drop.
#[derive(Debug)]
pub struct ChildProcess {
    name: String,
    child: Child,
    log: Option<PathBuf>,
}

impl ChildProcess {
    /// Spawns `command`; `name` is used in messages, `log` (if the command
    /// writes one) is printed when the process dies unexpectedly.
    pub fn spawn(name: &str, command: &mut Command, log: Option<&Path>) -> io::Result<Self> {
        let child = command
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot start {name}: {e}")))?;
        Ok(ChildProcess {
            name: name.to_owned(),
            child,
            log: log.map(Path::to_path_buf),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: Signal) -> io::Result<()> {
        send_signal(self.pid(), signal)
    }

    /// Pauses the process (SIGSTOP), as a long GC pause would.
    pub fn pause(&self) -> io::Result<()> {
        self.signal(Signal::SIGSTOP)
    }

    /// Resumes a paused process (SIGCONT).
    pub fn resume(&self) -> io::Result<()> {
        self.signal(Signal::SIGCONT)
    }

    /// Kills the process with SIGKILL and reaps it.
    pub fn kill(&mut self) -> io::Result<()> {
        match self.child.kill() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {} // already exited
            Err(e) => return Err(e),
        }
        self.child.wait().map(|_| ())
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The last `max_bytes` of the log file, for failure messages.
    pub fn log_tail(&self, max_bytes: usize) -> String {
        let Some(log) = &self.log else {
            return String::new();
        };
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let start = text.len().saturating_sub(max_bytes);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        format!(
            "--- last lines of {} log ({}) ---\n{}",
            self.name,
            log.display(),
            &text[start..]
        )
    }

    /// Access to the underlying child (stdin/stdout pipes, exit status).
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        // A stopped process ignores nothing: SIGKILL works on it too, but
        // resume first so the kernel reaps it promptly.
        let _ = self.resume();
        let _ = self.kill();
    }
}

/// Sends `signal` to process `pid` (a process this test started).
pub fn send_signal(pid: u32, signal: Signal) -> io::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?;
    nix::sys::signal::kill(Pid::from_raw(pid), signal).map_err(io::Error::from)
}
