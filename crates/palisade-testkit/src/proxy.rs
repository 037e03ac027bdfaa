//! A fault-injecting TCP proxy on loopback: the network between two
//! processes of a test, made to misbehave on command.
//!
//! A [`FaultProxy`] listens on `127.0.0.1:<free port>` and forwards every
//! connection to one upstream address. The test points a client (or an etcd
//! peer) at the proxy instead of the server, and then changes the proxy's
//! [`Fault`] at run time: a partition, one direction dropped, a fixed
//! delay, a lossy link. All traffic stays on loopback; nothing outside the
//! machine is ever addressed.
//!
//! # What each fault means for a TCP stream
//!
//! A proxy sees byte streams, not packets, so each network fault is modelled
//! by what it does to the application on top of TCP, which is all a
//! Palisade client or server can ever observe:
//!
//! - [`Fault::Partition`]: nothing crosses, in either direction. Bytes are
//!   *held*, not discarded: the proxy stops reading, so they wait in the
//!   kernel buffers exactly as unacknowledged segments wait in a sender's
//!   retransmission queue during a real partition. Connections stay open (no
//!   RST, no FIN), and a new connection is accepted but not dialled upstream
//!   until the partition heals, as a SYN retransmitted into a black hole
//!   would be. When the partition heals, everything held is delivered, in
//!   order: a request sent into the partition arrives late. That late
//!   arrival is the fencing hazard (issue 6, scenario 7).
//! - [`Fault::DropOneWay`]: the same, for one direction only; the other
//!   direction keeps flowing. A new connection is not established (the
//!   handshake needs both directions).
//! - [`Fault::Delay`]: every chunk is delivered a fixed time after it was
//!   read, in each direction, order preserved. Chunks are pipelined: the
//!   delay adds latency, not a throughput limit.
//! - [`Fault::Loss`]: TCP cannot lose bytes without corrupting the stream,
//!   so "packet loss" is what loss does to a TCP connection: with the given
//!   probability per chunk, the chunk is *late* by a retransmission timeout
//!   (200 ms, doubling on each consecutive loss in that direction, capped, as
//!   Linux's RTO backs off), and a new connection's handshake is lost with
//!   the same probability (a 1 s SYN timeout, doubling). Optionally, with a
//!   second probability per chunk, the connection is reset, which is what an
//!   application with timeouts does to a connection that stalls too long.
//!   Clients then see slow answers, timeouts and resets, the outcomes whose
//!   retries the store's request-id de-duplication must absorb.
//!
//! [`FaultProxy::reset_all`] resets every open connection (RST, both sides).
//!
//! # Faults by origin process
//!
//! [`FaultProxy::set_for_process`] applies a fault only to connections
//! opened by one process (found through `/proc`: the client socket's inode
//! among that process's file descriptors). A proxy in front of etcd member
//! `j` can thereby cut member `i`'s connections to `j` while member `k`'s
//! keep flowing; this is how [`EtcdCluster::isolate`](crate::etcd::EtcdCluster::isolate)
//! isolates one member from its peers.
//!
//! # Running
//!
//! Each proxy runs its own single-threaded tokio runtime on a thread of its
//! own, so it keeps forwarding while the test blocks (in a `std` call, in
//! `block_in_place`, or on a current-thread test runtime). Dropping the
//! proxy stops it: the listener closes and every connection is closed.
//!
//! ```no_run
//! use palisade_testkit::proxy::{Direction, FaultProxy};
//! use std::time::Duration;
//!
//! # fn example(server: std::net::SocketAddr) -> std::io::Result<()> {
//! let proxy = FaultProxy::start("client to resource server", server)?;
//! let url = proxy.url(); // give this to the client instead of the server's
//! proxy.partition(); // requests now wait in the partition
//! proxy.pass(); // ... and arrive late
//! proxy.drop_one_way(Direction::ServerToClient);
//! proxy.delay(Duration::from_millis(50));
//! proxy.loss(0.2);
//! proxy.reset_all();
//! println!("{}", proxy.stats());
//! # drop(url);
//! # Ok(())
//! # }
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::ReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// The direction of bytes through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the connecting client to the upstream server (requests).
    ClientToServer,
    /// From the upstream server back to the client (answers).
    ServerToClient,
}

impl Direction {
    fn name(self) -> &'static str {
        match self {
            Direction::ClientToServer => "client->server",
            Direction::ServerToClient => "server->client",
        }
    }
}

/// A lossy link, as TCP experiences one: see the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Loss {
    /// Probability, per chunk and per new connection, that it is lost and
    /// must wait for a retransmission.
    pub probability: f64,
    /// The first retransmission timeout of a lost chunk; it doubles with
    /// each consecutive loss in the same direction of one connection (Linux
    /// starts at 200 ms).
    pub first_rto: Duration,
    /// The longest retransmission timeout.
    pub max_rto: Duration,
    /// The first retransmission timeout of a lost handshake (Linux: 1 s),
    /// doubling on each consecutive loss.
    pub connect_rto: Duration,
    /// Probability, per chunk, that the connection is reset instead, as an
    /// application whose timeout expired during a stall would reset it.
    pub reset_probability: f64,
}

impl Loss {
    /// Loss with probability `probability` (clamped to 0..=1), Linux's
    /// timeouts (200 ms first RTO, capped at 1.6 s; 1 s for a handshake)
    /// and no resets.
    pub fn new(probability: f64) -> Self {
        Loss {
            probability: clamp_probability(probability),
            first_rto: Duration::from_millis(200),
            max_rto: Duration::from_millis(1600),
            connect_rto: Duration::from_secs(1),
            reset_probability: 0.0,
        }
    }

    /// The same, with other retransmission timeouts (for tests that cannot
    /// wait for real ones).
    pub fn with_rto(mut self, first_rto: Duration, max_rto: Duration) -> Self {
        self.first_rto = first_rto;
        self.max_rto = max_rto.max(first_rto);
        self
    }

    /// The same, with another handshake timeout.
    pub fn with_connect_rto(mut self, connect_rto: Duration) -> Self {
        self.connect_rto = connect_rto;
        self
    }

