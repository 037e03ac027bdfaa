//! The recent fencing decisions, for `/ui` and `GET /v1/events`: per
//! requester (the bearer token that made the request, or everyone on a
//! server without tokens) a bounded ring of its latest requests accepted
//! and refused (with why) and the latest marks it saw per lock, and a
//! broadcast of each new decision.
//!
//! Only requests whose token may use their lock are recorded: a request
//! with no valid token (401) or outside its token's prefixes (403) is no
//! decision on any lock and is counted only
//! (`palisade_requests_rejected_total`). Bounding per requester means one
//! token's traffic can push out only its own older decisions, never
//! another token's: a watcher sees, from every requester's ring, the
//! decisions on the locks its own token may use.
//!
//! Bounded everywhere, so a flood of requests costs memory only up to the
//! bounds: [`RING_CAPACITY`] decisions and [`MARKS_CAPACITY`] locks per
//! requester (the lock seen the longest ago is forgotten first), one
//! requester per token of the tokens file, [`MAX_WATCHERS`] event streams.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use palisade_wire::{Decision, MarksBody, Operation, Snapshot};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, watch};

/// Decisions kept per requester for a new watcher's first page.
pub(crate) const RING_CAPACITY: usize = 256;
/// Locks whose latest marks are kept, per requester.
pub(crate) const MARKS_CAPACITY: usize = 1024;
/// Event streams open at once; more are refused (503 `overloaded`).
pub(crate) const MAX_WATCHERS: usize = 32;
/// Decisions a slow watcher may fall behind before it skips some.
const LIVE_BACKLOG: usize = 1024;

/// What a decision is made of, before it gets its number and time.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) lock: String,
    pub(crate) op: Operation,
    /// The refusal's code (or `regression`); `None` when accepted.
    pub(crate) reason: Option<&'static str>,
    pub(crate) status: u16,
    pub(crate) generation: Option<u64>,
    pub(crate) marks: Option<MarksBody>,
}

/// One requester's recent decisions and the marks they saw.
#[derive(Debug, Default)]
struct Requester {
    ring: VecDeque<Arc<Decision>>,
    /// Per lock: its latest marks and the seq that brought them (to forget
    /// the lock seen the longest ago first).
    marks: BTreeMap<String, (MarksBody, u64)>,
    /// The same locks by that seq, oldest first: forgetting the oldest is
    /// one step, not a scan of every lock on every write to a new one.
    by_seq: BTreeMap<u64, String>,
}

#[derive(Debug, Default)]
struct Recent {
    next_seq: u64,
    /// By token id; `""` for a server without tokens.
    requesters: HashMap<String, Requester>,
}

/// The log every handler records into and every watcher reads.
#[derive(Debug)]
pub(crate) struct DecisionLog {
    recent: Mutex<Recent>,
    live: broadcast::Sender<Arc<Decision>>,
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
    /// Records a decision on a request made by `requester` (its token's
    /// id; `None` on a server without tokens).
    pub(crate) fn record(&self, requester: Option<&str>, outcome: Outcome) {
        let at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        let decision = {
            let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
            recent.next_seq += 1;
            let decision = Arc::new(Decision {
                seq: recent.next_seq,
                at_ms,
                lock: outcome.lock,
                op: outcome.op,
                outcome: if outcome.reason.is_none() {
                    palisade_wire::Outcome::Accepted
                } else {
                    palisade_wire::Outcome::Refused
                },
                reason: outcome.reason.map(Cow::Borrowed),
                status: outcome.status,
                generation: outcome.generation,
                marks: outcome.marks,
            });
            let requester = requester.unwrap_or_default();
            // A requester's entry is made once (there is one per token),
            // so its name is not copied on every decision.
            if !recent.requesters.contains_key(requester) {
                recent
                    .requesters
                    .insert(requester.to_owned(), Requester::default());
            }
            let entry = recent
                .requesters
                .get_mut(requester)
                .expect("inserted above");
            if let Some(marks) = decision.marks {
                entry.remember_marks(&decision.lock, marks, decision.seq);
            }
            if entry.ring.len() == RING_CAPACITY {
                entry.ring.pop_front();
            }
            entry.ring.push_back(Arc::clone(&decision));
            decision
        };
        // A watcher subscribes before it takes its snapshot (under the
        // lock above), so none can miss this one. None listening, or one
        // gone since, is not an error.
        if self.live.receiver_count() > 0 {
            let _ = self.live.send(decision);
        }
    }

