//! `fault-client`: one client of the fault suite, in a process of its own
//! so a test can stop it (SIGSTOP), kill it, or fake its clock.
//!
//! It runs a workload against one lock service (etcd, Redis or a Redis
//! Cluster (`--endpoints` listing its nodes), the SQL
//! backend on PostgreSQL or MariaDB, or ZooKeeper) and one resource server: acquire a
//! lock, write a few times with the guard's sequencer and an idempotency
//! key, release, again. Every acquire, write
//! and release is recorded in its history file (JSON lines, see
//! `palisade_tests::history`) as an `invoke` and exactly one completion:
//!
//! - acquire: `ok` with the generation granted; `fail` for a clean refusal
//!   (timeout, busy, regression); `unknown` when the lock service failed
//!   mid-call;
//! - write: `ok` with the server's `commit_seq` (2xx); `fail` with detail
//!   `stale` (409 stale), the refusal code (other 4xx), or `connect` (the
//!   server could not be reached, so nothing was sent); `unknown` for a
//!   timeout, a broken connection or a 5xx, where the write may have
//!   landed. A retry reuses the request id, so the server's idempotency
//!   record answers it instead of applying it twice;
//! - release: `ok`, or `fail` with the error kind. When the guard reports
//!   its lease lost, the client releases with detail `lease_lost <reason>`
//!   and acquires again.
//!
//! # Talking to the test
//!
//! Standard output carries one line per step, for the test to wait on
//! (never a sleep): `READY`, `GRANTED <lock> <generation> <sequencer> <monotonic µs>`,
//! `HOLDING <lock> <generation>` (a sequencer is in hand and the write is
//! about to go), `WROTE <lock> <generation> <commit_seq>`, `REFUSED <lock>
//! <generation> <detail>`, `GAVEUP <lock> <generation> <detail>` (no
//! answer after every retry), `LOST <lock> <generation> <reason>`,
//! `RAISED <lock> <mark>`, `DONE <operations>`.
//!
//! Standard input steers it: with `--gate`, the first write of every hold
//! waits after `HOLDING` for a `GO` line, so a test can stop the process or
//! expire its lease at exactly that point and let the (now late) write go
//! afterwards. A lease lost while the write waits is reported (`LOST`) as
//! it happens, and the write still goes out on `GO`. End of input stops the workload: the client releases what
//! it holds and exits.

use std::io::BufRead as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use palisade::client::{Client, ClientError, Refused, Written};
use palisade::etcd::{EtcdConfig, EtcdLock, EtcdLockClient};
use palisade::redis::{GenerationScheme, RedisConfig, RedisLock, RedisLockClient};
use palisade::{
    LeaseState, Lock, LockError, LockGuard, LockName, Mode, RaiseFloor, Sequencer, SessionOptions,
};
use palisade_lock_sql::{SqlConfig, SqlLock, SqlLockClient};
use palisade_lock_zookeeper::{Mutation, ZkConfig, ZkLock, ZkLockClient};
use palisade_tests::history::{Event, OpKind, Phase, Recorder};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// How long a Redis client waits, before it exits, for its background
/// clean-ups (abandoned queue entries) to finish.
const SETTLE_WITHIN: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Backend {
    Etcd,
    Redis,
    /// PostgreSQL or MariaDB, by the URL's scheme.
    Sql,
    /// ZooKeeper: a connect string, `host:port[,host:port...][/chroot]`.
    Zookeeper,
}

/// ZooKeeper only: a deliberate flaw, for the mutation rows.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum ZkMutation {
    /// Generations from the sequence suffix, not the creation zxid.
    GenerationFromSequence,
    /// On a disconnect, the lease counted from the notice.
    LeaseFromDisconnectNotice,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Scheme {
    /// `max(counter + 1, Redis time in µs)`: survives a lost counter.
    ServerClock,
    /// A plain counter, reset when Redis loses its data.
    Counter,
}