    /// The same, also resetting connections with probability
    /// `reset_probability` per chunk.
    pub fn with_resets(mut self, reset_probability: f64) -> Self {
        self.reset_probability = clamp_probability(reset_probability);
        self
    }

    /// The retransmission timeout of a chunk after `consecutive` earlier
    /// losses in a row.
    fn data_rto(&self, consecutive: u32) -> Duration {
        self.first_rto
            .saturating_mul(1u32 << consecutive.min(16))
            .min(self.max_rto)
    }

    /// The retransmission timeout of a handshake after `consecutive`
    /// earlier losses in a row (at most eight times the first).
    fn handshake_rto(&self, consecutive: u32) -> Duration {
        self.connect_rto.saturating_mul(1u32 << consecutive.min(3))
    }
}

fn clamp_probability(probability: f64) -> f64 {
    if probability.is_nan() {
        0.0
    } else {
        probability.clamp(0.0, 1.0)
    }
}

/// What the proxy does to the traffic: see the [module docs](self) for
/// what each means at the TCP layer.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Fault {
    /// Forward everything at once.
    #[default]
    Pass,
    /// Nothing crosses in either direction; bytes are held until it heals.
    Partition,
    /// Nothing crosses in that direction; the other flows.
    DropOneWay(Direction),
    /// Every chunk is delivered this long after it was read.
    Delay(Duration),
    /// A lossy link.
    Loss(Loss),
}

impl Fault {
    /// Whether bytes in `direction` are held.
    fn holds(&self, direction: Direction) -> bool {
        match self {
            Fault::Partition => true,
            Fault::DropOneWay(dropped) => *dropped == direction,
            _ => false,
        }
    }

    /// Whether a new connection can be established (both directions open).
    fn allows_handshake(&self) -> bool {
        !self.holds(Direction::ClientToServer) && !self.holds(Direction::ServerToClient)
    }

    fn delay(&self) -> Duration {
        match self {
            Fault::Delay(delay) => *delay,
            _ => Duration::ZERO,
        }
    }

    fn loss(&self) -> Option<Loss> {
        match self {
            Fault::Loss(loss) => Some(*loss),
            _ => None,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Pass => write!(f, "pass"),
            Fault::Partition => write!(f, "partition"),
            Fault::DropOneWay(direction) => write!(f, "drop {}", direction.name()),
            Fault::Delay(delay) => write!(f, "delay {} ms", delay.as_millis()),
            Fault::Loss(loss) => {
                write!(f, "loss {:.0} %", loss.probability * 100.0)?;
                if loss.reset_probability > 0.0 {
                    write!(f, " (resets {:.1} %)", loss.reset_probability * 100.0)?;
                }
                Ok(())
            }
        }
    }
}

/// What the proxy has done so far; see [`FaultProxy::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted from clients.
    pub connections_accepted: u64,
    /// Connections dialled through to the upstream server.
    pub connections_forwarded: u64,
    /// Connections open right now.
    pub connections_open: u64,
    /// Connections reset by the proxy ([`FaultProxy::reset_all`], a loss
    /// reset, or an error on the other side passed on as a reset).
    pub connections_reset: u64,
    /// Bytes forwarded from clients to the server.
    pub bytes_client_to_server: u64,
    /// Bytes forwarded from the server to clients.
    pub bytes_server_to_client: u64,
    /// Faults set other than [`Fault::Pass`] (each call counts once).
    pub faults_applied: u64,
    /// Chunks (and handshakes) delivered late by a [`Fault::Loss`].
    pub chunks_lost: u64,
    /// Chunks delivered late by a [`Fault::Delay`].
    pub chunks_delayed: u64,
    /// Times bytes (or a new connection's first bytes) reached the proxy
    /// while their direction was held: each is a request or answer sent
    /// into a partition. See [`FaultProxy::wait_for_held`].
    pub held_arrivals: u64,
}

impl fmt::Display for ProxyStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} connections ({} forwarded, {} open, {} reset), {} B up, {} B down, {} faults applied, {} chunks lost, {} delayed, {} held",
            self.connections_accepted,
            self.connections_forwarded,
            self.connections_open,
            self.connections_reset,
            self.bytes_client_to_server,
            self.bytes_server_to_client,
            self.faults_applied,
            self.chunks_lost,
            self.chunks_delayed,
            self.held_arrivals
        )
    }
}

#[derive(Debug, Default)]
struct Counters {
    connections_accepted: AtomicU64,
    connections_forwarded: AtomicU64,
    connections_open: AtomicU64,
    connections_reset: AtomicU64,
    bytes_client_to_server: AtomicU64,
    bytes_server_to_client: AtomicU64,
    faults_applied: AtomicU64,
    chunks_lost: AtomicU64,
    chunks_delayed: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// The rules a connection's fault is computed from.
#[derive(Debug, Default)]
struct Rules {
    /// The fault for every connection no process rule matches.
    default: Fault,
    /// Faults for connections opened by a given process id.
    by_process: Vec<(u32, Fault)>,
}

/// What the control side keeps of each open connection.
#[derive(Debug)]
struct ConnectionControl {
    /// The client's address as the proxy sees it (its ephemeral port finds
    /// the client socket in `/proc/net/tcp` for process rules).
    client: SocketAddr,
    /// The connection's effective fault. Its pumps wait on this channel
    /// while their direction is held, so a heal reaches them at once.
    fault: watch::Sender<Fault>,
    /// Set to `true` to reset the connection.
    reset: watch::Sender<bool>,
}

/// A small, seedable random generator (SplitMix64): the proxy's loss
/// decisions, reproducible from the seed in the logs.
#[derive(Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `true` with probability `probability`.
    fn chance(&mut self, probability: f64) -> bool {
        if probability <= 0.0 {
            return false;
        }
        // 53 random bits as a float in [0, 1).
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        unit < probability
    }
}

