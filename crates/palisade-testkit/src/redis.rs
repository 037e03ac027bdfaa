//! Real Redis servers for tests: a single server (with or without
//! persistence, restartable on the same directory after `kill -9`) and a
//! Redis Cluster (3 masters, with or without a replica each), all on
//! 127.0.0.1.
//!
//! ```no_run
//! use palisade_testkit::redis::RedisServer;
//!
//! let redis = RedisServer::start(); // fails the test, with an install hint, without redis-server
//! let url = redis.url();
//! # drop(url);
//! ```
//!
//! Every server runs in its own temporary directory on free ports and is
//! killed (SIGKILL, by PID) when its handle is dropped.
//!
//! A spawned server can require a password ([`RedisOptions::with_password`])
//! and can speak TLS only ([`RedisOptions::with_tls`]: `--port 0
//! --tls-port <free>`, certificates written into its directory). The test
//! kit's own commands ([`RedisServer::command`]) then go over a Unix socket
//! in that directory, so no plaintext TCP port is ever open.
//!
//! `PALISADE_REDIS_URL` points [`RedisServer::start`] at an external server
//! instead (started by compose or CI). Tests that kill or restart Redis use
//! [`RedisServer::spawn`], which always starts a local one.
//! `PALISADE_REDIS_CLUSTER_URLS` (comma-separated) does the same for
//! [`RedisCluster::start`].

use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::process::{self, ChildProcess};

/// The environment variable naming an external Redis for [`RedisServer::start`].
pub const REDIS_URL_ENV: &str = "PALISADE_REDIS_URL";

/// The environment variable naming an external cluster for [`RedisCluster::start`].
pub const REDIS_CLUSTER_URLS_ENV: &str = "PALISADE_REDIS_CLUSTER_URLS";

/// How a spawned server persists its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Persistence {
    /// Nothing survives a restart: `--save "" --appendonly no`.
    #[default]
    None,
    /// Every write is in the append-only file before it is acknowledged:
    /// `--save "" --appendonly yes --appendfsync always`.
    AofAlways,
}

/// Options for a spawned server.
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    /// Persistence mode.
    pub persistence: Persistence,
    /// Extra `redis-server` arguments (e.g. `["--maxmemory", "10mb"]`).
    pub extra_args: Vec<String>,
    /// `--requirepass`: clients must authenticate as the default user.
    /// [`RedisServer::url`] carries it and [`RedisServer::command`] sends
    /// `AUTH` first, so the rest of a test does not need to know.
    pub password: Option<String>,
    /// Serve TLS only, with these certificates.
    pub tls: Option<RedisTls>,
}

impl RedisOptions {
    /// Options with the given persistence.
    pub fn persistence(persistence: Persistence) -> Self {
        RedisOptions {
            persistence,
            ..RedisOptions::default()
        }
    }

    /// Requires `password` from every client (`--requirepass`).
    pub fn with_password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Serves TLS only (see [`RedisTls`]).
    pub fn with_tls(mut self, tls: RedisTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Loads the module at `path` (`--loadmodule`), e.g. the Redis fence's
    /// `libpalisade_fence_redis_module.so`; a restart loads it again.
    pub fn with_module(mut self, path: impl AsRef<Path>) -> Self {
        self.extra_args.push("--loadmodule".into());
        self.extra_args.push(path.as_ref().display().to_string());
        self
    }
}

/// TLS for a spawned server: `--port 0 --tls-port <free>`, so the server
/// has no plaintext TCP port at all, and its URL is `rediss://`.
///
/// The PEM texts are written into the server's temporary directory; the
/// test makes them (e.g. with `rcgen`), so a test controls exactly which CA
/// signed what. The server certificate must name `127.0.0.1` (an IP
/// subject alternative name), the host in [`RedisServer::url`].
#[derive(Clone)]
pub struct RedisTls {
    /// The server's certificate chain (`--tls-cert-file`).
    pub server_cert_pem: String,
    /// The server's private key (`--tls-key-file`).
    pub server_key_pem: String,
    /// The CA that client certificates must chain to
    /// (`--tls-ca-cert-file`; Redis requires one even when clients do not
    /// authenticate).
    pub ca_cert_pem: String,
    /// Whether clients must present a certificate (`--tls-auth-clients`).
    pub client_auth: TlsClientAuth,
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field("server_key_pem", &"<redacted>")
            .field("client_auth", &self.client_auth)
            .finish_non_exhaustive()
    }
}

impl RedisTls {
    /// TLS with the given server certificate and key, trusting `ca_cert_pem`
    /// for client certificates, which clients need not present.
    pub fn new(
        server_cert_pem: impl Into<String>,
        server_key_pem: impl Into<String>,
        ca_cert_pem: impl Into<String>,
    ) -> Self {
        RedisTls {
            server_cert_pem: server_cert_pem.into(),
            server_key_pem: server_key_pem.into(),
            ca_cert_pem: ca_cert_pem.into(),
            client_auth: TlsClientAuth::No,
        }
    }

