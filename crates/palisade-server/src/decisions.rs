//! The recent fencing decisions, for `/ui` and `GET /v1/events`: a bounded
//! ring of the latest writes accepted and refused (with why), the latest
//! marks seen per lock, and a broadcast of each new decision.
//!
//! Bounded everywhere, so a flood of requests costs memory only up to the
//! bounds: [`RING_CAPACITY`] decisions, [`MARKS_CAPACITY`] locks (the one
//! seen the longest ago is forgotten first), [`MAX_WATCHERS`] event streams.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use palisade_store::Marks;
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, watch};

/// Decisions kept for a new watcher's first page.
pub(crate) const RING_CAPACITY: usize = 256;
/// Locks whose latest marks are kept.
pub(crate) const MARKS_CAPACITY: usize = 1024;
/// Event streams open at once; more are refused (503 `overloaded`).
pub(crate) const MAX_WATCHERS: usize = 32;
/// Decisions a slow watcher may fall behind before it skips some.
const LIVE_BACKLOG: usize = 1024;

/// One write the server accepted or refused.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Decision {
    /// Increases by one per decision: a watcher drops live decisions its
    /// first page already had.
    pub(crate) seq: u64,
    /// Milliseconds since the Unix epoch.
    pub(crate) at_ms: u64,
    pub(crate) lock: String,
    pub(crate) op: &'static str,
    /// `accepted` or `refused`.
    pub(crate) outcome: &'static str,
    /// The refusal's `code`, or `regression` for a stale refusal known to
    /// be a generation regression; `None` when accepted.
    pub(crate) reason: Option<&'static str>,
    pub(crate) status: u16,
    /// The presented generation, when the request carried a readable
    /// sequencer.
    pub(crate) generation: Option<u64>,
    /// The lock's marks as the answer gave them, when it gave them.
    pub(crate) marks: Option<MarksView>,
}

/// A lock's marks, as JSON.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub(crate) struct MarksView {
    pub(crate) exclusive: u64,
    pub(crate) shared: u64,
}

impl From<Marks> for MarksView {
    fn from(marks: Marks) -> Self {
        MarksView {
            exclusive: marks.exclusive,
            shared: marks.shared,
        }
    }
}

/// What a decision is made of, before it gets its number and time.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) lock: String,
    pub(crate) op: &'static str,
    pub(crate) reason: Option<&'static str>,
    pub(crate) status: u16,
    pub(crate) generation: Option<u64>,
    pub(crate) marks: Option<MarksView>,
}

/// What a new watcher sees first.
#[derive(Debug, Serialize)]
pub(crate) struct Snapshot {
    pub(crate) decisions: Vec<Decision>,
    pub(crate) marks: BTreeMap<String, MarksView>,
}

#[derive(Debug, Default)]
struct Recent {
    next_seq: u64,
    ring: VecDeque<Decision>,
    /// Per lock: its latest marks and the seq that brought them (to forget
    /// the lock seen the longest ago first).
    marks: BTreeMap<String, (MarksView, u64)>,
    /// The same locks by that seq, oldest first: forgetting the oldest is
    /// one step, not a scan of every lock on every write to a new one.
    by_seq: BTreeMap<u64, String>,
}

/// The log every handler records into and every watcher reads.
#[derive(Debug)]
pub(crate) struct DecisionLog {
    recent: Mutex<Recent>,
    live: broadcast::Sender<Decision>,
    watchers: Arc<Semaphore>,
    /// Set at shutdown: every event stream ends, so the connections
    /// carrying them can close and the server can stop.
    closed: watch::Sender<bool>,
}

impl Default for DecisionLog {
    fn default() -> Self {
        DecisionLog {
            recent: Mutex::default(),
            live: broadcast::channel(LIVE_BACKLOG).0,
            watchers: Arc::new(Semaphore::new(MAX_WATCHERS)),
            closed: watch::channel(false).0,
        }
    }
}

impl DecisionLog {
    pub(crate) fn record(&self, outcome: Outcome) {
        let at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        let decision = {
            let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
            recent.next_seq += 1;
            let decision = Decision {
                seq: recent.next_seq,
                at_ms,
                lock: outcome.lock,
                op: outcome.op,
                outcome: if outcome.reason.is_none() {
                    "accepted"
                } else {
                    "refused"
                },
                reason: outcome.reason,
                status: outcome.status,
                generation: outcome.generation,
                marks: outcome.marks,
            };
            if let Some(marks) = decision.marks {
                recent.remember_marks(&decision.lock, marks, decision.seq);
            }
            if recent.ring.len() == RING_CAPACITY {
                recent.ring.pop_front();
            }
            // A watcher subscribes before it takes its snapshot (under
            // this lock), so with none now, nobody can miss this one: the
            // copy for the live stream is made only when someone listens.
            if self.live.receiver_count() == 0 {
                recent.ring.push_back(decision);
                return;
            }
            recent.ring.push_back(decision.clone());
            decision
        };
        // A watcher gone since is not an error.
        let _ = self.live.send(decision);
    }