/// State shared by the control handle and the proxy's runtime.
#[derive(Debug)]
struct Shared {
    name: String,
    listen: SocketAddr,
    upstream: SocketAddr,
    /// Locked before `connections` whenever both are needed.
    rules: Mutex<Rules>,
    connections: Mutex<HashMap<u64, ConnectionControl>>,
    counters: Counters,
    /// Counts held arrivals; a watch so a test can wait for one.
    held_arrivals: watch::Sender<u64>,
    random: Mutex<SplitMix64>,
    seed: u64,
}

/// Locks a mutex, ignoring poisoning: a panicking test thread must not
/// turn the proxy's own bookkeeping into a second panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    fn chance(&self, probability: f64) -> bool {
        lock(&self.random).chance(probability)
    }

    fn note_held_arrival(&self, direction: Direction) {
        tracing::debug!(proxy = %self.name, direction = direction.name(), "fault proxy: bytes held");
        self.held_arrivals.send_modify(|count| *count += 1);
    }

    /// The effective fault of a connection from `client`, under `rules`.
    fn fault_for(&self, rules: &Rules, client: SocketAddr, origins: &Origins) -> Fault {
        if let Some(inode) = origins.sockets.get(&(client.port(), self.listen.port())) {
            for (pid, fault) in &rules.by_process {
                if origins
                    .inodes_by_pid
                    .get(pid)
                    .is_some_and(|inodes| inodes.contains(inode))
                {
                    return fault.clone();
                }
            }
        }
        rules.default.clone()
    }

    /// Recomputes every open connection's fault after a rule change.
    fn apply_rules(&self) {
        let rules = lock(&self.rules);
        let origins = Origins::read(&rules);
        let connections = lock(&self.connections);
        for control in connections.values() {
            let fault = self.fault_for(&rules, control.client, &origins);
            control.fault.send_if_modified(|current| {
                if *current == fault {
                    false
                } else {
                    *current = fault;
                    true
                }
            });
        }
    }

    /// Registers a new connection and returns its id and control channels.
    fn register(
        &self,
        id: u64,
        client: SocketAddr,
    ) -> (watch::Receiver<Fault>, watch::Receiver<bool>) {
        let rules = lock(&self.rules);
        let origins = Origins::read(&rules);
        let fault = self.fault_for(&rules, client, &origins);
        let (fault_sender, fault_receiver) = watch::channel(fault);
        let (reset_sender, reset_receiver) = watch::channel(false);
        lock(&self.connections).insert(
            id,
            ConnectionControl {
                client,
                fault: fault_sender,
                reset: reset_sender,
            },
        );
        drop(rules);
        (fault_receiver, reset_receiver)
    }
}

/// What the process rules need from `/proc` to tell which process opened
/// a connection: empty when there are no process rules.
#[derive(Debug, Default)]
struct Origins {
    /// `(local port, remote port) → inode` of every TCP socket.
    sockets: HashMap<(u16, u16), u64>,
    /// The socket inodes of each process a rule names.
    inodes_by_pid: HashMap<u32, HashSet<u64>>,
}

impl Origins {
    fn read(rules: &Rules) -> Origins {
        if rules.by_process.is_empty() {
            return Origins::default();
        }
        Origins {
            sockets: tcp_socket_table(),
            inodes_by_pid: rules
                .by_process
                .iter()
                .map(|(pid, _)| (*pid, process_socket_inodes(*pid)))
                .collect(),
        }
    }
}

/// The socket inodes of process `pid` (empty if it is gone).
fn process_socket_inodes(pid: u32) -> HashSet<u64> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .filter_map(|target| {
            let target = target.to_str()?;
            target
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// `(local port, remote port) → socket inode` for every TCP socket in this
/// network namespace, IPv4 and IPv6 (`/proc/net/tcp{,6}`). On loopback the
/// pair of ports names a connection's client socket uniquely enough for a
/// test: its remote port is the proxy's own listening port.
fn tcp_socket_table() -> HashMap<(u16, u16), u64> {
    let mut table = HashMap::new();
    for path in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        for line in text.lines().skip(1) {
            if let Some((ports, inode)) = parse_tcp_line(line) {
                table.insert(ports, inode);
            }
        }
    }
    table
}

/// Parses one line of `/proc/net/tcp`: `sl local rem st tx:rx tr:tm retr
/// uid timeout inode ...`, addresses as `HEXADDR:HEXPORT`.
fn parse_tcp_line(line: &str) -> Option<((u16, u16), u64)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let port = |field: &str| -> Option<u16> {
        let (_, port) = field.rsplit_once(':')?;
        u16::from_str_radix(port, 16).ok()
    };
    let local = port(fields.get(1)?)?;
    let remote = port(fields.get(2)?)?;
    let inode = fields.get(9)?.parse().ok()?;
    Some(((local, remote), inode))
}

/// A fault-injecting TCP proxy on loopback; see the [module docs](self).
///
/// Control methods take `&self` and act at once on every open connection
/// and on the connections accepted afterwards.
#[derive(Debug)]
pub struct FaultProxy {
    shared: Arc<Shared>,
    /// Tells the proxy's thread to stop; taken on drop.
    shutdown: Option<oneshot::Sender<()>>,
    /// The proxy's thread, joined on drop so no connection outlives it.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy named `name` (for logs) on a free loopback port,
    /// forwarding to `upstream`, with [`Fault::Pass`].
    pub fn start(name: &str, upstream: SocketAddr) -> io::Result<FaultProxy> {
        let seed = {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            nanos ^ (u64::from(std::process::id()) << 32)
        };
        FaultProxy::start_seeded(name, upstream, seed)
    }

