//! The offline checker: reads a merged history (and the resource server's
//! final state) and reports every violation of the invariants the fault
//! suite proves.
//!
//! - **I-MONO**: per lock, the generations of accepted writes, in the
//!   server's commit order, never decrease.
//! - **I-STALE**: once a write with generation g' is acknowledged, no write
//!   with a lower generation invoked after that acknowledgement is accepted.
//! - **I-TOKEN**: each grant's generation is greater than that of every
//!   grant acknowledged before it was invoked. Violated by design by some
//!   setups (Redis without persistence): scenarios say whether they allow it.
//! - **I-DUR**: every acknowledged write is in the final state (the newest
//!   acknowledged write per key, or a later write whose outcome is unknown
//!   or that never completed).
//! - **I-ONCE**: a retried write (same request id) is applied at most once.
//! - **I-LIVE**: after the last fault heals, some client acquires and writes
//!   within the bound.
//!
//! Writes whose outcome is unknown (a timeout, a reset, a 5xx, a client
//! killed mid-request) are judged too (`in_doubt.rs`): one whose value is
//! visible in the final state was applied, and breaks I-STALE if a newer
//! generation had been acknowledged before it was sent, I-MONO if it holds
//! a key over an acknowledged write with a newer generation.
//!
//! Mutual exclusion of holders is deliberately *not* checked: pauses and
//! partitions break it by design. Safety lives at the resource server.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use crate::history::{Event, OpKind, Phase};

mod in_doubt;

/// One invariant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// Accepted generations never decrease in commit order.
    Mono,
    /// No stale write accepted after a newer one was acknowledged.
    Stale,
    /// Grants strictly increase.
    Token,
    /// No acknowledged write lost.
    Dur,
    /// No retried write applied twice.
    Once,
    /// Recovery within the bound after the faults heal.
    Live,
}

impl Invariant {
    /// The name used in reports (`I-MONO`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Invariant::Mono => "I-MONO",
            Invariant::Stale => "I-STALE",
            Invariant::Token => "I-TOKEN",
            Invariant::Dur => "I-DUR",
            Invariant::Once => "I-ONCE",
            Invariant::Live => "I-LIVE",
        }
    }
}

/// One violation, with enough context to find it in the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub invariant: Invariant,
    /// What happened.
    pub message: String,
}

/// What the resource server holds at the end: `(lock, key) → value`,
/// `None` for a key read as absent. Only keys the history wrote need to be
/// present.
pub type FinalState = HashMap<(String, String), Option<String>>;

/// How to judge a history.
#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// I-LIVE: the bound from the last heal to a successful acquire + write.
    /// `None` skips the check (and the recovery time is still reported).
    pub live_bound: Option<Duration>,
}

/// The checker's verdict and the figures for the suite's table.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Client operations invoked.
    pub operations: usize,
    /// Faults injected (nemesis invocations).
    pub faults: usize,
    /// Writes acknowledged with a 2xx.
    pub accepted_writes: usize,
    /// Writes refused as stale (by the fence).
    pub fenced_writes: usize,
    /// Grants (acquire `ok`).
    pub grants: usize,
    /// Writes in doubt, each judged: no attempt (same request id) was
    /// acknowledged, and one timed out, lost its connection, was answered
    /// 5xx or never completed.
    pub in_doubt_writes: usize,
    /// Writes in doubt visible afterwards (their value is in the final
    /// state): applied.
    pub in_doubt_visible: usize,
    /// Writes in doubt that were stale when first sent (a newer generation
    /// of their lock was already acknowledged): a violation if visible.
    pub in_doubt_stale: usize,
    /// From the last heal to the first acquire + write that completed after
    /// it, if there was one.
    pub recovery: Option<Duration>,
    /// Every violation found.
    pub violations: Vec<Violation>,
}

impl Report {
    /// Violations of `invariant`.
    pub fn of(&self, invariant: Invariant) -> impl Iterator<Item = &Violation> {
        self.violations
            .iter()
            .filter(move |v| v.invariant == invariant)
    }

    /// How many violations of `invariant`.
    pub fn count(&self, invariant: Invariant) -> usize {
        self.of(invariant).count()
    }

    /// Stale writes accepted (I-MONO and I-STALE violations).
    pub fn stale_accepted(&self) -> usize {
        self.count(Invariant::Mono) + self.count(Invariant::Stale)
    }