/// A workload client for the fault suite.
#[derive(Debug, Parser)]
#[command(name = "fault-client")]
struct Args {
    /// Which lock service.
    #[arg(long, value_enum)]
    backend: Backend,
    /// etcd endpoints (comma-separated), a Redis URL (several, comma-separated,
    /// for a Redis Cluster), a `postgres://` or
    /// `mysql://` URL, or a ZooKeeper connect string.
    #[arg(long)]
    endpoints: String,
    /// Redis only: how generations are minted.
    #[arg(long, value_enum, default_value_t = Scheme::ServerClock)]
    redis_scheme: Scheme,
    /// Redis only: on a 409 stale whose mark is above the generation held,
    /// raise the lock's generation floor to the mark (the recovery after
    /// Redis lost its counter).
    #[arg(long)]
    raise_floor_on_stale: bool,
    /// ZooKeeper only: play this mutation (test builds of the backend).
    #[arg(long, value_enum)]
    zk_mutation: Option<ZkMutation>,
    /// The locks to take, round-robin (repeat the flag).
    #[arg(long = "lock", required = true)]
    locks: Vec<String>,
    /// The resource server's base URL.
    #[arg(long)]
    server: String,
    /// This client's name in the history.
    #[arg(long)]
    client_id: String,
    /// Where to append the history.
    #[arg(long)]
    history: PathBuf,
    /// Lease TTL in milliseconds (keep-alive every TTL/4, safety margin
    /// TTL/4).
    #[arg(long, default_value_t = 2000)]
    ttl_ms: u64,
    /// Stop after this many holds (0: no limit).
    #[arg(long, default_value_t = 0)]
    rounds: u64,
    /// Stop after this long, in milliseconds (0: no limit).
    #[arg(long, default_value_t = 0)]
    duration_ms: u64,
    /// Writes per hold.
    #[arg(long, default_value_t = 3)]
    writes_per_hold: u64,
    /// Pause between two writes of a hold, in milliseconds.
    #[arg(long, default_value_t = 20)]
    think_ms: u64,
    /// Time limit of one write request, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    write_timeout_ms: u64,
    /// Extra attempts of a write whose outcome is unknown (same request id).
    #[arg(long, default_value_t = 2)]
    retries: u32,
    /// Time limit of one acquire, in milliseconds.
    #[arg(long, default_value_t = 15_000)]
    acquire_timeout_ms: u64,
    /// Wait for `GO` on standard input before the first write of every hold.
    #[arg(long)]
    gate: bool,
    /// Sleep this long between taking the sequencer and sending each
    /// write, in milliseconds: a window for a SIGSTOP mid-operation.
    #[arg(long, default_value_t = 0)]
    pause_before_write_ms: u64,
    /// Every N-th write goes to the shared key `register` instead of a key
    /// of its own (0: never).
    #[arg(long, default_value_t = 0)]
    register_every: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    // The lock backends' own events (grants, lease lost, refusals) go to
    // standard error, which the harness keeps as the client's log.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let args = Args::parse();
    let recorder = Recorder::open(&args.history)
        .with_context(|| format!("cannot open history {}", args.history.display()))?;
    let control = Control::from_stdin();
    let ttl = Duration::from_millis(args.ttl_ms);
    let options = SessionOptions::default()
        .with_ttl(ttl)
        .with_keepalive_interval(ttl / 4)
        .with_safety_margin(ttl / 4);
    let resource =
        Client::with_timeout(&args.server, Duration::from_millis(args.write_timeout_ms))?;
    let operations = match args.backend {
        Backend::Etcd => {
            let config = EtcdConfig::from_endpoint_list(&args.endpoints)?;
            let sessions = EtcdSessions::connect(config, options, &control).await?;
            Workload::new(&args, recorder, resource, control, sessions)
                .run()
                .await?
        }
        Backend::Redis => {
            let scheme = match args.redis_scheme {
                Scheme::ServerClock => GenerationScheme::ServerClock,
                Scheme::Counter => GenerationScheme::Counter,
            };
            // Several URLs: a Redis Cluster seeded from them. Counter
            // generations there are what the failover's mutation row runs,
            // so this client allows them where a real one refuses.
            let config = if args.endpoints.contains(',') {
                RedisConfig::cluster(args.endpoints.split(',')).with_counter_on_cluster_unsafe()
            } else {
                RedisConfig::new(&args.endpoints)
            }
            .with_generation_scheme(scheme);
            let sessions = RedisSessions::connect(config, options, &control).await?;
            let client = sessions.client.clone();
            let operations = Workload::new(&args, recorder, resource, control, sessions)
                .run()
                .await?;
            // An acquire the stop abandoned removes its queue entry in the
            // background: exiting first would leave it to its TTL, holding
            // up the waiters behind it (scenario 40's `a`, whose lease is
            // 30 s).
            let _ = tokio::time::timeout(SETTLE_WITHIN, client.settle()).await;
            operations
        }
        Backend::Sql => {
            // One database round may take at most a TTL: a client cut from
            // its database gives up on a call within a lease, not after it.
            let config = SqlConfig::new(&args.endpoints).with_operation_timeout(ttl);
            let sessions = SqlSessions::connect(config, options, &control).await?;
            Workload::new(&args, recorder, resource, control, sessions)
                .run()
                .await?
        }
        Backend::Zookeeper => {
            let mutation = match args.zk_mutation {
                None => Mutation::None,
                Some(ZkMutation::GenerationFromSequence) => Mutation::GenerationFromSequence,
                Some(ZkMutation::LeaseFromDisconnectNotice) => Mutation::LeaseFromDisconnectNotice,
            };
            let config = ZkConfig::parse(&args.endpoints)?.with_mutation(mutation);
            let sessions = ZkSessions::connect(config, options, &control).await?;
            Workload::new(&args, recorder, resource, control, sessions)
                .run()
                .await?
        }
    };
    say(format!("DONE {operations}"));
    Ok(())
}

