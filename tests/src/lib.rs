//! Shared fixtures for Palisade's integration tests. The tests live in
//! `tests/tests/<area>/main.rs`, one binary per area:
//!
//! - `fencing`: the vertical slice on the embedded backend: lock, sequencer,
//!   HTTP resource server, sled, and the stale write refused.
//! - `gc_pause`: a lock holder in its own process (`fence-client`) is
//!   stopped with SIGSTOP past its lease, on real etcd, Redis, PostgreSQL
//!   and MariaDB; its late write is refused.
//! - `redis_fencing`: Redis-specific fencing: no watchdog, and the counter
//!   lost in a restart without persistence.
//! - `etcd_fencing`: a 3-member etcd cluster losing its leader while the
//!   resource server keeps every write in generation order.
//! - `sql_fencing`: the SQL lock backend on PostgreSQL and MariaDB: fencing
//!   on acquire refuses a holder whose session the database ended.
//! - `demos`: the GC-pause and flash-sale demos on every backend, with
//!   their verdicts asserted (`src/bin/demo-child.rs` hosts their client
//!   processes).
//! - `deploy`: the files under `deploy/` parsed and cross-checked against
//!   the binaries' flags.
//! - `faults`, `faults_net`, `faults_disk`, `faults_zookeeper`: the fault
//!   suite, on the harness in [`fault`]: real processes, real faults,
//!   Jepsen-style operation histories recorded by the client processes
//!   ([`history`]) and the offline checker of the suite's invariants
//!   (I-MONO, I-STALE, I-TOKEN, I-DUR, I-ONCE, I-LIVE: [`checker`]).
//!   `scripts/faults.sh` runs all four and prints the table.

pub mod checker;
pub mod fault;
pub mod history;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use palisade_testkit::process::{Signal, send_signal};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use palisade::client::{Client, Refused, Written};
use palisade::server::{ServerConfig, run};
use palisade::{Lock, LockGuard, LockName, Mode};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A resource server running in this process on a free loopback port, with
/// its own temporary data directory. Stopped (gracefully, with a flush) on
/// [`ResourceServer::stop`]; on drop, its task is aborted.
pub struct ResourceServer {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), palisade::server::ServerError>>,
    _data_dir: TempDir,
}

impl ResourceServer {
    /// Starts a server with the default (durable) configuration.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with_flags(&[]).await
    }

    /// Starts a server configured by `flags` exactly as `palisade-server`
    /// parses them (`--data-dir` is added), so a test can follow the
    /// documented command line.
    pub async fn start_with_flags(flags: &[&str]) -> anyhow::Result<Self> {
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            server: ServerConfig,
        }
        let data_dir = tempfile::tempdir()?;
        let data_dir_flag = format!("--data-dir={}", data_dir.path().display());
        let argv = ["palisade-server", data_dir_flag.as_str()]
            .into_iter()
            .chain(flags.iter().copied());
        let Flags { server } = <Flags as clap::Parser>::try_parse_from(argv)?;
        let state = server.open_state(None)?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(run(listener, state, async {
            let _ = stopped.await;
        }));
        Ok(ResourceServer {
            address,
            stop: Some(stop),
            task,
            _data_dir: data_dir,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// A client for this server.
    pub fn client(&self) -> Client {
        Client::new(&self.base_url()).expect("a loopback URL is valid")
    }

    /// Shuts down gracefully and returns the server's result.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await??;
        Ok(())
    }
}

impl Drop for ResourceServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A `fence-client` process holding a lock: see `src/bin/fence-client.rs`
/// for its line protocol. Killed on drop.
pub struct HolderProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    /// The generation it was granted.
    pub generation: u64,
    /// The sequencer it was granted, in text form.
    pub sequencer: String,
}

/// How long a child may take to answer a line (it may be waiting for a
/// lock behind a lease that has to expire first).
const ANSWER_WAIT: Duration = Duration::from_secs(60);

