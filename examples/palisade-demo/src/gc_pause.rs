//! The GC-pause story from DESIGN.md, on any backend, with either pause.
//!
//! 1. Client A takes lock `accounts/alice`, gets generation g, and reads
//!    the balance.
//! 2. A stops the world for longer than its lease: in-process (its task
//!    sleeps and its lease renewal stops, as every thread of a paused
//!    process would), or for real (A runs in its own process and is
//!    stopped with SIGSTOP, then resumed with SIGCONT).
//! 3. The lease expires; client B takes the lock with generation g' > g,
//!    deposits, and releases.
//! 4. A wakes and writes the balance it computed before the pause, with the
//!    sequencer it fetched before the pause.
//!
//! The story runs twice: against the plain store (A's write lands and B's
//! deposit is lost) and against Palisade's resource server (A's write is
//! refused with 409 stale; A retries the right way).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use palisade_core::{LeaseState, LeaseWatch, LockName, Sequencer};
use tokio::time::Instant;

use crate::DemoError;
use crate::backend::{
    BackendTarget, Locks, Renewal, default_ttl, invocation_tag, kind_of, session_options, target,
};
use crate::child::{ChildCommand, ChildLauncher, ChildMessage, ChildProcess, ChildSpec};
use crate::client::LocalClient;
use crate::plain_store::PlainStore;
use crate::storage::{ResourceServer, Storage, StorageTarget, WriteOutcome};
use crate::svg;
use crate::timeline::{Event, EventKind, Lane, Timeline};
use palisade_lock_any::{BackendArgs, BackendKind, Defaults};

/// The lock of the story.
const LOCK: &str = "accounts/alice";
/// The key the balance lives under.
const KEY: &str = "balance";
/// The balance before the story starts.
const OPENING_BALANCE: i64 = 100;
/// What A deposits.
const DEPOSIT_A: i64 = 30;
/// What B deposits.
const DEPOSIT_B: i64 = 50;
/// How long a client waits for the lock (B waits for A's lease to end).
const ACQUIRE_WAIT: Duration = Duration::from_secs(60);
/// How long the driver waits for client A's process to answer a command.
const ANSWER_WAIT: Duration = Duration::from_secs(90);

/// How client A is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PauseVariant {
    /// A's task sleeps in this process and its lease renewal stops (every
    /// backend).
    InProcess,
    /// A runs in a process of its own, stopped with SIGSTOP and resumed
    /// with SIGCONT (etcd or Redis: a lock shared across processes).
    Sigstop,
}

impl PauseVariant {
    /// `in-process` or `sigstop`.
    pub fn name(self) -> &'static str {
        match self {
            PauseVariant::InProcess => "in-process",
            PauseVariant::Sigstop => "sigstop",
        }
    }
}

/// The GC-pause demo's flags.
#[derive(Debug, Clone, Args)]
pub struct GcPauseArgs {
    /// The lock service.
    #[command(flatten)]
    pub backend: BackendArgs,

    /// How client A is paused: `in-process` (its task sleeps and its lease
    /// renewal stops) or `sigstop` (A runs in its own process, stopped with
    /// SIGSTOP; needs --backend etcd or redis).
    #[arg(long, value_enum, default_value_t = PauseVariant::InProcess)]
    pub pause: PauseVariant,

    /// Lease TTL of every client, in milliseconds [default: 1000 on the
    /// embedded backend, 2000 on etcd and Redis].
    #[arg(long)]
    pub ttl_ms: Option<u64>,

    /// How long client A is stopped, in milliseconds; must exceed the TTL
    /// [default: twice the TTL plus one second].
    #[arg(long)]
    pub pause_ms: Option<u64>,

    /// Where to write the timeline picture (SVG) [default:
    /// palisade-gc-pause-BACKEND-PAUSE-UID.svg in the temporary directory].
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

impl GcPauseArgs {
    /// The defaults on `backend`, paused in-process.
    pub fn new(backend: BackendArgs) -> Self {
        GcPauseArgs {
            backend,
            pause: PauseVariant::InProcess,
            ttl_ms: None,
            pause_ms: None,
            svg: None,
        }
    }

