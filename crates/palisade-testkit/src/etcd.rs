//! Real etcd servers for tests: one member ([`EtcdServer`]) or a 3-member
//! cluster ([`EtcdCluster`]), on loopback.
//!
//! Each member gets free ports on 127.0.0.1, a data directory inside a
//! [`TempDir`], and a log file beside it. Members are killed by PID when their
//! handle drops (see [`ChildProcess`]); nothing is ever killed by name, so
//! other etcd processes on the machine are left alone.
//!
//! [`EtcdServer::start`] honours [`ENDPOINTS_ENV`]: when it is set (a CI
//! service container, a compose file), tests use that etcd instead of
//! spawning one, and the fault-injection methods report that they cannot act
//! on it. [`EtcdCluster`] always spawns its own members, because its tests
//! kill and restart them.
//!
//! [`EtcdCluster::start_with_peer_proxies`] puts a [`FaultProxy`] in front
//! of every member's peer port, so a test can cut a member off from its
//! peers ([`EtcdCluster::isolate`]) or make the links between members slow
//! or lossy, while clients keep reaching every member directly (or through
//! proxies of their own, to pin a client to one member).
//!
//! Both fail the test with an install hint when the `etcd` binary is
//! missing (see [`process::require_binary`]): a test never passes by
//! skipping.
//!
//! ```no_run
//! use palisade_testkit::etcd::EtcdServer;
//!
//! let etcd = EtcdServer::start();
//! let endpoints: Vec<String> = etcd.endpoints();
//! // connect a client to `endpoints`; the server dies with `etcd`.
//! # drop(endpoints);
//! ```

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use crate::process::{self, ChildProcess};
use crate::proxy::{Fault, FaultProxy};

/// Environment variable naming an external etcd to use instead of spawning
/// one: comma-separated endpoints, e.g. `http://127.0.0.1:2379`.
pub const ENDPOINTS_ENV: &str = "PALISADE_ETCD_ENDPOINTS";

/// How long a member may take to answer `/health` after it was started.
/// Generous: a loaded 2-core CI machine can be slow to fsync the first WAL.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How many times a spawn is retried with fresh ports when etcd exits at
/// once (another process took a port between choosing and binding it).
const SPAWN_ATTEMPTS: usize = 3;

/// Raft timing for every member: the values the field notes were measured
/// with (first write about 2 s after a leader is killed).
const HEARTBEAT_MS: u64 = 100;
const ELECTION_MS: u64 = 1000;

/// Whether a member joins a new cluster or rejoins one it belonged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClusterState {
    New,
    Existing,
}

/// One member's fixed identity, kept so the member can be restarted with the
/// same name, ports and data directory.
#[derive(Debug)]
struct MemberSpec {
    name: String,
    client_port: u16,
    /// The port the member listens on for its peers.
    peer_port: u16,
    /// The port its peers are told to reach it on, when that is a proxy's
    /// (the member's peer URL in the cluster's membership); `None` when
    /// peers connect straight to `peer_port`.
    advertised_peer_port: Option<u16>,
    data_dir: PathBuf,
    log: PathBuf,
}

impl MemberSpec {
    fn new(dir: &Path, name: &str) -> Self {
        MemberSpec {
            name: name.to_owned(),
            client_port: process::free_port(),
            peer_port: process::free_port(),
            advertised_peer_port: None,
            data_dir: dir.join(format!("{name}.etcd")),
            log: dir.join(format!("{name}.log")),
        }
    }

