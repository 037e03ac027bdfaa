//! The lock side's Grafana dashboard in deploy/grafana: every query names
//! only metrics [`LockMetrics`] exports, and every one of them is shown.

use std::collections::BTreeSet;

use palisade_metrics::LockMetrics;
use palisade_testkit::grafana::{check_dashboard, metrics_in};

fn exported() -> BTreeSet<String> {
    LockMetrics::exported_names().into_iter().collect()
}

#[test]
fn every_query_names_an_exported_metric_and_every_metric_is_shown() {
    check_dashboard("palisade-locks.json", &exported(), 9);
}

#[test]
fn a_misspelt_metric_is_caught() {
    let exported = exported();
    let names = metrics_in(
        "rate(palisade_lock_acquire_duration_seconds_bucket[5m]) + palisade_lock_acqiures_total",
        &exported,
    );
    assert_eq!(
        names,
        [
            "palisade_lock_acquire_duration_seconds",
            "palisade_lock_acqiures_total"
        ]
    );
    assert!(!exported.contains(&names[1]));
}