    /// A place among the watchers, or `None` when all are taken.
    pub(crate) fn admit_watcher(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.watchers).try_acquire_owned().ok()
    }

    /// The live decisions from now on (subscribe before taking the
    /// snapshot, so nothing falls between the two).
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Decision> {
        self.live.subscribe()
    }

    /// The recent decisions and marks, limited to the locks `visible`
    /// allows.
    pub(crate) fn snapshot(&self, visible: impl Fn(&str) -> bool) -> Snapshot {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        Snapshot {
            decisions: recent
                .ring
                .iter()
                .filter(|decision| visible(&decision.lock))
                .cloned()
                .collect(),
            marks: recent
                .marks
                .iter()
                .filter(|(lock, _)| visible(lock))
                .map(|(lock, (marks, _))| (lock.clone(), *marks))
                .collect(),
        }
    }

    /// Resolves once the server is shutting down.
    pub(crate) fn closing(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    /// Ends every event stream (shutdown).
    pub(crate) fn close(&self) {
        self.closed.send_replace(true);
    }
}

impl Recent {
    /// Records `lock`'s latest marks, forgetting the lock seen the longest
    /// ago beyond [`MARKS_CAPACITY`].
    ///
    /// A lock already known costs no allocation: its entry is updated in
    /// place and its name moves to the new seq.
    fn remember_marks(&mut self, lock: &str, marks: MarksView, seq: u64) {
        if let Some(entry) = self.marks.get_mut(lock) {
            let previous = std::mem::replace(entry, (marks, seq)).1;
            let name = self
                .by_seq
                .remove(&previous)
                .unwrap_or_else(|| lock.to_owned());
            self.by_seq.insert(seq, name);
            return;
        }
        self.marks.insert(lock.to_owned(), (marks, seq));
        self.by_seq.insert(seq, lock.to_owned());
        if self.marks.len() > MARKS_CAPACITY {
            if let Some((_, oldest)) = self.by_seq.pop_first() {
                self.marks.remove(&oldest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(lock: &str, reason: Option<&'static str>, exclusive: u64) -> Outcome {
        Outcome {
            lock: lock.to_owned(),
            op: "put",
            reason,
            status: if reason.is_some() { 409 } else { 200 },
            generation: Some(exclusive),
            marks: Some(MarksView {
                exclusive,
                shared: 0,
            }),
        }
    }

    #[test]
    fn the_ring_and_the_marks_stay_bounded() {
        let log = DecisionLog::default();
        for index in 0..(MARKS_CAPACITY + 10) {
            log.record(outcome(&format!("lock-{index}"), None, 1));
        }
        let snapshot = log.snapshot(|_| true);
        assert_eq!(snapshot.decisions.len(), RING_CAPACITY);
        assert_eq!(snapshot.marks.len(), MARKS_CAPACITY);
        assert!(!snapshot.marks.contains_key("lock-0"), "oldest forgotten");
        assert!(
            snapshot
                .marks
                .contains_key(&format!("lock-{}", MARKS_CAPACITY + 9))
        );
        let last = snapshot.decisions.last().unwrap();
        assert_eq!(last.seq, u64::try_from(MARKS_CAPACITY + 10).unwrap());
    }

    #[test]
    fn a_lock_seen_again_is_forgotten_last() {
        let log = DecisionLog::default();
        log.record(outcome("again", None, 1));
        log.record(outcome("once", None, 1));
        log.record(outcome("again", None, 2));
        for index in 0..(MARKS_CAPACITY - 1) {
            log.record(outcome(&format!("lock-{index}"), None, 1));
        }
        let snapshot = log.snapshot(|_| true);
        assert_eq!(snapshot.marks.len(), MARKS_CAPACITY);
        assert!(!snapshot.marks.contains_key("once"), "seen the longest ago");
        assert_eq!(snapshot.marks["again"].exclusive, 2);
    }

    #[test]
    fn watchers_see_only_their_locks_and_live_decisions() {
        let log = DecisionLog::default();
        log.record(outcome("orders/a", None, 5));
        log.record(outcome("billing/x", Some("stale"), 9));
        let mut live = log.subscribe();
        let snapshot = log.snapshot(|lock| lock.starts_with("orders/"));
        assert_eq!(snapshot.decisions.len(), 1);
        assert_eq!(snapshot.decisions[0].outcome, "accepted");
        assert_eq!(snapshot.marks.keys().collect::<Vec<_>>(), ["orders/a"]);
        log.record(outcome("orders/a", Some("stale"), 5));
        let next = live.try_recv().unwrap();
        assert_eq!((next.outcome, next.reason), ("refused", Some("stale")));
    }
}