    fn peer_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.peer_port))
    }

    /// The peer URL the cluster knows this member by.
    fn advertised_peer_url(&self) -> String {
        format!(
            "http://127.0.0.1:{}",
            self.advertised_peer_port.unwrap_or(self.peer_port)
        )
    }

    fn client_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    fn client_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.client_port))
    }

    fn spawn(
        &self,
        binary: &Path,
        initial_cluster: &str,
        token: &str,
        state: ClusterState,
    ) -> io::Result<ChildProcess> {
        let mut command = Command::new(binary);
        command
            .arg("--name")
            .arg(&self.name)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--listen-client-urls")
            .arg(self.client_url())
            .arg("--advertise-client-urls")
            .arg(self.client_url())
            .arg("--listen-peer-urls")
            .arg(self.peer_url())
            .arg("--initial-advertise-peer-urls")
            .arg(self.advertised_peer_url())
            .arg("--initial-cluster")
            .arg(initial_cluster)
            .arg("--initial-cluster-token")
            .arg(token)
            .arg("--initial-cluster-state")
            .arg(match state {
                ClusterState::New => "new",
                ClusterState::Existing => "existing",
            })
            .arg("--heartbeat-interval")
            .arg(HEARTBEAT_MS.to_string())
            .arg("--election-timeout")
            .arg(ELECTION_MS.to_string())
            .arg("--logger")
            .arg("zap")
            .arg("--log-outputs")
            .arg(&self.log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        ChildProcess::spawn(
            &format!("etcd {}", self.name),
            &mut command,
            Some(&self.log),
        )
    }
}

/// A running member: its identity and, while it runs, its process.
type Member = process::Member<MemberSpec>;

impl Member {
    fn log_tail(&self) -> String {
        match &self.process {
            Some(process) => process.log_tail(4000),
            None => String::new(),
        }
    }
}

/// A unique cluster token, so members of two test clusters can never join
/// each other even if a port were reused.
fn cluster_token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("palisade-{}-{nanos}", std::process::id())
}

fn initial_cluster(specs: &[&MemberSpec]) -> String {
    specs
        .iter()
        .map(|spec| format!("{}={}", spec.name, spec.advertised_peer_url()))
        .collect::<Vec<_>>()
        .join(",")
}

/// A single-member etcd for tests, or an external one named by
/// [`ENDPOINTS_ENV`].
#[derive(Debug)]
pub struct EtcdServer {
    endpoints: Vec<String>,
    /// `None` for an external etcd.
    member: Option<Member>,
    binary: Option<PathBuf>,
    token: String,
    /// Keeps the data directory and log until the server is gone. Declared
    /// last so the process (in `member`) is killed before it is removed.
    _dir: Option<TempDir>,
}

impl EtcdServer {
    /// The etcd named by [`ENDPOINTS_ENV`] if set, otherwise a fresh member
    /// spawned on free loopback ports.
    ///
    /// # Panics
    ///
    /// If the `etcd` binary is missing (with an install hint).
    ///
    /// # Panics
    ///
    /// If etcd is installed but cannot be started: that is a broken test
    /// machine, and the panic message carries the end of etcd's log.
    pub fn start() -> EtcdServer {
        if let Some(endpoints) = external_endpoints() {
            return EtcdServer {
                endpoints,
                member: None,
                binary: None,
                token: String::new(),
                _dir: None,
            };
        }
        EtcdServer::spawn()
    }

    /// Always spawns a fresh member, ignoring [`ENDPOINTS_ENV`]; for tests
    /// that pause, kill or reconfigure the server.
    ///
    /// # Panics
    ///
    /// As [`EtcdServer::start`].
    pub fn spawn() -> EtcdServer {
        let binary = process::require_binary("etcd");
        let mut last_error = String::new();
        for _attempt in 0..SPAWN_ATTEMPTS {
            let dir = tempfile::Builder::new()
                .prefix("palisade-etcd-")
                .tempdir()
                .expect("creating a temporary directory must work on a test machine");
            let spec = MemberSpec::new(dir.path(), "s1");
            let token = cluster_token();
            let process = spec
                .spawn(
                    &binary,
                    &initial_cluster(&[&spec]),
                    &token,
                    ClusterState::New,
                )
                .unwrap_or_else(|e| panic!("{e}"));
            let mut member = Member {
                spec,
                process: Some(process),
            };
            match wait_healthy(std::slice::from_mut(&mut member), START_TIMEOUT) {
                Ok(()) => {
                    tracing::debug!(endpoint = %member.spec.client_url(), "etcd started");
                    return EtcdServer {
                        endpoints: vec![member.spec.client_url()],
                        member: Some(member),
                        binary: Some(binary),
                        token,
                        _dir: Some(dir),
                    };
                }
                Err(e) => last_error = format!("{e}\n{}", member.log_tail()),
            }
        }
        panic!("etcd did not start after {SPAWN_ATTEMPTS} attempts: {last_error}");
    }

