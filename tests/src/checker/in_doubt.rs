//! Writes in doubt: every attempt of the request (one request id, its
//! retries) timed out, lost its connection, was answered 5xx or never
//! completed (its client was killed), and none was acknowledged. Such a
//! write may have been applied. The checks on acknowledged writes cannot
//! see it, so it is judged here by what is visible afterwards: a write
//! whose value is in the final state was applied (every value is unique).
//!
//! - **I-STALE**: a visible write in doubt whose generation was already
//!   below an acknowledged write of the same lock when its first attempt
//!   was sent was accepted stale. (It cannot have been applied before it
//!   was first sent, so this holds whichever attempt landed.)
//! - **I-MONO**, without any clock: a visible write in doubt is the last
//!   write to its key, so it was committed after every acknowledged write
//!   to that key (unless one of those was lost, which I-DUR reports). An
//!   acknowledged write to the same key with a higher generation therefore
//!   means generations went down in commit order.
//!
//! A write in doubt that is not visible is not judged further: it was not
//! applied, or it was overwritten by a later write; its commit number is
//! unknown (a plain read does not return one), so nothing orders it.

use std::collections::BTreeMap;

use super::{Completed, FinalState, Invariant, Report, Violation};
use crate::history::{Event, OpKind, Phase};

/// Every attempt of one request, folded.
struct Request<'a> {
    /// An event of the request: the lock, client, generation, key, value.
    event: &'a Event,
    /// When its first attempt was sent.
    first_sent_us: u64,
    /// Some attempt was acknowledged: not in doubt.
    acknowledged: bool,
    /// Some attempt ended unknown or never completed.
    doubtful: bool,
}

/// Judges every write in doubt among `completed` attempts and the
/// `unfinished` invokes, against the acknowledged writes and the final
/// state; counts them in `report`.
pub(super) fn check_in_doubt(
    completed: &[Completed<'_>],
    unfinished: &[&Event],
    final_state: &FinalState,
    report: &mut Report,
) {
    let acknowledged: Vec<&Event> = completed
        .iter()
        .filter(|c| c.done.op == OpKind::Write && c.done.phase == Phase::Ok)
        .map(|c| c.done)
        .collect();
    for write in in_doubt(completed, unfinished) {
        let event = write.event;
        let (Some(key), Some(value)) = (event.key.as_deref(), event.value.as_deref()) else {
            continue;
        };
        report.in_doubt_writes += 1;
        let generation = event.generation.unwrap_or(0);
        let newer_when_sent = acknowledged
            .iter()
            .filter(|ack| ack.lock == event.lock && ack.mono_us < write.first_sent_us)
            .filter(|ack| ack.generation.unwrap_or(0) > generation)
            .max_by_key(|ack| ack.generation);
        if newer_when_sent.is_some() {
            report.in_doubt_stale += 1;
        }
        let visible = final_state
            .get(&(event.lock.clone(), key.to_owned()))
            .is_some_and(|found| found.as_deref() == Some(value));
        if !visible {
            continue;
        }
        report.in_doubt_visible += 1;
        let lock = &event.lock;
        if let Some(newer) = newer_when_sent {
            report.violations.push(Violation {
                invariant: Invariant::Stale,
                message: format!(
                    "lock {lock}: generation {generation} ({}, request {:?}, outcome unknown) was applied (its value {value:?} is in the final state) although generation {} ({}) had been acknowledged {} µs before it was first sent",
                    event.client,
                    event.request_id,
                    newer.generation.unwrap_or(0),
                    newer.client,
                    write.first_sent_us - newer.mono_us
                ),
            });
        }
        if let Some(overwritten) = acknowledged
            .iter()
            .filter(|ack| ack.lock == event.lock && ack.key.as_deref() == Some(key))
            .filter(|ack| ack.generation.unwrap_or(0) > generation)
            .max_by_key(|ack| ack.generation)
        {
            report.violations.push(Violation {
                invariant: Invariant::Mono,
                message: format!(
                    "lock {lock}, key {key}: generation {generation} ({}, request {:?}, outcome unknown) holds the final value {value:?}, so it was committed after generation {} ({}, request {:?}, commit {:?}) acknowledged on the same key",
                    event.client,
                    event.request_id,
                    overwritten.generation.unwrap_or(0),
                    overwritten.client,
                    overwritten.request_id,
                    overwritten.commit_seq
                ),
            });
        }
    }
}

/// The requests none of whose attempts was acknowledged and at least one
/// of which may have been applied, in order of first attempt.
fn in_doubt<'a>(completed: &[Completed<'a>], unfinished: &[&'a Event]) -> Vec<Request<'a>> {
    let mut requests: BTreeMap<(&str, &str), Request<'a>> = BTreeMap::new();
    let attempts = completed
        .iter()
        .map(|c| (c.done, c.invoked_us, Some(c.done.phase)))
        .chain(
            unfinished
                .iter()
                .map(|invoke| (*invoke, invoke.mono_us, None)),
        );
    for (event, sent_us, phase) in attempts {
        let (OpKind::Write, Some(request_id)) = (event.op, event.request_id.as_deref()) else {
            continue;
        };
        let request = requests
            .entry((event.lock.as_str(), request_id))
            .or_insert(Request {
                event,
                first_sent_us: sent_us,
                acknowledged: false,
                doubtful: false,
            });
        request.first_sent_us = request.first_sent_us.min(sent_us);
        match phase {
            Some(Phase::Ok) => request.acknowledged = true,
            Some(Phase::Unknown) | None => request.doubtful = true,
            Some(Phase::Fail | Phase::Invoke) => {}
        }
    }
    let mut doubtful: Vec<Request<'a>> = requests
        .into_values()
        .filter(|request| request.doubtful && !request.acknowledged)
        .collect();
    doubtful.sort_by_key(|request| request.first_sent_us);
    doubtful
}