    /// Sets whether clients must present a certificate.
    pub fn with_client_auth(mut self, client_auth: TlsClientAuth) -> Self {
        self.client_auth = client_auth;
        self
    }
}

/// Whether a TLS server asks clients for a certificate
/// (`--tls-auth-clients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsClientAuth {
    /// `no`: clients are not asked for a certificate.
    #[default]
    No,
    /// `optional`: a certificate is checked if presented.
    Optional,
    /// `yes`: mutual TLS; a client without a certificate signed by the CA is
    /// refused during the handshake.
    Required,
}

impl TlsClientAuth {
    fn arg(self) -> &'static str {
        match self {
            TlsClientAuth::No => "no",
            TlsClientAuth::Optional => "optional",
            TlsClientAuth::Required => "yes",
        }
    }
}

/// A Redis server for a test: spawned here, or external.
#[derive(Debug)]
pub struct RedisServer {
    inner: ServerKind,
}

#[derive(Debug)]
enum ServerKind {
    Spawned(Box<Spawned>),
    External { url: String },
}

#[derive(Debug)]
struct Spawned {
    binary: PathBuf,
    options: RedisOptions,
    port: u16,
    dir: TempDir,
    child: Option<ChildProcess>,
}

impl RedisServer {
    /// A server without persistence: the external one named by
    /// `PALISADE_REDIS_URL` if set, else a new local one.
    ///
    /// # Panics
    ///
    /// When `redis-server` is not installed (with an install hint) or
    /// cannot start.
    pub fn start() -> RedisServer {
        if let Some(url) = std::env::var_os(REDIS_URL_ENV) {
            let url = url.to_string_lossy().into_owned();
            return RedisServer {
                inner: ServerKind::External { url },
            };
        }
        RedisServer::spawn(RedisOptions::default())
    }

    /// Always spawns a local server (for tests that kill or restart it).
    /// Panics as [`RedisServer::start`], with the server's log.
    pub fn spawn(options: RedisOptions) -> RedisServer {
        let binary = process::require_binary("redis-server");
        let mut last_error = None;
        for _ in 0..5 {
            let mut spawned = Spawned {
                binary: binary.clone(),
                options: options.clone(),
                port: process::free_port(),
                dir: tempfile::Builder::new()
                    .prefix("palisade-redis-")
                    .tempdir()
                    .expect("create a temporary directory for redis"),
                child: None,
            };
            match spawned.launch() {
                Ok(()) => {
                    return RedisServer {
                        inner: ServerKind::Spawned(Box::new(spawned)),
                    };
                }
                // Most likely the port was taken between choosing and binding.
                Err(error) => last_error = Some(error),
            }
        }
        panic!(
            "redis-server did not start after 5 attempts: {}",
            last_error.map(|e| e.to_string()).unwrap_or_default()
        );
    }

    /// The URL clients use: `redis://127.0.0.1:<port>`, `rediss://` for a
    /// TLS server, with `:<password>@` when a password is required (or the
    /// external URL).
    pub fn url(&self) -> String {
        match &self.inner {
            ServerKind::Spawned(spawned) => spawned.url(None, spawned.options.password.as_deref()),
            ServerKind::External { url } => url.clone(),
        }
    }

    /// [`RedisServer::url`] without the password: a client with it is
    /// refused by a server that requires one. The external URL unchanged.
    pub fn url_without_password(&self) -> String {
        match &self.inner {
            ServerKind::Spawned(spawned) => spawned.url(None, None),
            ServerKind::External { url } => url.clone(),
        }
    }

    /// [`RedisServer::url`] with the given ACL user and password instead of
    /// the default user's (for users made with `ACL SETUSER`). The external
    /// URL unchanged.
    pub fn url_as(&self, user: &str, password: &str) -> String {
        match &self.inner {
            ServerKind::Spawned(spawned) => spawned.url(Some(user), Some(password)),
            ServerKind::External { url } => url.clone(),
        }
    }

    /// Whether clients must speak TLS to this server (a spawned TLS server,
    /// or an external `rediss://` URL).
    pub fn is_tls(&self) -> bool {
        match &self.inner {
            ServerKind::Spawned(spawned) => spawned.options.tls.is_some(),
            ServerKind::External { url } => url.starts_with("rediss://"),
        }
    }

    /// Whether this is an external server (which cannot be killed or
    /// restarted from here, and may be shared: use unique key prefixes).
    pub fn is_external(&self) -> bool {
        matches!(self.inner, ServerKind::External { .. })
    }