    /// The client endpoints (`http://127.0.0.1:<port>`).
    pub fn endpoints(&self) -> Vec<String> {
        self.endpoints.clone()
    }

    /// The first client endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoints[0]
    }

    /// Whether this is an external etcd (from [`ENDPOINTS_ENV`]), which the
    /// fault-injection methods cannot touch.
    pub fn is_external(&self) -> bool {
        self.member.is_none()
    }

    /// The process id of the spawned member.
    pub fn pid(&self) -> Option<u32> {
        self.member
            .as_ref()
            .and_then(|member| member.process.as_ref())
            .map(ChildProcess::pid)
    }

    fn process(&self) -> io::Result<&ChildProcess> {
        self.member
            .as_ref()
            .and_then(|member| member.process.as_ref())
            .ok_or_else(|| io::Error::other("this etcd is external or not running"))
    }

    /// Freezes the server with SIGSTOP: it holds its sockets but answers
    /// nothing, as a server in a long GC pause or on a hung disk would.
    pub fn pause(&self) -> io::Result<()> {
        self.process()?.pause()
    }

    /// Resumes a paused server (SIGCONT).
    pub fn resume(&self) -> io::Result<()> {
        self.process()?.resume()
    }

    /// Kills the server with SIGKILL (`kill -9`); its data directory stays
    /// for [`EtcdServer::restart`].
    pub fn kill(&mut self) -> io::Result<()> {
        let member = self
            .member
            .as_mut()
            .ok_or_else(|| io::Error::other("this etcd is external"))?;
        member.kill()
    }

    /// Restarts a killed server on the same ports and data directory, and
    /// waits until it is healthy.
    pub fn restart(&mut self) -> io::Result<()> {
        let binary = self
            .binary
            .clone()
            .ok_or_else(|| io::Error::other("this etcd is external"))?;
        let member = self.member.as_mut().expect("spawned servers have a member");
        if member.is_running() {
            return Ok(());
        }
        let cluster = initial_cluster(&[&member.spec]);
        member.process = Some(member.spec.spawn(
            &binary,
            &cluster,
            &self.token,
            ClusterState::Existing,
        )?);
        wait_healthy(std::slice::from_mut(member), START_TIMEOUT)
    }

    /// Loses all of etcd's data, as a wiped data directory does: kills the
    /// server, removes its data directory and starts a fresh member on the
    /// same ports with the same cluster token, so the cluster id (and with
    /// it the issuer in sequencers) stays the same while the revision
    /// starts over at 1.
    pub fn wipe(&mut self) -> io::Result<()> {
        let binary = self
            .binary
            .clone()
            .ok_or_else(|| io::Error::other("this etcd is external"))?;
        self.kill()?;
        let member = self.member.as_mut().expect("spawned servers have a member");
        std::fs::remove_dir_all(&member.spec.data_dir)?;
        let cluster = initial_cluster(&[&member.spec]);
        member.process = Some(member.spec.spawn(
            &binary,
            &cluster,
            &self.token,
            ClusterState::New,
        )?);
        wait_healthy(std::slice::from_mut(member), START_TIMEOUT)
    }

    /// The end of the server's log, for failure messages.
    pub fn log_tail(&self) -> String {
        self.member
            .as_ref()
            .map(Member::log_tail)
            .unwrap_or_default()
    }
}