    /// The lease TTL in force.
    pub fn ttl(&self) -> Duration {
        self.ttl_ms
            .map(Duration::from_millis)
            .unwrap_or_else(|| default_ttl(kind_of(&self.backend)))
    }

    /// How long A is paused (at least).
    pub fn pause_length(&self) -> Duration {
        self.pause_ms
            .map(Duration::from_millis)
            .unwrap_or_else(|| self.ttl() * 2 + Duration::from_secs(1))
    }

    /// Where the picture goes: `--svg`, or a file in the temporary
    /// directory named for the run and the user (another user's picture
    /// of the same run there is not ours to overwrite).
    pub fn svg_path(&self) -> PathBuf {
        self.svg.clone().unwrap_or_else(|| {
            use std::os::unix::fs::MetadataExt as _;
            let owner = std::fs::metadata("/proc/self")
                .map(|process| process.uid().to_string())
                .unwrap_or_else(|_| std::process::id().to_string());
            std::env::temp_dir().join(format!(
                "palisade-gc-pause-{}-{}-{owner}.svg",
                kind_of(&self.backend).name(),
                self.pause.name()
            ))
        })
    }

    fn validate(&self) -> Result<(), DemoError> {
        let kind = self.backend.kind(Defaults::Local)?;
        if self.pause == PauseVariant::Sigstop && kind == BackendKind::Embedded {
            return Err(DemoError::usage(
                "--pause sigstop runs client A in a process of its own, and the embedded lock service lives inside one process: use --backend etcd, redis, postgres, mariadb or zookeeper (or --pause in-process)",
            ));
        }
        let ttl = self.ttl();
        if ttl < Duration::from_millis(100) {
            return Err(DemoError::usage("--ttl-ms must be at least 100"));
        }
        if kind == BackendKind::Etcd && ttl < Duration::from_secs(2) {
            return Err(DemoError::usage(
                "etcd's smallest lease is 2 s: use --ttl-ms 2000 or more with --backend etcd",
            ));
        }
        if self.pause_length() <= ttl {
            return Err(DemoError::usage(format!(
                "--pause-ms ({}) must exceed the lease TTL ({} ms) for the lease to expire during the pause",
                self.pause_length().as_millis(),
                ttl.as_millis()
            )));
        }
        Ok(())
    }
}

/// What one run of the story ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcRunReport {
    /// Against the resource server (`true`) or the plain store.
    pub fencing: bool,
    /// A's generation.
    pub generation_a: u64,
    /// B's generation.
    pub generation_b: u64,
    /// The balance read at the end.
    pub final_balance: i64,
    /// The balance with both deposits applied once.
    pub expected_balance: i64,
    /// The storage applied A's write after B's newer generation had
    /// written.
    pub stale_write_accepted: bool,
    /// The resource server refused A's late write as stale.
    pub stale_write_refused: bool,
    /// A's guard reported the lease lost by the time A woke.
    pub lease_lost_signalled: bool,
    /// What happened, in order.
    pub events: Vec<Event>,
    /// The same, as console lines.
    pub console: String,
}

impl GcRunReport {
    /// The anomaly of the unfenced run: a stale write applied and a
    /// deposit lost.
    pub fn lost_update(&self) -> bool {
        self.stale_write_accepted && self.final_balance != self.expected_balance
    }

    /// No stale write applied, and every deposit in the balance once.
    pub fn is_safe(&self) -> bool {
        !self.stale_write_accepted && self.final_balance == self.expected_balance
    }

