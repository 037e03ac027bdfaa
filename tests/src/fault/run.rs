//! One scenario run: its directory, the histories in it, the nemesis, and
//! the verdict.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::checker::{CheckOptions, FinalState, Invariant, Report, check};
use crate::history::{Event, OpKind, Phase, Recorder, read_histories};
use anyhow::Context as _;
use palisade::LockName;
use palisade::client::Client;
use tempfile::TempDir;
use tokio::sync::mpsc;

use super::table::{TableRow, append_row};
use super::{ClientConfig, ClientLine, ClientProcess, FaultBinaries};

/// Set to `1` to keep a run's directory (histories, logs, server data)
/// after the test; its path is printed.
pub const KEEP_ENV: &str = "PALISADE_FAULT_KEEP";

/// The client id of the nemesis's own history.
const NEMESIS: &str = "nemesis";

/// What a verdict is about: the table's first two columns and an optional
/// note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// Number first: `1 Redis holder paused past its TTL`.
    pub name: String,
    /// The backend, as the table shows it.
    pub backend: String,
    /// Anything the row should add (e.g. "I-TOKEN violated by design").
    pub note: Option<String>,
    /// Clients whose history times are not comparable with the others'
    /// (their monotonic clock was faked). Their operations are judged only
    /// by the invariants that do not use time: I-MONO (commit order), I-DUR
    /// and I-ONCE. I-STALE, I-TOKEN and I-LIVE are judged on the other
    /// clients' operations.
    pub untimed_clients: Vec<String>,
    /// The row says how many writes in doubt were judged even when there
    /// were none (for scenarios made to produce them); otherwise only when
    /// there were some.
    pub note_in_doubt: bool,
}

impl Scenario {
    /// A scenario named `name` on `backend`.
    pub fn new(name: impl Into<String>, backend: impl Into<String>) -> Self {
        Scenario {
            name: name.into(),
            backend: backend.into(),
            note: None,
            untimed_clients: Vec::new(),
            note_in_doubt: false,
        }
    }

    /// Marks `client`'s history times as not comparable (see
    /// [`Scenario::untimed_clients`]).
    pub fn untimed_client(mut self, client: impl Into<String>) -> Self {
        self.untimed_clients.push(client.into());
        self
    }

    /// Always says in the row how many writes in doubt were judged (see
    /// [`Scenario::note_in_doubt`]).
    pub fn note_in_doubt(mut self) -> Self {
        self.note_in_doubt = true;
        self
    }

    /// Adds a note for the table.
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }
}

/// One run of a scenario: a temporary directory holding every client's
/// history (`history-<client>.jsonl`), the nemesis's history, the server's
/// data and every log. Removed on drop unless `PALISADE_FAULT_KEEP=1`.
#[derive(Debug)]
pub struct FaultRun {
    name: String,
    dir: Option<TempDir>,
    path: PathBuf,
    /// The faults, as the history sees them: `invoke` when one starts, `ok`
    /// when it heals. I-LIVE is measured from the last heal.
    nemesis: Recorder,
    /// Every line of every client spawned by this run, with its client id:
    /// what [`FaultRun::wait_any`] waits on.
    feed: mpsc::UnboundedReceiver<(String, String)>,
    feed_sender: mpsc::UnboundedSender<(String, String)>,
    /// When the last fault healed (the history's monotonic clock).
    last_heal_us: Option<u64>,
}