fn external_endpoints() -> Option<Vec<String>> {
    let value = std::env::var(ENDPOINTS_ENV).ok()?;
    let endpoints: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|endpoint| !endpoint.is_empty())
        .map(str::to_owned)
        .collect();
    (!endpoints.is_empty()).then_some(endpoints)
}

/// A 3-member etcd cluster on loopback whose members can be killed (`kill
/// -9`), paused and restarted one by one.
///
/// Member indexes are stable: member `i` keeps its name, ports and data
/// directory across restarts.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Member>,
    binary: PathBuf,
    token: String,
    /// One proxy per member in front of its peer port (its advertised peer
    /// URL points here), when started with
    /// [`EtcdCluster::start_with_peer_proxies`]; empty otherwise. Declared
    /// after `members`, so the processes die before their links do.
    peer_proxies: Vec<FaultProxy>,
    /// Declared last so the processes are killed before it is removed.
    _dir: TempDir,
}

impl EtcdCluster {
    /// The number of members.
    pub const SIZE: usize = 3;

    /// Starts a 3-member cluster and waits until every member is healthy
    /// (which in etcd means a leader has been elected).
    ///
    /// # Panics
    ///
    /// If the `etcd` binary is missing (with an install hint), or the
    /// cluster cannot be started.
    pub fn start() -> EtcdCluster {
        EtcdCluster::start_inner(false)
    }

    /// Starts a 3-member cluster whose members reach each other only
    /// through one [`FaultProxy`] per member: member `i` listens for peers
    /// on its own port and advertises its proxy's, so every connection *to*
    /// member `i` from a peer crosses [`EtcdCluster::peer_proxy`]`(i)`.
    /// Clients still reach every member directly.
    ///
    /// # Panics
    ///
    /// As [`EtcdCluster::start`].
    pub fn start_with_peer_proxies() -> EtcdCluster {
        EtcdCluster::start_inner(true)
    }

    fn start_inner(proxied: bool) -> EtcdCluster {
        let binary = process::require_binary("etcd");
        let mut last_error = String::new();
        for _attempt in 0..SPAWN_ATTEMPTS {
            let dir = tempfile::Builder::new()
                .prefix("palisade-etcd-cluster-")
                .tempdir()
                .expect("creating a temporary directory must work on a test machine");
            let mut specs: Vec<MemberSpec> = (1..=Self::SIZE)
                .map(|i| MemberSpec::new(dir.path(), &format!("m{i}")))
                .collect();
            let mut peer_proxies = Vec::new();
            if proxied {
                for spec in &mut specs {
                    let proxy =
                        FaultProxy::start(&format!("etcd {} peer", spec.name), spec.peer_addr())
                            .unwrap_or_else(|e| panic!("cannot start a peer proxy: {e}"));
                    spec.advertised_peer_port = Some(proxy.address().port());
                    peer_proxies.push(proxy);
                }
            }
            let cluster = initial_cluster(&specs.iter().collect::<Vec<_>>());
            let token = cluster_token();
            let mut members = Vec::with_capacity(Self::SIZE);
            for spec in specs {
                let process = spec
                    .spawn(&binary, &cluster, &token, ClusterState::New)
                    .unwrap_or_else(|e| panic!("{e}"));
                members.push(Member {
                    spec,
                    process: Some(process),
                });
            }
            match wait_healthy(&mut members, START_TIMEOUT) {
                Ok(()) => {
                    return EtcdCluster {
                        members,
                        binary,
                        token,
                        peer_proxies,
                        _dir: dir,
                    };
                }
                Err(e) => {
                    last_error = format!("{e}");
                    for member in &members {
                        last_error.push('\n');
                        last_error.push_str(&member.log_tail());
                    }
                }
            }
        }
        panic!("etcd cluster did not start after {SPAWN_ATTEMPTS} attempts: {last_error}");
    }