    /// The verdict line.
    pub fn verdict(&self) -> String {
        let balance = format!(
            "final balance {}, expected {}",
            self.final_balance, self.expected_balance
        );
        let lease = if self.lease_lost_signalled {
            "A's guard had signalled lease lost"
        } else {
            "A's guard did NOT signal lease lost"
        };
        match (self.fencing, self.is_safe()) {
            (true, true) => format!(
                "SAFE: A's stale write (generation {} < mark {}) was refused with 409 and retried; {lease}; {balance}",
                self.generation_a, self.generation_b
            ),
            (true, false) => format!(
                "FENCING FAILED: stale write accepted = {}, refused = {}; {balance}",
                self.stale_write_accepted, self.stale_write_refused
            ),
            (false, _) if self.lost_update() => format!(
                "LOST UPDATE: A's stale write (generation {} after {}) was applied; {balance}: B's deposit is gone",
                self.generation_a, self.generation_b
            ),
            (false, _) => format!(
                "anomaly NOT reproduced this time ({balance}, stale write applied = {}); try a longer --pause-ms",
                self.stale_write_accepted
            ),
        }
    }
}

/// Both runs of the story.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcPauseReport {
    /// Which lock service.
    pub backend: BackendKind,
    /// How A was paused.
    pub pause: PauseVariant,
    /// Run 1: the plain store.
    pub unfenced: GcRunReport,
    /// Run 2: Palisade's resource server.
    pub fenced: GcRunReport,
    /// Where the timeline picture was written.
    pub svg_path: PathBuf,
}

impl GcPauseReport {
    /// The fenced run refused the stale write and kept every deposit.
    pub fn fenced_safe(&self) -> bool {
        self.fenced.is_safe() && self.fenced.stale_write_refused
    }

    /// The unfenced run showed the lost update.
    pub fn anomaly_reproduced(&self) -> bool {
        self.unfenced.lost_update()
    }

    /// 0 when the fenced run was safe, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        if self.fenced_safe() { 0 } else { 1 }
    }
}

/// Tells the story twice, prints the timelines and verdicts, and writes the
/// SVG picture. `launcher` starts client A's process for `--pause sigstop`.
pub async fn run(args: &GcPauseArgs, launcher: &ChildLauncher) -> Result<GcPauseReport, DemoError> {
    args.validate()?;
    let ttl = args.ttl();
    let pause = args.pause_length();
    let tag = invocation_tag();
    println!(
        "GC-pause demo: lock service {}; client A {}; lease TTL {} ms, pause {} ms",
        target(&args.backend, &tag)?.describe(),
        match args.pause {
            PauseVariant::InProcess =>
                "paused in-process (its task sleeps, its lease renewal stops)",
            PauseVariant::Sigstop => "in its own process, stopped with SIGSTOP",
        },
        ttl.as_millis(),
        pause.as_millis()
    );

    // The two runs are independent (their own lock names, their own
    // storage), so they are told side by side and printed one after the
    // other: the demo takes one pause, not two.
    let plain_store = PlainStore::start().await?;
    let server = ResourceServer::start().await?;
    let unfenced_setup = Setup {
        fencing: false,
        target: target(&args.backend, &format!("{tag}-1"))?,
        storage: StorageTarget::Plain {
            url: plain_store.url(),
        },
        ttl,
        pause,
        variant: args.pause,
        launcher,
    };
    let fenced_setup = Setup {
        fencing: true,
        target: target(&args.backend, &format!("{tag}-2"))?,
        storage: StorageTarget::Fenced { url: server.url() },
        ttl,
        pause,
        variant: args.pause,
        launcher,
    };
    let (unfenced, fenced) = tokio::try_join!(tell(&unfenced_setup), tell(&fenced_setup))?;

    println!("\nRun 1: without fencing (a plain store that applies whatever it is sent)");
    println!("  (plain store on {})", plain_store.url());
    print!("{}", unfenced.console);
    println!("  verdict: {}", unfenced.verdict());
    drop(plain_store);

    println!("\nRun 2: with fencing (Palisade's resource server checks every sequencer)");
    println!(
        "  (resource server on {}, data in {})",
        server.url(),
        server.data_dir().display()
    );
    print!("{}", fenced.console);
    server.stop().await?;
    println!("  verdict: {}", fenced.verdict());

    let svg_path = args.svg_path();
    let title = format!(
        "GC pause on {}, client A paused {}; lease TTL {} ms",
        kind_of(&args.backend).name(),
        match args.pause {
            PauseVariant::InProcess => "in-process",
            PauseVariant::Sigstop => "with SIGSTOP",
        },
        ttl.as_millis()
    );
    let picture = svg::render(
        &title,
        &[
            svg::Panel {
                title: "Run 1: without fencing (plain store)",
                storage_label: "plain store",
                verdict: &unfenced.verdict(),
                events: &unfenced.events,
            },
            svg::Panel {
                title: "Run 2: with fencing (Palisade resource server)",
                storage_label: "resource server",
                verdict: &fenced.verdict(),
                events: &fenced.events,
            },
        ],
    );
    std::fs::write(&svg_path, picture)?;
    println!("\ntimeline picture: {}", svg_path.display());
    println!("unfenced: {}", unfenced.verdict());
    println!("fenced:   {}", fenced.verdict());
    Ok(GcPauseReport {
        backend: kind_of(&args.backend),
        pause: args.pause,
        unfenced,
        fenced,
        svg_path,
    })
}