impl FaultRun {
    /// A new run in a fresh temporary directory.
    pub fn new(name: &str) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("palisade-fault-{name}-"))
            .tempdir()?;
        let path = dir.path().to_owned();
        let nemesis = Recorder::open(&path.join(format!("history-{NEMESIS}.jsonl")))?;
        let (feed_sender, feed) = mpsc::unbounded_channel();
        Ok(FaultRun {
            name: name.to_owned(),
            dir: Some(dir),
            path,
            nemesis,
            feed,
            feed_sender,
            last_heal_us: None,
        })
    }

    /// The run's directory.
    pub fn dir(&self) -> &Path {
        &self.path
    }

    /// Where client `client` records its history.
    pub fn history_path(&self, client: &str) -> PathBuf {
        self.path.join(format!("history-{client}.jsonl"))
    }

    /// Starts a `fault-client` as `client`, recording into this run.
    pub fn spawn_client(
        &self,
        binaries: &FaultBinaries,
        client: &str,
        config: &ClientConfig,
    ) -> anyhow::Result<ClientProcess> {
        anyhow::ensure!(client != NEMESIS, "`{NEMESIS}` is the nemesis's name");
        ClientProcess::spawn_with_feed(
            &binaries.fault_client,
            client,
            config,
            &self.history_path(client),
            &self.path.join(format!("client-{client}.log")),
            Some(self.feed_sender.clone()),
        )
    }

    /// Starts a flash-sale buyer on the Redis fence (`redis-buyer`) as
    /// `client`, recording into this run: `args` are its flags after the
    /// client id and history (`--redis`, `--lock`, `--gate`, ...).
    pub fn spawn_buyer(
        &self,
        binaries: &FaultBinaries,
        client: &str,
        args: &[String],
    ) -> anyhow::Result<ClientProcess> {
        anyhow::ensure!(client != NEMESIS, "`{NEMESIS}` is the nemesis's name");
        let history = self.history_path(client);
        let mut command = std::process::Command::new(&binaries.redis_buyer);
        command
            .arg("--client-id")
            .arg(client)
            .arg("--history")
            .arg(&history)
            .args(args);
        ClientProcess::spawn_command(
            command,
            client,
            &history,
            &self.path.join(format!("client-{client}.log")),
            Some(self.feed_sender.clone()),
        )
    }

    /// Reads the run-wide stream of client lines (every client this run
    /// spawned, in arrival order, independent of each client's own
    /// [`ClientProcess::next_line`]) until `wanted` picks one, for at most
    /// `timeout`.
    pub async fn wait_any<T>(
        &mut self,
        timeout: Duration,
        mut wanted: impl FnMut(&str, &ClientLine) -> Option<T>,
    ) -> anyhow::Result<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, self.feed.recv()).await {
                Ok(Some((client, line))) => {
                    if let Some(found) = wanted(&client, &ClientLine::parse(&line)) {
                        return Ok(found);
                    }
                }
                Ok(None) => unreachable!("the run holds a sender of its own feed"),
                Err(_) => anyhow::bail!("[{}] no wanted client line within {timeout:?}", self.name),
            }
        }
    }

    /// Forgets every client line received so far on the run-wide stream.
    pub fn drain_feed(&mut self) {
        while self.feed.try_recv().is_ok() {}
    }

    /// Waits until some client is granted a lock *after the last heal* (by
    /// the grant's own time, as the checker judges it: a line read after
    /// the heal may tell of a grant from before it) and then writes under
    /// that grant: the recovery I-LIVE looks for. Returns the client id and
    /// the generation.
    ///
    /// Lines already received count: the grant's time, not when its line
    /// is read, says whether it came after the heal, and a grant read
    /// between the heal and this call may be the only one for a while (a
    /// client that keeps its hold and writes on).
    pub async fn wait_recovered(&mut self, timeout: Duration) -> anyhow::Result<(String, u64)> {
        let since = self.last_heal_us.unwrap_or(0);
        let mut granted: std::collections::HashMap<String, u64> = Default::default();
        self.wait_any(timeout, |client, line| match line {
            ClientLine::Granted {
                generation, at_us, ..
            } if *at_us >= since => {
                granted.insert(client.to_owned(), *generation);
                None
            }
            ClientLine::Wrote { generation, .. } if granted.get(client) == Some(generation) => {
                Some((client.to_owned(), *generation))
            }
            _ => None,
        })
        .await
    }

    /// Records that `fault` starts now.
    pub fn inject(&mut self, fault: &str) -> anyhow::Result<()> {
        eprintln!("[{}] fault: {fault}", self.name);
        self.nemesis
            .record(&Event::now(NEMESIS, Phase::Invoke, OpKind::Nemesis, "").detail(fault))?;
        Ok(())
    }

    /// Records that `fault` healed now.
    pub fn heal(&mut self, fault: &str) -> anyhow::Result<()> {
        eprintln!("[{}] healed: {fault}", self.name);
        let healed = Event::now(NEMESIS, Phase::Ok, OpKind::Nemesis, "").detail(fault);
        self.last_heal_us = Some(healed.mono_us);
        self.nemesis.record(&healed)?;
        Ok(())
    }

    /// Every history file of the run.
    pub fn history_files(&self) -> anyhow::Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&self.path)? {
            let path = entry?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name.starts_with("history-") && name.ends_with(".jsonl") {
                files.push(path);
            }
        }
        files.sort();
        Ok(files)
    }

    /// Every event of every history, merged in time order.
    pub fn events(&self) -> anyhow::Result<Vec<Event>> {
        Ok(read_histories(self.history_files()?)?)
    }

    /// Reads the final state, checks the whole history, prints the report,
    /// appends the table row, and returns the report for the scenario to
    /// assert on. The resource server at `server_url` must be up.
    pub async fn verdict(
        &self,
        server_url: &str,
        options: &CheckOptions,
        scenario: &Scenario,
    ) -> anyhow::Result<Report> {
        let events = self.events()?;
        self.verdict_over(&events, server_url, options, scenario)
            .await
    }

    /// [`FaultRun::verdict`] over `events` (e.g. a history with some
    /// clients' events left out).
    pub async fn verdict_over(
        &self,
        events: &[Event],
        server_url: &str,
        options: &CheckOptions,
        scenario: &Scenario,
    ) -> anyhow::Result<Report> {
        let final_state = read_final_state(server_url, events).await?;
        self.judge(events, &final_state, options, scenario)
    }

    /// Checks `events` against `final_state` (read by the scenario from
    /// wherever its data lives), prints the report, appends the table row
    /// and returns the report.
    pub fn judge(
        &self,
        events: &[Event],
        final_state: &FinalState,
        options: &CheckOptions,
        scenario: &Scenario,
    ) -> anyhow::Result<Report> {
        let mut report = check(events, final_state, options);
        if !scenario.untimed_clients.is_empty() {
            // Time-based invariants only over the clients whose clock is
            // the machine's; time-free ones over everything.
            let timed: Vec<Event> = events
                .iter()
                .filter(|event| !scenario.untimed_clients.contains(&event.client))
                .cloned()
                .collect();
            let timed_report = check(&timed, final_state, options);
            let uses_time = |invariant: Invariant| {
                matches!(
                    invariant,
                    Invariant::Stale | Invariant::Token | Invariant::Live
                )
            };
            report
                .violations
                .retain(|violation| !uses_time(violation.invariant));
            report.violations.extend(
                timed_report
                    .violations
                    .into_iter()
                    .filter(|violation| uses_time(violation.invariant)),
            );
            report.recovery = timed_report.recovery;
        }
        eprintln!(
            "[{}] {} on {}: {report}",
            self.name, scenario.name, scenario.backend
        );
        for violation in report.violations.iter().take(20) {
            eprintln!("  {}: {}", violation.invariant.name(), violation.message);
        }
        append_row(&TableRow::from_report(scenario, &report))?;
        Ok(report)
    }
}

