//! Real ZooKeeper servers for tests: one standalone server
//! ([`ZooKeeperServer`]) or a 3-member ensemble ([`ZooKeeperEnsemble`]), on
//! loopback.
//!
//! Each member gets free ports on 127.0.0.1 (client, quorum, election), a
//! data directory with its `myid` inside a [`TempDir`], a `zoo.cfg` and a
//! log file beside it, the admin server off, and no cap on connections
//! from one address (ZooKeeper's default is 60; a benchmark queues 200
//! sessions, each a connection of its own). Members run
//! `zkServer.sh start-foreground`, which execs java, so the PID started is
//! the server's; they are killed by that PID when their handle drops (see
//! [`ChildProcess`]), never by name.
//!
//! The timing is the field notes' (`tickTime=500`): sessions may last from
//! 1 s to 60 s, a member answers `ruok` about 2 s after it starts on a
//! loaded machine, and an ensemble elects a new leader within a few
//! seconds of losing one. Empty container nodes are reaped every second
//! (ZooKeeper's default is a minute), so tests meet a lock directory that
//! was deleted and created again as often as production does over days.
//!
//! [`ZooKeeperServer::start`] honours [`CONNECT_ENV`]: when it is set,
//! tests use that ZooKeeper instead of spawning one, and the fault methods
//! report that they cannot act on it. [`ZooKeeperEnsemble`] always spawns
//! its own members, because its tests kill and restart them.
//!
//! Both fail the test with an install hint when ZooKeeper or Java is
//! missing: a test never passes by skipping.
//!
//! ```no_run
//! use palisade_testkit::zookeeper::ZooKeeperServer;
//!
//! let zookeeper = ZooKeeperServer::start();
//! let connect: String = zookeeper.connect_string(); // "127.0.0.1:PORT"
//! # drop(connect);
//! ```

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use crate::process::{self, ChildProcess};

/// Environment variable naming an external ZooKeeper to use instead of
/// spawning one: a connect string, `host:port[,host:port...]`.
pub const CONNECT_ENV: &str = "PALISADE_ZOOKEEPER";

/// Where Debian's `zookeeper` package puts the start script.
pub const ZK_SERVER_SCRIPT: &str = "/usr/share/zookeeper/bin/zkServer.sh";

/// The packages the install hint names.
const PACKAGES: &str = "--no-install-recommends zookeeper default-jre-headless";

/// How long a member may take to serve after it was started: the JVM's
/// start on a loaded 2-core machine, and for an ensemble the first
/// election.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How many times a spawn is retried with fresh ports when a member exits
/// at once (another process took a port between choosing and binding it).
const SPAWN_ATTEMPTS: usize = 3;

/// ZooKeeper's tick: sessions may last 2 to 120 ticks (see `zoo_cfg`).
pub const TICK: Duration = Duration::from_millis(500);

/// The ZooKeeper start script, or a failed test saying how to install it.
///
/// # Panics
///
/// When the script or `java` is missing.
pub fn require_zookeeper() -> PathBuf {
    let script = PathBuf::from(ZK_SERVER_SCRIPT);
    assert!(
        script.is_file(),
        "{}",
        process::install_hint("ZooKeeper (`zkServer.sh`)", PACKAGES)
    );
    assert!(
        process::find_binary("java").is_some(),
        "{}",
        process::install_hint("Java (`java`)", PACKAGES)
    );
    script
}

/// One member's fixed identity, kept so the member can be restarted with
/// the same id, ports and data directory.
#[derive(Debug)]
struct MemberSpec {
    /// ZooKeeper's `myid`, 1-based.
    id: usize,
    client_port: u16,
    quorum_port: u16,
    election_port: u16,
    dir: PathBuf,
}

