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

/// A port on 127.0.0.1 that refuses every connection for as long as this
/// value lives: a socket is bound to it and never listens, so a connection
/// gets a reset, and no server (another test's, started meanwhile) can
/// take the port, as it could one [`free_port`] returned.
#[derive(Debug)]
pub struct ClosedPort {
    _socket: std::os::fd::OwnedFd,
    port: u16,
}

impl ClosedPort {
    /// Binds a port chosen by the kernel, without listening.
    pub fn new() -> ClosedPort {
        use nix::sys::socket::{
            AddressFamily, SockFlag, SockType, SockaddrIn, bind, getsockname, socket,
        };
        let socket = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .expect("a TCP socket");
        bind(
            std::os::fd::AsRawFd::as_raw_fd(&socket),
            &SockaddrIn::new(127, 0, 0, 1, 0),
        )
        .expect("binding 127.0.0.1:0 must work on a test machine");
        let address: SockaddrIn =
            getsockname(std::os::fd::AsRawFd::as_raw_fd(&socket)).expect("the bound address");
        ClosedPort {
            _socket: socket,
            port: address.port(),
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Default for ClosedPort {
    fn default() -> ClosedPort {
        ClosedPort::new()
    }
}

/// Finds `binary` on `PATH`.
pub fn find_binary(binary: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(binary))
        .find(|candidate| candidate.is_file())
}

/// The Debian package that provides `binary`, for install hints.
fn debian_package(binary: &str) -> &str {
    match binary {
        "etcd" => "etcd-server",
        "etcdctl" => "etcd-client",
        "redis-server" => "redis-server",
        "redis-cli" => "redis-tools",
        "faketime" => "faketime",
        "chromedriver" => "chromium-driver",
        "fiu-run" | "fiu-ctrl" => "fiu-utils",
        "xfs_io" | "mkfs.xfs" => "xfsprogs",
        "mkfs.ext4" => "e2fsprogs",
        "mount" | "umount" | "losetup" => "mount",
        other => other,
    }
}

/// The message a test fails with when `what` is missing.
pub fn install_hint(what: &str, package: &str) -> String {
    format!(
        "{what} is not installed: run the README's test command (scripts/test.sh), \
         which installs everything the tests need, or `apt-get install {package}`"
    )
}

/// Finds `binary` for a test, or fails the test saying how to install it.
///
/// A test that cannot run must not report success, so there is no skip: a
/// missing server fails with an install hint (the README's test command
/// installs every binary the tests use).
///
/// # Panics
///
/// When `binary` is not on `PATH`.
pub fn require_binary(binary: &str) -> PathBuf {
    find_binary(binary).unwrap_or_else(|| {
        panic!(
            "{}",
            install_hint(&format!("`{binary}`"), debian_package(binary))
        )
    })
}

/// Fails the test unless it runs as root, saying why it needs to.
///
/// # Panics
///
/// When the effective user is not root.
pub fn require_root(why: &str) {
    assert!(
        nix::unistd::geteuid().is_root(),
        "{why} needs root: run the README's test command (scripts/test.sh) as root, \
         as CI does"
    );
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

/// The processes whose parent is `pid`, from `/proc` (empty when `pid` is
/// gone).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| proc_stat(*child).is_some_and(|(_, parent)| parent == pid))
        .collect()
}

/// Whether process `pid` has ended: no longer in `/proc`, or a zombie
/// waiting for its parent to reap it.
pub fn is_gone(pid: u32) -> bool {
    proc_stat(pid).is_none_or(|(state, _)| state == 'Z' || state == 'X')
}

/// Waits until every process in `pids` has ended (see [`is_gone`]).
///
/// A process killed with SIGKILL ends when the kernel next schedules it;
/// there is no event to wait on for a process that is not our child, so
/// poll with a short, bounded period.
pub fn wait_gone(pids: &[u32], timeout: Duration) -> io::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|pid| !is_gone(*pid)).collect();
        if alive.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("processes {alive:?} still run after {timeout:?}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `(state, parent pid)` of process `pid`, from `/proc/<pid>/stat`.
fn proc_stat(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces:
    // the fields after it start after the last ')'.
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}

/// Sends `signal` to process `pid` (a process this test started).
pub fn send_signal(pid: u32, signal: Signal) -> io::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?;
    nix::sys::signal::kill(Pid::from_raw(pid), signal).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A missing server fails the test that needs it, saying how to
    /// install it and naming the Debian package; it never returns a value
    /// a test could skip on.
    #[test]
    fn a_missing_binary_fails_the_test_with_an_install_hint() {
        let hint = std::panic::catch_unwind(|| require_binary("palisade-no-such-server"))
            .expect_err("a missing binary must panic");
        let message = hint
            .downcast_ref::<String>()
            .expect("the panic carries a formatted message");
        assert!(
            message.contains("is not installed: run the README's test command"),
            "{message}"
        );
        assert!(
            message.contains("apt-get install palisade-no-such-server"),
            "{message}"
        );
        assert_eq!(debian_package("etcd"), "etcd-server");
        assert_eq!(debian_package("redis-cli"), "redis-tools");
    }

    #[test]
    fn children_are_found_and_a_killed_process_is_gone() {
        let mut parent = ChildProcess::spawn(
            "sh",
            Command::new("sh").args(["-c", "sleep 60 & wait"]),
            None,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let child = loop {
            if let Some(child) = children_of(parent.pid()).first() {
                break *child;
            }
            assert!(Instant::now() < deadline, "sh never started its sleep");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(!is_gone(child));
        send_signal(child, Signal::SIGKILL).unwrap();
        wait_gone(&[child], Duration::from_secs(30)).unwrap();
        parent.kill().unwrap();
        assert!(is_gone(parent.pid()));
    }

    #[test]
    fn an_installed_binary_is_found() {
        assert!(require_binary("sh").is_file());
    }
}

/// One member of a test cluster (etcd, ZooKeeper): its fixed identity
/// `spec` (ports, data directory), kept across restarts, and its process
/// while it runs. The clusters differ in how they start a member and ask
/// it whether it serves, not in how they kill, pause or wait for it.
#[derive(Debug)]
pub(crate) struct Member<S> {
    pub(crate) spec: S,
    pub(crate) process: Option<ChildProcess>,
}

impl<S> Member<S> {
    pub(crate) fn is_running(&mut self) -> bool {
        self.process.as_mut().is_some_and(ChildProcess::is_running)
    }

    /// Kills the member with SIGKILL (`kill -9`); its spec stays for a
    /// restart.
    pub(crate) fn kill(&mut self) -> io::Result<()> {
        match self.process.take() {
            Some(mut process) => process.kill(),
            None => Ok(()),
        }
    }

    /// The running process, for SIGSTOP and SIGCONT.
    pub(crate) fn running(&self) -> io::Result<&ChildProcess> {
        self.process
            .as_ref()
            .ok_or_else(|| io::Error::other("this member is not running"))
    }
}

/// Waits until `serves` says yes for every member, failing early if one
/// exits; `name` names a member in the errors (`etcd m1`, `zookeeper 2`).
pub(crate) fn wait_serving<S>(
    members: &mut [Member<S>],
    timeout: Duration,
    name: impl Fn(&S) -> String,
    serves: impl Fn(&S) -> bool,
) -> io::Result<()> {
    let deadline = Instant::now() + timeout;
    for member in members.iter_mut() {
        loop {
            if !member.is_running() {
                return Err(io::Error::other(format!(
                    "{} exited during start-up",
                    name(&member.spec)
                )));
            }
            if serves(&member.spec) {
                break;
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} not serving after {timeout:?}", name(&member.spec)),
                ));
            }
            // A starting server announces nothing outside: ask it again
            // with a short, bounded period.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// Asks `probe` until it answers, every 50 ms for at most `timeout`: for
/// what a server announces to no outside observer (an election's end).
/// The error says there was no `what` after `timeout`.
pub(crate) fn poll_until<T>(
    timeout: Duration,
    what: &str,
    mut probe: impl FnMut() -> Option<T>,
) -> io::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = probe() {
            return Ok(found);
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no {what} after {timeout:?}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
