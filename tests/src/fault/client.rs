//! Workload clients as child processes (`src/bin/fault-client.rs`): how to
//! configure one, and how a test follows and steers it.

use std::ffi::OsString;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use palisade_testkit::process::ChildProcess;
use tokio::sync::mpsc;

/// What a `fault-client` runs: the flags of `src/bin/fault-client.rs`, less
/// the client id and history file, which
/// [`FaultRun::spawn_client`](super::FaultRun::spawn_client) fills in.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `etcd`, `redis`, `sql` or `zookeeper`.
    pub backend: &'static str,
    /// etcd endpoints (comma-separated), the Redis URL, the database URL, or
    /// the ZooKeeper connect string.
    pub endpoints: String,
    /// The resource server's base URL.
    pub server: String,
    /// The locks, taken round-robin.
    pub locks: Vec<String>,
    /// Redis: mint generations with the plain counter instead of the
    /// default server-clock scheme.
    pub counter_scheme: bool,
    /// Redis: raise the generation floor to the mark of a 409 stale.
    pub raise_floor_on_stale: bool,
    /// ZooKeeper: the backend's mutation to play (`fault-client
    /// --zk-mutation`), for the mutation rows.
    pub zk_mutation: Option<&'static str>,
    /// Lease TTL.
    pub ttl: Duration,
    /// Holds before stopping (0: no limit).
    pub rounds: u64,
    /// Run time before stopping (`None`: no limit).
    pub duration: Option<Duration>,
    /// Writes per hold.
    pub writes_per_hold: u64,
    /// Pause between two writes of a hold.
    pub think: Duration,
    /// Time limit of one write request.
    pub write_timeout: Duration,
    /// Extra attempts of a write whose outcome is unknown.
    pub retries: u32,
    /// Time limit of one acquire.
    pub acquire_timeout: Duration,
    /// Wait for `GO` before the first write of every hold.
    pub gate: bool,
    /// Sleep between taking the sequencer and sending each write.
    pub pause_before_write: Duration,
    /// Every N-th write goes to the shared key `register` (0: never).
    pub register_every: u64,
    /// Extra environment variables (e.g. `LD_PRELOAD` for libfaketime).
    pub env: Vec<(OsString, OsString)>,
}

impl ClientConfig {
    fn new(backend: &'static str, endpoints: String, server: &str) -> Self {
        ClientConfig {
            backend,
            endpoints,
            server: server.to_owned(),
            locks: Vec::new(),
            counter_scheme: false,
            raise_floor_on_stale: false,
            zk_mutation: None,
            ttl: Duration::from_secs(2),
            rounds: 0,
            duration: None,
            writes_per_hold: 3,
            think: Duration::from_millis(20),
            write_timeout: Duration::from_secs(5),
            retries: 2,
            acquire_timeout: Duration::from_secs(15),
            gate: false,
            pause_before_write: Duration::ZERO,
            register_every: 0,
            env: Vec::new(),
        }
    }

    /// A Redis client (`url` as the testkit's `RedisServer::url` gives it).
    pub fn redis(url: &str, server: &str) -> Self {
        ClientConfig::new("redis", url.to_owned(), server)
    }

    /// A Redis Cluster client, seeded from every node in `urls`.
    pub fn redis_cluster(urls: &[String], server: &str) -> Self {
        ClientConfig::new("redis", urls.join(","), server)
    }

    /// An etcd client.
    pub fn etcd(endpoints: &[String], server: &str) -> Self {
        ClientConfig::new("etcd", endpoints.join(","), server)
    }

    /// A SQL backend client (`url` as the testkit's `SqlServer::url` gives
    /// it: PostgreSQL or MariaDB).
    pub fn sql(url: &str, server: &str) -> Self {
        ClientConfig::new("sql", url.to_owned(), server)
    }

    /// A ZooKeeper client (`connect` as the testkit's servers give it).
    pub fn zookeeper(connect: &str, server: &str) -> Self {
        ClientConfig::new("zookeeper", connect.to_owned(), server)
    }