/// One line to the test, flushed at once (the test waits on it).
fn say(line: impl AsRef<str>) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", line.as_ref());
    let _ = stdout.flush();
}

/// What the test says on standard input: `GO` lines open the gate, and the
/// end of input stops the workload.
struct Control {
    go: mpsc::UnboundedReceiver<()>,
    stop: watch::Receiver<bool>,
}

impl Control {
    fn from_stdin() -> Self {
        let (go_sender, go) = mpsc::unbounded_channel();
        let (stop_sender, stop) = watch::channel(false);
        // A plain thread, not tokio's stdin: a read blocked in tokio's
        // blocking pool would keep the runtime from shutting down at exit.
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if line.trim() == "GO" {
                    let _ = go_sender.send(());
                }
            }
            let _ = stop_sender.send(true);
        });
        Control { go, stop }
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Resolves when the test closes standard input.
    async fn until_stopped(&self) {
        let mut stop = self.stop.clone();
        let _ = stop.wait_for(|stopped| *stopped).await;
    }

    /// Waits for `GO`; `false` if the workload was stopped instead.
    async fn wait_go(&mut self) -> bool {
        let mut stop = self.stop.clone();
        tokio::select! {
            go = self.go.recv() => go.is_some(),
            _ = stop.wait_for(|stopped| *stopped) => false,
        }
    }
}

/// Where sessions come from: a session may end (etcd closes it with its
/// lease), and the workload then opens a new one.
trait Sessions {
    type Locks: Lock;

    /// A session to acquire with: the current one, or a new one.
    async fn session(&mut self) -> Result<Self::Locks, LockError>;

    /// Forgets the current session after an error that may have ended it.
    fn discard(&mut self);

    /// Raises the lock's generation floor to `mark`, where the backend has
    /// one (Redis).
    async fn raise_floor(&self, lock: &LockName, mark: u64) -> Result<(), LockError>;
}

struct EtcdSessions {
    connection: EtcdLockClient,
    options: SessionOptions,
    current: Option<EtcdLock>,
}

impl EtcdSessions {
    /// Connects, retrying while the cluster is unreachable (a restarted
    /// member, an election) until the workload is stopped.
    async fn connect(
        config: EtcdConfig,
        options: SessionOptions,
        control: &Control,
    ) -> anyhow::Result<Self> {
        let connection = retry_connect(control, || EtcdLockClient::connect(config.clone())).await?;
        say("READY");
        Ok(EtcdSessions {
            connection,
            options,
            current: None,
        })
    }
}

impl Sessions for EtcdSessions {
    type Locks = EtcdLock;

    async fn session(&mut self) -> Result<EtcdLock, LockError> {
        if let Some(session) = self.current.as_ref().filter(|session| session.is_open()) {
            return Ok(session.clone());
        }
        let session = self.connection.session(self.options.clone()).await?;
        self.current = Some(session.clone());
        Ok(session)
    }

    fn discard(&mut self) {
        self.current = None;
    }

    async fn raise_floor(&self, _lock: &LockName, _mark: u64) -> Result<(), LockError> {
        // etcd's revisions never go backwards: nothing to raise.
        Ok(())
    }
}