    /// The port clients connect to of a spawned server (the TLS port of a
    /// TLS server, which has no other TCP port).
    pub fn port(&self) -> Option<u16> {
        match &self.inner {
            ServerKind::Spawned(spawned) => Some(spawned.port),
            ServerKind::External { .. } => None,
        }
    }

    /// The PID of a spawned, running server.
    pub fn pid(&self) -> Option<u32> {
        match &self.inner {
            ServerKind::Spawned(spawned) => spawned.child.as_ref().map(ChildProcess::pid),
            ServerKind::External { .. } => None,
        }
    }

    /// The data directory of a spawned server.
    pub fn dir(&self) -> Option<&Path> {
        match &self.inner {
            ServerKind::Spawned(spawned) => Some(spawned.dir.path()),
            ServerKind::External { .. } => None,
        }
    }

    /// Kills the server with SIGKILL (a crash: nothing is flushed beyond
    /// what its persistence mode already wrote).
    pub fn kill(&mut self) -> io::Result<()> {
        let spawned = self.spawned_mut("kill")?;
        if let Some(mut child) = spawned.child.take() {
            child.kill()?;
        }
        Ok(())
    }

    /// Starts the server again on the same port and directory (after
    /// [`RedisServer::kill`]); with [`Persistence::AofAlways`] it reloads
    /// its data.
    pub fn restart(&mut self) -> io::Result<()> {
        let spawned = self.spawned_mut("restart")?;
        if let Some(mut child) = spawned.child.take() {
            child.kill()?;
        }
        spawned.launch()
    }

    /// Pauses the server process (SIGSTOP).
    pub fn pause(&self) -> io::Result<()> {
        self.child("pause")?.pause()
    }

    /// Resumes a paused server (SIGCONT).
    pub fn resume(&self) -> io::Result<()> {
        self.child("resume")?.resume()
    }

    /// Runs one command over a fresh connection and returns the reply as
    /// text (bulk strings and integers as-is, arrays one item per line,
    /// nil as an empty string; an error reply is an `Err`). Enough for
    /// `INFO`, `PTTL`, `LLEN` and the like in assertions.
    ///
    /// Authenticates first when the server requires a password. A spawned
    /// TLS server is reached over its Unix socket, in plaintext.
    pub fn command(&self, args: &[&str]) -> io::Result<String> {
        match &self.inner {
            ServerKind::Spawned(spawned) => spawned.admin_command(args),
            ServerKind::External { url } => command_at(url, args),
        }
    }

    fn child(&self, what: &str) -> io::Result<&ChildProcess> {
        match &self.inner {
            ServerKind::Spawned(spawned) if spawned.child.is_some() => {
                Ok(spawned.child.as_ref().expect("checked"))
            }
            _ => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("cannot {what}: the server is external or not running"),
            )),
        }
    }

    fn spawned_mut(&mut self, what: &str) -> io::Result<&mut Spawned> {
        match &mut self.inner {
            ServerKind::Spawned(spawned) => Ok(&mut **spawned),
            ServerKind::External { .. } => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("cannot {what} an external Redis ({REDIS_URL_ENV})"),
            )),
        }
    }
}

impl Spawned {
    fn url(&self, user: Option<&str>, password: Option<&str>) -> String {
        let scheme = if self.options.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        let credentials = match (user, password) {
            (None, None) => String::new(),
            (user, password) => format!(
                "{}:{}@",
                percent_encode(user.unwrap_or_default()),
                percent_encode(password.unwrap_or_default())
            ),
        };
        format!("{scheme}://{credentials}127.0.0.1:{}", self.port)
    }

    /// Where the test kit's own commands go: the TCP port, or for a TLS
    /// server (which has no plaintext TCP port) its Unix socket.
    fn admin_target(&self) -> AdminTarget {
        if self.options.tls.is_some() {
            AdminTarget::Unix(self.dir.path().join("redis.sock"))
        } else {
            AdminTarget::Tcp(SocketAddr::from(([127, 0, 0, 1], self.port)))
        }
    }

    fn admin_command(&self, args: &[&str]) -> io::Result<String> {
        let credentials = self
            .options
            .password
            .as_deref()
            .map(|password| (None, password));
        run_command(&self.admin_target(), credentials, args)
    }