/// One run's settings.
struct Setup<'a> {
    fencing: bool,
    target: BackendTarget,
    storage: StorageTarget,
    ttl: Duration,
    pause: Duration,
    variant: PauseVariant,
    launcher: &'a ChildLauncher,
}

/// Client A: in this process, or in a process of its own.
// One value per run: the size difference of the variants costs nothing.
#[allow(clippy::large_enum_variant)]
enum ClientA {
    InProcess(LocalClient),
    Process(ChildProcess),
}

impl ClientA {
    async fn acquire(&mut self) -> Result<Sequencer, DemoError> {
        match self {
            ClientA::InProcess(client) => client.acquire(ACQUIRE_WAIT).await,
            ClientA::Process(process) => {
                let wait_ms = u64::try_from(ACQUIRE_WAIT.as_millis()).unwrap_or(u64::MAX);
                match process
                    .ask(&ChildCommand::Acquire { wait_ms }, ANSWER_WAIT)
                    .await?
                {
                    ChildMessage::Acquired { sequencer } => {
                        sequencer
                            .parse::<Sequencer>()
                            .map_err(|error| DemoError::Child {
                                role: "client A".into(),
                                message: format!("sent a bad sequencer `{sequencer}`: {error}"),
                            })
                    }
                    other => Err(process.unexpected(&other)),
                }
            }
        }
    }

    async fn read(&mut self) -> Result<i64, DemoError> {
        let value = match self {
            ClientA::InProcess(client) => match client.read().await? {
                Ok(value) => value,
                Err(stale) => {
                    return Err(DemoError::story(format!(
                        "A's read right after its grant was refused (generation {} < {})",
                        stale.presented, stale.mark
                    )));
                }
            },
            ClientA::Process(process) => match process.ask(&ChildCommand::Read, ANSWER_WAIT).await?
            {
                ChildMessage::Read { value, stale: None } => value,
                other => return Err(process.unexpected(&other)),
            },
        };
        value.ok_or_else(|| DemoError::story("the balance was never written"))
    }

    async fn write(&mut self, value: i64) -> Result<WriteOutcome, DemoError> {
        match self {
            ClientA::InProcess(client) => client.write(value).await,
            ClientA::Process(process) => {
                match process
                    .ask(&ChildCommand::Write { value }, ANSWER_WAIT)
                    .await?
                {
                    ChildMessage::Written { outcome } => Ok(outcome),
                    other => Err(process.unexpected(&other)),
                }
            }
        }
    }