struct RedisSessions {
    client: RedisLockClient,
    options: SessionOptions,
    current: Option<RedisLock>,
}

impl RedisSessions {
    async fn connect(
        config: RedisConfig,
        options: SessionOptions,
        control: &Control,
    ) -> anyhow::Result<Self> {
        let client = retry_connect(control, || RedisLockClient::connect(config.clone())).await?;
        say("READY");
        Ok(RedisSessions {
            client,
            options,
            current: None,
        })
    }
}

impl Sessions for RedisSessions {
    type Locks = RedisLock;

    async fn session(&mut self) -> Result<RedisLock, LockError> {
        if let Some(session) = &self.current {
            return Ok(session.clone());
        }
        let session =
            self.client
                .session(self.options.clone())
                .map_err(|error| LockError::Backend {
                    backend: "redis",
                    source: Box::new(error),
                })?;
        self.current = Some(session.clone());
        Ok(session)
    }

    fn discard(&mut self) {
        self.current = None;
    }

    async fn raise_floor(&self, lock: &LockName, mark: u64) -> Result<(), LockError> {
        self.client.raise_floor(lock, mark).await.map(|_| ())
    }
}

struct SqlSessions {
    client: SqlLockClient,
    options: SessionOptions,
    current: Option<SqlLock>,
}

impl SqlSessions {
    async fn connect(
        config: SqlConfig,
        options: SessionOptions,
        control: &Control,
    ) -> anyhow::Result<Self> {
        let client = retry_connect(control, || SqlLockClient::connect(config.clone())).await?;
        say("READY");
        Ok(SqlSessions {
            client,
            options,
            current: None,
        })
    }
}

impl Sessions for SqlSessions {
    type Locks = SqlLock;

    async fn session(&mut self) -> Result<SqlLock, LockError> {
        // A session whose row the database ended opens a new row by itself
        // on its next acquire, so one session serves the whole run unless
        // an error discards it.
        if let Some(session) = &self.current {
            return Ok(session.clone());
        }
        let session = self
            .client
            .session(self.options.clone())
            .await
            .map_err(|error| LockError::Backend {
                backend: "sql",
                source: Box::new(error),
            })?;
        self.current = Some(session.clone());
        Ok(session)
    }

    fn discard(&mut self) {
        self.current = None;
    }

    async fn raise_floor(&self, _lock: &LockName, _mark: u64) -> Result<(), LockError> {
        // The generation column is never reset: nothing to raise.
        Ok(())
    }
}

struct ZkSessions {
    client: ZkLockClient,
    options: SessionOptions,
    current: Option<ZkLock>,
}

impl ZkSessions {
    async fn connect(
        config: ZkConfig,
        options: SessionOptions,
        control: &Control,
    ) -> anyhow::Result<Self> {
        let client = retry_connect(control, || ZkLockClient::connect(config.clone())).await?;
        say("READY");
        Ok(ZkSessions {
            client,
            options,
            current: None,
        })
    }
}

impl Sessions for ZkSessions {
    type Locks = ZkLock;

    async fn session(&mut self) -> Result<ZkLock, LockError> {
        // A ZooKeeper session ends with its lease: then open a new one.
        if let Some(session) = self.current.as_ref().filter(|session| session.is_open()) {
            return Ok(session.clone());
        }
        let session = self.client.session(self.options.clone()).await?;
        self.current = Some(session.clone());
        Ok(session)
    }

    fn discard(&mut self) {
        self.current = None;
    }

    async fn raise_floor(&self, lock: &LockName, mark: u64) -> Result<(), LockError> {
        // One floor for every lock name: above the mark of the refusal.
        match self.client.raise_floor(lock, mark).await {
            Ok(_) => Ok(()),
            Err(palisade::RaiseFloorError::Lock(error)) => Err(error),
            Err(error) => Err(LockError::Backend {
                backend: "zookeeper",
                source: Box::new(error),
            }),
        }
    }
}