impl Drop for FaultRun {
    fn drop(&mut self) {
        let keep = std::env::var(KEEP_ENV).is_ok_and(|value| value == "1");
        if keep {
            if let Some(dir) = self.dir.take() {
                let path = dir.keep();
                eprintln!("[{}] kept the run's files in {}", self.name, path.display());
            }
        } else if std::thread::panicking() {
            eprintln!(
                "[{}] failed; rerun with {KEEP_ENV}=1 to keep its histories and logs",
                self.name
            );
        }
    }
}

/// Reads, without a sequencer (a plain read never moves a mark), every key
/// the history wrote, from the resource server at `server_url`. Retries
/// while the server is unreachable (it may be restarting) for up to 30 s.
pub async fn read_final_state(server_url: &str, events: &[Event]) -> anyhow::Result<FinalState> {
    let slots: BTreeSet<(&str, &str)> = events
        .iter()
        .filter(|event| event.op == OpKind::Write)
        .filter_map(|event| Some((event.lock.as_str(), event.key.as_deref()?)))
        .collect();
    let client = Client::with_timeout(server_url, Duration::from_secs(10))?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut state = FinalState::new();
    for (lock, key) in slots {
        let name = LockName::new(lock).with_context(|| format!("lock `{lock}` in the history"))?;
        let read = loop {
            match client.get(&name, key.as_bytes(), None).await {
                Ok(Ok(read)) => break read,
                Ok(Err(refused)) => {
                    anyhow::bail!("a plain read of {lock}/{key} was refused: {refused}")
                }
                Err(error) if error.is_transient() && tokio::time::Instant::now() < deadline => {
                    // The server may still be coming back; a short backoff.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => return Err(error).context(format!("reading {lock}/{key}")),
            }
        };
        let value = read
            .value
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
        state.insert((lock.to_owned(), key.to_owned()), value);
    }
    Ok(state)
}