impl HolderProcess {
    /// Starts `fence-client` (pass `env!("CARGO_BIN_EXE_fence-client")`,
    /// which cargo defines for integration tests) with `args`, and waits
    /// until it holds the lock.
    pub async fn start(binary: &str, args: &[String]) -> anyhow::Result<Self> {
        let mut child = Command::new(binary)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start fence-client")?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("no stdout")?).lines();
        let mut holder = HolderProcess {
            child,
            stdin,
            stdout,
            generation: 0,
            sequencer: String::new(),
        };
        let line = holder.next_line().await?;
        let mut words = line.splitn(3, ' ');
        anyhow::ensure!(
            words.next() == Some("ACQUIRED"),
            "unexpected first line `{line}`"
        );
        holder.generation = words.next().context("no generation")?.parse()?;
        holder.sequencer = words.next().context("no sequencer")?.to_owned();
        Ok(holder)
    }

    /// Sends one command and returns the answer line.
    pub async fn ask(&mut self, command: &str) -> anyhow::Result<String> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        self.next_line().await
    }

    async fn next_line(&mut self) -> anyhow::Result<String> {
        tokio::time::timeout(ANSWER_WAIT, self.stdout.next_line())
            .await
            .context("fence-client did not answer in time")??
            .context("fence-client exited")
    }

    /// Stops the process (SIGSTOP): every thread, the keep-alive included.
    pub fn pause(&self) -> anyhow::Result<()> {
        send_signal(self.child.id().context("exited")?, Signal::SIGSTOP)?;
        Ok(())
    }

    /// Resumes a stopped process (SIGCONT).
    pub fn resume(&self) -> anyhow::Result<()> {
        send_signal(self.child.id().context("exited")?, Signal::SIGCONT)?;
        Ok(())
    }
}

/// Fencing on acquire, on any lock service: `holder` takes `lock` and keeps
/// the sequencer it was granted; `end_lease` ends that lease (an expiry
/// during a pause, or what stands in for one), given the holder's session
/// and guard; `contender` takes
/// the lock within `wait` and writes nothing itself. With `fence` it
/// fences at once, so the holder's late write, sent next, is refused as
/// stale; without, nothing newer has reached the server and it lands.
/// Returns the late write's outcome.
pub async fn late_write_after_a_silent_new_holder<A: Lock, B: Lock>(
    holder: A,
    end_lease: impl AsyncFnOnce(&A, &A::Guard) -> anyhow::Result<()>,
    contender: &B,
    resource: &Client,
    lock: &LockName,
    fence: bool,
    wait: Duration,
) -> anyhow::Result<Result<Written, Refused>> {
    let guard_a = holder.acquire(lock, Mode::Exclusive).await?;
    let sequencer_a = guard_a.sequencer()?;
    end_lease(&holder, &guard_a).await?;

    let guard_b = contender
        .acquire_timeout(lock, Mode::Exclusive, wait)
        .await?;
    anyhow::ensure!(guard_b.generation() > sequencer_a.generation());
    if fence {
        let marks = resource
            .fence(&guard_b)
            .await?
            .expect("a new holder's fence is accepted");
        assert_eq!(marks.exclusive, guard_b.generation().get());
    }
    let late = resource.put(&sequencer_a, b"k", "from-A", None).await?;
    guard_b.release().await?;
    drop(guard_a);
    Ok(late)
}

/// Both halves of fencing on acquire on one lock service, each with a
/// fresh holder from `new_holder` (see
/// [`late_write_after_a_silent_new_holder`]): fenced, A's late write is
/// refused and nothing is written under `fenced`; unfenced (the window the
/// fence closes), A's late write lands under `unfenced`.
pub async fn fence_on_acquire_refuses_a_silent_holder<A: Lock, B: Lock>(
    new_holder: impl AsyncFn() -> anyhow::Result<A>,
    end_lease: impl AsyncFn(&A, &A::Guard) -> anyhow::Result<()>,
    contender: &B,
    resource: &Client,
    (fenced, unfenced): (&LockName, &LockName),
    wait: Duration,
) -> anyhow::Result<()> {
    let refused = late_write_after_a_silent_new_holder(
        new_holder().await?,
        &end_lease,
        contender,
        resource,
        fenced,
        true,
        wait,
    )
    .await?
    .expect_err("the new holder fenced: A's late write is stale");
    assert!(matches!(refused, Refused::Stale { .. }), "{refused:?}");
    let read = resource.get(fenced, b"k", None).await?.expect("read");
    assert_eq!(read.value, None, "nothing was written");

    late_write_after_a_silent_new_holder(
        new_holder().await?,
        &end_lease,
        contender,
        resource,
        unfenced,
        false,
        wait,
    )
    .await?
    .expect("without a fence nothing newer has reached the server");
    Ok(())
}
