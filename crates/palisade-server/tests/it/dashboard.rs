//! The Grafana dashboard in deploy/grafana: every query names only metrics
//! the server exports, and every exported metric is on the dashboard.

use std::collections::BTreeSet;

use palisade_server::exported_metric_names;
use palisade_testkit::grafana::{check_dashboard, metrics_in};

fn exported() -> BTreeSet<String> {
    exported_metric_names().into_iter().collect()
}

#[test]
fn every_query_names_an_exported_metric_and_every_metric_is_shown() {
    check_dashboard("palisade-server.json", &exported(), 8);
}

#[test]
fn a_misspelt_metric_is_caught() {
    let exported = exported();
    let names = metrics_in(
        "rate(palisade_request_duration_seconds_bucket[5m]) + palisade_requests_acepted_total",
        &exported,
    );
    assert_eq!(
        names,
        [
            "palisade_request_duration_seconds",
            "palisade_requests_acepted_total"
        ]
    );
    assert!(!exported.contains(&names[1]));
}
