//! The metric families and their registration.

use std::time::Duration;

use palisade_core::{LockError, LostReason, Mode};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upper bounds of the acquire-latency histogram, in seconds: from an
/// uncontended grant (a round trip) to a long queue.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AcquireLabels {
    mode: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ModeLabels {
    mode: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

fn latency_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// The lock side's metrics. Cheap to clone: clones share their series, so
/// one `LockMetrics` can meter many sessions and backends.
#[derive(Debug, Clone)]
pub struct LockMetrics {
    acquire_duration: Family<AcquireLabels, Histogram, fn() -> Histogram>,
    acquires: Family<AcquireLabels, Counter>,
    waiting: Gauge,
    waits: Family<ModeLabels, Counter>,
    handoffs: Family<ModeLabels, Counter>,
    lease_losses: Family<ReasonLabels, Counter>,
    regressions_refused: Counter,
    busy_refusals: Counter,
}

impl Default for LockMetrics {
    fn default() -> Self {
        let metrics = LockMetrics {
            acquire_duration: Family::new_with_constructor(latency_histogram),
            acquires: Family::default(),
            waiting: Gauge::default(),
            waits: Family::default(),
            handoffs: Family::default(),
            lease_losses: Family::default(),
            regressions_refused: Counter::default(),
            busy_refusals: Counter::default(),
        };
        // Every series at zero from the start, so `increase(...)` sees the
        // first event.
        for mode in [Mode::Exclusive, Mode::Shared] {
            let mode = mode.as_str();
            let _ = metrics.waits.get_or_create(&ModeLabels { mode });
            let _ = metrics.handoffs.get_or_create(&ModeLabels { mode });
            let granted = AcquireLabels {
                mode,
                outcome: "acquired",
            };
            let _ = metrics.acquires.get_or_create(&granted);
            let _ = metrics.acquire_duration.get_or_create(&granted);
        }
        for reason in [
            LostReason::Expired,
            LostReason::KeepAliveFailed,
            LostReason::Revoked,
            LostReason::KeyDeleted,
            LostReason::SessionClosed,
        ] {
            let _ = metrics.lease_losses.get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            });
        }
        metrics
    }
}

impl LockMetrics {
    /// Registers every family in `registry` (the service's own, or one
    /// served by `palisade lock --metrics-listen`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "palisade_lock_acquire_duration_seconds",
            "Time from asking for a lock to being granted or refused, by mode and outcome",
            self.acquire_duration.clone(),
        );
        registry.register(
            "palisade_lock_acquires",
            "Lock acquires, by mode and outcome (acquired, or the error's kind)",
            self.acquires.clone(),
        );
        registry.register(
            "palisade_lock_waiting",
            "Acquires waiting for their lock now",
            self.waiting.clone(),
        );
        registry.register(
            "palisade_lock_waits",
            "Acquires that could not be granted at once and queued",
            self.waits.clone(),
        );
        registry.register(
            "palisade_lock_handoffs",
            "Queued acquires later granted: the lock passed from a holder to a waiter",
            self.handoffs.clone(),
        );
        registry.register(
            "palisade_lock_lease_losses",
            "Holds whose lease was lost, by reason",
            self.lease_losses.clone(),
        );
        registry.register(
            "palisade_lock_regressions_refused",
            "Grants refused because the lock service's generation went below the known floor",
            self.regressions_refused.clone(),
        );
        registry.register(
            "palisade_lock_busy_refusals",
            "Acquires refused at once: too many waiters on the lock in this process",
            self.busy_refusals.clone(),
        );
    }

    /// The name of every sample family these metrics export, as a query
    /// names it (counters with `_total`, histograms without suffixes).
    pub fn exported_names() -> Vec<String> {
        let mut registry = Registry::default();
        LockMetrics::default().register(&mut registry);
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &registry).is_err() {
            return Vec::new();
        }
        text.lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|rest| {
                let (name, kind) = rest.split_once(' ')?;
                Some(match kind {
                    "counter" => format!("{name}_total"),
                    _ => name.to_owned(),
                })
            })
            .collect()
    }

    pub(crate) fn waiting(&self) -> WaitingGuard {
        self.waiting.inc();
        WaitingGuard(self.waiting.clone())
    }

    pub(crate) fn waited(&self, mode: Mode) {
        self.waits
            .get_or_create(&ModeLabels {
                mode: mode.as_str(),
            })
            .inc();
    }

    pub(crate) fn handed_off(&self, mode: Mode) {
        self.handoffs
            .get_or_create(&ModeLabels {
                mode: mode.as_str(),
            })
            .inc();
    }

    /// An acquire granted (`error` is `None`) or refused.
    pub(crate) fn finished(&self, mode: Mode, elapsed: Duration, error: Option<&LockError>) {
        let outcome = match error {
            None => "acquired",
            Some(error) => {
                match error {
                    LockError::Busy { .. } => self.busy_refusals.inc(),
                    LockError::GenerationRegression { .. } => self.regressions_refused.inc(),
                    _ => 0,
                };
                error.kind()
            }
        };
        let labels = AcquireLabels {
            mode: mode.as_str(),
            outcome,
        };
        self.acquires.get_or_create(&labels).inc();
        self.acquire_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    pub(crate) fn lease_lost(&self, reason: LostReason) {
        self.lease_losses
            .get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            })
            .inc();
    }
}

/// Lowers the waiting gauge when the acquire ends, however it ends
/// (granted, refused, or its future dropped by a timeout).
pub(crate) struct WaitingGuard(Gauge);

impl Drop for WaitingGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}