    /// Writes the TLS files into the server's directory and returns the
    /// arguments naming them.
    fn tls_args(&self, tls: &RedisTls) -> io::Result<Vec<String>> {
        let write = |file: &str, contents: &str| -> io::Result<String> {
            let path = self.dir.path().join(file);
            std::fs::write(&path, contents)?;
            Ok(path.display().to_string())
        };
        Ok(vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            self.port.to_string(),
            "--tls-cert-file".into(),
            write("server.crt", &tls.server_cert_pem)?,
            "--tls-key-file".into(),
            write("server.key", &tls.server_key_pem)?,
            "--tls-ca-cert-file".into(),
            write("ca.crt", &tls.ca_cert_pem)?,
            "--tls-auth-clients".into(),
            tls.client_auth.arg().into(),
            "--unixsocket".into(),
            self.dir.path().join("redis.sock").display().to_string(),
            "--unixsocketperm".into(),
            "700".into(),
        ])
    }

    fn launch(&mut self) -> io::Result<()> {
        let log = self.dir.path().join("redis.log");
        let mut command = Command::new(&self.binary);
        match &self.options.tls {
            Some(tls) => {
                command.args(self.tls_args(tls)?);
            }
            None => {
                command.arg("--port").arg(self.port.to_string());
            }
        }
        if let Some(password) = &self.options.password {
            command.arg("--requirepass").arg(password);
        }
        command
            .args(["--bind", "127.0.0.1", "--daemonize", "no", "--save", ""])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log);
        match self.options.persistence {
            Persistence::None => {
                command.args(["--appendonly", "no"]);
            }
            Persistence::AofAlways => {
                command.args(["--appendonly", "yes", "--appendfsync", "always"]);
            }
        }
        command
            .args(&self.options.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = ChildProcess::spawn("redis-server", &mut command, Some(&log))?;
        let ready = wait_until_ready(
            || self.admin_command(&["PING"]),
            &self.url(None, None),
            &mut child,
            Duration::from_secs(10),
        );
        if let Err(error) = ready {
            let tail = child.log_tail(2000);
            return Err(io::Error::new(error.kind(), format!("{error}\n{tail}")));
        }
        self.child = Some(child);
        Ok(())
    }
}

/// Waits until `ping` answers `PONG` (not `LOADING`).
fn wait_until_ready(
    ping: impl Fn() -> io::Result<String>,
    url: &str,
    child: &mut ChildProcess,
    timeout: Duration,
) -> io::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if !child.is_running() {
            return Err(io::Error::other("redis-server exited during startup"));
        }
        match ping() {
            Ok(reply) if reply == "PONG" => return Ok(()),
            _ if Instant::now() >= deadline => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("redis at {url} not ready after {timeout:?}"),
                ));
            }
            // Waiting for a process we started to come up: no event to wait
            // on, so poll with a short, bounded period.
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// A Redis Cluster on loopback, made with `redis-cli --cluster create`:
/// three masters ([`RedisCluster::start`]), or three masters with one
/// replica each ([`RedisCluster::start_with_replicas`]), or the external
/// cluster named by `PALISADE_REDIS_CLUSTER_URLS`.
///
/// Nodes are numbered by their place in [`RedisCluster::urls`]. Which node
/// is a master changes with a failover, so tests ask
/// ([`RedisCluster::master_of_slot`], [`RedisCluster::replica_of`]) rather
/// than assume. A spawned cluster with replicas can lose a master
/// ([`RedisCluster::kill`]) and have its replica promoted
/// ([`RedisCluster::wait_for_promotion`]), and can move a slot between
/// masters ([`RedisCluster::migrate_slot`]).
#[derive(Debug)]
pub struct RedisCluster {
    urls: Vec<String>,
    nodes: Vec<Option<ChildProcess>>,
    dir: Option<TempDir>,
}