    /// Whether the lease is valid, in words.
    async fn lease(&mut self) -> Result<(bool, String), DemoError> {
        match self {
            ClientA::InProcess(client) => Ok(crate::client::describe_lease(client.lease_state())),
            ClientA::Process(process) => {
                match process.ask(&ChildCommand::Lease, ANSWER_WAIT).await? {
                    ChildMessage::Lease { valid, detail } => Ok((valid, detail)),
                    other => Err(process.unexpected(&other)),
                }
            }
        }
    }

    /// Releases; `Some(error)` when the lock service refused.
    async fn release(&mut self) -> Result<Option<String>, DemoError> {
        match self {
            ClientA::InProcess(client) => Ok(client.release().await.err().map(|e| e.to_string())),
            ClientA::Process(process) => {
                match process.ask(&ChildCommand::Release, ANSWER_WAIT).await? {
                    ChildMessage::Released { error } => Ok(error),
                    other => Err(process.unexpected(&other)),
                }
            }
        }
    }

    fn lease_watch(&self) -> Option<LeaseWatch> {
        match self {
            ClientA::InProcess(client) => client.lease_watch(),
            ClientA::Process(_) => None,
        }
    }

    /// Stops the world for A; says how.
    fn begin_pause(&mut self) -> Result<String, DemoError> {
        match self {
            ClientA::InProcess(client) => Ok(format!("A's task sleeps; {}", client.stop_renewal())),
            ClientA::Process(process) => {
                process.stop()?;
                Ok(format!(
                    "SIGSTOP to pid {}: every thread stops, its lease renewal included",
                    process.pid()
                ))
            }
        }
    }

    fn end_pause(&mut self) -> Result<Option<String>, DemoError> {
        match self {
            ClientA::InProcess(client) => {
                // A's retry, if any, renews its lease as usual.
                client.set_renewal(Renewal::KeepAlive);
                Ok(None)
            }
            ClientA::Process(process) => {
                process.resume()?;
                Ok(Some(format!("SIGCONT to pid {}", process.pid())))
            }
        }
    }
}

