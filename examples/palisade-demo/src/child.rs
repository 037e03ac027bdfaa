//! Client processes: the demos re-run their own binary in a hidden role, so
//! that a lock holder can be stopped with SIGSTOP (every thread, its
//! keep-alive included) and so that flash-sale buyers are real separate
//! clients of etcd or Redis.
//!
//! The driver starts the binary named by a [`ChildLauncher`] with one extra
//! argument, a JSON `ChildSpec`, and talks to it in JSON lines: commands
//! on the child's standard input, messages on its standard output. Anything
//! else the child prints on standard output is ignored; its standard error
//! is kept, and its last lines are shown if it fails.
//!
//! Every host binary routes that argument to [`run_child`]:
//!
//! | host | how the role is reached |
//! |---|---|
//! | `example-gc-pause`, `example-flash-sale` | `--demo-child <spec>` |
//! | `palisade` | `palisade demo child <spec>` |
//! | the test suite | the `demo-child` binary of `palisade-tests` |

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::DemoError;
use crate::backend::{BackendTarget, Locks, Renewal, session_options};
use crate::client::{LocalClient, describe_lease};
use crate::flash_sale::{self, BuyerEvent, BuyerPlan, Tally};
use crate::storage::{Storage, StorageTarget, WriteOutcome};

/// How to start a client process: a program and the arguments that put it
/// in the child role; the JSON spec is appended as the last argument.
#[derive(Debug, Clone)]
pub struct ChildLauncher {
    program: PathBuf,
    leading_args: Vec<OsString>,
}

impl ChildLauncher {
    /// Runs `program leading_args... <spec>`.
    pub fn new<I, S>(program: impl Into<PathBuf>, leading_args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        ChildLauncher {
            program: program.into(),
            leading_args: leading_args.into_iter().map(Into::into).collect(),
        }
    }

    /// Re-runs the current executable with `leading_args` before the spec
    /// (`["--demo-child"]` for the examples, `["demo", "child"]` for the
    /// `palisade` binary).
    pub fn current_exe<I, S>(leading_args: I) -> Result<Self, DemoError>
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Ok(ChildLauncher::new(std::env::current_exe()?, leading_args))
    }

    /// Starts one client process in the role `spec`; `role` names it in
    /// messages.
    pub(crate) async fn spawn(
        &self,
        role: &str,
        spec: &ChildSpec,
    ) -> Result<ChildProcess, DemoError> {
        let spec_json = serde_json::to_string(spec)?;
        let mut child = Command::new(&self.program)
            .args(&self.leading_args)
            .arg(spec_json)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| DemoError::Child {
                role: role.to_owned(),
                message: format!("cannot start {}: {error}", self.program.display()),
            })?;
        let missing = |what: &str| DemoError::Child {
            role: role.to_owned(),
            message: format!("no {what} pipe"),
        };
        let pid = child.id().ok_or_else(|| missing("pid"))?;
        let stdin = child.stdin.take().ok_or_else(|| missing("stdin"))?;
        let stdout = BufReader::new(child.stdout.take().ok_or_else(|| missing("stdout"))?).lines();
        let stderr = child.stderr.take().ok_or_else(|| missing("stderr"))?;
        let stderr_tail: Arc<Mutex<VecDeque<String>>> = Arc::default();
        let tail = stderr_tail.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
                if tail.len() == STDERR_TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
        Ok(ChildProcess {
            role: role.to_owned(),
            child,
            pid,
            stdin,
            stdout,
            stderr_tail,
            stopped: false,
        })
    }
}

/// How many lines of a child's standard error are kept for messages.
const STDERR_TAIL_LINES: usize = 20;

/// What a client process is asked to be.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub(crate) enum ChildSpec {
    /// Client A of the GC-pause story, driven command by command.
    GcHolder {
        backend: BackendTarget,
        storage: StorageTarget,
        lock: String,
        key: String,
        ttl_ms: u64,
    },
    /// One flash-sale buyer: waits for `go`, buys until the stock is gone,
    /// reports.
    Buyer {
        backend: BackendTarget,
        plan: BuyerPlan,
    },
}

/// A command to a client process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub(crate) enum ChildCommand {
    /// Take the lock (fresh session), waiting up to `wait_ms`.
    Acquire { wait_ms: u64 },
    /// Read the number with the hold's sequencer.
    Read,
    /// Write `value` with the sequencer fetched at the grant.
    Write { value: i64 },
    /// Report the hold's lease.
    Lease,
    /// Release the hold.
    Release,
    /// Start buying.
    Go,
}