    /// Acknowledged writes lost (I-DUR violations).
    pub fn lost_writes(&self) -> usize {
        self.count(Invariant::Dur)
    }

    /// Panics, listing them, if any of `invariants` is violated.
    pub fn assert_holds(&self, invariants: &[Invariant]) {
        let broken: Vec<&Violation> = self
            .violations
            .iter()
            .filter(|v| invariants.contains(&v.invariant))
            .collect();
        assert!(
            broken.is_empty(),
            "{} violation(s):\n{}",
            broken.len(),
            broken
                .iter()
                .map(|v| format!("  {}: {}", v.invariant.name(), v.message))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    /// Panics unless I-MONO, I-STALE, I-DUR and I-ONCE hold: the safety
    /// claim.
    pub fn assert_safe(&self) {
        self.assert_holds(&[
            Invariant::Mono,
            Invariant::Stale,
            Invariant::Dur,
            Invariant::Once,
        ]);
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ops, {} faults, {} grants, {} writes accepted, {} fenced, {} in doubt ({} visible, {} stale when sent), {} stale accepted, {} lost, {} token violations, recovery {}",
            self.operations,
            self.faults,
            self.grants,
            self.accepted_writes,
            self.fenced_writes,
            self.in_doubt_writes,
            self.in_doubt_visible,
            self.in_doubt_stale,
            self.stale_accepted(),
            self.lost_writes(),
            self.count(Invariant::Token),
            self.recovery
                .map_or("-".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()))
        )
    }
}

/// A completed operation: its invoke time and its completion event.
struct Completed<'a> {
    invoked_us: u64,
    done: &'a Event,
}

/// Checks `events` (merged, in time order) against `final_state`.
pub fn check(events: &[Event], final_state: &FinalState, options: &CheckOptions) -> Report {
    let mut report = Report::default();
    // One operation in flight per client: its invoke, until it completes.
    let mut open: HashMap<&str, &Event> = HashMap::new();
    // Invokes that never completed (the client was killed mid-request).
    let mut unfinished: Vec<&Event> = Vec::new();
    let mut completed: Vec<Completed<'_>> = Vec::new();
    let mut last_heal_us: Option<u64> = None;
    for event in events {
        if event.op == OpKind::Nemesis {
            match event.phase {
                Phase::Invoke => report.faults += 1,
                _ => last_heal_us = Some(event.mono_us),
            }
            continue;
        }
        match event.phase {
            Phase::Invoke => {
                report.operations += 1;
                if let Some(previous) = open.insert(&event.client, event) {
                    unfinished.push(previous);
                }
            }
            _ => {
                let invoked_us = open
                    .remove(event.client.as_str())
                    .map_or(event.mono_us, |invoke| invoke.mono_us);
                completed.push(Completed {
                    invoked_us,
                    done: event,
                });
            }
        }
    }
    unfinished.extend(open.into_values());
    unfinished.sort_by_key(|invoke| invoke.mono_us);

    let writes_ok: Vec<&Completed<'_>> = completed
        .iter()
        .filter(|c| c.done.op == OpKind::Write && c.done.phase == Phase::Ok)
        .collect();
    report.accepted_writes = writes_ok.len();
    report.fenced_writes = completed
        .iter()
        .filter(|c| {
            c.done.op == OpKind::Write
                && c.done.phase == Phase::Fail
                && c.done.detail.as_deref() == Some("stale")
        })
        .count();
    let grants: Vec<&Completed<'_>> = completed
        .iter()
        .filter(|c| c.done.op == OpKind::Acquire && c.done.phase == Phase::Ok)
        .collect();
    report.grants = grants.len();

    check_mono(&writes_ok, &mut report);
    check_stale(&writes_ok, &mut report);
    check_token(&grants, &mut report);
    check_once(&writes_ok, &mut report);
    check_dur(&completed, &unfinished, final_state, &mut report);
    in_doubt::check_in_doubt(&completed, &unfinished, final_state, &mut report);
    check_live(&completed, last_heal_us, options, &mut report);
    report
}