/// Tells the story once.
async fn tell(setup: &Setup<'_>) -> Result<GcRunReport, DemoError> {
    let store_name = if setup.fencing {
        "resource server"
    } else {
        "plain store"
    };
    let timeline = Timeline::new().with_storage_label(store_name);
    let lock = LockName::new(LOCK)?;
    let locks = Locks::connect(&setup.target).await?;
    let options = session_options(setup.ttl);
    let storage = Storage::connect(&setup.storage).await?;
    let new_client = || {
        LocalClient::new(
            locks.clone(),
            options.clone(),
            storage.clone(),
            lock.clone(),
            KEY,
        )
    };

    // The opening balance, written under the lock like every other write.
    let mut opener = new_client();
    let opening = opener.acquire(ACQUIRE_WAIT).await?;
    if let WriteOutcome::Refused { presented, mark } = opener.write(OPENING_BALANCE).await? {
        return Err(DemoError::story(format!(
            "the opening balance was refused (generation {presented} < mark {mark})"
        )));
    }
    opener.release().await?;
    timeline.record(
        Lane::ResourceServer,
        EventKind::WriteAccepted,
        format!("balance = {OPENING_BALANCE}"),
        format!(
            "balance = {OPENING_BALANCE} (the opening balance, written under generation {})",
            opening.generation()
        ),
    );

    // 1. A takes the lock and reads.
    let mut client_a = match setup.variant {
        PauseVariant::InProcess => {
            let mut client = new_client();
            client.set_renewal(Renewal::Pausable);
            ClientA::InProcess(client)
        }
        PauseVariant::Sigstop => {
            let spec = ChildSpec::GcHolder {
                backend: setup.target.clone(),
                storage: setup.storage.clone(),
                lock: LOCK.to_owned(),
                key: KEY.to_owned(),
                ttl_ms: u64::try_from(setup.ttl.as_millis()).unwrap_or(u64::MAX),
            };
            let mut process = setup.launcher.spawn("client A", &spec).await?;
            match process.receive(ANSWER_WAIT).await? {
                ChildMessage::Ready => {}
                other => return Err(process.unexpected(&other)),
            }
            timeline.record(
                Lane::ClientA,
                EventKind::Note,
                format!("own process, pid {}", process.pid()),
                format!("runs in a process of its own (pid {})", process.pid()),
            );
            ClientA::Process(process)
        }
    };
    let sequencer_a = client_a.acquire().await?;
    let generation_a = sequencer_a.generation().get();
    timeline.record(
        Lane::LockService,
        EventKind::Acquired,
        format!("grants generation {generation_a} to A"),
        format!("grants `{LOCK}` to A: generation {generation_a}"),
    );
    timeline.record(
        Lane::ClientA,
        EventKind::Acquired,
        format!("holds generation {generation_a}"),
        format!("acquired `{LOCK}`, generation {generation_a}; sequencer `{sequencer_a}`"),
    );
    let seen_by_a = client_a.read().await?;
    let a_will_write = seen_by_a + DEPOSIT_A;
    timeline.record(
        Lane::ClientA,
        EventKind::Read,
        format!("reads {seen_by_a}"),
        format!("reads balance = {seen_by_a}; will write {a_will_write} (+{DEPOSIT_A})"),
    );

    // A's lease-lost signal fires at its validity deadline by itself, even
    // while A is paused (in-process only: a stopped process shows nothing).
    let lease_monitor = client_a.lease_watch().map(|mut watch| {
        let timeline = timeline.clone();
        tokio::spawn(async move {
            if let LeaseState::Lost(reason) = watch.lost().await {
                timeline.record(
                    Lane::ClientA,
                    EventKind::LeaseLost,
                    "guard: lease lost",
                    format!(
                        "A's guard signals lease lost at its deadline ({reason}); A is paused and sees it when it wakes"
                    ),
                );
            }
        })
    });

    // 3. B wants the lock from now on, and gets it when A's lease expires.
    let client_b_task = {
        let client_b = new_client();
        let timeline = timeline.clone();
        tokio::spawn(client_b_story(client_b, timeline))
    };

    // 2. A stops the world.
    let how = client_a.begin_pause()?;
    timeline.record(
        Lane::ClientA,
        EventKind::PauseStart,
        "paused",
        format!(
            "stop-the-world pause of {} ms (lease TTL {} ms): {how}",
            setup.pause.as_millis(),
            setup.ttl.as_millis()
        ),
    );
    let paused_at = Instant::now();
    tokio::time::sleep(setup.pause).await;
    // The pause lasts until B is done, so the story is told in order even
    // on a slow machine (B's wait for A's lease is what takes time).
    let generation_b = match tokio::time::timeout(ACQUIRE_WAIT * 2, client_b_task).await {
        Ok(Ok(result)) => result?,
        Ok(Err(join)) => return Err(DemoError::story(format!("client B's task failed: {join}"))),
        Err(_) => return Err(DemoError::story("client B did not finish in time")),
    };
    let resumed = client_a.end_pause()?;
    let paused_for = paused_at.elapsed();
    timeline.record(
        Lane::ClientA,
        EventKind::PauseEnd,
        "wakes",
        format!(
            "wakes after {} ms{}{}",
            paused_for.as_millis(),
            resumed.map(|how| format!(" ({how})")).unwrap_or_default(),
            if paused_for > setup.pause + Duration::from_millis(100) {
                "; the pause ran on until B had written, so the story is told in order"
            } else {
                ""
            }
        ),
    );

    // 4. A wakes up and finishes the write it started before the pause.
    let (lease_valid, lease_detail) = client_a.lease().await?;
    let lease_lost_signalled = !lease_valid;
    timeline.record(
        Lane::ClientA,
        if lease_valid {
            EventKind::Note
        } else {
            EventKind::LeaseLost
        },
        if lease_valid {
            "guard: lease valid?!"
        } else {
            "guard: lease lost"
        },
        format!("its guard says: {lease_detail}"),
    );
    timeline.record(
        Lane::ClientA,
        EventKind::WriteSent,
        format!("writes {a_will_write} (generation {generation_a})"),
        format!(
            "writes balance = {a_will_write} with the sequencer it fetched before the pause (generation {generation_a})"
        ),
    );
    let (stale_write_accepted, stale_write_refused) = match client_a.write(a_will_write).await? {
        WriteOutcome::Accepted { .. } => {
            let stale = generation_a < generation_b;
            timeline.record(
                Lane::ResourceServer,
                if stale {
                    EventKind::StaleWriteAccepted
                } else {
                    EventKind::WriteAccepted
                },
                format!("applies A's {a_will_write} (generation {generation_a})"),
                format!(
                    "applies A's write: balance = {a_will_write} (generation {generation_a}{})",
                    if stale {
                        format!(", older than B's {generation_b}: B's deposit is overwritten")
                    } else {
                        String::new()
                    }
                ),
            );
            (stale, false)
        }
        WriteOutcome::Refused { presented, mark } => {
            timeline.record(
                Lane::ResourceServer,
                EventKind::WriteRefused,
                format!("refuses A: 409 stale, {presented} < {mark}"),
                format!("refuses A's write: 409 stale, generation {presented} < mark {mark}"),
            );
            (false, true)
        }
    };
    if let Some(monitor) = lease_monitor {
        monitor.abort();
    }
    match client_a.release().await? {
        None => timeline.record(
            Lane::ClientA,
            EventKind::Released,
            "releases",
            "releases the lock",
        ),
        Some(error) => timeline.record(
            Lane::ClientA,
            EventKind::Released,
            "release refused",
            format!("its release is refused: {error}"),
        ),
    }

    // A correct client treats the refusal as "you no longer hold the lock":
    // take it again, read again, apply again.
    if stale_write_refused {
        let sequencer = client_a.acquire().await?;
        let generation = sequencer.generation().get();
        let seen = client_a.read().await?;
        let retried = seen + DEPOSIT_A;
        match client_a.write(retried).await? {
            WriteOutcome::Accepted { .. } => {}
            WriteOutcome::Refused { presented, mark } => {
                return Err(DemoError::story(format!(
                    "A's retry with generation {presented} was refused (mark {mark})"
                )));
            }
        }
        if let Some(error) = client_a.release().await? {
            return Err(DemoError::story(format!(
                "A's retry could not release: {error}"
            )));
        }
        timeline.record(
            Lane::ClientA,
            EventKind::Acquired,
            format!("retries: generation {generation}"),
            format!(
                "retries the right way: takes the lock again (generation {generation}), reads {seen}, writes {retried}, releases"
            ),
        );
        timeline.record(
            Lane::ResourceServer,
            EventKind::WriteAccepted,
            format!("balance = {retried} (generation {generation})"),
            format!("applies A's retry: balance = {retried} (generation {generation})"),
        );
    }
    drop(client_a);

    let final_balance = match storage.read(&lock, KEY, None).await? {
        Ok(Some(balance)) => balance,
        Ok(None) => return Err(DemoError::story("the balance disappeared")),
        Err(stale) => {
            return Err(DemoError::story(format!(
                "a plain read was refused (generation {} < {})",
                stale.presented, stale.mark
            )));
        }
    };
    Ok(GcRunReport {
        fencing: setup.fencing,
        generation_a,
        generation_b,
        final_balance,
        expected_balance: OPENING_BALANCE + DEPOSIT_A + DEPOSIT_B,
        stale_write_accepted,
        stale_write_refused,
        lease_lost_signalled,
        events: timeline.events(),
        console: timeline.render(),
    })
}

