//! Counters of fencing decisions, readable by the service (no global
//! registry: export them however the service exports its own metrics).

use std::collections::BTreeMap;
use std::sync::Mutex;

/// The counters of one [`Guard`](crate::Guard). Updated under a
/// `std::sync::Mutex` held for one increment, never across an `.await`.
#[derive(Debug, Default)]
pub(crate) struct GuardMetrics {
    counts: Mutex<MetricsSnapshot>,
}

/// A copy of a guard's counters at one moment
/// ([`Guard::metrics`](crate::Guard::metrics)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// Requests admitted by the mark store (serialised mode): the handler
    /// ran under the per-lock lock.
    pub admitted: u64,
    /// Requests whose sequencer was validated and passed to the handler for
    /// the store's transaction to fence (transaction mode).
    pub validated: u64,
    /// Requests passed through without a sequencer (reads the policy lets
    /// through unfenced).
    pub unfenced: u64,
    /// Admitted requests that had to wait for an earlier request on the
    /// same lock to finish first.
    pub waited: u64,
    /// Refused requests by error code (`stale`, `unsigned`,
    /// `raise_too_large`, ...).
    pub refused: BTreeMap<&'static str, u64>,
}

impl MetricsSnapshot {
    /// Requests refused with `code`.
    pub fn refused(&self, code: &str) -> u64 {
        self.refused.get(code).copied().unwrap_or(0)
    }

    /// Requests refused, every code together.
    pub fn total_refused(&self) -> u64 {
        self.refused.values().sum()
    }
}

impl GuardMetrics {
    fn update(&self, change: impl FnOnce(&mut MetricsSnapshot)) {
        change(&mut self.counts.lock().unwrap_or_else(|e| e.into_inner()));
    }

    pub(crate) fn admitted(&self, waited: bool) {
        self.update(|counts| {
            counts.admitted += 1;
            counts.waited += u64::from(waited);
        });
    }

    pub(crate) fn validated(&self) {
        self.update(|counts| counts.validated += 1);
    }

    pub(crate) fn unfenced(&self) {
        self.update(|counts| counts.unfenced += 1);
    }

    pub(crate) fn refused(&self, code: &'static str) {
        self.update(|counts| *counts.refused.entry(code).or_default() += 1);
    }

    pub(crate) fn snapshot(&self) -> MetricsSnapshot {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