    /// Every member's client endpoint, in member order.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|member| member.spec.client_url())
            .collect()
    }

    /// Member `index`'s client endpoint.
    pub fn endpoint(&self, index: usize) -> String {
        self.members[index].spec.client_url()
    }

    /// Member `index`'s client address (`127.0.0.1:<port>`), e.g. the
    /// upstream of a proxy that pins a client to that member.
    pub fn client_addr(&self, index: usize) -> SocketAddr {
        self.members[index].spec.client_addr()
    }

    /// The process id of member `index`, while it runs.
    pub fn pid(&self, index: usize) -> Option<u32> {
        self.members[index].process.as_ref().map(ChildProcess::pid)
    }

    /// The proxy in front of member `index`'s peer port (every connection a
    /// peer opens to it crosses it), if the cluster was started with
    /// [`EtcdCluster::start_with_peer_proxies`].
    pub fn peer_proxy(&self, index: usize) -> Option<&FaultProxy> {
        self.peer_proxies.get(index)
    }

    /// Cuts member `index` off from its peers, both ways, until
    /// [`EtcdCluster::heal_peers`]: its own peer proxy holds everything the
    /// others send it, and every other member's peer proxy holds the
    /// connections member `index`'s process opened to them. The member
    /// keeps running and keeps answering its clients from its own state,
    /// as a member on the wrong side of a real partition does. Needs the
    /// peer proxies ([`EtcdCluster::start_with_peer_proxies`]) and a
    /// running member.
    pub fn isolate(&self, index: usize) -> io::Result<()> {
        if self.peer_proxies.is_empty() {
            return Err(io::Error::other(
                "isolate needs a cluster started with peer proxies",
            ));
        }
        let pid = self
            .pid(index)
            .ok_or_else(|| io::Error::other(format!("member {index} is not running")))?;
        tracing::info!(member = %self.members[index].spec.name, pid, "isolating etcd member from its peers");
        self.peer_proxies[index].partition();
        for (other, proxy) in self.peer_proxies.iter().enumerate() {
            if other != index {
                proxy.set_for_process(pid, Fault::Partition);
            }
        }
        Ok(())
    }

    /// Heals every peer link: all peer proxies forward again (delivering
    /// what they held) and forget their per-process rules.
    pub fn heal_peers(&self) {
        for proxy in &self.peer_proxies {
            proxy.clear_process_rules();
            proxy.pass();
        }
    }

    /// Whether member `index` is running.
    pub fn is_running(&mut self, index: usize) -> bool {
        self.members[index].is_running()
    }

    /// The index of the current leader, as reported by the running members
    /// (`/v3/maintenance/status`); `None` while there is none.
    pub fn leader(&mut self) -> Option<usize> {
        let mut ids = Vec::with_capacity(self.members.len());
        let mut leader_id = None;
        for member in &mut self.members {
            if !member.is_running() {
                ids.push(None);
                continue;
            }
            match member_status(member.spec.client_addr()) {
                Ok(status) => {
                    ids.push(Some(status.member_id));
                    if status.leader_id != 0 {
                        leader_id = Some(status.leader_id);
                    }
                }
                Err(_) => ids.push(None),
            }
        }
        let leader_id = leader_id?;
        ids.iter().position(|id| *id == Some(leader_id))
    }

    /// Waits until a leader is known (bounded by `timeout`) and returns its
    /// index.
    pub fn wait_for_leader(&mut self, timeout: Duration) -> io::Result<usize> {
        // No event announces an election to an outside observer; poll the
        // members' status with a short, bounded period.
        process::poll_until(timeout, "etcd leader", || self.leader())
    }

    /// Kills member `index` with SIGKILL (`kill -9`). Its data directory
    /// stays for [`EtcdCluster::restart`].
    pub fn kill(&mut self, index: usize) -> io::Result<()> {
        let member = &mut self.members[index];
        if let Some(process) = &member.process {
            tracing::info!(member = %member.spec.name, pid = process.pid(), "kill -9 etcd member");
        }
        member.kill()
    }

    /// Freezes member `index` with SIGSTOP.
    pub fn pause(&self, index: usize) -> io::Result<()> {
        self.members[index].running()?.pause()
    }

    /// Resumes member `index` with SIGCONT.
    pub fn resume(&self, index: usize) -> io::Result<()> {
        self.members[index].running()?.resume()
    }

    /// Restarts a killed member with `--initial-cluster-state existing`, the
    /// same ports and data directory, and waits until it is healthy.
    pub fn restart(&mut self, index: usize) -> io::Result<()> {
        if self.members[index].is_running() {
            return Ok(());
        }
        let cluster = initial_cluster(&self.members.iter().map(|m| &m.spec).collect::<Vec<_>>());
        let member = &mut self.members[index];
        member.process = Some(member.spec.spawn(
            &self.binary,
            &cluster,
            &self.token,
            ClusterState::Existing,
        )?);
        tracing::info!(member = %member.spec.name, "etcd member restarted");
        wait_healthy(std::slice::from_mut(member), START_TIMEOUT)
    }

    /// The end of member `index`'s log, for failure messages.
    pub fn log_tail(&self, index: usize) -> String {
        self.members[index].log_tail()
    }
}