/// Client B: waits for the lock, deposits, releases. Returns its
/// generation.
async fn client_b_story(mut client: LocalClient, timeline: Timeline) -> Result<u64, DemoError> {
    let asked_at = Instant::now();
    timeline.record(
        Lane::ClientB,
        EventKind::Note,
        "asks for the lock",
        format!("asks for `{}`; queued behind A", client.lock()),
    );
    let sequencer = client
        .acquire(ACQUIRE_WAIT)
        .await
        .map_err(|error| DemoError::story(format!("client B never got the lock: {error}")))?;
    let generation = sequencer.generation().get();
    timeline.record(
        Lane::LockService,
        EventKind::Acquired,
        format!("A expired; grants generation {generation} to B"),
        format!(
            "A's lease has expired: grants `{}` to B, generation {generation}",
            client.lock()
        ),
    );
    timeline.record(
        Lane::ClientB,
        EventKind::Acquired,
        format!("holds generation {generation}"),
        format!(
            "acquired, generation {generation}, after waiting {} ms",
            asked_at.elapsed().as_millis()
        ),
    );
    let seen = match client.read().await? {
        Ok(Some(seen)) => seen,
        Ok(None) => return Err(DemoError::story("B found no balance")),
        Err(stale) => {
            return Err(DemoError::story(format!(
                "B's read was refused (generation {} < {}); B held the newest grant",
                stale.presented, stale.mark
            )));
        }
    };
    let new_balance = seen + DEPOSIT_B;
    timeline.record(
        Lane::ClientB,
        EventKind::Read,
        format!("reads {seen}, writes {new_balance}"),
        format!("reads balance = {seen}; writes {new_balance} (+{DEPOSIT_B})"),
    );
    match client.write(new_balance).await? {
        WriteOutcome::Accepted { .. } => timeline.record(
            Lane::ResourceServer,
            EventKind::WriteAccepted,
            format!("balance = {new_balance} (generation {generation})"),
            format!("applies B's write: balance = {new_balance} (generation {generation})"),
        ),
        WriteOutcome::Refused { presented, mark } => {
            return Err(DemoError::story(format!(
                "B's write with generation {presented} was refused (mark {mark}); B held the newest grant"
            )));
        }
    }
    client.release().await?;
    timeline.record(
        Lane::ClientB,
        EventKind::Released,
        "releases",
        "releases the lock",
    );
    Ok(generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigstop_needs_a_lock_service_shared_across_processes() {
        let args = GcPauseArgs {
            pause: PauseVariant::Sigstop,
            ..GcPauseArgs::new(BackendArgs::default())
        };
        let error = args.validate().expect_err("usage error");
        assert!(error.is_usage());
        assert!(error.to_string().contains("--backend etcd"), "{error}");
    }

    #[test]
    fn the_pause_must_outlast_the_lease() {
        let args = GcPauseArgs {
            ttl_ms: Some(1000),
            pause_ms: Some(1000),
            ..GcPauseArgs::new(BackendArgs::default())
        };
        assert!(args.validate().expect_err("usage error").is_usage());
        let args = GcPauseArgs {
            pause_ms: Some(1001),
            ..args
        };
        assert!(args.validate().is_ok());
    }

    #[test]
    fn defaults_follow_the_backend() {
        let embedded = GcPauseArgs::new(BackendArgs::default());
        assert_eq!(embedded.ttl(), Duration::from_millis(1000));
        assert_eq!(embedded.pause_length(), Duration::from_millis(3000));
        let etcd = GcPauseArgs::new(BackendArgs::from(palisade_lock_any::LockSpec::etcd(
            "127.0.0.1:2379",
        )));
        assert_eq!(etcd.ttl(), Duration::from_millis(2000));
        assert!(etcd.validate().is_ok());
        let short_etcd = GcPauseArgs {
            ttl_ms: Some(1000),
            ..etcd
        };
        assert!(short_etcd.validate().expect_err("usage error").is_usage());
    }
}