    /// Like [`FaultProxy::start`], with the seed of its loss decisions
    /// given, to replay a run.
    pub fn start_seeded(name: &str, upstream: SocketAddr, seed: u64) -> io::Result<FaultProxy> {
        let listener = StdTcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let listen = listener.local_addr()?;
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            listen,
            upstream,
            rules: Mutex::new(Rules::default()),
            connections: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            held_arrivals: watch::channel(0).0,
            random: Mutex::new(SplitMix64(seed)),
            seed,
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (shutdown, stopped) = oneshot::channel();
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy {name}"))
            .spawn(move || {
                runtime.block_on(accept_loop(thread_shared, listener, stopped));
                // Dropping the runtime cancels every connection task, which
                // closes their sockets.
                drop(runtime);
            })?;
        tracing::debug!(proxy = name, %listen, %upstream, seed, "fault proxy started");
        Ok(FaultProxy {
            shared,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// The proxy's own address: point clients here.
    pub fn address(&self) -> SocketAddr {
        self.shared.listen
    }

    /// `http://<address>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.listen)
    }

    /// Where the proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// The proxy's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The seed of the loss decisions (see [`FaultProxy::start_seeded`]).
    pub fn seed(&self) -> u64 {
        self.shared.seed
    }

    /// The fault applied to connections no process rule matches.
    pub fn fault(&self) -> Fault {
        lock(&self.shared.rules).default.clone()
    }

    /// Sets the fault for every connection no process rule matches, now
    /// and for new connections.
    pub fn set(&self, fault: Fault) {
        if fault != Fault::Pass {
            bump(&self.shared.counters.faults_applied, 1);
        }
        tracing::info!(proxy = %self.shared.name, %fault, "fault proxy: fault set");
        lock(&self.shared.rules).default = fault;
        self.shared.apply_rules();
    }

    /// Heals: forwards everything, and delivers what was held.
    pub fn pass(&self) {
        self.set(Fault::Pass);
    }

    /// A partition: nothing crosses until [`FaultProxy::pass`].
    pub fn partition(&self) {
        self.set(Fault::Partition);
    }

    /// Drops one direction until [`FaultProxy::pass`].
    pub fn drop_one_way(&self, direction: Direction) {
        self.set(Fault::DropOneWay(direction));
    }

    /// Delays every chunk by `delay`, in each direction.
    pub fn delay(&self, delay: Duration) {
        self.set(Fault::Delay(delay));
    }

    /// A lossy link with probability `probability` and Linux's timeouts
    /// ([`Loss::new`]).
    pub fn loss(&self, probability: f64) {
        self.set(Fault::Loss(Loss::new(probability)));
    }

    /// Applies `fault` only to connections opened by process `pid` (now
    /// and later), taking precedence over the proxy-wide fault. A second
    /// call for the same pid replaces its fault.
    pub fn set_for_process(&self, pid: u32, fault: Fault) {
        if fault != Fault::Pass {
            bump(&self.shared.counters.faults_applied, 1);
        }
        tracing::info!(proxy = %self.shared.name, pid, %fault, "fault proxy: fault set for one process");
        {
            let mut rules = lock(&self.shared.rules);
            rules.by_process.retain(|(ruled, _)| *ruled != pid);
            rules.by_process.push((pid, fault));
        }
        self.shared.apply_rules();
    }

    /// Removes every process rule ([`FaultProxy::set_for_process`]).
    pub fn clear_process_rules(&self) {
        tracing::info!(proxy = %self.shared.name, "fault proxy: process rules cleared");
        lock(&self.shared.rules).by_process.clear();
        self.shared.apply_rules();
    }

    /// Resets every open connection (RST to both sides).
    pub fn reset_all(&self) {
        let connections = lock(&self.shared.connections);
        tracing::info!(proxy = %self.shared.name, open = connections.len(), "fault proxy: resetting every connection");
        for control in connections.values() {
            control.reset.send_replace(true);
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> ProxyStats {
        let c = &self.shared.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ProxyStats {
            connections_accepted: load(&c.connections_accepted),
            connections_forwarded: load(&c.connections_forwarded),
            connections_open: load(&c.connections_open),
            connections_reset: load(&c.connections_reset),
            bytes_client_to_server: load(&c.bytes_client_to_server),
            bytes_server_to_client: load(&c.bytes_server_to_client),
            faults_applied: load(&c.faults_applied),
            chunks_lost: load(&c.chunks_lost),
            chunks_delayed: load(&c.chunks_delayed),
            held_arrivals: *self.shared.held_arrivals.borrow(),
        }
    }

    /// Waits until at least `count` held arrivals have happened since the
    /// proxy started (see [`ProxyStats::held_arrivals`]), for at most
    /// `timeout`; returns whether they did. This is the event "the request
    /// is now inside the partition" that a test waits on instead of
    /// sleeping.
    pub async fn wait_for_held(&self, count: u64, timeout: Duration) -> bool {
        let mut held = self.shared.held_arrivals.subscribe();
        tokio::time::timeout(timeout, held.wait_for(|held| *held >= count))
            .await
            .is_ok_and(|waited| waited.is_ok())
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        tracing::debug!(proxy = %self.shared.name, stats = %self.stats(), "fault proxy stopped");
    }
}

async fn accept_loop(
    shared: Arc<Shared>,
    listener: StdTcpListener,
    mut stopped: oneshot::Receiver<()>,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(proxy = %shared.name, %error, "fault proxy cannot listen");
            return;
        }
    };
    let mut next_id = 0u64;
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((client, address)) => {
                    next_id += 1;
                    bump(&shared.counters.connections_accepted, 1);
                    let (fault, reset) = shared.register(next_id, address);
                    tokio::spawn(run_connection(Arc::clone(&shared), next_id, client, fault, reset));
                }
                Err(error) => {
                    // Out of file descriptors or a connection aborted
                    // before it was accepted: keep serving the others.
                    tracing::warn!(proxy = %shared.name, %error, "fault proxy accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
}

/// Unregisters a connection when its task ends, however it ends.
struct Registration {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.shared.connections).remove(&self.id);
        self.shared
            .counters
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a connection ended abnormally.
#[derive(Debug)]
enum Broken {
    /// The proxy reset it (on command or by a loss reset).
    Reset,
    /// One side failed; the other gets a reset.
    Io(io::Error),
}

impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Broken::Reset => write!(f, "reset by the proxy"),
            Broken::Io(error) => write!(f, "{error}"),
        }
    }
}

async fn run_connection(
    shared: Arc<Shared>,
    id: u64,
    mut client: TcpStream,
    fault: watch::Receiver<Fault>,
    mut reset: watch::Receiver<bool>,
) {
    bump(&shared.counters.connections_open, 1);
    let _registration = Registration {
        shared: Arc::clone(&shared),
        id,
    };
    let _ = client.set_nodelay(true);
    // The handshake: held while the path is cut, late on a lossy link.
    let dialled = tokio::select! {
        dialled = dial(&shared, &client, fault.clone()) => dialled,
        _ = reset.wait_for(|reset| *reset) => Err(Broken::Reset),
    };
    let mut server = match dialled {
        Ok(server) => server,
        Err(broken) => {
            tracing::debug!(proxy = %shared.name, id, %broken, "fault proxy: connection not forwarded");
            bump(&shared.counters.connections_reset, 1);
            let _ = client.set_zero_linger();
            return;
        }
    };
    bump(&shared.counters.connections_forwarded, 1);
    let _ = server.set_nodelay(true);
    let outcome = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let upstream = pump(
            &shared,
            Direction::ClientToServer,
            client_read,
            server_write,
            fault.clone(),
        );
        let downstream = pump(
            &shared,
            Direction::ServerToClient,
            server_read,
            client_write,
            fault,
        );
        tokio::select! {
            done = async { tokio::try_join!(upstream, downstream) } => done.map(|_| ()),
            _ = reset.wait_for(|reset| *reset) => Err(Broken::Reset),
        }
    };
    if let Err(broken) = outcome {
        // A reset, or an error on one side: both sides get an RST, as a
        // broken path looks to each end.
        tracing::debug!(proxy = %shared.name, id, %broken, "fault proxy: connection reset");
        bump(&shared.counters.connections_reset, 1);
        let _ = client.set_zero_linger();
        let _ = server.set_zero_linger();
    }
}