/// Waits until every member answers `/health` with `true`, failing early if
/// one of them exits.
fn wait_healthy(members: &mut [Member], timeout: Duration) -> io::Result<()> {
    process::wait_serving(
        members,
        timeout,
        |spec| format!("etcd {}", spec.name),
        |spec| is_healthy(spec.client_addr()),
    )
}

fn is_healthy(addr: SocketAddr) -> bool {
    http(addr, "GET", "/health", "")
        .map(|body| body.contains("\"health\":\"true\""))
        .unwrap_or(false)
}

/// What `/v3/maintenance/status` says about a member.
#[derive(Debug)]
struct MemberStatus {
    member_id: u64,
    leader_id: u64,
}

fn member_status(addr: SocketAddr) -> io::Result<MemberStatus> {
    let body = http(addr, "POST", "/v3/maintenance/status", "{}")?;
    let field = |name: &str| -> io::Result<u64> {
        json_u64_string(&body, name)
            .ok_or_else(|| io::Error::other(format!("no `{name}` in status: {body}")))
    };
    Ok(MemberStatus {
        member_id: field("member_id")?,
        leader_id: field("leader")?,
    })
}

/// Reads `"name":"<digits>"` from a JSON text. The gRPC gateway prints
/// 64-bit integers as strings, and the testkit does not depend on a JSON
/// crate for two fields.
fn json_u64_string(body: &str, name: &str) -> Option<u64> {
    let pattern = format!("\"{name}\":\"");
    let start = body.find(&pattern)? + pattern.len();
    let rest = &body[start..];
    let end = rest.find('"')?;
    rest[..end].parse().ok()
}