/// Retries `connect` with a short backoff until it works or the test stops
/// the client.
async fn retry_connect<T, E, F>(control: &Control, connect: impl Fn() -> F) -> anyhow::Result<T>
where
    E: std::error::Error + Send + Sync + 'static,
    F: Future<Output = Result<T, E>>,
{
    loop {
        match connect().await {
            Ok(connected) => return Ok(connected),
            Err(error) if control.stopped() => return Err(error.into()),
            Err(error) => {
                eprintln!("fault-client: cannot connect yet: {error}");
                // A backoff between attempts at a service that is down, not
                // a synchronisation with the test.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// How one write attempt ended.
enum WriteOutcome {
    Accepted(Written),
    /// Definitely not applied; the detail is for the history.
    Refused {
        detail: String,
        mark: Option<u64>,
    },
    /// Not sent at all (the server could not be reached): safe to retry.
    NotSent(String),
    /// May or may not have been applied.
    Unknown(String),
}

fn classify(result: Result<Result<Written, Refused>, ClientError>) -> WriteOutcome {
    match result {
        Ok(Ok(written)) => WriteOutcome::Accepted(written),
        Ok(Err(Refused::Stale { marks, .. })) => WriteOutcome::Refused {
            detail: "stale".into(),
            mark: Some(marks.exclusive.max(marks.shared)),
        },
        Ok(Err(refused)) => WriteOutcome::Refused {
            detail: refused.reason().into(),
            mark: None,
        },
        Err(ClientError::Connect { .. }) => WriteOutcome::NotSent("connect".into()),
        Err(ClientError::Timeout { .. }) => WriteOutcome::Unknown("timeout".into()),
        Err(ClientError::Transport { source, .. }) => {
            WriteOutcome::Unknown(format!("transport: {source}"))
        }
        // 503: the server's storage failed after the request arrived; the
        // write may be committed in memory and reach the disk or not.
        Err(ClientError::Unavailable { code, .. }) => WriteOutcome::Unknown(format!("503 {code}")),
        Err(ClientError::Server { status, code, .. }) if status >= 500 => {
            WriteOutcome::Unknown(format!("{status} {code}"))
        }
        Err(ClientError::Server { status, code, .. }) => WriteOutcome::Refused {
            detail: format!("{status} {code}"),
            mark: None,
        },
        Err(ClientError::BadRequest { status, code, .. }) => WriteOutcome::Refused {
            detail: format!("{status} {code}"),
            mark: None,
        },
        Err(other) => WriteOutcome::Unknown(other.to_string()),
    }
}

/// Whether an acquire error is a clean refusal (nothing was granted).
fn acquire_refused_cleanly(error: &LockError) -> bool {
    matches!(
        error,
        LockError::Timeout { .. }
            | LockError::Busy { .. }
            | LockError::GenerationRegression { .. }
            | LockError::SessionClosed
    )
}

/// The loop: acquire, write, release, until rounds, duration or input end.
struct Workload<S> {
    client_id: String,
    locks: Vec<LockName>,
    recorder: Recorder,
    resource: Client,
    control: Control,
    sessions: S,
    rounds: u64,
    deadline: Option<Instant>,
    writes_per_hold: u64,
    think: Duration,
    retries: u32,
    acquire_timeout: Duration,
    gate: bool,
    pause_before_write: Duration,
    register_every: u64,
    raise_floor_on_stale: bool,
    /// Writes issued so far: numbers request ids and keys, so every write
    /// of this client is unique and I-DUR can check each one.
    writes_issued: u64,
    /// Operations invoked (the `DONE` line).
    operations: u64,
}

impl<S: Sessions> Workload<S> {
    fn new(
        args: &Args,
        recorder: Recorder,
        resource: Client,
        control: Control,
        sessions: S,
    ) -> Self {
        Workload {
            client_id: args.client_id.clone(),
            locks: args
                .locks
                .iter()
                .map(|lock| LockName::new(lock.as_str()).expect("a valid lock name"))
                .collect(),
            recorder,
            resource,
            control,
            sessions,
            rounds: args.rounds,
            deadline: (args.duration_ms > 0)
                .then(|| Instant::now() + Duration::from_millis(args.duration_ms)),
            writes_per_hold: args.writes_per_hold,
            think: Duration::from_millis(args.think_ms),
            retries: args.retries,
            acquire_timeout: Duration::from_millis(args.acquire_timeout_ms),
            gate: args.gate,
            pause_before_write: Duration::from_millis(args.pause_before_write_ms),
            register_every: args.register_every,
            raise_floor_on_stale: args.raise_floor_on_stale,
            writes_issued: 0,
            operations: 0,
        }
    }

    fn finished(&self, round: u64) -> bool {
        self.control.stopped()
            || (self.rounds > 0 && round >= self.rounds)
            || self
                .deadline
                .is_some_and(|deadline| Instant::now() >= deadline)
    }

    fn record(&mut self, event: Event) -> anyhow::Result<()> {
        if event.phase == Phase::Invoke {
            self.operations += 1;
        }
        self.recorder.record(&event)?;
        Ok(())
    }

    fn event(&self, phase: Phase, op: OpKind, lock: &LockName) -> Event {
        Event::now(&self.client_id, phase, op, lock.as_str())
    }

    async fn run(mut self) -> anyhow::Result<u64> {
        let mut round = 0;
        while !self.finished(round) {
            let lock = self.locks[(round as usize) % self.locks.len()].clone();
            round += 1;
            if let Some(guard) = self.acquire(&lock).await? {
                self.hold(guard).await?;
            }
        }
        Ok(self.operations)
    }

    /// One acquire, recorded. `None` when nothing was granted.
    async fn acquire(
        &mut self,
        lock: &LockName,
    ) -> anyhow::Result<Option<<S::Locks as Lock>::Guard>> {
        let session = match self.sessions.session().await {
            Ok(session) => session,
            Err(error) => {
                // No session, so no acquire was sent: back off and retry.
                eprintln!("fault-client: cannot open a session: {error}");
                self.sessions.discard();
                self.backoff().await;
                return Ok(None);
            }
        };
        self.record(self.event(Phase::Invoke, OpKind::Acquire, lock))?;
        let acquired = tokio::select! {
            acquired = session.acquire_timeout(lock, Mode::Exclusive, self.acquire_timeout) => acquired,
            () = self.control.until_stopped() => {
                // Dropping the acquire leaves no queue entry behind (the
                // Lock trait's cancellation clause).
                self.record(self.event(Phase::Fail, OpKind::Acquire, lock).detail("stopped"))?;
                return Ok(None);
            }
        };
        match acquired {
            Ok(guard) => {
                let sequencer = guard.issued().clone();
                let generation = sequencer.generation().get();
                let granted = self
                    .event(Phase::Ok, OpKind::Acquire, lock)
                    .generation(generation);
                let at_us = granted.mono_us;
                self.record(granted)?;
                say(format!("GRANTED {lock} {generation} {sequencer} {at_us}"));
                Ok(Some(guard))
            }
            Err(error) => {
                let phase = if acquire_refused_cleanly(&error) {
                    Phase::Fail
                } else {
                    Phase::Unknown
                };
                self.record(
                    self.event(phase, OpKind::Acquire, lock)
                        .detail(error.kind()),
                )?;
                if !matches!(error, LockError::Timeout { .. }) {
                    // The session may be gone (etcd ends it with its lease);
                    // a fresh one costs little.
                    self.sessions.discard();
                    self.backoff().await;
                }
                Ok(None)
            }
        }
    }

    /// Writes under `guard`, then releases it.
    async fn hold(&mut self, guard: <S::Locks as Lock>::Guard) -> anyhow::Result<()> {
        let lock = guard.name().clone();
        let generation = guard.generation().get();
        let mut lost: Option<String> = None;
        for write_index in 0..self.writes_per_hold {
            if self.control.stopped() {
                break;
            }
            // The client checks its lease before every write, as a careful
            // application does...
            let sequencer = match guard.sequencer() {
                Ok(sequencer) => sequencer,
                Err(error) => {
                    let reason = match guard.lease().state() {
                        LeaseState::Lost(reason) => reason.as_str().to_owned(),
                        _ => error.kind().to_owned(),
                    };
                    say(format!("LOST {lock} {generation} {reason}"));
                    lost = Some(reason);
                    break;
                }
            };
            // ...and may still stall between the check and the send: this
            // is where a test stops it, or expires its lease behind its back.
            if self.gate && write_index == 0 {
                say(format!("HOLDING {lock} {generation}"));
                let mut lease = guard.lease();
                let go = tokio::select! {
                    go = self.control.wait_go() => go,
                    state = lease.lost() => {
                        // The lease ended while the write waited: the signal
                        // is reported, and the write still goes out on `GO`
                        // (the late write the resource server must fence).
                        let reason = match state {
                            LeaseState::Lost(reason) => reason.as_str().to_owned(),
                            other => format!("{other:?}"),
                        };
                        say(format!("LOST {lock} {generation} {reason}"));
                        lost = Some(reason);
                        self.control.wait_go().await
                    }
                };
                if !go {
                    break;
                }
            } else if !self.pause_before_write.is_zero() {
                say(format!("HOLDING {lock} {generation}"));
                tokio::time::sleep(self.pause_before_write).await;
            }
            if !self.write(&sequencer).await? {
                break;
            }
            if !self.think.is_zero() {
                tokio::time::sleep(self.think).await;
            }
        }
        self.release(guard, lost).await
    }

    /// One write with its retries, recorded. `false` once writing under this
    /// sequencer is pointless (refused, or still unknown after retrying).
    async fn write(&mut self, sequencer: &Sequencer) -> anyhow::Result<bool> {
        let lock = sequencer.lock().clone();
        let generation = sequencer.generation().get();
        self.writes_issued += 1;
        let request_id = format!("{}-{}", self.client_id, self.writes_issued);
        let key = if self.register_every > 0 && self.writes_issued % self.register_every == 0 {
            "register".to_owned()
        } else {
            format!("k-{request_id}")
        };
        let value = format!("{request_id}@{generation}");
        let client_id = self.client_id.clone();
        let mut attempts_left = self.retries + 1;
        loop {
            attempts_left -= 1;
            let invoke = self
                .event(Phase::Invoke, OpKind::Write, &lock)
                .generation(generation)
                .write(&request_id, &key, &value);
            self.record(invoke)?;
            let result = self
                .resource
                .put(sequencer, key.as_bytes(), value.clone(), Some(&request_id))
                .await;
            let done = |phase| {
                Event::now(&client_id, phase, OpKind::Write, lock.as_str())
                    .generation(generation)
                    .write(&request_id, &key, &value)
            };
            let unanswered = match classify(result) {
                WriteOutcome::Accepted(written) => {
                    let mut event = done(Phase::Ok).commit_seq(written.commit_seq);
                    if written.replayed {
                        event = event.detail("replayed");
                    }
                    self.record(event)?;
                    say(format!("WROTE {lock} {generation} {}", written.commit_seq));
                    return Ok(true);
                }
                WriteOutcome::Refused { detail, mark } => {
                    self.record(done(Phase::Fail).detail(detail.clone()))?;
                    say(format!("REFUSED {lock} {generation} {detail}"));
                    if let Some(mark) = mark.filter(|mark| *mark > generation) {
                        if self.raise_floor_on_stale {
                            match self.sessions.raise_floor(&lock, mark).await {
                                Ok(()) => say(format!("RAISED {lock} {mark}")),
                                Err(error) => eprintln!("fault-client: raise floor: {error}"),
                            }
                        }
                    }
                    return Ok(false);
                }
                WriteOutcome::NotSent(detail) => {
                    self.record(done(Phase::Fail).detail(detail.clone()))?;
                    detail
                }
                WriteOutcome::Unknown(detail) => {
                    self.record(done(Phase::Unknown).detail(detail.clone()))?;
                    detail
                }
            };
            if attempts_left == 0 || self.control.stopped() {
                say(format!("GAVEUP {lock} {generation} {unanswered}"));
                return Ok(false);
            }
            self.backoff().await;
        }
    }

    async fn release(
        &mut self,
        guard: <S::Locks as Lock>::Guard,
        lost: Option<String>,
    ) -> anyhow::Result<()> {
        let lock = guard.name().clone();
        let generation = guard.generation().get();
        self.record(
            self.event(Phase::Invoke, OpKind::Release, &lock)
                .generation(generation),
        )?;
        let released = guard.release().await;
        let mut event = match &released {
            Ok(()) => self.event(Phase::Ok, OpKind::Release, &lock),
            Err(error) => self
                .event(Phase::Fail, OpKind::Release, &lock)
                .detail(error.kind()),
        }
        .generation(generation);
        if let Some(reason) = lost {
            event = event.detail(format!("lease_lost {reason}"));
        }
        self.record(event)?;
        if let Err(error) = released {
            if !matches!(
                error,
                LockError::NotOwner { .. } | LockError::LeaseLost { .. }
            ) {
                self.sessions.discard();
            }
        }
        Ok(())
    }

    /// A short wait before retrying against a service that just failed.
    async fn backoff(&self) {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
            () = self.control.until_stopped() => {}
        }
    }
}