    /// ZooKeeper: play `mutation` (`generation-from-sequence` or
    /// `lease-from-disconnect-notice`).
    pub fn zk_mutation(mut self, mutation: &'static str) -> Self {
        self.zk_mutation = Some(mutation);
        self
    }

    /// Adds a lock to take.
    pub fn lock(mut self, lock: impl Into<String>) -> Self {
        self.locks.push(lock.into());
        self
    }

    /// Sets the lease TTL.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Stops after `rounds` holds.
    pub fn rounds(mut self, rounds: u64) -> Self {
        self.rounds = rounds;
        self
    }

    /// Stops after `duration`.
    pub fn duration(mut self, duration: Duration) -> Self {
        self.duration = Some(duration);
        self
    }

    /// Writes per hold.
    pub fn writes_per_hold(mut self, writes: u64) -> Self {
        self.writes_per_hold = writes;
        self
    }

    /// Pause between two writes of a hold.
    pub fn think(mut self, think: Duration) -> Self {
        self.think = think;
        self
    }

    /// Time limit of one write.
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// Extra attempts of a write whose outcome is unknown.
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// Time limit of one acquire.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// Waits for [`ClientProcess::go`] before the first write of every hold.
    pub fn gate(mut self) -> Self {
        self.gate = true;
        self
    }

    /// Sleeps `pause` between taking the sequencer and sending each write.
    pub fn pause_before_write(mut self, pause: Duration) -> Self {
        self.pause_before_write = pause;
        self
    }

    /// Every `every`-th write goes to the shared key `register`.
    pub fn register_every(mut self, every: u64) -> Self {
        self.register_every = every;
        self
    }

    /// Redis: the plain counter scheme (lost with Redis's data).
    pub fn counter_scheme(mut self) -> Self {
        self.counter_scheme = true;
        self
    }

    /// Redis: raise the generation floor to the mark of a 409 stale.
    pub fn raise_floor_on_stale(mut self) -> Self {
        self.raise_floor_on_stale = true;
        self
    }

    /// Adds an environment variable for the client process.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The command-line arguments for client `client_id` recording to
    /// `history`.
    pub fn args(&self, client_id: &str, history: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut flag = |name: &str, value: String| {
            args.push(format!("--{name}").into());
            args.push(value.into());
        };
        flag("backend", self.backend.to_owned());
        flag("endpoints", self.endpoints.clone());
        flag("server", self.server.clone());
        flag("client-id", client_id.to_owned());
        flag("history", history.display().to_string());
        for lock in &self.locks {
            flag("lock", lock.clone());
        }
        flag("ttl-ms", self.ttl.as_millis().to_string());
        flag("rounds", self.rounds.to_string());
        flag(
            "duration-ms",
            self.duration.map_or(0, |d| d.as_millis()).to_string(),
        );
        flag("writes-per-hold", self.writes_per_hold.to_string());
        flag("think-ms", self.think.as_millis().to_string());
        flag(
            "write-timeout-ms",
            self.write_timeout.as_millis().to_string(),
        );
        flag("retries", self.retries.to_string());
        flag(
            "acquire-timeout-ms",
            self.acquire_timeout.as_millis().to_string(),
        );
        flag(
            "pause-before-write-ms",
            self.pause_before_write.as_millis().to_string(),
        );
        flag("register-every", self.register_every.to_string());
        if self.counter_scheme {
            flag("redis-scheme", "counter".to_owned());
        }
        if let Some(mutation) = self.zk_mutation {
            flag("zk-mutation", mutation.to_owned());
        }
        if self.gate {
            args.push("--gate".into());
        }
        if self.raise_floor_on_stale {
            args.push("--raise-floor-on-stale".into());
        }
        args
    }
}