    /// A place among the watchers, or `None` when all are taken.
    pub(crate) fn admit_watcher(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.watchers).try_acquire_owned().ok()
    }

    /// The live decisions from now on (subscribe before taking the
    /// snapshot, so nothing falls between the two).
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<Decision>> {
        self.live.subscribe()
    }

    /// The recent decisions of every requester on the locks `visible`
    /// allows, oldest first, and the latest marks seen of those locks.
    pub(crate) fn snapshot(&self, visible: impl Fn(&str) -> bool) -> Snapshot {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let mut decisions: Vec<Decision> = recent
            .requesters
            .values()
            .flat_map(|requester| requester.ring.iter())
            .filter(|decision| visible(&decision.lock))
            .map(|decision| Decision::clone(decision))
            .collect();
        decisions.sort_unstable_by_key(|decision| decision.seq);
        let mut latest: BTreeMap<String, (MarksBody, u64)> = BTreeMap::new();
        for requester in recent.requesters.values() {
            for (lock, (marks, seq)) in &requester.marks {
                if !visible(lock) {
                    continue;
                }
                match latest.get_mut(lock) {
                    Some(known) if known.1 >= *seq => {}
                    Some(known) => *known = (*marks, *seq),
                    None => {
                        latest.insert(lock.clone(), (*marks, *seq));
                    }
                }
            }
        }
        Snapshot {
            decisions,
            marks: latest
                .into_iter()
                .map(|(lock, (marks, _))| (lock, marks))
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

impl Requester {
    /// Records `lock`'s latest marks, forgetting the lock seen the longest
    /// ago beyond [`MARKS_CAPACITY`].
    ///
    /// A lock already known costs no allocation: its entry is updated in
    /// place and its name moves to the new seq.
    fn remember_marks(&mut self, lock: &str, marks: MarksBody, seq: u64) {
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
        if self.marks.len() > MARKS_CAPACITY
            && let Some((_, oldest)) = self.by_seq.pop_first()
        {
            self.marks.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use palisade_wire::Outcome as Verdict;

    fn outcome(lock: &str, reason: Option<&'static str>, exclusive: u64) -> Outcome {
        Outcome {
            lock: lock.to_owned(),
            op: Operation::Put,
            reason,
            status: if reason.is_some() { 409 } else { 200 },
            generation: Some(exclusive),
            marks: Some(MarksBody {
                exclusive,
                shared: 0,
            }),
        }
    }

    #[test]
    fn the_ring_and_the_marks_stay_bounded() {
        let log = DecisionLog::default();
        for index in 0..(MARKS_CAPACITY + 10) {
            log.record(None, outcome(&format!("lock-{index}"), None, 1));
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
        log.record(None, outcome("again", None, 1));
        log.record(None, outcome("once", None, 1));
        log.record(None, outcome("again", None, 2));
        for index in 0..(MARKS_CAPACITY - 1) {
            log.record(None, outcome(&format!("lock-{index}"), None, 1));
        }
        let snapshot = log.snapshot(|_| true);
        assert_eq!(snapshot.marks.len(), MARKS_CAPACITY);
        assert!(!snapshot.marks.contains_key("once"), "seen the longest ago");
        assert_eq!(snapshot.marks["again"].exclusive, 2);
    }

    #[test]
    fn watchers_see_only_their_locks_and_live_decisions() {
        let log = DecisionLog::default();
        log.record(None, outcome("orders/a", None, 5));
        log.record(None, outcome("billing/x", Some("stale"), 9));
        let mut live = log.subscribe();
        let snapshot = log.snapshot(|lock| lock.starts_with("orders/"));
        assert_eq!(snapshot.decisions.len(), 1);
        assert_eq!(snapshot.decisions[0].outcome, Verdict::Accepted);
        assert_eq!(snapshot.marks.keys().collect::<Vec<_>>(), ["orders/a"]);
        log.record(None, outcome("orders/a", Some("stale"), 5));
        let next = live.try_recv().unwrap();
        assert_eq!(
            (next.outcome, next.reason.as_deref()),
            (Verdict::Refused, Some("stale"))
        );
    }

    #[test]
    fn one_requesters_flood_pushes_out_only_its_own_decisions() {
        let log = DecisionLog::default();
        log.record(Some("b-token"), outcome("shared/x", Some("stale"), 3));
        for generation in 0..(2 * RING_CAPACITY as u64) {
            log.record(Some("a-token"), outcome("shared/x", None, 10 + generation));
        }
        let snapshot = log.snapshot(|_| true);
        assert_eq!(snapshot.decisions.len(), RING_CAPACITY + 1);
        assert_eq!(snapshot.decisions[0].reason.as_deref(), Some("stale"));
        assert!(snapshot.decisions.windows(2).all(|w| w[0].seq < w[1].seq));
        // The latest marks of a lock are the newest any requester saw.
        assert_eq!(
            snapshot.marks["shared/x"].exclusive,
            10 + 2 * RING_CAPACITY as u64 - 1
        );
    }
}