/// A message from a client process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "message", rename_all = "snake_case")]
pub(crate) enum ChildMessage {
    /// Connected and waiting for commands.
    Ready,
    /// Holds the lock with `sequencer` (canonical text).
    Acquired { sequencer: String },
    /// The number read (`None`: never written), or the refusal's
    /// generations.
    Read {
        value: Option<i64>,
        stale: Option<(u64, u64)>,
    },
    /// What became of a write.
    Written { outcome: WriteOutcome },
    /// The hold's lease.
    Lease { valid: bool, detail: String },
    /// A release; `error` if the lock service refused it.
    Released { error: Option<String> },
    /// A flash-sale buyer's event.
    Buyer { event: BuyerEvent },
    /// A flash-sale buyer is done.
    Done { tally: Tally },
    /// The last command failed (the process goes on).
    Failed { error: String },
}

/// A running client process, killed when dropped.
#[derive(Debug)]
pub(crate) struct ChildProcess {
    role: String,
    child: Child,
    pid: u32,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// Stopped with SIGSTOP and not resumed yet.
    stopped: bool,
}

impl ChildProcess {
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    fn failure(&self, message: impl std::fmt::Display) -> DemoError {
        let tail = self
            .stderr_tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n");
        DemoError::Child {
            role: self.role.clone(),
            message: if tail.is_empty() {
                message.to_string()
            } else {
                format!("{message}\n--- its standard error ---\n{tail}")
            },
        }
    }

    /// Sends one command.
    pub(crate) async fn send(&mut self, command: &ChildCommand) -> Result<(), DemoError> {
        let mut line = serde_json::to_string(command)?;
        line.push('\n');
        let sent = async {
            self.stdin.write_all(line.as_bytes()).await?;
            self.stdin.flush().await
        }
        .await;
        sent.map_err(|error| self.failure(format!("cannot send a command: {error}")))
    }

    /// The next message, within `wait`. A `failed` message is an error.
    pub(crate) async fn receive(&mut self, wait: Duration) -> Result<ChildMessage, DemoError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let line = match tokio::time::timeout_at(deadline, self.stdout.next_line()).await {
                Err(_elapsed) => {
                    return Err(self.failure(format!("no answer within {} s", wait.as_secs())));
                }
                Ok(Err(error)) => return Err(self.failure(format!("reading its output: {error}"))),
                Ok(Ok(None)) => {
                    let status = self.child.wait().await.ok();
                    return Err(self.failure(match status {
                        Some(status) => format!("exited ({status})"),
                        None => "exited".to_owned(),
                    }));
                }
                Ok(Ok(Some(line))) => line,
            };
            match serde_json::from_str::<ChildMessage>(&line) {
                Ok(ChildMessage::Failed { error }) => return Err(self.failure(error)),
                Ok(message) => return Ok(message),
                // Not one of ours (a library printing to stdout): skip it.
                Err(_) => {
                    tracing::debug!(role = %self.role, %line, "ignored a line from a client process")
                }
            }
        }
    }

    /// Sends `command` and returns the answer.
    pub(crate) async fn ask(
        &mut self,
        command: &ChildCommand,
        wait: Duration,
    ) -> Result<ChildMessage, DemoError> {
        self.send(command).await?;
        self.receive(wait).await
    }

    /// An error for an answer the driver did not expect.
    pub(crate) fn unexpected(&self, message: &ChildMessage) -> DemoError {
        self.failure(format!("unexpected answer {message:?}"))
    }

    /// Stops the process (SIGSTOP): every thread, the lease renewal
    /// included, as a long GC pause or a page-fault storm would.
    pub(crate) fn stop(&mut self) -> Result<(), DemoError> {
        self.signal(Signal::SIGSTOP)?;
        self.stopped = true;
        Ok(())
    }

    /// Resumes a stopped process (SIGCONT).
    pub(crate) fn resume(&mut self) -> Result<(), DemoError> {
        self.signal(Signal::SIGCONT)?;
        self.stopped = false;
        Ok(())
    }

    /// Signals the process, only while it has not been reaped (its pid
    /// could otherwise belong to another process by now).
    fn signal(&mut self, signal: Signal) -> Result<(), DemoError> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Err(self.failure(format!("exited ({status}) before {signal}")));
        }
        let pid = i32::try_from(self.pid).map_err(|_| self.failure("pid out of range"))?;
        kill(Pid::from_raw(pid), signal)
            .map_err(|error| self.failure(format!("cannot send {signal}: {error}")))
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        // A stopped process is killed all the same (kill_on_drop sends
        // SIGKILL), but resuming it first lets it be reaped at once.
        if self.stopped {
            let _ = self.signal(Signal::SIGCONT);
        }
    }
}