/// One line a `fault-client` printed (see `src/bin/fault-client.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientLine {
    /// Connected to the lock service.
    Ready,
    /// A lock was granted.
    Granted {
        /// The lock.
        lock: String,
        /// Its generation.
        generation: u64,
        /// The sequencer, in its text form.
        sequencer: String,
        /// When the grant completed (the history's monotonic clock).
        at_us: u64,
    },
    /// A sequencer is in hand and a write is about to go (behind the gate).
    Holding {
        /// The lock.
        lock: String,
        /// The generation held.
        generation: u64,
    },
    /// A write was accepted.
    Wrote {
        /// The lock.
        lock: String,
        /// The generation presented.
        generation: u64,
        /// The server's commit sequence number.
        commit_seq: u64,
    },
    /// A write was refused.
    Refused {
        /// The lock.
        lock: String,
        /// The generation presented.
        generation: u64,
        /// `stale`, or another refusal code.
        detail: String,
    },
    /// A write got no definite answer, retries included (timeouts, broken
    /// connections, 5xx, or the server unreachable).
    GaveUp {
        /// The lock.
        lock: String,
        /// The generation presented.
        generation: u64,
        /// The last attempt's outcome.
        detail: String,
    },
    /// The guard reported its lease lost before a write, or while a gated
    /// write waited for `GO`.
    Lost {
        /// The lock.
        lock: String,
        /// The generation that was held.
        generation: u64,
        /// Why.
        reason: String,
    },
    /// The client raised the lock's generation floor (Redis).
    Raised {
        /// The lock.
        lock: String,
        /// The mark it raised the floor to.
        mark: u64,
    },
    /// The workload ended.
    Done {
        /// Operations invoked.
        operations: u64,
    },
    /// Anything else.
    Other(String),
}

impl ClientLine {
    /// Parses one line.
    pub fn parse(line: &str) -> ClientLine {
        let words: Vec<&str> = line.split_whitespace().collect();
        let number = |index: usize| words.get(index).and_then(|word| word.parse::<u64>().ok());
        let word = |index: usize| words.get(index).map(|word| (*word).to_owned());
        let parsed = match words.first().copied() {
            Some("READY") => Some(ClientLine::Ready),
            Some("GRANTED") => (|| {
                Some(ClientLine::Granted {
                    lock: word(1)?,
                    generation: number(2)?,
                    sequencer: word(3)?,
                    at_us: number(4)?,
                })
            })(),
            Some("HOLDING") => (|| {
                Some(ClientLine::Holding {
                    lock: word(1)?,
                    generation: number(2)?,
                })
            })(),
            Some("WROTE") => (|| {
                Some(ClientLine::Wrote {
                    lock: word(1)?,
                    generation: number(2)?,
                    commit_seq: number(3)?,
                })
            })(),
            Some("REFUSED") => (|| {
                Some(ClientLine::Refused {
                    lock: word(1)?,
                    generation: number(2)?,
                    detail: words.get(3..)?.join(" "),
                })
            })(),
            Some("GAVEUP") => (|| {
                Some(ClientLine::GaveUp {
                    lock: word(1)?,
                    generation: number(2)?,
                    detail: words.get(3..)?.join(" "),
                })
            })(),
            Some("LOST") => (|| {
                Some(ClientLine::Lost {
                    lock: word(1)?,
                    generation: number(2)?,
                    reason: words.get(3..)?.join(" "),
                })
            })(),
            Some("RAISED") => (|| {
                Some(ClientLine::Raised {
                    lock: word(1)?,
                    mark: number(2)?,
                })
            })(),
            Some("DONE") => number(1).map(|operations| ClientLine::Done { operations }),
            _ => None,
        };
        parsed.unwrap_or_else(|| ClientLine::Other(line.to_owned()))
    }
}

/// A `fault-client` process. Killed (SIGKILL, by PID) on drop.
#[derive(Debug)]
pub struct ClientProcess {
    id: String,
    child: ChildProcess,
    /// Closing it is how the test asks the workload to stop.
    stdin: Option<ChildStdin>,
    /// The client's output lines, read on a thread of their own.
    lines: mpsc::UnboundedReceiver<String>,
    /// Every line taken from `lines` so far, for failure messages.
    seen: Vec<String>,
    history: PathBuf,
    log: PathBuf,
}

