//! The test's own client, and the checks on a history that the shared
//! checker does not make: the marks after a restart, and no
//! acknowledgement while the disk was failing.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use palisade::client::{Client, ClientError, Marks, Refused};
use palisade::{Generation, LockName, Mode, Sequencer};
use palisade_tests::fault::FaultRun;
use palisade_tests::history::{Event, OpKind, Phase, Recorder};

/// How a probe write ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProbeWrite {
    /// 2xx.
    Accepted {
        /// The server's commit sequence number.
        commit_seq: u64,
    },
    /// 409 stale, with the marks the server reported.
    Stale {
        /// The marks in the refusal.
        marks: Marks,
    },
    /// Another refusal (a 4xx with a code).
    Refused(String),
    /// 503: the server's storage failed.
    Unavailable {
        /// The `code` (`storage_unavailable`).
        code: String,
        /// The human message.
        message: String,
    },
    /// No answer (the server is down, a reset connection, a timeout).
    NoAnswer(String),
}

/// A client in the test process whose writes go into the run's history
/// (as client `id`), so the checker judges them with everyone else's: a
/// stale probe accepted would be an I-STALE violation like any other.
pub(crate) struct Probe {
    id: String,
    client: Client,
    recorder: Recorder,
    writes: u64,
}

impl Probe {
    /// A probe recording into `run` as `id`, talking to `server_url`.
    pub(crate) fn new(run: &FaultRun, id: &str, server_url: &str) -> anyhow::Result<Self> {
        Ok(Probe {
            id: id.to_owned(),
            client: Client::with_timeout(server_url, Duration::from_secs(10))?,
            recorder: Recorder::open(&run.history_path(id))?,
            writes: 0,
        })
    }

    /// Writes a key of its own on `lock` with an exclusive sequencer of
    /// `generation`, recording the invoke and the completion.
    pub(crate) async fn write(
        &mut self,
        lock: &str,
        generation: u64,
    ) -> anyhow::Result<ProbeWrite> {
        self.write_padded(lock, generation, 0).await
    }

    /// [`Probe::write`] with a value of at least `size` bytes: a value
    /// that large needs new space on the server's disk (sled keeps a page
    /// over 128 KiB, a quarter of its segment, in a file of its own).
    pub(crate) async fn write_padded(
        &mut self,
        lock: &str,
        generation: u64,
        size: usize,
    ) -> anyhow::Result<ProbeWrite> {
        self.writes += 1;
        let request_id = format!("{}-{}", self.id, self.writes);
        let key = format!("k-{request_id}");
        let mut value = format!("{request_id}@{generation}");
        if value.len() < size {
            value.push_str(&".".repeat(size - value.len()));
        }
        let sequencer = Sequencer::new(
            LockName::new(lock)?,
            Mode::Exclusive,
            Generation::new(generation).ok_or_else(|| anyhow::anyhow!("generation 0"))?,
        );
        let event = |phase| {
            Event::now(&self.id, phase, OpKind::Write, lock)
                .generation(generation)
                .write(&request_id, &key, &value)
        };
        self.recorder.record(&event(Phase::Invoke))?;
        let result = self
            .client
            .put(&sequencer, key.as_bytes(), value.clone(), Some(&request_id))
            .await;
        let (completion, outcome) = match result {
            Ok(Ok(written)) => (
                event(Phase::Ok).commit_seq(written.commit_seq),
                ProbeWrite::Accepted {
                    commit_seq: written.commit_seq,
                },
            ),
            Ok(Err(Refused::Stale { marks, .. })) => (
                event(Phase::Fail).detail("stale"),
                ProbeWrite::Stale { marks },
            ),
            Ok(Err(refused)) => (
                event(Phase::Fail).detail(refused.reason()),
                ProbeWrite::Refused(refused.reason().to_owned()),
            ),
            // A 503 may come after the write was committed in memory: its
            // outcome is unknown, and a restart may show it applied.
            Err(ClientError::Unavailable { code, message }) => (
                event(Phase::Unknown).detail(format!("503 {code}")),
                ProbeWrite::Unavailable { code, message },
            ),
            Err(error @ ClientError::Connect { .. }) => (
                event(Phase::Fail).detail("connect"),
                ProbeWrite::NoAnswer(error.to_string()),
            ),
            Err(error) => (
                event(Phase::Unknown).detail(error.to_string()),
                ProbeWrite::NoAnswer(error.to_string()),
            ),
        };
        self.recorder.record(&completion)?;
        Ok(outcome)
    }