/// One node as `CLUSTER NODES` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    /// The node id.
    pub id: String,
    /// `127.0.0.1:<port>`.
    pub address: String,
    /// Whether it serves slots as a master (not failed).
    pub is_master: bool,
    /// Whether the cluster takes it for failed (`fail` flag).
    pub failed: bool,
    /// The id of its master, for a replica.
    pub master_id: Option<String>,
    /// The slot ranges it serves, inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl RedisCluster {
    /// Three masters and no replicas; waits until every node reports
    /// `cluster_state:ok`.
    ///
    /// # Panics
    ///
    /// When `redis-server` or `redis-cli` is missing (with an install hint)
    /// or the cluster cannot be formed.
    pub fn start() -> RedisCluster {
        RedisCluster::start_nodes(0)
    }

    /// Three masters with one replica each (six processes), the layout a
    /// production cluster runs; waits until every node reports
    /// `cluster_state:ok` and every replica has finished its first sync.
    ///
    /// A replica takes over whatever its offset (`cluster-replica-validity
    /// -factor 0`), so a failover can lose writes the master acknowledged:
    /// the case the fault tests are about. Panics as
    /// [`RedisCluster::start`].
    pub fn start_with_replicas() -> RedisCluster {
        RedisCluster::start_nodes(1)
    }

    fn start_nodes(replicas: usize) -> RedisCluster {
        if let Some(urls) = std::env::var_os(REDIS_CLUSTER_URLS_ENV) {
            let urls: Vec<String> = urls
                .to_string_lossy()
                .split(',')
                .map(|url| url.trim().to_owned())
                .filter(|url| !url.is_empty())
                .collect();
            return RedisCluster {
                nodes: urls.iter().map(|_| None).collect(),
                urls,
                dir: None,
            };
        }
        let server = process::require_binary("redis-server");
        let cli = process::require_binary("redis-cli");
        let dir = tempfile::Builder::new()
            .prefix("palisade-redis-cluster-")
            .tempdir()
            .expect("create a temporary directory for the cluster");
        let mut nodes = Vec::new();
        let mut urls = Vec::new();
        for index in 0..3 * (1 + replicas) {
            let node_dir = dir.path().join(format!("node{index}"));
            std::fs::create_dir_all(&node_dir).expect("create a node directory");
            let (child, port) = start_cluster_node(&server, &node_dir)
                .unwrap_or_else(|error| panic!("cluster node {index} did not start: {error}"));
            nodes.push(Some(child));
            urls.push(format!("redis://127.0.0.1:{port}"));
        }
        let addresses: Vec<String> = urls
            .iter()
            .map(|url| url.trim_start_matches("redis://").to_owned())
            .collect();
        let output = Command::new(&cli)
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisCluster {
            urls,
            nodes,
            dir: Some(dir),
        };
        cluster.wait_until_ok(Duration::from_secs(30));
        cluster
    }

    /// The node URLs.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// The PIDs of spawned, running nodes (empty for an external cluster).
    pub fn pids(&self) -> Vec<u32> {
        self.nodes.iter().flatten().map(ChildProcess::pid).collect()
    }

    /// Runs one command on node `index` (see [`RedisServer::command`]).
    pub fn command(&self, index: usize, args: &[&str]) -> io::Result<String> {
        command_at(&self.urls[index], args)
    }

    /// The topology as the first running node sees it, in `urls` order
    /// (a node it does not know yet is left out).
    pub fn topology(&self) -> io::Result<Vec<(usize, ClusterNode)>> {
        let mut last_error = io::Error::other("no node is running");
        for index in self.running() {
            match self.command(index, &["CLUSTER", "NODES"]) {
                Ok(text) => {
                    let nodes = parse_cluster_nodes(&text);
                    return Ok(self
                        .urls
                        .iter()
                        .enumerate()
                        .filter_map(|(index, url)| {
                            let address = url.trim_start_matches("redis://");
                            let node = nodes.iter().find(|node| node.address == address)?;
                            Some((index, node.clone()))
                        })
                        .collect());
                }
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    /// The nodes serving slots as masters, as the first running node sees
    /// them (a replica it has not yet heard of as one shows as a master
    /// without slots, and is left out).
    pub fn masters(&self) -> Vec<usize> {
        self.topology()
            .expect("read the cluster topology")
            .into_iter()
            .filter(|(_, node)| node.is_master && !node.failed && !node.slots.is_empty())
            .map(|(index, _)| index)
            .collect()
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`).
    pub fn keyslot(&self, key: &str) -> u16 {
        let index = self.running().next().expect("a running node");
        self.command(index, &["CLUSTER", "KEYSLOT", key])
            .and_then(|slot| slot.parse().map_err(io::Error::other))
            .unwrap_or_else(|error| panic!("CLUSTER KEYSLOT {key}: {error}"))
    }

    /// The node serving `slot` as a master, as the first running node sees
    /// it.
    pub fn master_of_slot(&self, slot: u16) -> usize {
        self.topology()
            .expect("read the cluster topology")
            .into_iter()
            .find(|(_, node)| {
                node.is_master
                    && !node.failed
                    && node
                        .slots
                        .iter()
                        .any(|&(low, high)| (low..=high).contains(&slot))
            })
            .map(|(index, _)| index)
            .unwrap_or_else(|| panic!("no master serves slot {slot}"))
    }

    /// The replica of master `index`, once the first running node has
    /// heard of it (gossip may lag the replica's own view by a moment).
    pub fn replica_of(&self, index: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let topology = self.topology().expect("read the cluster topology");
            let master = topology
                .iter()
                .find(|(node, _)| *node == index)
                .map(|(_, node)| node.id.clone());
            let replica = topology.iter().find(|(_, node)| {
                master.is_some() && node.master_id.as_deref() == master.as_deref()
            });
            if let Some((replica, _)) = replica {
                return *replica;
            }
            assert!(Instant::now() < deadline, "node {index} has no replica");
            // Gossip settles on the nodes' own timers; no event to wait on.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills node `index` with SIGKILL: a master lost with whatever its
    /// replica had not received yet.
    pub fn kill(&mut self, index: usize) -> io::Result<()> {
        match self.nodes[index].take() {
            Some(mut child) => child.kill(),
            None => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("cannot kill node {index}: external or not running"),
            )),
        }
    }

    /// Pauses node `index` (SIGSTOP).
    pub fn pause(&self, index: usize) -> io::Result<()> {
        self.node(index)?.pause()
    }

    /// Resumes a paused node (SIGCONT).
    pub fn resume(&self, index: usize) -> io::Result<()> {
        self.node(index)?.resume()
    }

    /// Waits until `replica` is a master serving slots and every running
    /// node reports `cluster_state:ok` again (after its master was killed).
    /// Returns how long the promotion took.
    pub fn wait_for_promotion(&self, replica: usize, timeout: Duration) -> Duration {
        let started = Instant::now();
        let deadline = started + timeout;
        loop {
            let promoted = self
                .command(replica, &["ROLE"])
                .map(|role| role.starts_with("master"))
                .unwrap_or(false);
            if promoted && self.all_ok() {
                return started.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "node {replica} not promoted after {timeout:?}"
            );
            // Failure detection and the election run on the nodes' own
            // timers; there is no event to wait on.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Moves `slot`, with its keys, to master `to`: `CLUSTER SETSLOT ...
    /// IMPORTING` on the target, `MIGRATING` on the source, `MIGRATE` of
    /// each key, then `SETSLOT ... NODE` on every master. Between the steps
    /// clients get `ASK` and `TRYAGAIN` redirections, which is the point.
    ///
    /// `between` runs after the slot is marked migrating and before any
    /// key moves, so a test can act while the slot is in flight.
    pub fn migrate_slot(&self, slot: u16, to: usize, between: impl FnOnce()) -> io::Result<()> {
        let from = self.master_of_slot(slot);
        if from == to {
            return Ok(());
        }
        let topology = self.topology()?;
        let id = |index: usize| -> io::Result<String> {
            topology
                .iter()
                .find(|(node, _)| *node == index)
                .map(|(_, node)| node.id.clone())
                .ok_or_else(|| io::Error::other(format!("node {index} is not in the cluster")))
        };
        let (from_id, to_id) = (id(from)?, id(to)?);
        let slot_text = slot.to_string();
        self.command(
            to,
            &["CLUSTER", "SETSLOT", &slot_text, "IMPORTING", &from_id],
        )?;
        self.command(
            from,
            &["CLUSTER", "SETSLOT", &slot_text, "MIGRATING", &to_id],
        )?;
        between();
        let to_address = self.urls[to].trim_start_matches("redis://");
        let (host, port) = to_address
            .split_once(':')
            .ok_or_else(|| io::Error::other(format!("bad address {to_address}")))?;
        loop {
            let keys = self.command(from, &["CLUSTER", "GETKEYSINSLOT", &slot_text, "100"])?;
            let keys: Vec<&str> = keys.lines().filter(|key| !key.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let mut migrate = vec!["MIGRATE", host, port, "", "0", "5000", "KEYS"];
            migrate.extend(keys);
            self.command(from, &migrate)?;
        }
        // Masters serving slots: a replica the first node has not yet heard
        // of as one shows as a master without slots, and refuses SETSLOT.
        for (index, node) in &topology {
            if node.is_master && !node.failed && !node.slots.is_empty() {
                self.command(*index, &["CLUSTER", "SETSLOT", &slot_text, "NODE", &to_id])?;
            }
        }
        Ok(())
    }

    fn node(&self, index: usize) -> io::Result<&ChildProcess> {
        self.nodes[index].as_ref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                format!("node {index} is external or not running"),
            )
        })
    }

    /// Spawned nodes still running, or every node of an external cluster.
    fn running(&self) -> impl Iterator<Item = usize> + '_ {
        let external = self.dir.is_none();
        (0..self.urls.len()).filter(move |&index| external || self.nodes[index].is_some())
    }

    /// Every running node says `cluster_state:ok`, and every replica's
    /// link to its master is up (its first sync is done).
    fn all_ok(&self) -> bool {
        self.running().all(|index| {
            let ok = self
                .command(index, &["CLUSTER", "INFO"])
                .map(|info| info.contains("cluster_state:ok"))
                .unwrap_or(false);
            let synced = self
                .command(index, &["INFO", "replication"])
                .map(|info| !info.contains("role:slave") || info.contains("master_link_status:up"))
                .unwrap_or(false);
            ok && synced
        })
    }

    fn wait_until_ok(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.all_ok() {
            assert!(
                Instant::now() < deadline,
                "redis cluster not ok after {timeout:?}"
            );
            // The nodes gossip their way to "ok"; there is no event to wait on.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The nodes in `CLUSTER NODES` text.
fn parse_cluster_nodes(text: &str) -> Vec<ClusterNode> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let flags: Vec<&str> = fields[2].split(',').collect();
            let slots = fields[8..]
                .iter()
                .filter(|range| !range.starts_with('['))
                .filter_map(|range| {
                    let (low, high) = range.split_once('-').unwrap_or((range, range));
                    Some((low.parse().ok()?, high.parse().ok()?))
                })
                .collect();
            Some(ClusterNode {
                id: fields[0].to_owned(),
                address: fields[1].split('@').next().unwrap_or_default().to_owned(),
                is_master: flags.contains(&"master"),
                failed: flags.contains(&"fail"),
                master_id: (fields[3] != "-").then(|| fields[3].to_owned()),
                slots,
            })
        })
        .collect()
}