impl ClientProcess {
    /// Starts `binary` as client `id` with `config`, recording to `history`
    /// and logging (standard error) to `log`.
    pub fn spawn(
        binary: &Path,
        id: &str,
        config: &ClientConfig,
        history: &Path,
        log: &Path,
    ) -> anyhow::Result<Self> {
        Self::spawn_with_feed(binary, id, config, history, log, None)
    }

    /// [`ClientProcess::spawn`], also copying every line, with the client's
    /// id, to `feed` (a run-wide stream: see [`FaultRun::wait_any`](super::FaultRun::wait_any)).
    pub fn spawn_with_feed(
        binary: &Path,
        id: &str,
        config: &ClientConfig,
        history: &Path,
        log: &Path,
        feed: Option<mpsc::UnboundedSender<(String, String)>>,
    ) -> anyhow::Result<Self> {
        let mut command = Command::new(binary);
        command.args(config.args(id, history));
        for (key, value) in &config.env {
            command.env(key, value);
        }
        Self::spawn_command(command, id, history, log, feed)
    }

    /// Starts `command` (a client binary with its arguments: `fault-client`
    /// or another that speaks the same lines, such as `redis-buyer`) as
    /// client `id`, which records to `history`, logging to `log`.
    pub fn spawn_command(
        mut command: Command,
        id: &str,
        history: &Path,
        log: &Path,
        feed: Option<mpsc::UnboundedSender<(String, String)>>,
    ) -> anyhow::Result<Self> {
        let log_file = std::fs::File::create(log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        command
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file);
        let mut child =
            ChildProcess::spawn(&format!("fault-client {id}"), &mut command, Some(log))?;
        let stdin = child.child_mut().stdin.take();
        let stdout = child.child_mut().stdout.take().context("no stdout pipe")?;
        let (sender, lines) = mpsc::unbounded_channel();
        let feed_id = id.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(feed) = &feed {
                    let _ = feed.send((feed_id.clone(), line.clone()));
                }
                // The process's own channel may be gone (the test dropped
                // it): keep feeding the run-wide stream regardless.
                let _ = sender.send(line);
            }
        });
        Ok(ClientProcess {
            id: id.to_owned(),
            child,
            stdin,
            lines,
            seen: Vec::new(),
            history: history.to_owned(),
            log: log.to_owned(),
        })
    }

    /// The client id (its name in the history).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The PID.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The history file.
    pub fn history(&self) -> &Path {
        &self.history
    }

    /// Every line read so far.
    pub fn seen_lines(&self) -> &[String] {
        &self.seen
    }

    /// The next line, waiting at most `timeout`. An error if the client
    /// exited (its output ended) or said nothing in time.
    pub async fn next_line(&mut self, timeout: Duration) -> anyhow::Result<ClientLine> {
        match tokio::time::timeout(timeout, self.lines.recv()).await {
            Ok(Some(line)) => {
                self.seen.push(line.clone());
                Ok(ClientLine::parse(&line))
            }
            Ok(None) => Err(anyhow::anyhow!(
                "fault-client {} exited; it said:\n{}\n{}",
                self.id,
                self.seen_tail(),
                self.child.log_tail(3000)
            )),
            Err(_) => Err(anyhow::anyhow!(
                "fault-client {} said nothing for {timeout:?}; it said before:\n{}\n{}",
                self.id,
                self.seen_tail(),
                self.child.log_tail(3000)
            )),
        }
    }

    /// Reads lines until `wanted` picks one (returning what it returned),
    /// for at most `timeout` in all.
    pub async fn wait_for<T>(
        &mut self,
        timeout: Duration,
        mut wanted: impl FnMut(&ClientLine) -> Option<T>,
    ) -> anyhow::Result<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let line = self
                .next_line(left)
                .await
                .with_context(|| format!("waiting {timeout:?} for a line from {}", self.id))?;
            if let Some(found) = wanted(&line) {
                return Ok(found);
            }
        }
    }

    /// Waits for an accepted write (`WROTE`).
    pub async fn wait_wrote(&mut self, timeout: Duration) -> anyhow::Result<()> {
        self.wait_for(timeout, |line| {
            matches!(line, ClientLine::Wrote { .. }).then_some(())
        })
        .await
    }

    /// Waits for `HOLDING`; returns the generation held.
    pub async fn wait_holding(&mut self, timeout: Duration) -> anyhow::Result<u64> {
        self.wait_for(timeout, |line| match line {
            ClientLine::Holding { generation, .. } => Some(*generation),
            _ => None,
        })
        .await
    }

    /// Waits for `GRANTED`; returns the generation and the sequencer text.
    pub async fn wait_granted(&mut self, timeout: Duration) -> anyhow::Result<(u64, String)> {
        self.wait_for(timeout, |line| match line {
            ClientLine::Granted {
                generation,
                sequencer,
                ..
            } => Some((*generation, sequencer.clone())),
            _ => None,
        })
        .await
    }

    /// Waits for an accepted write with a generation above `above`; returns
    /// its generation.
    pub async fn wait_wrote_above(&mut self, above: u64, timeout: Duration) -> anyhow::Result<u64> {
        self.wait_for(timeout, |line| match line {
            ClientLine::Wrote { generation, .. } if *generation > above => Some(*generation),
            _ => None,
        })
        .await
    }

    /// Opens the gate (`--gate`): the held write goes.
    pub fn go(&mut self) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("the client was stopped")?;
        stdin.write_all(b"GO\n")?;
        stdin.flush()?;
        Ok(())
    }

    /// Asks the workload to stop (closes its standard input): it releases
    /// what it holds, prints `DONE` and exits.
    pub fn stop(&mut self) {
        self.stdin = None;
    }

    /// Waits until the client exits by itself (reading its remaining lines)
    /// and returns its exit status; kills it after `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, self.lines.recv()).await {
                Ok(Some(line)) => self.seen.push(line),
                Ok(None) => break,
                Err(_) => {
                    self.child.kill()?;
                    anyhow::bail!(
                        "fault-client {} did not exit within {timeout:?}; it said:\n{}\n{}",
                        self.id,
                        self.seen_tail(),
                        self.child.log_tail(3000)
                    );
                }
            }
        }
        // Its output is closed: it has exited, or is about to. Reaping has
        // no async event here, so poll briefly.
        loop {
            if let Some(status) = self.child.child_mut().try_wait()? {
                return Ok(status);
            }
            if tokio::time::Instant::now() >= deadline {
                self.child.kill()?;
                anyhow::bail!(
                    "fault-client {} closed its output but did not exit",
                    self.id
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops the workload and waits for a clean exit (status 0).
    pub async fn stop_and_wait(&mut self, timeout: Duration) -> anyhow::Result<()> {
        self.stop();
        let status = self.wait_exit(timeout).await?;
        anyhow::ensure!(
            status.success(),
            "fault-client {} exited with {status}; it said:\n{}\n{}",
            self.id,
            self.seen_tail(),
            self.child.log_tail(3000)
        );
        Ok(())
    }

    /// SIGSTOP: every thread stops, the keep-alive included.
    pub fn pause(&self) -> anyhow::Result<()> {
        self.child.pause()?;
        Ok(())
    }

    /// SIGCONT.
    pub fn resume(&self) -> anyhow::Result<()> {
        self.child.resume()?;
        Ok(())
    }

    /// SIGKILL. Its history may end with an invoke that has no completion:
    /// the checker treats that operation as never completed.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        Ok(())
    }

    /// The client's log (standard error).
    pub fn log(&self) -> &Path {
        &self.log
    }

    fn seen_tail(&self) -> String {
        let start = self.seen.len().saturating_sub(20);
        self.seen[start..].join("\n")
    }
}

/// Asks every client to stop at once, then waits for each to exit cleanly
/// (status 0) within `timeout`.
pub async fn stop_clients<'a>(
    clients: impl IntoIterator<Item = &'a mut ClientProcess>,
    timeout: Duration,
) -> anyhow::Result<()> {
    let mut clients: Vec<&mut ClientProcess> = clients.into_iter().collect();
    for client in clients.iter_mut() {
        client.stop();
    }
    for client in clients {
        client.stop_and_wait(timeout).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_of_the_client_parses() {
        let check =
            |line: &str, expected: ClientLine| assert_eq!(ClientLine::parse(line), expected);
        check("READY", ClientLine::Ready);
        check(
            "GRANTED a/b 7 v1;lock=a/b;mode=exclusive;gen=7 1234",
            ClientLine::Granted {
                lock: "a/b".into(),
                generation: 7,
                sequencer: "v1;lock=a/b;mode=exclusive;gen=7".into(),
                at_us: 1234,
            },
        );
        check(
            "HOLDING a/b 7",
            ClientLine::Holding {
                lock: "a/b".into(),
                generation: 7,
            },
        );
        check(
            "WROTE a/b 7 42",
            ClientLine::Wrote {
                lock: "a/b".into(),
                generation: 7,
                commit_seq: 42,
            },
        );
        check(
            "REFUSED a/b 7 stale",
            ClientLine::Refused {
                lock: "a/b".into(),
                generation: 7,
                detail: "stale".into(),
            },
        );
        check(
            "GAVEUP a/b 7 503 storage_unavailable",
            ClientLine::GaveUp {
                lock: "a/b".into(),
                generation: 7,
                detail: "503 storage_unavailable".into(),
            },
        );
        check(
            "LOST a/b 7 expired",
            ClientLine::Lost {
                lock: "a/b".into(),
                generation: 7,
                reason: "expired".into(),
            },
        );
        check(
            "RAISED a/b 90",
            ClientLine::Raised {
                lock: "a/b".into(),
                mark: 90,
            },
        );
        check("DONE 12", ClientLine::Done { operations: 12 });
        // Anything malformed is kept, not guessed at.
        check(
            "WROTE a/b seven 1",
            ClientLine::Other("WROTE a/b seven 1".into()),
        );
        check("", ClientLine::Other(String::new()));
    }

    #[test]
    fn a_config_becomes_the_client_flags() {
        let config = ClientConfig::etcd(
            &[
                "http://127.0.0.1:1".to_owned(),
                "http://127.0.0.1:2".to_owned(),
            ],
            "http://127.0.0.1:3",
        )
        .lock("x")
        .lock("y")
        .rounds(4)
        .gate()
        .write_timeout(Duration::from_millis(1500))
        .register_every(3);
        let args: Vec<String> = config
            .args("c1", Path::new("/tmp/h.jsonl"))
            .into_iter()
            .map(|arg| arg.into_string().unwrap())
            .collect();
        let value = |flag: &str| {
            let at = args.iter().position(|arg| arg == flag).unwrap();
            args[at + 1].clone()
        };
        assert_eq!(value("--backend"), "etcd");
        assert_eq!(
            value("--endpoints"),
            "http://127.0.0.1:1,http://127.0.0.1:2"
        );
        assert_eq!(value("--client-id"), "c1");
        assert_eq!(value("--history"), "/tmp/h.jsonl");
        assert_eq!(value("--rounds"), "4");
        assert_eq!(value("--write-timeout-ms"), "1500");
        assert_eq!(value("--register-every"), "3");
        assert_eq!(args.iter().filter(|arg| *arg == "--lock").count(), 2);
        assert!(args.contains(&"--gate".to_owned()));
        assert!(!args.contains(&"--raise-floor-on-stale".to_owned()));
        assert!(!args.contains(&"--redis-scheme".to_owned()));
    }
}
