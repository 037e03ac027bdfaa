//! Scenario 20: three resource servers over one PostgreSQL (`--store
//! postgres://...`). Eight readers send fenced reads of one lock to
//! replica 0 as fast as it answers; two writers (SQL-backend lock holders)
//! write to the same lock through replicas 1 and 2. Replica 0 is stopped
//! (SIGSTOP) in the middle of that stream for [`PAUSE`], then resumed.
//!
//! Every request of the PostgreSQL engine is one statement that
//! PostgreSQL runs and commits by itself, so the stopped replica holds no
//! lock's row, and the writes through the others go on. Asserted
//! ([`PauseWrites::check`]): every write through replicas 1 and 2 sent
//! during the pause was answered (200, or 503, each within
//! [`ANSWER_BOUND`]; none left without an answer), their p99 is within
//! [`BOUND`] (the engine's `lock_timeout`, the longest one wait for a
//! lock: docs/engines.md), at least [`MIN_APPLIED`] were applied while
//! replica 0 was stopped; and I-MONO, I-STALE, I-DUR, I-ONCE, I-TOKEN,
//! I-LIVE.
//!
//! The readers present a shared sequencer at the lock's exclusive mark
//! (learnt from a refusal when a newer writer moved it), as a reader
//! granted after the last writer would: admitted, and never above a
//! writer's generation, so they fence no writer out. They are tasks of
//! this test, not recorded in the history (the checker judges writes).
//!
//! The mutation check (`mutation.rs`) runs the same story with replica 0's
//! fenced reads held in transactions across round trips (today's main
//! before #25): the writes then wait for the stopped replica's row, and
//! the same check must fail.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use palisade::client::Client;
use palisade::{Generation, LockName, Mode, Sequencer};
use palisade_testkit::sql::SqlServer;
use palisade_tests::fault::{
    ClientConfig, ClientLine, FaultRun, Invariant, Report, ResourceServerOptions,
    ResourceServerProcess, Scenario, stop_clients,
};
use palisade_tests::history::{Event, OpKind, Phase, monotonic_us};

use crate::{EXIT, STEP, TTL, live_within};

/// Readers on the replica that is stopped.
const READERS: usize = 8;
/// How long replica 0 stays stopped.
const PAUSE: Duration = Duration::from_secs(6);
/// The bound on the writes' p99 (docs/engines.md): the PostgreSQL
/// engine's default `lock_timeout`, the longest one wait for a lock.
pub(crate) const BOUND: Duration = Duration::from_secs(2);
/// The bound on every answer: the engine's default `statement_timeout`
/// (5 s, lock waits included) plus the wait for a connection (1 s) and
/// the probe that says why there was none (0.5 s).
const ANSWER_BOUND: Duration = Duration::from_millis(6500);
/// Writes that must be applied while replica 0 is stopped: a tenth of what
/// a loaded 2-core machine applies in the pause (200 to 270), where a stall
/// lets at most one per writer through, just before the resume.
const MIN_APPLIED: usize = 20;

/// The writes through the healthy replicas that were sent while replica 0
/// was stopped.
#[derive(Debug, Default)]
pub(crate) struct PauseWrites {
    /// Each write attempt's time from invoke to completion.
    pub(crate) latencies: Vec<Duration>,
    /// Attempts answered 2xx.
    pub(crate) applied: usize,
    /// Attempts answered 503.
    pub(crate) unavailable: usize,
    /// Attempts that got no answer at all (the client's timeout).
    pub(crate) unanswered: usize,
    /// Writes applied (answered 2xx) while replica 0 was stopped, whenever
    /// they were sent.
    pub(crate) applied_while_stopped: usize,
}

impl PauseWrites {
    /// The 99th percentile latency (nearest rank).
    pub(crate) fn p99(&self) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        let rank = (sorted.len() * 99).div_ceil(100).max(1);
        sorted.get(rank - 1).copied().unwrap_or_default()
    }

    /// The slowest.
    pub(crate) fn max(&self) -> Duration {
        self.latencies.iter().copied().max().unwrap_or_default()
    }

    /// Scenario 20's check of the writes during the pause: what fails when
    /// a stopped replica stalls the others.
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut failed = Vec::new();
        if self.unanswered > 0 {
            failed.push(format!("{} writes got no answer", self.unanswered));
        }
        if self.applied_while_stopped < MIN_APPLIED {
            failed.push(format!(
                "{} writes applied while replica 0 was stopped, fewer than {MIN_APPLIED}",
                self.applied_while_stopped
            ));
        }
        if self.p99() > BOUND {
            failed.push(format!("p99 {:?} over the bound {BOUND:?}", self.p99()));
        }
        if self.max() > ANSWER_BOUND {
            failed.push(format!(
                "a write took {:?} to answer, over {ANSWER_BOUND:?}",
                self.max()
            ));
        }
        match failed.is_empty() {
            true => Ok(()),
            false => Err(format!("{}: {self:?}", failed.join("; "))),
        }
    }

    fn note(&self) -> String {
        format!(
            "writes through replicas 1-2 during the pause: {} ({} applied, {} of all writes while replica 0 was stopped; {} 503, {} unanswered), p99 {} ms (bound {} ms), max {} ms",
            self.latencies.len(),
            self.applied,
            self.applied_while_stopped,
            self.unavailable,
            self.unanswered,
            self.p99().as_millis(),
            BOUND.as_millis(),
            self.max().as_millis()
        )
    }

    /// The write attempts of `writers` invoked in `[from, to]` (monotonic
    /// microseconds), from the merged history.
    fn from_events(events: &[Event], writers: &[&str], from: u64, to: u64) -> PauseWrites {
        let mut writes = PauseWrites::default();
        for writer in writers {
            let mut invoked: Option<u64> = None;
            for event in events
                .iter()
                .filter(|event| event.client == *writer && event.op == OpKind::Write)
            {
                match event.phase {
                    Phase::Invoke => invoked = Some(event.mono_us),
                    phase => {
                        if phase == Phase::Ok && (from..=to).contains(&event.mono_us) {
                            writes.applied_while_stopped += 1;
                        }
                        let Some(start) = invoked.take() else {
                            continue;
                        };
                        if !(from..=to).contains(&start) {
                            continue;
                        }
                        writes
                            .latencies
                            .push(Duration::from_micros(event.mono_us.saturating_sub(start)));
                        let detail = event.detail.as_deref().unwrap_or_default();
                        match phase {
                            Phase::Ok => writes.applied += 1,
                            _ if detail.starts_with("503") => writes.unavailable += 1,
                            _ if detail == "timeout" => writes.unanswered += 1,
                            _ => {}
                        }
                    }
                }
            }
        }
        writes
    }
}

