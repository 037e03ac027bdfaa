//! The lock side's Grafana dashboard in deploy/grafana: every query names
//! only metrics [`LockMetrics`] exports, and every one of them is shown.

use std::collections::BTreeSet;
use std::path::PathBuf;

use palisade_metrics::LockMetrics;
use serde_json::Value;

fn dashboard() -> Value {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/palisade-locks.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: not JSON: {e}"))
}

/// Every `expr` and templating `query` in the dashboard.
fn queries(dashboard: &Value) -> Vec<String> {
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            queries.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if variable["type"] == "query" {
            queries.push(variable["query"].as_str().expect("query").to_owned());
        }
    }
    queries
}

/// The metric names in a PromQL query: `palisade_...` tokens, with a
/// histogram's `_bucket`/`_sum`/`_count` suffix taken off when the base is
/// the histogram's name.
fn metrics_in(query: &str, exported: &BTreeSet<String>) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = query;
    while let Some(start) = rest.find("palisade_") {
        let after = &rest[start..];
        let end = after
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(after.len());
        let name = &after[..end];
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix).filter(|b| exported.contains(*b)))
            .unwrap_or(name);
        names.push(base.to_owned());
        rest = &after[end..];
    }
    names
}

#[test]
fn every_query_names_an_exported_metric_and_every_metric_is_shown() {
    let exported: BTreeSet<String> = LockMetrics::exported_names().into_iter().collect();
    let dashboard = dashboard();
    let queries = queries(&dashboard);
    assert!(queries.len() >= 9, "{queries:?}");
    let mut shown = BTreeSet::new();
    for query in &queries {
        let names = metrics_in(query, &exported);
        assert!(
            !names.is_empty(),
            "a query without a Palisade metric: {query}"
        );
        for name in names {
            assert!(
                exported.contains(&name),
                "`{name}` in `{query}` is not a metric LockMetrics exports ({exported:?})"
            );
            shown.insert(name);
        }
    }
    let missing: Vec<_> = exported.difference(&shown).collect();
    assert!(
        missing.is_empty(),
        "exported but not on the dashboard: {missing:?}"
    );
}

#[test]
fn a_misspelt_metric_is_caught() {
    let exported: BTreeSet<String> = LockMetrics::exported_names().into_iter().collect();
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