impl MemberSpec {
    fn new(root: &Path, id: usize) -> Self {
        MemberSpec {
            id,
            client_port: process::free_port(),
            quorum_port: process::free_port(),
            election_port: process::free_port(),
            dir: root.join(format!("zk{id}")),
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("zookeeper.log")
    }

    fn client_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.client_port))
    }

    /// Writes `zoo.cfg` and `myid` (again: a wipe removes the data
    /// directory) for an ensemble of `members` (empty: standalone).
    fn prepare(&self, members: &[&MemberSpec]) -> io::Result<PathBuf> {
        std::fs::create_dir_all(self.data_dir())?;
        let mut config = format!(
            "tickTime={tick}\n\
             initLimit=20\n\
             syncLimit=5\n\
             minSessionTimeout={min}\n\
             maxSessionTimeout={max}\n\
             dataDir={data}\n\
             clientPort={port}\n\
             clientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=ruok,srvr,mntr\n\
             maxClientCnxns=0\n",
            tick = TICK.as_millis(),
            min = TICK.as_millis() * 2,
            max = TICK.as_millis() * 120,
            data = self.data_dir().display(),
            port = self.client_port,
        );
        if !members.is_empty() {
            std::fs::write(self.data_dir().join("myid"), format!("{}\n", self.id))?;
            for member in members {
                config.push_str(&format!(
                    "server.{}=127.0.0.1:{}:{}\n",
                    member.id, member.quorum_port, member.election_port
                ));
            }
        }
        let path = self.dir.join("zoo.cfg");
        std::fs::write(&path, config)?;
        Ok(path)
    }

    fn spawn(&self, script: &Path, config: &Path) -> io::Result<ChildProcess> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())?;
        let mut command = Command::new(script);
        command
            .arg("start-foreground")
            .arg(config)
            .env("ZOO_LOG_DIR", &self.dir)
            // A small heap and the serial collector: three JVMs share two
            // cores with the tests. Containers are reaped every second.
            .env(
                "SERVER_JVMFLAGS",
                "-Xms32m -Xmx256m -XX:+UseSerialGC -Dznode.container.checkIntervalMs=1000",
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        ChildProcess::spawn(
            &format!("zookeeper {}", self.id),
            &mut command,
            Some(&self.log()),
        )
    }
}

/// A member and its process (absent while killed).
type Member = process::Member<MemberSpec>;

impl Member {
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.spec.log()).unwrap_or_default();
        let start = text.len().saturating_sub(4000);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        format!(
            "--- last lines of zookeeper {} log ({}) ---\n{}",
            self.spec.id,
            self.spec.log().display(),
            &text[start..]
        )
    }
}

/// A standalone ZooKeeper for tests, or an external one named by
/// [`CONNECT_ENV`].
#[derive(Debug)]
pub struct ZooKeeperServer {
    connect: String,
    /// `None` for an external ZooKeeper.
    member: Option<Member>,
    script: Option<PathBuf>,
    /// Keeps the data directory and log until the server is gone. Declared
    /// last so the process (in `member`) is killed before it is removed.
    _dir: Option<TempDir>,
}

impl ZooKeeperServer {
    /// The ZooKeeper named by [`CONNECT_ENV`] if set, otherwise a fresh
    /// standalone server spawned on free loopback ports.
    ///
    /// # Panics
    ///
    /// If ZooKeeper or Java is missing (with an install hint), or installed
    /// but unable to start (with the end of its log).
    pub fn start() -> ZooKeeperServer {
        if let Some(connect) = external_connect_string() {
            return ZooKeeperServer {
                connect,
                member: None,
                script: None,
                _dir: None,
            };
        }
        ZooKeeperServer::spawn()
    }

    /// Always spawns a fresh server, ignoring [`CONNECT_ENV`]; for tests
    /// that pause, kill, wipe or proxy the server.
    ///
    /// # Panics
    ///
    /// As [`ZooKeeperServer::start`].
    pub fn spawn() -> ZooKeeperServer {
        let script = require_zookeeper();
        let mut last_error = String::new();
        for _attempt in 0..SPAWN_ATTEMPTS {
            let dir = temp_dir();
            let spec = MemberSpec::new(dir.path(), 1);
            let config = spec
                .prepare(&[])
                .unwrap_or_else(|e| panic!("writing zoo.cfg: {e}"));
            let process = spec
                .spawn(&script, &config)
                .unwrap_or_else(|e| panic!("{e}"));
            let mut member = Member {
                spec,
                process: Some(process),
            };
            match wait_serving(std::slice::from_mut(&mut member), START_TIMEOUT) {
                Ok(()) => {
                    return ZooKeeperServer {
                        connect: member.spec.client_addr().to_string(),
                        member: Some(member),
                        script: Some(script),
                        _dir: Some(dir),
                    };
                }
                Err(e) => last_error = format!("{e}\n{}", member.log_tail()),
            }
        }
        panic!("ZooKeeper did not start after {SPAWN_ATTEMPTS} attempts: {last_error}");
    }