    /// The marks of `lock`, or the failure (a 503 while fail-stopped).
    pub(crate) async fn marks(&self, lock: &str) -> anyhow::Result<Result<Marks, ClientError>> {
        Ok(self.client.marks(&LockName::new(lock)?).await)
    }

    /// A plain read (no sequencer) of `key` on `lock`: the value, or the
    /// failure.
    pub(crate) async fn read(
        &self,
        lock: &str,
        key: &str,
    ) -> anyhow::Result<Result<Option<String>, ClientError>> {
        let read = self
            .client
            .get(&LockName::new(lock)?, key.as_bytes(), None)
            .await;
        Ok(match read {
            Ok(Ok(read)) => Ok(read
                .value
                .map(|value| String::from_utf8_lossy(&value).into_owned())),
            Ok(Err(refused)) => anyhow::bail!("a plain read was refused: {refused}"),
            Err(error) => Err(error),
        })
    }

    /// Waits until the server's health check fails (503): the store has
    /// fail-stopped. There is no event to wait on from outside the
    /// server, so this polls, every 20 ms, for at most `timeout`.
    pub(crate) async fn wait_fail_stopped(&self, timeout: Duration) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match self.client.health().await {
                Err(ClientError::Unavailable { message, .. }) => return Ok(message),
                other if tokio::time::Instant::now() >= deadline => {
                    anyhow::bail!(
                        "the server did not fail-stop within {timeout:?} (health: {other:?})"
                    )
                }
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// Whether the health check answers 503 now.
    pub(crate) async fn is_fail_stopped(&self) -> bool {
        matches!(
            self.client.health().await,
            Err(ClientError::Unavailable { .. })
        )
    }
}

/// One operation of a history: its invoke and its completion, if any.
struct Operation<'a> {
    invoke: &'a Event,
    completion: Option<&'a Event>,
}

/// Pairs every invoke with its completion (one operation in flight per
/// client at a time: the history's convention).
fn operations(events: &[Event]) -> Vec<Operation<'_>> {
    let mut open: HashMap<&str, usize> = HashMap::new();
    let mut operations = Vec::new();
    for event in events.iter().filter(|e| e.op != OpKind::Nemesis) {
        if event.phase == Phase::Invoke {
            open.insert(&event.client, operations.len());
            operations.push(Operation {
                invoke: event,
                completion: None,
            });
        } else if let Some(index) = open.remove(event.client.as_str()) {
            operations[index].completion = Some(event);
        }
    }
    operations
}

/// The highest generation among the writes to `lock` acknowledged in
/// `events` (0 if none).
pub(crate) fn highest_acknowledged(events: &[Event], lock: &str) -> u64 {
    events
        .iter()
        .filter(|e| e.op == OpKind::Write && e.phase == Phase::Ok && e.lock == lock)
        .filter_map(|e| e.generation)
        .max()
        .unwrap_or(0)
}

/// What the exclusive mark of `lock` may be once every operation in
/// `events` has ended: at least the highest acknowledged generation, and
/// above it only the generation of a write whose outcome is unknown (a
/// 503, a timeout, a connection lost, or no completion at all). A mark
/// raised by anything else (a refused write, a write never sent) was
/// raised by a request that was answered as not done, and a mark below the
/// highest acknowledged one went back.
pub(crate) fn mark_violations(events: &[Event], lock: &str, mark: u64) -> Vec<String> {
    let highest = highest_acknowledged(events, lock);
    let mut violations = Vec::new();
    if mark < highest {
        violations.push(format!(
            "lock {lock}: the mark went back to {mark}, below the acknowledged generation {highest}"
        ));
    }
    if mark > highest {
        let in_doubt: BTreeSet<u64> = operations(events)
            .into_iter()
            .filter(|op| op.invoke.op == OpKind::Write && op.invoke.lock == lock)
            .filter(|op| op.completion.is_none_or(|c| c.phase == Phase::Unknown))
            .filter_map(|op| op.invoke.generation)
            .collect();
        if !in_doubt.contains(&mark) {
            violations.push(format!(
                "lock {lock}: the mark is {mark}, above every acknowledged generation ({highest}) and not the generation of any write in doubt"
            ));
        }
    }
    violations
}

