//! Checks of the Grafana dashboards in `deploy/grafana`: every query names
//! only metrics the code exports, and every exported metric is shown.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;

/// Reads `deploy/grafana/<file>` and asserts that it has at least
/// `min_queries` queries, that every query names at least one Palisade
/// metric, that every name is in `exported`, and that every exported
/// metric is on the dashboard.
pub fn check_dashboard(file: &str, exported: &BTreeSet<String>, min_queries: usize) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/grafana")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let dashboard: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: not JSON: {e}"));
    let queries = queries(&dashboard);
    assert!(queries.len() >= min_queries, "{file}: {queries:?}");
    let mut shown = BTreeSet::new();
    for query in &queries {
        let names = metrics_in(query, exported);
        assert!(
            !names.is_empty(),
            "{file}: a query without a Palisade metric: {query}"
        );
        for name in names {
            assert!(
                exported.contains(&name),
                "{file}: `{name}` in `{query}` is not an exported metric ({exported:?})"
            );
            shown.insert(name);
        }
    }
    let missing: Vec<_> = exported.difference(&shown).collect();
    assert!(
        missing.is_empty(),
        "{file}: exported but not on the dashboard: {missing:?}"
    );
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
pub fn metrics_in(query: &str, exported: &BTreeSet<String>) -> Vec<String> {
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
