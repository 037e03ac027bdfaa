//! The suite's table: one markdown row per scenario run, appended to the
//! file named by `PALISADE_FAULT_TABLE` (set by `scripts/faults.sh`).

use std::io::Write as _;
use std::time::Duration;

use crate::checker::{Invariant, Report};

use super::Scenario;

/// The environment variable naming the table file rows are appended to.
pub const TABLE_ENV: &str = "PALISADE_FAULT_TABLE";

/// The table's header (two lines, markdown).
pub const TABLE_HEADER: &str = "| scenario | backend | operations | faults injected | stale writes accepted | acknowledged writes lost | recovery | notes |\n|---|---|---:|---:|---:|---:|---:|---|";

/// One row of the suite's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRow {
    /// The scenario, number first (`1 Redis holder paused past its TTL`).
    pub scenario: String,
    /// `redis`, `etcd`, `etcd (3 members)`, ...
    pub backend: String,
    /// Client operations invoked.
    pub operations: usize,
    /// Faults injected.
    pub faults: usize,
    /// Stale writes accepted (I-MONO and I-STALE violations): must be 0.
    pub stale_accepted: usize,
    /// Acknowledged writes lost (I-DUR violations): must be 0.
    pub lost_writes: usize,
    /// From the last heal to the first acquire + write after it.
    pub recovery: Option<Duration>,
    /// Writes fenced, I-TOKEN violations, and the scenario's own note.
    pub notes: String,
}

impl TableRow {
    /// The row for `scenario` judged by `report`.
    pub fn from_report(scenario: &Scenario, report: &Report) -> Self {
        let mut notes = vec![format!(
            "{} writes accepted, {} fenced",
            report.accepted_writes, report.fenced_writes
        )];
        let token_violations = report.count(Invariant::Token);
        if token_violations > 0 {
            notes.push(format!("I-TOKEN violated {token_violations}x"));
        }
        let once_violations = report.count(Invariant::Once);
        if once_violations > 0 {
            notes.push(format!("I-ONCE violated {once_violations}x"));
        }
        if report.in_doubt_writes > 0 || scenario.note_in_doubt {
            notes.push(format!(
                "{} writes left in doubt, judged: {} visible afterwards, {} stale when sent",
                report.in_doubt_writes, report.in_doubt_visible, report.in_doubt_stale
            ));
        }
        if !scenario.untimed_clients.is_empty() {
            notes.push(format!(
                "clock-faked {} judged on I-MONO, I-DUR, I-ONCE only",
                scenario.untimed_clients.join(", ")
            ));
        }
        if let Some(note) = &scenario.note {
            notes.push(note.clone());
        }
        TableRow {
            scenario: scenario.name.clone(),
            backend: scenario.backend.clone(),
            operations: report.operations,
            faults: report.faults,
            stale_accepted: report.stale_accepted(),
            lost_writes: report.lost_writes(),
            recovery: report.recovery,
            notes: notes.join("; "),
        }
    }

    /// The row as one markdown table line.
    pub fn markdown(&self) -> String {
        let clean = |text: &str| text.replace('|', "/").replace('\n', " ");
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            clean(&self.scenario),
            clean(&self.backend),
            self.operations,
            self.faults,
            self.stale_accepted,
            self.lost_writes,
            self.recovery
                .map_or("-".to_owned(), |d| format!("{:.2} s", d.as_secs_f64())),
            clean(&self.notes)
        )
    }
}

/// Appends `row` to the table file named by [`TABLE_ENV`], if it is set.
/// One `write` of one line with `O_APPEND`, so rows from tests running in
/// parallel do not interleave.
pub fn append_row(row: &TableRow) -> std::io::Result<()> {
    let Some(path) = std::env::var_os(TABLE_ENV) else {
        return Ok(());
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(format!("{}\n", row.markdown()).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::Violation;

    #[test]
    fn a_row_reports_the_figures_of_the_table() {
        let report = Report {
            operations: 120,
            faults: 2,
            accepted_writes: 40,
            fenced_writes: 3,
            grants: 12,
            recovery: Some(Duration::from_millis(2346)),
            violations: vec![Violation {
                invariant: Invariant::Token,
                message: "by design".into(),
            }],
            ..Report::default()
        };
        let scenario = Scenario::new("3 Redis restarted | empty", "redis").note("counter scheme");
        let row = TableRow::from_report(&scenario, &report);
        assert_eq!(
            row.markdown(),
            "| 3 Redis restarted / empty | redis | 120 | 2 | 0 | 0 | 2.35 s | 40 writes accepted, 3 fenced; I-TOKEN violated 1x; counter scheme |"
        );
        assert_eq!(TABLE_HEADER.lines().count(), 2);
        assert_eq!(
            TABLE_HEADER.lines().next().unwrap().matches('|').count(),
            row.markdown().matches('|').count()
        );
    }

    #[test]
    fn a_row_says_how_many_writes_in_doubt_were_judged() {
        let report = Report {
            operations: 50,
            accepted_writes: 20,
            in_doubt_writes: 7,
            in_doubt_visible: 3,
            in_doubt_stale: 1,
            ..Report::default()
        };
        let row = TableRow::from_report(&Scenario::new("8 lossy links", "etcd"), &report);
        assert!(
            row.notes.contains(
                "7 writes left in doubt, judged: 3 visible afterwards, 1 stale when sent"
            ),
            "{}",
            row.notes
        );
        // None in doubt: no note, unless the scenario asks for one.
        let row = TableRow::from_report(&Scenario::new("1", "redis"), &Report::default());
        assert!(!row.notes.contains("in doubt"), "{}", row.notes);
        let scenario = Scenario::new("8 lossy links", "redis").note_in_doubt();
        let row = TableRow::from_report(&scenario, &Report::default());
        assert!(
            row.notes.contains("0 writes left in doubt, judged"),
            "{}",
            row.notes
        );
    }
}