/// A minimal HTTP/1.1 request to etcd's HTTP endpoints; returns the body.
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> io::Result<String> {
    let timeout = Duration::from_secs(2);
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| io::Error::other("malformed HTTP response"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(io::Error::other(format!(
            "etcd answered {}",
            head.lines().next().unwrap_or("")
        )));
    }
    Ok(body.to_owned())
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn reads_gateway_integers() {
        let body =
            r#"{"header":{"cluster_id":"151","member_id":"1366","revision":"1"},"leader":"1366"}"#;
        assert_eq!(json_u64_string(body, "member_id"), Some(1366));
        assert_eq!(json_u64_string(body, "leader"), Some(1366));
        assert_eq!(json_u64_string(body, "cluster_id"), Some(151));
        assert_eq!(json_u64_string(body, "missing"), None);
    }

    /// `key` and the values below, base64-encoded for the JSON gateway.
    const KEY_B64: &str = "aXNvbGF0aW9u"; // "isolation"
    const BEFORE_B64: &str = "YmVmb3Jl"; // "before"
    const AFTER_B64: &str = "YWZ0ZXI="; // "after"

    fn put(addr: SocketAddr, value_b64: &str) -> io::Result<String> {
        http(
            addr,
            "POST",
            "/v3/kv/put",
            &format!(r#"{{"key":"{KEY_B64}","value":"{value_b64}"}}"#),
        )
    }

    fn range(addr: SocketAddr, serializable: bool) -> io::Result<String> {
        http(
            addr,
            "POST",
            "/v3/kv/range",
            &format!(r#"{{"key":"{KEY_B64}","serializable":{serializable}}}"#),
        )
    }

    /// Retries `attempt` until it returns `true` or `timeout` passes.
    fn eventually(timeout: Duration, mut attempt: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if attempt() {
                return true;
            }
            // Elections and catch-up have no event an outsider can wait
            // on: poll with a short, bounded period.
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    #[test]
    fn an_isolated_member_serves_only_stale_serializable_reads_until_healed() {
        let mut cluster = EtcdCluster::start_with_peer_proxies();
        let leader = cluster.wait_for_leader(Duration::from_secs(20)).unwrap();
        let isolated = cluster.client_addr(leader);
        put(isolated, BEFORE_B64).unwrap();
        // Every member has it before the cut.
        for index in 0..EtcdCluster::SIZE {
            let addr = cluster.client_addr(index);
            assert!(
                eventually(Duration::from_secs(10), || range(addr, true)
                    .is_ok_and(|body| body.contains(BEFORE_B64))),
                "member {index} never saw the first write"
            );
        }

        cluster.isolate(leader).unwrap();
        // The majority elects a leader of its own and accepts a write.
        let majority = cluster.client_addr((leader + 1) % EtcdCluster::SIZE);
        assert!(
            eventually(Duration::from_secs(30), || put(majority, AFTER_B64).is_ok()),
            "the majority never accepted a write\n{}",
            cluster.log_tail((leader + 1) % EtcdCluster::SIZE)
        );
        // The isolated member: a linearizable read cannot complete, and a
        // serializable one answers from its stale state. This is why
        // Palisade never decides ownership from a serializable read.
        assert!(range(isolated, false).is_err());
        let stale = range(isolated, true).unwrap();
        assert!(
            stale.contains(BEFORE_B64) && !stale.contains(AFTER_B64),
            "{stale}"
        );
        let held = cluster.peer_proxy(leader).unwrap().stats();
        assert!(held.faults_applied >= 1);

        cluster.heal_peers();
        assert!(
            eventually(Duration::from_secs(30), || range(isolated, false)
                .is_ok_and(|body| body.contains(AFTER_B64))),
            "the healed member never caught up\n{}",
            cluster.log_tail(leader)
        );
        assert_eq!(cluster.peer_proxy(leader).unwrap().fault(), Fault::Pass);
    }

    #[test]
    fn isolate_needs_peer_proxies() {
        let cluster = EtcdCluster::start();
        assert!(cluster.peer_proxy(0).is_none());
        assert!(cluster.isolate(0).is_err());
        assert!(cluster.pid(0).is_some());
    }

    #[test]
    fn a_spawned_server_is_healthy_and_dies_with_its_handle() {
        let mut etcd = EtcdServer::spawn();
        let pid = etcd.pid().expect("spawned");
        let addr: SocketAddr = etcd
            .endpoint()
            .trim_start_matches("http://")
            .parse()
            .unwrap();
        assert!(is_healthy(addr));
        etcd.kill().unwrap();
        assert!(!is_healthy(addr));
        etcd.restart().unwrap();
        assert!(is_healthy(addr));
        let restarted = etcd.pid().expect("restarted");
        assert_ne!(pid, restarted);
        drop(etcd);
        // The process was killed and reaped by PID: signal 0 finds nothing.
        assert!(process::send_signal(restarted, process::Signal::SIGCONT).is_err());
    }
}