/// The entry point of a client process: `spec` is the JSON argument the
/// driver appended. Returns when the driver closes standard input (client
/// A) or when the buyer is done.
pub async fn run_child(spec: &str) -> Result<(), DemoError> {
    match serde_json::from_str::<ChildSpec>(spec)? {
        ChildSpec::GcHolder {
            backend,
            storage,
            lock,
            key,
            ttl_ms,
        } => gc_holder(backend, storage, lock, key, ttl_ms).await,
        ChildSpec::Buyer { backend, plan } => buyer(backend, plan).await,
    }
}

/// Writes one message on standard output and flushes it. A driver that
/// has gone away is not an error here: the child simply finds its standard
/// input closed next.
pub(crate) fn emit(message: &ChildMessage) {
    let line = serde_json::to_string(message).unwrap_or_else(|error| {
        serde_json::json!({"message": "failed", "error": format!("cannot encode a message: {error}")})
            .to_string()
    });
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
}

async fn gc_holder(
    backend: BackendTarget,
    storage: StorageTarget,
    lock: String,
    key: String,
    ttl_ms: u64,
) -> Result<(), DemoError> {
    let locks = Locks::connect(&backend).await?;
    let mut client = LocalClient::new(
        locks,
        session_options(Duration::from_millis(ttl_ms)),
        Storage::connect(&storage).await?,
        palisade_core::LockName::new(lock)?,
        key,
    );
    // This process is paused from outside (SIGSTOP), so its lease renewal
    // runs as usual until then.
    client.set_renewal(Renewal::KeepAlive);
    emit(&ChildMessage::Ready);
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let command = match serde_json::from_str::<ChildCommand>(&line) {
            Ok(command) => command,
            Err(error) => {
                emit(&ChildMessage::Failed {
                    error: format!("bad command `{line}`: {error}"),
                });
                continue;
            }
        };
        let answer = match command {
            ChildCommand::Acquire { wait_ms } => client
                .acquire(Duration::from_millis(wait_ms))
                .await
                .map(|sequencer| ChildMessage::Acquired {
                    sequencer: sequencer.to_string(),
                }),
            ChildCommand::Read => client.read().await.map(|read| match read {
                Ok(value) => ChildMessage::Read { value, stale: None },
                Err(stale) => ChildMessage::Read {
                    value: None,
                    stale: Some((stale.presented, stale.mark)),
                },
            }),
            ChildCommand::Write { value } => client
                .write(value)
                .await
                .map(|outcome| ChildMessage::Written { outcome }),
            ChildCommand::Lease => {
                let (valid, detail) = describe_lease(client.lease_state());
                Ok(ChildMessage::Lease { valid, detail })
            }
            ChildCommand::Release => Ok(ChildMessage::Released {
                error: client.release().await.err().map(|error| error.to_string()),
            }),
            ChildCommand::Go => Err(DemoError::story("client A takes no `go`")),
        };
        emit(&answer.unwrap_or_else(|error| ChildMessage::Failed {
            error: error.to_string(),
        }));
    }
    Ok(())
}

async fn buyer(backend: BackendTarget, plan: BuyerPlan) -> Result<(), DemoError> {
    let locks = Locks::connect(&backend).await?;
    let storage = Storage::connect(&plan.storage).await?;
    emit(&ChildMessage::Ready);
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        match lines.next_line().await? {
            None => return Ok(()),
            Some(line) => {
                if matches!(
                    serde_json::from_str::<ChildCommand>(&line),
                    Ok(ChildCommand::Go)
                ) {
                    break;
                }
            }
        }
    }
    let report = |event: BuyerEvent| emit(&ChildMessage::Buyer { event });
    match flash_sale::buy_until_sold_out(&plan, locks, storage, &report).await {
        Ok(tally) => emit(&ChildMessage::Done { tally }),
        Err(error) => emit(&ChildMessage::Failed {
            error: error.to_string(),
        }),
    }
    Ok(())
}