fn by_lock<'a, 'b>(items: &'b [&'b Completed<'a>]) -> BTreeMap<&'a str, Vec<&'b Completed<'a>>> {
    let mut map: BTreeMap<&'a str, Vec<&'b Completed<'a>>> = BTreeMap::new();
    for item in items {
        map.entry(item.done.lock.as_str()).or_default().push(item);
    }
    map
}

fn check_mono(writes: &[&Completed<'_>], report: &mut Report) {
    for (lock, mut writes) in by_lock(writes) {
        // Replays share their original's number: count each commit once.
        writes.sort_by_key(|w| w.done.commit_seq);
        writes.dedup_by_key(|w| w.done.commit_seq);
        let mut highest: Option<&Event> = None;
        for write in writes {
            let Some(commit_seq) = write.done.commit_seq else {
                report.violations.push(Violation {
                    invariant: Invariant::Mono,
                    message: format!(
                        "lock {lock}: {} write {:?} accepted without a commit sequence number",
                        write.done.client, write.done.request_id
                    ),
                });
                continue;
            };
            let generation = write.done.generation.unwrap_or(0);
            if let Some(high) = highest {
                if generation < high.generation.unwrap_or(0) {
                    report.violations.push(Violation {
                        invariant: Invariant::Mono,
                        message: format!(
                            "lock {lock}: generation {generation} ({}, request {:?}) committed at {commit_seq}, after generation {} ({}, request {:?}) at {:?}",
                            write.done.client,
                            write.done.request_id,
                            high.generation.unwrap_or(0),
                            high.client,
                            high.request_id,
                            high.commit_seq
                        ),
                    });
                    continue;
                }
            }
            highest = Some(write.done);
        }
    }
}

fn check_stale(writes: &[&Completed<'_>], report: &mut Report) {
    for (lock, writes) in by_lock(writes) {
        for late in &writes {
            let generation = late.done.generation.unwrap_or(0);
            // Any newer write acknowledged before this one was even sent?
            if let Some(newer) = writes.iter().find(|newer| {
                newer.done.generation.unwrap_or(0) > generation
                    && newer.done.mono_us < late.invoked_us
            }) {
                report.violations.push(Violation {
                    invariant: Invariant::Stale,
                    message: format!(
                        "lock {lock}: generation {generation} ({}, request {:?}) was accepted although generation {} ({}) had been acknowledged {} µs before it was sent",
                        late.done.client,
                        late.done.request_id,
                        newer.done.generation.unwrap_or(0),
                        newer.done.client,
                        late.invoked_us - newer.done.mono_us
                    ),
                });
            }
        }
    }
}

fn check_token(grants: &[&Completed<'_>], report: &mut Report) {
    for (lock, grants) in by_lock(grants) {
        for later in &grants {
            let generation = later.done.generation.unwrap_or(0);
            if let Some(earlier) = grants.iter().find(|earlier| {
                earlier.done.mono_us < later.invoked_us
                    && earlier.done.generation.unwrap_or(0) >= generation
            }) {
                report.violations.push(Violation {
                    invariant: Invariant::Token,
                    message: format!(
                        "lock {lock}: {} was granted generation {generation} after {} had been granted {}",
                        later.done.client,
                        earlier.done.client,
                        earlier.done.generation.unwrap_or(0)
                    ),
                });
            }
        }
    }
}

fn check_once(writes: &[&Completed<'_>], report: &mut Report) {
    let mut seqs: HashMap<(&str, &str), Vec<u64>> = HashMap::new();
    for write in writes {
        if let (Some(request_id), Some(commit_seq)) =
            (&write.done.request_id, write.done.commit_seq)
        {
            let seen = seqs
                .entry((write.done.lock.as_str(), request_id.as_str()))
                .or_default();
            if !seen.contains(&commit_seq) {
                seen.push(commit_seq);
            }
        }
    }
    let mut twice: Vec<_> = seqs.into_iter().filter(|(_, s)| s.len() > 1).collect();
    twice.sort();
    for ((lock, request_id), seqs) in twice {
        report.violations.push(Violation {
            invariant: Invariant::Once,
            message: format!(
                "lock {lock}: request {request_id} was applied {} times (commit sequence numbers {seqs:?})",
                seqs.len()
            ),
        });
    }
}

fn check_dur(
    completed: &[Completed<'_>],
    unfinished: &[&Event],
    final_state: &FinalState,
    report: &mut Report,
) {
    // Per key: the newest acknowledged write (by commit order), and the
    // values of writes whose outcome is unknown, or that never completed
    // (any may have landed last).
    let mut newest: BTreeMap<(&str, &str), &Event> = BTreeMap::new();
    let mut unknown: HashMap<(&str, &str), Vec<&str>> = HashMap::new();
    for c in completed.iter().filter(|c| c.done.op == OpKind::Write) {
        let (Some(key), Some(value)) = (&c.done.key, &c.done.value) else {
            continue;
        };
        let slot = (c.done.lock.as_str(), key.as_str());
        match c.done.phase {
            Phase::Ok
                if newest
                    .get(&slot)
                    .is_none_or(|old| old.commit_seq < c.done.commit_seq) =>
            {
                newest.insert(slot, c.done);
            }
            Phase::Unknown => unknown.entry(slot).or_default().push(value),
            _ => {}
        }
    }
    for invoke in unfinished
        .iter()
        .filter(|invoke| invoke.op == OpKind::Write)
    {
        if let (Some(key), Some(value)) = (&invoke.key, &invoke.value) {
            unknown
                .entry((invoke.lock.as_str(), key.as_str()))
                .or_default()
                .push(value);
        }
    }
    for ((lock, key), write) in newest {
        let expected = write.value.as_deref().unwrap_or_default();
        let found = final_state
            .get(&(lock.to_owned(), key.to_owned()))
            .cloned()
            .flatten();
        let fine = found.as_deref().is_some_and(|value| {
            value == expected
                || unknown
                    .get(&(lock, key))
                    .is_some_and(|values| values.contains(&value))
        });
        if !fine {
            report.violations.push(Violation {
                invariant: Invariant::Dur,
                message: format!(
                    "lock {lock}, key {key}: acknowledged value {expected:?} ({}, commit {:?}) is missing; final value {found:?}",
                    write.client, write.commit_seq
                ),
            });
        }
    }
}

fn check_live(
    completed: &[Completed<'_>],
    last_heal_us: Option<u64>,
    options: &CheckOptions,
    report: &mut Report,
) {
    let Some(heal_us) = last_heal_us else {
        return;
    };
    // The first write acknowledged after the heal by a client whose grant
    // also completed after the heal.
    let mut granted_after_heal: HashMap<(&str, &str), u64> = HashMap::new();
    for c in completed.iter().filter(|c| c.done.mono_us >= heal_us) {
        match (c.done.op, c.done.phase) {
            (OpKind::Acquire, Phase::Ok) => {
                granted_after_heal.insert((&c.done.client, &c.done.lock), c.done.mono_us);
            }
            (OpKind::Write, Phase::Ok)
                if granted_after_heal
                    .contains_key(&(c.done.client.as_str(), c.done.lock.as_str())) =>
            {
                report.recovery = Some(Duration::from_micros(c.done.mono_us - heal_us));
                break;
            }
            _ => {}
        }
    }
    if let Some(bound) = options.live_bound {
        match report.recovery {
            Some(recovery) if recovery <= bound => {}
            Some(recovery) => report.violations.push(Violation {
                invariant: Invariant::Live,
                message: format!(
                    "recovery took {:.2} s, over the bound of {:.2} s",
                    recovery.as_secs_f64(),
                    bound.as_secs_f64()
                ),
            }),
            None => report.violations.push(Violation {
                invariant: Invariant::Live,
                message: "no acquire + write succeeded after the faults healed".into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct History {
        events: Vec<Event>,
        clock: u64,
    }

    impl History {
        fn new() -> Self {
            History {
                events: Vec::new(),
                clock: 0,
            }
        }

        fn push(&mut self, mut event: Event) {
            self.clock += 10;
            event.mono_us = self.clock;
            self.events.push(event);
        }

        fn grant(&mut self, client: &str, generation: u64) {
            self.push(Event::now(client, Phase::Invoke, OpKind::Acquire, "L"));
            self.push(Event::now(client, Phase::Ok, OpKind::Acquire, "L").generation(generation));
        }

        fn invoke_write(&mut self, client: &str, generation: u64, id: &str, value: &str) {
            self.invoke_write_to(client, generation, id, "k", value);
        }

        fn invoke_write_to(
            &mut self,
            client: &str,
            generation: u64,
            id: &str,
            key: &str,
            value: &str,
        ) {
            self.push(
                Event::now(client, Phase::Invoke, OpKind::Write, "L")
                    .generation(generation)
                    .write(id, key, value),
            );
        }

        fn complete_write(
            &mut self,
            client: &str,
            generation: u64,
            id: &str,
            value: &str,
            outcome: Result<u64, &str>,
        ) {
            self.complete_write_to(client, generation, id, "k", value, outcome);
        }

        fn complete_write_to(
            &mut self,
            client: &str,
            generation: u64,
            id: &str,
            key: &str,
            value: &str,
            outcome: Result<u64, &str>,
        ) {
            let base = |phase| {
                Event::now(client, phase, OpKind::Write, "L")
                    .generation(generation)
                    .write(id, key, value)
            };
            self.push(match outcome {
                Ok(seq) => base(Phase::Ok).commit_seq(seq),
                Err("unknown") => base(Phase::Unknown),
                Err(code) => base(Phase::Fail).detail(code),
            });
        }

        fn write(
            &mut self,
            client: &str,
            generation: u64,
            id: &str,
            value: &str,
            outcome: Result<u64, &str>,
        ) {
            self.invoke_write(client, generation, id, value);
            self.complete_write(client, generation, id, value, outcome);
        }

        fn write_to_ok(
            &mut self,
            client: &str,
            generation: u64,
            id: &str,
            key: &str,
            value: &str,
            commit_seq: u64,
        ) {
            self.invoke_write_to(client, generation, id, key, value);
            self.complete_write_to(client, generation, id, key, value, Ok(commit_seq));
        }

        fn heal(&mut self) {
            self.push(Event::now("nemesis", Phase::Invoke, OpKind::Nemesis, "").detail("pause a"));
            self.push(Event::now("nemesis", Phase::Ok, OpKind::Nemesis, "").detail("pause a"));
        }

        fn check(&self, final_value: Option<&str>) -> Report {
            self.check_state(&[("k", final_value)])
        }

        /// Checks against a final state of several keys of lock `L`.
        fn check_state(&self, keys: &[(&str, Option<&str>)]) -> Report {
            let mut state = FinalState::new();
            for (key, value) in keys {
                state.insert(("L".into(), (*key).into()), value.map(str::to_owned));
            }
            check(
                &self.events,
                &state,
                &CheckOptions {
                    live_bound: Some(Duration::from_secs(1)),
                },
            )
        }
    }

    /// The fenced GC-pause story: a holds 1, pauses, b gets 2 and writes,
    /// a's late write is refused.
    fn fenced_story() -> History {
        let mut h = History::new();
        h.grant("a", 1);
        h.write("a", 1, "a1", "a-first", Ok(1));
        h.invoke_write("a", 1, "a2", "a-late");
        h.heal();
        h.grant("b", 2);
        h.write("b", 2, "b1", "b-first", Ok(2));
        h.complete_write("a", 1, "a2", "a-late", Err("stale"));
        h
    }

    #[test]
    fn a_fenced_history_is_clean() {
        let report = fenced_story().check(Some("b-first"));
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!((report.operations, report.faults, report.grants), (5, 1, 2));
        assert_eq!((report.accepted_writes, report.fenced_writes), (2, 1));
        assert!(report.recovery.is_some());
        report.assert_safe();
    }

    #[test]
    fn an_unfenced_late_write_breaks_mono_and_stale_and_dur() {
        // Without fencing the late write lands after b's.
        let mut h = History::new();
        h.grant("a", 1);
        h.write("a", 1, "a1", "a-first", Ok(1));
        h.grant("b", 2);
        h.write("b", 2, "b1", "b-first", Ok(2));
        h.write("a", 1, "a2", "a-late", Ok(3));
        let report = h.check(Some("a-late"));
        assert_eq!(report.count(Invariant::Mono), 1);
        assert_eq!(report.count(Invariant::Stale), 1);
        assert_eq!(report.stale_accepted(), 2);
        // a-late is "newest" by commit order and present: not a loss.
        assert_eq!(report.lost_writes(), 0);
        let message = format!("{:?}", report.of(Invariant::Mono).next().unwrap());
        assert!(message.contains("generation 1") && message.contains("generation 2"));
    }

    #[test]
    fn a_lost_or_rolled_back_write_breaks_dur() {
        let report = fenced_story().check(None);
        assert_eq!(report.lost_writes(), 1);
        // Rolled back to an older acknowledged value.
        let report = fenced_story().check(Some("a-first"));
        assert_eq!(report.lost_writes(), 1);
        // A value nobody wrote.
        let report = fenced_story().check(Some("garbage"));
        assert_eq!(report.lost_writes(), 1);
    }

    #[test]
    fn an_unknown_write_may_be_the_final_value() {
        let mut h = fenced_story();
        h.write("b", 2, "b2", "b-maybe", Err("unknown"));
        assert_eq!(h.check(Some("b-maybe")).lost_writes(), 0);
        assert_eq!(h.check(Some("b-first")).lost_writes(), 0);
    }

    #[test]
    fn token_regressions_are_reported() {
        let mut h = History::new();
        h.grant("a", 5);
        h.grant("b", 1); // e.g. Redis restarted without persistence
        let report = h.check(None);
        assert_eq!(report.count(Invariant::Token), 1);
        // ...which the safety claim does not depend on.
        report.assert_safe();
    }

    #[test]
    fn a_write_applied_twice_breaks_once() {
        let mut h = History::new();
        h.grant("a", 1);
        h.write("a", 1, "r1", "v", Ok(1));
        h.write("a", 1, "r1", "v", Ok(1)); // a replay: fine
        assert_eq!(h.check(Some("v")).count(Invariant::Once), 0);
        h.write("a", 1, "r1", "v", Ok(7)); // applied again: not fine
        assert_eq!(h.check(Some("v")).count(Invariant::Once), 1);
    }

    #[test]
    fn no_recovery_after_the_heal_breaks_live() {
        let mut h = History::new();
        h.grant("a", 1);
        h.heal();
        let report = h.check(None);
        assert_eq!(report.count(Invariant::Live), 1);
        assert!(report.recovery.is_none());
    }

    #[test]
    fn assert_holds_lists_the_violations() {
        let mut h = History::new();
        h.grant("a", 2);
        h.write("a", 2, "a1", "x", Ok(1));
        h.write("a", 1, "a0", "y", Ok(2));
        let report = h.check(Some("y"));
        let panic = std::panic::catch_unwind(|| report.assert_safe()).unwrap_err();
        let text = panic.downcast_ref::<String>().unwrap();
        assert!(text.contains("I-MONO"), "{text}");
    }

    /// The lossy-link story: a holds 1 and writes; b takes over with 2 and
    /// is acknowledged; then a sends a write of its own key, and never
    /// learns its outcome (every attempt times out).
    fn stale_write_in_doubt() -> History {
        let mut h = History::new();
        h.grant("a", 1);
        h.write("a", 1, "a1", "a-first", Ok(1));
        h.grant("b", 2);
        h.write("b", 2, "b1", "b-first", Ok(2));
        h.invoke_write_to("a", 1, "a2", "k-a2", "a-late");
        h.complete_write_to("a", 1, "a2", "k-a2", "a-late", Err("unknown"));
        // Its retry, same request id: unknown again.
        h.invoke_write_to("a", 1, "a2", "k-a2", "a-late");
        h.complete_write_to("a", 1, "a2", "k-a2", "a-late", Err("unknown"));
        h
    }

    #[test]
    fn a_visible_stale_write_in_doubt_breaks_stale() {
        let report =
            stale_write_in_doubt().check_state(&[("k", Some("b-first")), ("k-a2", Some("a-late"))]);
        // The acknowledged-write checks alone see nothing wrong...
        assert_eq!(report.lost_writes(), 0);
        // ...the in-doubt judgement does: one request (two attempts),
        // visible, stale when first sent.
        assert_eq!(
            (
                report.in_doubt_writes,
                report.in_doubt_visible,
                report.in_doubt_stale
            ),
            (1, 1, 1)
        );
        assert_eq!(report.count(Invariant::Stale), 1, "{:?}", report.violations);
        assert_eq!(report.count(Invariant::Mono), 0, "{:?}", report.violations);
        let message = &report.of(Invariant::Stale).next().unwrap().message;
        assert!(
            message.contains("outcome unknown") && message.contains("generation 2"),
            "{message}"
        );
    }

    #[test]
    fn a_stale_write_in_doubt_that_is_not_visible_is_fine() {
        let report = stale_write_in_doubt().check_state(&[("k", Some("b-first")), ("k-a2", None)]);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(
            (
                report.in_doubt_writes,
                report.in_doubt_visible,
                report.in_doubt_stale
            ),
            (1, 0, 1)
        );
    }

    #[test]
    fn a_visible_write_in_doubt_that_was_not_stale_when_sent_is_fine() {
        // a sends before b's write is acknowledged: it may land first.
        let mut h = History::new();
        h.grant("a", 1);
        h.invoke_write_to("a", 1, "a1", "k-a1", "a-slow");
        h.grant("b", 2);
        h.write("b", 2, "b1", "b-first", Ok(2));
        h.complete_write_to("a", 1, "a1", "k-a1", "a-slow", Err("unknown"));
        // Its retry is sent after b's acknowledgement, but the request was
        // first sent before it.
        h.invoke_write_to("a", 1, "a1", "k-a1", "a-slow");
        h.complete_write_to("a", 1, "a1", "k-a1", "a-slow", Err("unknown"));
        let report = h.check_state(&[("k", Some("b-first")), ("k-a1", Some("a-slow"))]);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(
            (
                report.in_doubt_writes,
                report.in_doubt_visible,
                report.in_doubt_stale
            ),
            (1, 1, 0)
        );
    }

    #[test]
    fn a_write_whose_retry_was_acknowledged_is_not_in_doubt() {
        let mut h = stale_write_in_doubt();
        // A third attempt: answered from the idempotency record.
        h.write_to_ok("a", 1, "a2", "k-a2", "a-late", 3);
        let report = h.check_state(&[("k", Some("b-first")), ("k-a2", Some("a-late"))]);
        assert_eq!(report.in_doubt_writes, 0);
        // The acknowledged-write checks judge it instead: accepted stale.
        assert!(
            report.count(Invariant::Stale) >= 1,
            "{:?}",
            report.violations
        );
    }

    #[test]
    fn a_write_in_doubt_holding_a_key_over_a_newer_acknowledged_write_breaks_mono() {
        // a's write to the shared key is sent before b's is acknowledged,
        // so time alone cannot call it stale; but it holds the final value
        // over b's acknowledged generation 2: committed after it.
        let mut h = History::new();
        h.grant("a", 1);
        h.invoke_write("a", 1, "a1", "a-late");
        h.grant("b", 2);
        h.write("b", 2, "b1", "b-first", Ok(2));
        h.complete_write("a", 1, "a1", "a-late", Err("unknown"));
        let report = h.check(Some("a-late"));
        // I-DUR lets an unknown write be the final value...
        assert_eq!(report.lost_writes(), 0);
        // ...but generations went down in commit order.
        assert_eq!(report.count(Invariant::Mono), 1, "{:?}", report.violations);
        assert_eq!(report.count(Invariant::Stale), 0, "{:?}", report.violations);
        assert_eq!(report.stale_accepted(), 1);
        // Not visible: nothing to judge.
        assert!(h.check(Some("b-first")).violations.is_empty());
    }

    #[test]
    fn a_write_that_never_completed_is_in_doubt() {
        // a's process was killed with its write in flight: an invoke with no
        // completion.
        let mut h = History::new();
        h.grant("b", 2);
        h.write("b", 2, "b1", "b-first", Ok(2));
        h.invoke_write_to("a", 1, "a1", "k-a1", "a-killed");
        let report = h.check_state(&[("k", Some("b-first")), ("k-a1", Some("a-killed"))]);
        assert_eq!(
            (
                report.in_doubt_writes,
                report.in_doubt_visible,
                report.in_doubt_stale
            ),
            (1, 1, 1)
        );
        assert_eq!(report.count(Invariant::Stale), 1, "{:?}", report.violations);
        let report = h.check_state(&[("k", Some("b-first")), ("k-a1", None)]);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
    }

    #[test]
    fn a_write_that_never_completed_may_be_the_final_value() {
        let mut h = fenced_story();
        h.invoke_write("b", 2, "b2", "b-maybe");
        assert_eq!(h.check(Some("b-maybe")).lost_writes(), 0);
    }
}