/// Fenced readers on one replica until told to stop; counts their reads.
struct Readers {
    stop: Arc<AtomicBool>,
    reads: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Readers {
    fn start(server: &str, lock: &str) -> anyhow::Result<Readers> {
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicU64::new(0));
        let lock = LockName::new(lock)?;
        let mut tasks = Vec::new();
        for _ in 0..READERS {
            // Longer than the pause: a read sent into it waits, it does not
            // fail.
            let client = Client::with_timeout(server, STEP)?;
            let (stop, reads, lock) = (Arc::clone(&stop), Arc::clone(&reads), lock.clone());
            tasks.push(tokio::spawn(async move {
                // At the exclusive mark, learnt from the refusal when a
                // newer writer moved it: every request is a fenced read.
                let mut mark = 1;
                while !stop.load(Ordering::Relaxed) {
                    let generation = Generation::new(mark).expect("non-zero");
                    let sequencer = Sequencer::new(lock.clone(), Mode::Shared, generation);
                    match client.get(&lock, b"k", Some(&sequencer)).await {
                        Ok(Ok(_)) => {
                            reads.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(Err(refused)) => {
                            mark = refused.marks().map_or(mark, |marks| marks.exclusive.max(1));
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            }));
        }
        Ok(Readers { stop, reads, tasks })
    }

    fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// The story: returns the checker's report (already in the table, with
/// the pause's write figures in its notes) and those figures.
/// `replica_0` configures the replica that is stopped, given the
/// database's URL (its `--store` is that URL unless it names its own).
pub(crate) async fn paused_replica(
    tag: &str,
    scenario: Scenario,
    replica_0: impl FnOnce(&str) -> ResourceServerOptions,
) -> anyhow::Result<(Report, PauseWrites)> {
    let postgres = SqlServer::postgres();
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new(tag)?;
    let store = postgres.url();
    let mut replicas = Vec::new();
    let mut replica_0 = Some(replica_0(&store));
    for index in 0..3 {
        let dir = run.dir().join(format!("replica-{index}"));
        std::fs::create_dir_all(&dir)?;
        let mut options = replica_0.take().unwrap_or_default();
        if options.store.is_none() {
            options.store = Some(store.clone());
        }
        replicas.push(ResourceServerProcess::start_at(
            &binaries.resource_server,
            &dir,
            options,
        )?);
    }
    let urls: Vec<String> = replicas.iter().map(|r| r.base_url()).collect();
    let lock = format!("faults/{tag}");

    // Writers through replicas 1 and 2, one lock, short holds.
    let writers = ["w1", "w2"];
    let mut writer_processes = Vec::new();
    for (writer, url) in writers.iter().zip(&urls[1..]) {
        let config = ClientConfig::sql(&postgres.url(), url)
            .lock(lock.clone())
            .ttl(TTL)
            .writes_per_hold(4)
            .think(Duration::from_millis(10));
        writer_processes.push(run.spawn_client(&binaries, writer, &config)?);
    }
    run.wait_any(STEP, |_, line| {
        matches!(line, ClientLine::Wrote { .. }).then_some(())
    })
    .await?;
    let readers = Readers::start(&urls[0], &lock)?;
    let deadline = tokio::time::Instant::now() + STEP;
    while readers.reads() < 50 {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the readers never got going"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Replica 0 stops with reads in flight, for PAUSE: time is the subject.
    let fault = format!("SIGSTOP replica 0 ({READERS} fenced readers on it) for {PAUSE:?}");
    let from = monotonic_us();
    replicas[0].pause()?;
    run.inject(&fault)?;
    tokio::time::sleep(PAUSE).await;
    let to = monotonic_us();
    replicas[0].resume()?;
    run.heal(&fault)?;
    run.wait_recovered(STEP).await?;
    stop_clients(writer_processes.iter_mut(), EXIT).await?;
    readers.stop().await;

    let writes = PauseWrites::from_events(&run.events()?, &writers, from, to);
    let scenario = scenario.note(writes.note());
    let report = run
        .verdict(
            &urls[1],
            &live_within(TTL + Duration::from_secs(20)),
            &scenario,
        )
        .await?;
    Ok((report, writes))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_stalls_no_other_replica() -> anyhow::Result<()> {
    let (report, writes) = paused_replica(
        "s20",
        Scenario::new(
            "20 three replicas over one PostgreSQL: one SIGSTOPped mid fenced reads",
            "sql (PostgreSQL), PostgreSQL engine",
        ),
        |_| ResourceServerOptions::default(),
    )
    .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    assert_eq!(report.faults, 1);
    if let Err(failed) = writes.check() {
        panic!("a paused replica stalled the others: {failed}");
    }
    Ok(())
}