/// Connects to the upstream once the fault lets a handshake through.
async fn dial(
    shared: &Shared,
    client: &TcpStream,
    mut fault: watch::Receiver<Fault>,
) -> Result<TcpStream, Broken> {
    let mut consecutive_losses = 0u32;
    let mut noted = false;
    loop {
        let current = fault.borrow_and_update().clone();
        if !current.allows_handshake() {
            let mut probe = [0u8; 1];
            tokio::select! {
                changed = fault.changed() => if changed.is_err() {
                    return Err(Broken::Reset);
                },
                // The client's first bytes, waiting behind the cut.
                peeked = client.peek(&mut probe), if !noted => {
                    noted = true;
                    if peeked.is_ok_and(|n| n > 0) {
                        shared.note_held_arrival(Direction::ClientToServer);
                    }
                }
            }
            continue;
        }
        if let Some(loss) = current.loss() {
            if shared.chance(loss.probability) {
                bump(&shared.counters.chunks_lost, 1);
                let rto = loss.handshake_rto(consecutive_losses);
                consecutive_losses += 1;
                tokio::time::sleep(rto).await;
                continue;
            }
        }
        let delay = current.delay();
        if !delay.is_zero() {
            bump(&shared.counters.chunks_delayed, 1);
            tokio::time::sleep(delay).await;
        }
        return TcpStream::connect(shared.upstream)
            .await
            .map_err(Broken::Io);
    }
}

/// Waits until `direction` is not held (the writer's side: a chunk in
/// hand is a held arrival).
async fn wait_flowing(shared: &Shared, fault: &mut watch::Receiver<Fault>, direction: Direction) {
    let mut noted = false;
    loop {
        if !fault.borrow_and_update().holds(direction) {
            return;
        }
        if !noted {
            noted = true;
            shared.note_held_arrival(direction);
        }
        if fault.changed().await.is_err() {
            return;
        }
    }
}

/// Waits until `direction` is not held (the reader's side: bytes waiting
/// unread in `from` are a held arrival, noted once).
async fn wait_readable_flowing(
    shared: &Shared,
    fault: &mut watch::Receiver<Fault>,
    direction: Direction,
    from: &mut ReadHalf<'_>,
) {
    let mut noted = false;
    loop {
        if !fault.borrow_and_update().holds(direction) {
            return;
        }
        let mut probe = [0u8; 1];
        tokio::select! {
            changed = fault.changed() => if changed.is_err() {
                return;
            },
            peeked = from.peek(&mut probe), if !noted => {
                noted = true;
                if peeked.is_ok_and(|n| n > 0) {
                    shared.note_held_arrival(direction);
                }
            }
        }
    }
}

/// One chunk on its way through the proxy.
struct Chunk {
    bytes: Vec<u8>,
    /// When it may be delivered (read time + delay).
    due: Instant,
    /// Whether it was "lost" and waits for a retransmission first.
    lost: bool,
}

/// How many chunks may be in flight in one direction; beyond that, the
/// proxy stops reading and the sender's kernel buffers fill, as a real slow
/// path pushes back.
const CHUNKS_IN_FLIGHT: usize = 64;
/// The largest chunk read at once.
const CHUNK_BYTES: usize = 16 * 1024;