    /// The connect string, `127.0.0.1:<port>`.
    pub fn connect_string(&self) -> String {
        self.connect.clone()
    }

    /// The client address of the spawned server.
    pub fn client_addr(&self) -> Option<SocketAddr> {
        self.member.as_ref().map(|member| member.spec.client_addr())
    }

    /// Whether this is an external ZooKeeper (from [`CONNECT_ENV`]), which
    /// the fault methods cannot touch.
    pub fn is_external(&self) -> bool {
        self.member.is_none()
    }

    /// The process id of the spawned server.
    pub fn pid(&self) -> Option<u32> {
        self.member
            .as_ref()
            .and_then(|member| member.process.as_ref())
            .map(ChildProcess::pid)
    }

    fn spawned(&mut self) -> io::Result<(&mut Member, PathBuf)> {
        let script = self
            .script
            .clone()
            .ok_or_else(|| io::Error::other("this ZooKeeper is external"))?;
        let member = self
            .member
            .as_mut()
            .ok_or_else(|| io::Error::other("this ZooKeeper is external"))?;
        Ok((member, script))
    }

    /// Kills the server with SIGKILL; its data directory stays for
    /// [`ZooKeeperServer::restart`].
    pub fn kill(&mut self) -> io::Result<()> {
        let (member, _) = self.spawned()?;
        member.kill()
    }

    /// Restarts a killed server on the same port and data directory, and
    /// waits until it serves.
    pub fn restart(&mut self) -> io::Result<()> {
        let (member, script) = self.spawned()?;
        if member.is_running() {
            return Ok(());
        }
        let config = member.spec.prepare(&[])?;
        member.process = Some(member.spec.spawn(&script, &config)?);
        wait_serving(std::slice::from_mut(member), START_TIMEOUT)
    }

    /// Loses all of ZooKeeper's data, as a wiped data directory does:
    /// kills the server, removes its data directory and starts it again
    /// on the same port, so zxids start over.
    pub fn wipe(&mut self) -> io::Result<()> {
        self.kill()?;
        let (member, _) = self.spawned()?;
        std::fs::remove_dir_all(member.spec.data_dir())?;
        self.restart()
    }

    /// The end of the server's log, for failure messages.
    pub fn log_tail(&self) -> String {
        self.member
            .as_ref()
            .map(Member::log_tail)
            .unwrap_or_default()
    }
}

/// A 3-member ZooKeeper ensemble on loopback whose members can be killed
/// (`kill -9`), paused and restarted one by one, or wiped together.
///
/// Member indexes are 0-based and stable: member `i` keeps its `myid`
/// (`i + 1`), ports and data directory across restarts.
#[derive(Debug)]
pub struct ZooKeeperEnsemble {
    members: Vec<Member>,
    script: PathBuf,
    /// Declared last: the processes die before their directories go.
    _dir: TempDir,
}

impl ZooKeeperEnsemble {
    /// Three fresh members, started together; returns once all of them
    /// serve (a leader was elected and the followers synced).
    ///
    /// # Panics
    ///
    /// As [`ZooKeeperServer::start`].
    pub fn start() -> ZooKeeperEnsemble {
        let script = require_zookeeper();
        let mut last_error = String::new();
        for _attempt in 0..SPAWN_ATTEMPTS {
            let dir = temp_dir();
            let specs: Vec<MemberSpec> =
                (1..=3).map(|id| MemberSpec::new(dir.path(), id)).collect();
            let refs: Vec<&MemberSpec> = specs.iter().collect();
            let mut members = Vec::new();
            for spec in &specs {
                let config = spec
                    .prepare(&refs)
                    .unwrap_or_else(|e| panic!("writing zoo.cfg: {e}"));
                let process = spec
                    .spawn(&script, &config)
                    .unwrap_or_else(|e| panic!("{e}"));
                members.push(process);
            }
            let mut members: Vec<Member> = specs
                .into_iter()
                .zip(members)
                .map(|(spec, process)| Member {
                    spec,
                    process: Some(process),
                })
                .collect();
            match wait_serving(&mut members, START_TIMEOUT) {
                Ok(()) => {
                    return ZooKeeperEnsemble {
                        members,
                        script,
                        _dir: dir,
                    };
                }
                Err(e) => {
                    last_error = format!(
                        "{e}\n{}",
                        members
                            .iter()
                            .map(Member::log_tail)
                            .collect::<Vec<_>>()
                            .join("\n")
                    )
                }
            }
        }
        panic!(
            "the ZooKeeper ensemble did not start after {SPAWN_ATTEMPTS} attempts: {last_error}"
        );
    }