/// Writes acknowledged (2xx) although they were sent at or after
/// `from_us` and answered before `to_us`: while the disk could not sync,
/// that would be an acknowledgement without a successful sync. A replayed
/// answer is left out: it repeats an outcome acknowledged (and synced)
/// before.
pub(crate) fn acknowledged_between(events: &[Event], from_us: u64, to_us: u64) -> Vec<String> {
    operations(events)
        .into_iter()
        .filter(|op| op.invoke.op == OpKind::Write && op.invoke.mono_us >= from_us)
        .filter_map(|op| op.completion)
        .filter(|done| {
            done.phase == Phase::Ok
                && done.mono_us < to_us
                && done.detail.as_deref() != Some("replayed")
        })
        .map(|done| {
            format!(
                "{} write {:?} (generation {:?}) was acknowledged at commit {:?} while the disk was failing",
                done.client, done.request_id, done.generation, done.commit_seq
            )
        })
        .collect()
}

/// How many writes ended in doubt (503, timeout, reset) and how many
/// answers were replays of an earlier attempt: what shows a run really
/// had writes in flight when its faults struck.
pub(crate) fn doubt_and_replays(events: &[Event]) -> (usize, usize) {
    let writes = events.iter().filter(|e| e.op == OpKind::Write);
    let in_doubt = writes.clone().filter(|e| e.phase == Phase::Unknown).count();
    let replayed = writes
        .filter(|e| e.phase == Phase::Ok && e.detail.as_deref() == Some("replayed"))
        .count();
    (in_doubt, replayed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(client: &str, at: u64, phase: Phase, generation: u64) -> Event {
        let mut event = Event::now(client, phase, OpKind::Write, "L")
            .generation(generation)
            .write(&format!("{client}-{generation}"), "k", "v");
        event.mono_us = at;
        event
    }

    #[test]
    fn marks_may_rise_above_the_acknowledged_only_through_writes_in_doubt() {
        let events = vec![
            event("a", 1, Phase::Invoke, 5),
            event("a", 2, Phase::Ok, 5),
            event("b", 3, Phase::Invoke, 7),
            event("b", 4, Phase::Unknown, 7),
            event("c", 5, Phase::Invoke, 9),
            event("c", 6, Phase::Fail, 9),
            event("d", 7, Phase::Invoke, 11),
        ];
        assert!(mark_violations(&events, "L", 5).is_empty());
        assert!(mark_violations(&events, "L", 7).is_empty());
        // d's write never completed: it is in doubt too.
        assert!(mark_violations(&events, "L", 11).is_empty());
        // c's write was refused: it cannot have raised the mark.
        assert_eq!(mark_violations(&events, "L", 9).len(), 1);
        // Below what was acknowledged: the mark went back.
        assert_eq!(mark_violations(&events, "L", 4).len(), 1);
    }

    #[test]
    fn an_acknowledgement_inside_a_window_is_reported_unless_replayed() {
        let mut replayed = event("b", 25, Phase::Ok, 6);
        replayed.detail = Some("replayed".into());
        let events = vec![
            event("a", 5, Phase::Invoke, 5),
            event("a", 15, Phase::Ok, 5),
            event("a", 16, Phase::Invoke, 5),
            event("a", 17, Phase::Ok, 5),
            event("b", 20, Phase::Invoke, 6),
            replayed,
        ];
        // a's first write was sent before the window: fine. Its second was
        // sent inside and acknowledged: reported. b's answer is a replay.
        let found = acknowledged_between(&events, 10, 30);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("a-5"));
        assert_eq!(doubt_and_replays(&events), (0, 1));
    }
}