/// Moves bytes in one direction: a reader stamps each chunk with its fate,
/// a writer delivers chunks in order when they are due.
async fn pump(
    shared: &Shared,
    direction: Direction,
    mut from: ReadHalf<'_>,
    mut to: impl AsyncWrite + Unpin,
    fault: watch::Receiver<Fault>,
) -> Result<(), Broken> {
    let (chunks, mut in_flight) = mpsc::channel::<Chunk>(CHUNKS_IN_FLIGHT);
    let mut reader_fault = fault.clone();
    let reading = async move {
        let mut buffer = vec![0u8; CHUNK_BYTES];
        loop {
            wait_readable_flowing(shared, &mut reader_fault, direction, &mut from).await;
            let read = from.read(&mut buffer).await.map_err(Broken::Io)?;
            if read == 0 {
                // End of stream: dropping `chunks` tells the writer.
                return Ok(());
            }
            let current = reader_fault.borrow().clone();
            let mut lost = false;
            if let Some(loss) = current.loss() {
                if shared.chance(loss.reset_probability) {
                    return Err(Broken::Reset);
                }
                lost = shared.chance(loss.probability);
            }
            let chunk = Chunk {
                bytes: buffer[..read].to_vec(),
                due: Instant::now() + current.delay(),
                lost,
            };
            if chunks.send(chunk).await.is_err() {
                return Ok(());
            }
        }
    };
    let mut writer_fault = fault;
    let writing = async move {
        let mut consecutive_losses = 0u32;
        let delivered = match direction {
            Direction::ClientToServer => &shared.counters.bytes_client_to_server,
            Direction::ServerToClient => &shared.counters.bytes_server_to_client,
        };
        while let Some(chunk) = in_flight.recv().await {
            if chunk.due > Instant::now() {
                bump(&shared.counters.chunks_delayed, 1);
                tokio::time::sleep_until(chunk.due).await;
            }
            if chunk.lost {
                bump(&shared.counters.chunks_lost, 1);
                let loss = writer_fault
                    .borrow()
                    .loss()
                    .unwrap_or_else(|| Loss::new(0.0));
                tokio::time::sleep(loss.data_rto(consecutive_losses)).await;
                consecutive_losses += 1;
            } else {
                consecutive_losses = 0;
            }
            // A chunk in flight when a partition begins is held too.
            wait_flowing(shared, &mut writer_fault, direction).await;
            // Counted as it is handed over, so a test that has read the
            // bytes finds them counted.
            bump(delivered, chunk.bytes.len() as u64);
            to.write_all(&chunk.bytes).await.map_err(Broken::Io)?;
        }
        // Pass the end of stream on (a half close); the other direction
        // may still be talking.
        let _ = to.shutdown().await;
        Ok(())
    };
    tokio::try_join!(reading, writing).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::UnboundedReceiver;

    /// Long enough for anything that should happen on loopback to happen
    /// on a loaded CI machine.
    const EVENTUALLY: Duration = Duration::from_secs(10);
    /// How long something that must *not* happen is given to happen
    /// anyway: the subject of these tests is time, so a bounded wait is
    /// the honest check.
    const QUIET: Duration = Duration::from_millis(400);

    /// An echo server that also reports every chunk it receives, so a
    /// test can see what reached the server apart from what came back.
    struct Echo {
        address: SocketAddr,
        received: UnboundedReceiver<Vec<u8>>,
        accepted: Arc<AtomicU64>,
    }

    async fn echo_server() -> Echo {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (report, received) = mpsc::unbounded_channel();
        let accepted = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&accepted);
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                counter.fetch_add(1, Ordering::SeqCst);
                let report = report.clone();
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 4096];
                    loop {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                let _ = report.send(buffer[..n].to_vec());
                                if stream.write_all(&buffer[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        Echo {
            address,
            received,
            accepted,
        }
    }

    async fn connect(proxy: &FaultProxy) -> TcpStream {
        tokio::time::timeout(EVENTUALLY, TcpStream::connect(proxy.address()))
            .await
            .expect("connect in time")
            .expect("connect")
    }

    /// Reads exactly `n` bytes within `within`, or `None`.
    async fn read_n(stream: &mut TcpStream, n: usize, within: Duration) -> Option<Vec<u8>> {
        let mut buffer = vec![0u8; n];
        match tokio::time::timeout(within, stream.read_exact(&mut buffer)).await {
            Ok(Ok(_)) => Some(buffer),
            _ => None,
        }
    }

    /// The next chunk the echo server received, within `within`.
    async fn server_got(echo: &mut Echo, within: Duration) -> Option<Vec<u8>> {
        tokio::time::timeout(within, echo.received.recv())
            .await
            .ok()
            .flatten()
    }

    #[tokio::test]
    async fn passes_bytes_both_ways_and_counts_them() {
        let mut echo = echo_server().await;
        let proxy = FaultProxy::start("pass", echo.address).unwrap();
        assert_eq!(proxy.upstream(), echo.address);
        assert_eq!(proxy.url(), format!("http://{}", proxy.address()));
        let mut stream = connect(&proxy).await;
        stream.write_all(b"hello").await.unwrap();
        assert_eq!(
            read_n(&mut stream, 5, EVENTUALLY).await.as_deref(),
            Some(&b"hello"[..])
        );
        assert_eq!(
            server_got(&mut echo, EVENTUALLY).await.as_deref(),
            Some(&b"hello"[..])
        );
        let stats = proxy.stats();
        assert_eq!(stats.connections_accepted, 1);
        assert_eq!(stats.connections_forwarded, 1);
        assert_eq!(stats.connections_open, 1);
        assert_eq!(stats.bytes_client_to_server, 5);
        assert_eq!(stats.bytes_server_to_client, 5);
        assert_eq!(stats.faults_applied, 0);
        assert_eq!(echo.accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_partition_holds_bytes_and_new_connections_until_it_heals() {
        let mut echo = echo_server().await;
        let proxy = FaultProxy::start("partition", echo.address).unwrap();
        let mut before = connect(&proxy).await;
        before.write_all(b"a").await.unwrap();
        assert!(read_n(&mut before, 1, EVENTUALLY).await.is_some());
        assert!(server_got(&mut echo, EVENTUALLY).await.is_some());

        proxy.partition();
        assert_eq!(proxy.fault(), Fault::Partition);
        assert_eq!(proxy.stats().held_arrivals, 0);
        before.write_all(b"held").await.unwrap();
        // The proxy tells when the bytes are inside the partition.
        assert!(proxy.wait_for_held(1, EVENTUALLY).await);
        // A new connection is accepted by the proxy but not forwarded.
        let mut during = connect(&proxy).await;
        during.write_all(b"late").await.unwrap();
        assert!(proxy.wait_for_held(2, EVENTUALLY).await);
        assert!(server_got(&mut echo, QUIET).await.is_none());
        assert!(read_n(&mut before, 4, QUIET).await.is_none());
        assert_eq!(echo.accepted.load(Ordering::SeqCst), 1);
        assert_eq!(proxy.stats().connections_forwarded, 1);

        // Heal: both the held request and the held connection get through,
        // late, with nothing lost and nothing reset.
        proxy.pass();
        assert_eq!(
            read_n(&mut before, 4, EVENTUALLY).await.as_deref(),
            Some(&b"held"[..])
        );
        assert_eq!(
            read_n(&mut during, 4, EVENTUALLY).await.as_deref(),
            Some(&b"late"[..])
        );
        assert_eq!(echo.accepted.load(Ordering::SeqCst), 2);
        let stats = proxy.stats();
        assert_eq!(stats.faults_applied, 1);
        assert_eq!(stats.connections_reset, 0);
        assert_eq!(stats.held_arrivals, 2);
        assert!(!proxy.wait_for_held(3, QUIET).await);
    }

    #[tokio::test]
    async fn dropping_requests_lets_answers_through_and_vice_versa() {
        let mut echo = echo_server().await;
        let proxy = FaultProxy::start("one way", echo.address).unwrap();
        let mut stream = connect(&proxy).await;
        stream.write_all(b"0").await.unwrap();
        assert!(read_n(&mut stream, 1, EVENTUALLY).await.is_some());
        assert!(server_got(&mut echo, EVENTUALLY).await.is_some());

        // Requests dropped: the server hears nothing.
        proxy.drop_one_way(Direction::ClientToServer);
        stream.write_all(b"1").await.unwrap();
        assert!(server_got(&mut echo, QUIET).await.is_none());
        proxy.pass();
        assert_eq!(
            server_got(&mut echo, EVENTUALLY).await.as_deref(),
            Some(&b"1"[..])
        );
        assert_eq!(
            read_n(&mut stream, 1, EVENTUALLY).await.as_deref(),
            Some(&b"1"[..])
        );

        // Answers dropped: the server hears the request at once, the
        // client gets the answer only after the heal.
        proxy.drop_one_way(Direction::ServerToClient);
        stream.write_all(b"2").await.unwrap();
        assert_eq!(
            server_got(&mut echo, EVENTUALLY).await.as_deref(),
            Some(&b"2"[..])
        );
        assert!(read_n(&mut stream, 1, QUIET).await.is_none());
        proxy.pass();
        assert_eq!(
            read_n(&mut stream, 1, EVENTUALLY).await.as_deref(),
            Some(&b"2"[..])
        );
        assert_eq!(proxy.stats().faults_applied, 2);
    }

    #[tokio::test]
    async fn a_delay_applies_to_each_direction_and_keeps_order() {
        let echo = echo_server().await;
        let proxy = FaultProxy::start("delay", echo.address).unwrap();
        let mut stream = connect(&proxy).await;
        let delay = Duration::from_millis(150);
        proxy.delay(delay);
        let started = Instant::now();
        let mut sent = Vec::new();
        for i in 0..40u8 {
            let piece = [b'a' + i % 26; 3];
            stream.write_all(&piece).await.unwrap();
            sent.extend_from_slice(&piece);
        }
        let echoed = read_n(&mut stream, sent.len(), EVENTUALLY)
            .await
            .expect("echo");
        // Delayed there and back: at least twice the delay. Chunks are
        // pipelined, so 40 writes do not cost 40 delays (not asserted:
        // speed is not a test's business).
        assert!(started.elapsed() >= delay * 2, "{:?}", started.elapsed());
        assert_eq!(echoed, sent, "order preserved");
        assert!(proxy.stats().chunks_delayed >= 2);
    }

    #[tokio::test]
    async fn loss_makes_chunks_late_but_never_corrupts_the_stream() {
        let echo = echo_server().await;
        let proxy = FaultProxy::start_seeded("loss", echo.address, 7).unwrap();
        assert_eq!(proxy.seed(), 7);
        let mut stream = connect(&proxy).await;
        // A round trip first, so the connection is through before the
        // handshake would be lost too.
        stream.write_all(b"0").await.unwrap();
        assert!(read_n(&mut stream, 1, EVENTUALLY).await.is_some());
        // Every chunk lost once: a round trip costs at least two RTOs.
        let rto = Duration::from_millis(100);
        proxy.set(Fault::Loss(
            Loss::new(1.0).with_rto(rto, rto * 4).with_connect_rto(rto),
        ));
        let started = Instant::now();
        stream.write_all(b"ping").await.unwrap();
        assert_eq!(
            read_n(&mut stream, 4, EVENTUALLY).await.as_deref(),
            Some(&b"ping"[..])
        );
        assert!(started.elapsed() >= rto * 2, "{:?}", started.elapsed());
        assert!(proxy.stats().chunks_lost >= 2);

        // Partial loss over many chunks: everything arrives, in order.
        proxy.set(Fault::Loss(
            Loss::new(0.3)
                .with_rto(Duration::from_millis(2), Duration::from_millis(8))
                .with_connect_rto(Duration::from_millis(2)),
        ));
        let lost_before = proxy.stats().chunks_lost;
        let mut sent = Vec::new();
        for i in 0..100u32 {
            let piece = i.to_be_bytes();
            stream.write_all(&piece).await.unwrap();
            sent.extend_from_slice(&piece);
            // Wait for each echo so every piece is its own chunk.
            let echoed = read_n(&mut stream, 4, EVENTUALLY).await.expect("echo");
            assert_eq!(echoed, piece);
        }
        // 200 chunks at 30 %: none lost has probability 0.7^200.
        assert!(proxy.stats().chunks_lost > lost_before);
        // A lossy handshake still connects.
        let mut second = connect(&proxy).await;
        second.write_all(b"x").await.unwrap();
        assert!(read_n(&mut second, 1, EVENTUALLY).await.is_some());
        assert_eq!(proxy.stats().connections_reset, 0);
    }

    #[tokio::test]
    async fn loss_with_resets_resets_connections() {
        let echo = echo_server().await;
        let proxy = FaultProxy::start("loss resets", echo.address).unwrap();
        let mut stream = connect(&proxy).await;
        stream.write_all(b"0").await.unwrap();
        assert!(read_n(&mut stream, 1, EVENTUALLY).await.is_some());
        proxy.set(Fault::Loss(Loss::new(0.0).with_resets(1.0)));
        stream.write_all(b"1").await.unwrap();
        let mut buffer = [0u8; 1];
        let read = tokio::time::timeout(EVENTUALLY, stream.read(&mut buffer))
            .await
            .expect("the reset arrives in time");
        assert_eq!(
            read.expect_err("reset").kind(),
            io::ErrorKind::ConnectionReset
        );
        assert_eq!(proxy.stats().connections_reset, 1);
    }

    #[tokio::test]
    async fn reset_all_resets_every_connection_and_new_ones_work() {
        let echo = echo_server().await;
        let proxy = FaultProxy::start("reset", echo.address).unwrap();
        let mut streams = Vec::new();
        for _ in 0..3 {
            let mut stream = connect(&proxy).await;
            stream.write_all(b"x").await.unwrap();
            assert!(read_n(&mut stream, 1, EVENTUALLY).await.is_some());
            streams.push(stream);
        }
        proxy.reset_all();
        for stream in &mut streams {
            let mut buffer = [0u8; 1];
            let read = tokio::time::timeout(EVENTUALLY, stream.read(&mut buffer))
                .await
                .expect("the reset arrives in time");
            assert_eq!(
                read.expect_err("reset").kind(),
                io::ErrorKind::ConnectionReset
            );
        }
        assert_eq!(proxy.stats().connections_reset, 3);
        let mut fresh = connect(&proxy).await;
        fresh.write_all(b"y").await.unwrap();
        assert_eq!(
            read_n(&mut fresh, 1, EVENTUALLY).await.as_deref(),
            Some(&b"y"[..])
        );
    }

    #[tokio::test]
    async fn a_process_rule_applies_only_to_that_process_connections() {
        let mut echo = echo_server().await;
        let proxy = FaultProxy::start("by process", echo.address).unwrap();
        let mut stream = connect(&proxy).await;
        stream.write_all(b"0").await.unwrap();
        assert!(read_n(&mut stream, 1, EVENTUALLY).await.is_some());
        assert!(server_got(&mut echo, EVENTUALLY).await.is_some());

        // A rule for another process leaves this one's connection alone.
        let other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut other = KillOnDrop(other);
        proxy.set_for_process(other.0.id(), Fault::Partition);
        stream.write_all(b"1").await.unwrap();
        assert!(read_n(&mut stream, 1, EVENTUALLY).await.is_some());
        assert!(server_got(&mut echo, EVENTUALLY).await.is_some());

        // A rule for this process holds its open connection and its new
        // ones, while the proxy-wide fault stays `Pass`.
        proxy.set_for_process(std::process::id(), Fault::Partition);
        assert_eq!(proxy.fault(), Fault::Pass);
        stream.write_all(b"2").await.unwrap();
        let mut fresh = connect(&proxy).await;
        fresh.write_all(b"3").await.unwrap();
        assert!(server_got(&mut echo, QUIET).await.is_none());

        proxy.clear_process_rules();
        assert_eq!(
            read_n(&mut stream, 1, EVENTUALLY).await.as_deref(),
            Some(&b"2"[..])
        );
        assert_eq!(
            read_n(&mut fresh, 1, EVENTUALLY).await.as_deref(),
            Some(&b"3"[..])
        );
        let _ = other.0.kill();
    }

    /// A child process killed when the test ends, however it ends.
    struct KillOnDrop(std::process::Child);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[tokio::test]
    async fn dropping_the_proxy_closes_its_port_and_its_connections() {
        let echo = echo_server().await;
        let proxy = FaultProxy::start("drop", echo.address).unwrap();
        let address = proxy.address();
        let mut stream = connect(&proxy).await;
        stream.write_all(b"x").await.unwrap();
        assert!(read_n(&mut stream, 1, EVENTUALLY).await.is_some());
        drop(proxy);
        let mut buffer = [0u8; 1];
        let read = tokio::time::timeout(EVENTUALLY, stream.read(&mut buffer))
            .await
            .expect("the close arrives in time");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        assert!(TcpStream::connect(address).await.is_err());
    }

    #[test]
    fn parses_proc_net_tcp_lines() {
        let line = "   3: 0100007F:A1B2 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 123456 1 0000000000000000 20 4 30 10 -1";
        assert_eq!(parse_tcp_line(line), Some(((0xA1B2, 0x1F90), 123456)));
        let v6 = "   0: 0000000000000000FFFF00000100007F:9C40 0000000000000000FFFF00000100007F:0050 01 00000000:00000000 00:00000000 00000000  1000        0 98765 1 0000000000000000 20 4 0 10 -1";
        assert_eq!(parse_tcp_line(v6), Some(((0x9C40, 0x50), 98765)));
        assert_eq!(parse_tcp_line("garbage"), None);
    }

    #[test]
    fn loss_timeouts_back_off_and_are_capped() {
        let loss = Loss::new(0.5).with_rto(Duration::from_millis(200), Duration::from_millis(1000));
        assert_eq!(loss.data_rto(0), Duration::from_millis(200));
        assert_eq!(loss.data_rto(2), Duration::from_millis(800));
        assert_eq!(loss.data_rto(5), Duration::from_millis(1000));
        assert_eq!(loss.handshake_rto(1), Duration::from_secs(2));
        assert_eq!(loss.handshake_rto(9), Duration::from_secs(8));
        assert_eq!(Loss::new(7.0).probability, 1.0);
        assert_eq!(Loss::new(f64::NAN).probability, 0.0);
        assert_eq!(
            Fault::Loss(Loss::new(0.25).with_resets(0.01)).to_string(),
            "loss 25 % (resets 1.0 %)"
        );
    }

    #[test]
    fn the_random_generator_is_reproducible_and_roughly_fair() {
        let mut a = SplitMix64(42);
        let mut b = SplitMix64(42);
        let draws: Vec<bool> = (0..1000).map(|_| a.chance(0.3)).collect();
        let again: Vec<bool> = (0..1000).map(|_| b.chance(0.3)).collect();
        assert_eq!(draws, again);
        let hits = draws.iter().filter(|hit| **hit).count();
        assert!((200..400).contains(&hits), "{hits} of 1000 at p = 0.3");
        assert!(!a.chance(0.0));
        assert!(a.chance(1.0));
    }
}