fn start_cluster_node(binary: &Path, dir: &Path) -> io::Result<(ChildProcess, u16)> {
    let mut last_error = io::Error::other("no attempt");
    for _ in 0..5 {
        let port = process::free_port();
        let bus_port = process::free_port();
        let log = dir.join("redis.log");
        let mut command = Command::new(binary);
        command
            .arg("--port")
            .arg(port.to_string())
            .arg("--cluster-port")
            .arg(bus_port.to_string())
            .args([
                "--bind",
                "127.0.0.1",
                "--daemonize",
                "no",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                // A replica with any offset may take over: failovers that
                // lose acknowledged writes are what the tests are about.
                "--cluster-replica-validity-factor",
                "0",
                // A replica's first sync starts at once, not after 5 s.
                "--repl-diskless-sync-delay",
                "0",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let _ = std::fs::remove_file(dir.join("nodes.conf"));
        let mut child = ChildProcess::spawn("redis-server (cluster)", &mut command, Some(&log))?;
        let url = format!("redis://127.0.0.1:{port}");
        match wait_until_ready(
            || command_at(&url, &["PING"]),
            &url,
            &mut child,
            Duration::from_secs(10),
        ) {
            Ok(()) => return Ok((child, port)),
            Err(error) => {
                last_error =
                    io::Error::new(error.kind(), format!("{error}\n{}", child.log_tail(2000)))
            }
        }
    }
    Err(last_error)
}

/// Runs one command against `url` (`redis://[[user]:password@]host:port[/db]`,
/// no TLS; `AUTH` first when the URL has a password) over a fresh
/// connection; see [`RedisServer::command`].
pub fn command_at(url: &str, args: &[&str]) -> io::Result<String> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
    let rest = url.strip_prefix("redis://").ok_or_else(|| {
        invalid(format!(
            "`{url}`: only plaintext redis:// URLs are supported"
        ))
    })?;
    let authority = rest.split('/').next().unwrap_or_default();
    let (credentials, address) = match authority.rsplit_once('@') {
        Some((credentials, address)) => (Some(credentials), address),
        None => (None, authority),
    };
    let socket: SocketAddr = address
        .parse()
        .map_err(|e| invalid(format!("{address}: {e}")))?;
    let credentials = credentials.map(|credentials| {
        let (user, password) = credentials.split_once(':').unwrap_or(("", credentials));
        (
            Some(percent_decode(user)).filter(|user| !user.is_empty()),
            percent_decode(password),
        )
    });
    let credentials = credentials
        .as_ref()
        .map(|(user, password)| (user.as_deref(), password.as_str()));
    run_command(&AdminTarget::Tcp(socket), credentials, args)
}

/// Where a plaintext command connection goes.
enum AdminTarget {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// Sends `AUTH` (if `credentials`: user, password) and then `args` over a
/// fresh plaintext connection, and reads the reply of `args`.
fn run_command(
    target: &AdminTarget,
    credentials: Option<(Option<&str>, &str)>,
    args: &[&str],
) -> io::Result<String> {
    let (reader, mut writer): (Box<dyn io::Read>, Box<dyn Write>) = match target {
        AdminTarget::Tcp(socket) => {
            let stream = TcpStream::connect_timeout(socket, Duration::from_secs(2))?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            (Box::new(stream.try_clone()?), Box::new(stream))
        }
        AdminTarget::Unix(path) => {
            let stream = std::os::unix::net::UnixStream::connect(path)?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            (Box::new(stream.try_clone()?), Box::new(stream))
        }
    };
    let mut reader = BufReader::new(reader);
    if let Some((user, password)) = credentials {
        let mut auth = vec!["AUTH"];
        auth.extend(user);
        auth.push(password);
        writer.write_all(&encode_command(&auth))?;
        read_reply(&mut reader, &mut Vec::new())?;
    }
    writer.write_all(&encode_command(args))?;
    let mut lines = Vec::new();
    read_reply(&mut reader, &mut lines)?;
    Ok(lines.join("\n"))
}

fn encode_command(args: &[&str]) -> Vec<u8> {
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        request.extend_from_slice(arg.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    request
}

/// Percent-encodes everything but RFC 3986's unreserved characters, for a
/// user name or password in a URL.
fn percent_encode(text: &str) -> String {
    let mut encoded = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// The inverse of [`percent_encode`] (and of any other valid encoding);
/// invalid escapes are kept as they are.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let escaped = (bytes[index] == b'%')
            .then(|| text.get(index + 1..index + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                decoded.push(byte);
                index += 3;
            }
            None => {
                decoded.push(bytes[index]);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

fn read_reply(reader: &mut impl BufRead, out: &mut Vec<String>) -> io::Result<()> {
    let mut header = String::new();
    reader.read_line(&mut header)?;
    let header = header.trim_end_matches(['\r', '\n']);
    let (kind, rest) = header.split_at(header.len().min(1));
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("bad reply `{header}`"));
    match kind {
        "+" | ":" => out.push(rest.to_owned()),
        "-" => return Err(io::Error::other(format!("redis error: {rest}"))),
        "$" => {
            let len: i64 = rest.parse().map_err(|_| bad())?;
            if len < 0 {
                out.push(String::new());
            } else {
                let mut body = vec![0; len as usize + 2];
                reader.read_exact(&mut body)?;
                body.truncate(len as usize);
                out.push(String::from_utf8_lossy(&body).into_owned());
            }
        }
        "*" => {
            let count: i64 = rest.parse().map_err(|_| bad())?;
            for _ in 0..count.max(0) {
                read_reply(reader, out)?;
            }
        }
        _ => return Err(bad()),
    }
    Ok(())
}

/// The `calls=` count of one command in `INFO commandstats` text (0 if the
/// command was never called). `command` is lower case, e.g. `evalsha`.
pub fn commandstat_calls(info: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_are_read_per_command() {
        let info =
            "# Commandstats\r\ncmdstat_evalsha:calls=12,usec=3\r\ncmdstat_eval:calls=2,usec=1\r\n";
        assert_eq!(commandstat_calls(info, "evalsha"), 12);
        assert_eq!(commandstat_calls(info, "eval"), 2);
        assert_eq!(commandstat_calls(info, "publish"), 0);
    }

    #[test]
    fn cluster_nodes_are_parsed() {
        let text = "a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 [93-<-b2]\n\
                    b2 127.0.0.1:7001@17001 slave a1 0 0 1 connected\n\
                    c3 127.0.0.1:7002@17002 master,fail - 0 0 2 disconnected 5461 5462-10922\n";
        let nodes = parse_cluster_nodes(text);
        assert_eq!(nodes.len(), 3);
        assert!(nodes[0].is_master && !nodes[0].failed);
        assert_eq!(nodes[0].slots, vec![(0, 5460)]);
        assert_eq!(nodes[1].master_id.as_deref(), Some("a1"));
        assert_eq!(nodes[1].address, "127.0.0.1:7001");
        assert!(nodes[2].failed);
        assert_eq!(nodes[2].slots, vec![(5461, 5461), (5462, 10922)]);
    }

    #[test]
    fn credentials_survive_the_url() {
        for text in ["plain", "p@ss:w/rd %41 ü", ""] {
            assert_eq!(percent_decode(&percent_encode(text)), text);
        }
        assert_eq!(percent_encode("a b@c"), "a%20b%40c");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }

    #[test]
    fn password_server_refuses_commands_without_it() {
        let password = "s3cret/with:odd@chars";
        let server = RedisServer::spawn(RedisOptions::default().with_password(password));
        assert!(server.url().contains('@'), "{}", server.url());
        assert!(
            !server.url().contains(password),
            "the password is percent-encoded"
        );
        assert_eq!(server.command(&["SET", "k", "v"]).unwrap(), "OK");
        assert_eq!(command_at(&server.url(), &["GET", "k"]).unwrap(), "v");
        let refused = command_at(&server.url_without_password(), &["GET", "k"]).unwrap_err();
        assert!(refused.to_string().contains("NOAUTH"), "{refused}");
        let wrong = command_at(&server.url_as("default", "wrong"), &["GET", "k"]).unwrap_err();
        assert!(wrong.to_string().contains("WRONGPASS"), "{wrong}");
    }

    #[test]
    fn spawned_server_restarts_on_the_same_port() {
        let mut server = RedisServer::spawn(RedisOptions::persistence(Persistence::AofAlways));
        assert_eq!(server.command(&["SET", "k", "v"]).unwrap(), "OK");
        let port = server.port();
        server.kill().unwrap();
        assert!(server.command(&["PING"]).is_err());
        server.restart().unwrap();
        assert_eq!(server.port(), port);
        assert_eq!(server.command(&["GET", "k"]).unwrap(), "v");
    }
}