    /// The connect string naming every member.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(|member| member.spec.client_addr().to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Member `index`'s client address.
    pub fn client_addr(&self, index: usize) -> SocketAddr {
        self.members[index].spec.client_addr()
    }

    /// Member `index`'s process id, while it runs.
    pub fn pid(&self, index: usize) -> Option<u32> {
        self.members[index].process.as_ref().map(ChildProcess::pid)
    }

    /// The member that says it leads (`srvr`), if one does now.
    pub fn leader(&mut self) -> Option<usize> {
        (0..self.members.len()).find(|&index| {
            self.members[index].is_running()
                && mode(self.members[index].spec.client_addr()).as_deref() == Some("leader")
        })
    }

    /// Waits until some member leads.
    pub fn wait_for_leader(&mut self, timeout: Duration) -> io::Result<usize> {
        // Elections announce nothing outside: poll `srvr`.
        process::poll_until(timeout, "ZooKeeper leader", || self.leader())
    }

    /// Kills member `index` with SIGKILL; its data stays for a restart.
    pub fn kill(&mut self, index: usize) -> io::Result<()> {
        self.members[index].kill()
    }

    /// Freezes member `index` (SIGSTOP).
    pub fn pause(&self, index: usize) -> io::Result<()> {
        self.members[index].running()?.pause()
    }

    /// Resumes member `index` (SIGCONT).
    pub fn resume(&self, index: usize) -> io::Result<()> {
        self.members[index].running()?.resume()
    }

    /// Restarts killed member `index` on its ports and data, and waits
    /// until it serves again (it rejoins the quorum).
    pub fn restart(&mut self, index: usize) -> io::Result<()> {
        let refs: Vec<&MemberSpec> = self.members.iter().map(|member| &member.spec).collect();
        let config = self.members[index].spec.prepare(&refs)?;
        let member = &mut self.members[index];
        if member.is_running() {
            return Ok(());
        }
        member.process = Some(member.spec.spawn(&self.script, &config)?);
        wait_serving(std::slice::from_mut(member), START_TIMEOUT)
    }

    /// Loses the whole ensemble's data: kills every member, removes every
    /// data directory, and starts them again on the same ports, so zxids
    /// start over from a new first epoch.
    pub fn wipe(&mut self) -> io::Result<()> {
        for index in 0..self.members.len() {
            self.kill(index)?;
            std::fs::remove_dir_all(self.members[index].spec.data_dir())?;
        }
        let refs: Vec<&MemberSpec> = self.members.iter().map(|member| &member.spec).collect();
        let configs = refs
            .iter()
            .map(|spec| spec.prepare(&refs))
            .collect::<io::Result<Vec<_>>>()?;
        for (member, config) in self.members.iter_mut().zip(configs) {
            member.process = Some(member.spec.spawn(&self.script, &config)?);
        }
        wait_serving(&mut self.members, START_TIMEOUT)
    }

    /// The end of member `index`'s log.
    pub fn log_tail(&self, index: usize) -> String {
        self.members[index].log_tail()
    }
}

fn temp_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("palisade-zookeeper-")
        .tempdir()
        .expect("creating a temporary directory must work on a test machine")
}

fn external_connect_string() -> Option<String> {
    let value = std::env::var(CONNECT_ENV).ok()?;
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

/// Waits until every member serves clients: `srvr` names a mode
/// (standalone, leader or follower) instead of "not currently serving".
fn wait_serving(members: &mut [Member], timeout: Duration) -> io::Result<()> {
    process::wait_serving(
        members,
        timeout,
        |spec| format!("zookeeper {}", spec.id),
        |spec| mode(spec.client_addr()).is_some(),
    )
}

/// The member's mode from the `srvr` four-letter word, `None` while it does
/// not serve.
fn mode(addr: SocketAddr) -> Option<String> {
    let answer = four_letter_word(addr, "srvr").ok()?;
    answer
        .lines()
        .find_map(|line| line.strip_prefix("Mode: "))
        .map(|mode| mode.trim().to_owned())
}

/// Sends a four-letter word and reads the answer until the server closes.
pub fn four_letter_word(addr: SocketAddr, word: &str) -> io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(word.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}
