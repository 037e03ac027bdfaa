//! The end of the fenced flash sale, shared by scenarios 22 and 41: buyer
//! `a`, stopped holding its sale while the fault ran, resumes and sends
//! its late sale first; then everyone sells until the stock is gone, and
//! the checker judges the sales against what Redis holds.

use palisade_tests::fault::{
    CheckOptions, ClientLine, ClientProcess, FaultRun, FinalState, Invariant, Report, Scenario,
};
use palisade_tests::history::Phase;

use crate::{EXIT, STEP};

/// What the sale came to.
#[derive(Debug)]
pub(crate) struct Sale {
    pub(crate) report: Report,
    /// What became of `a`'s late sale: `stale`, `accepted`, `other` or
    /// `unknown`.
    pub(crate) late: String,
    /// Sales acknowledged to the buyers.
    pub(crate) acknowledged: u64,
    /// Sales recorded in Redis: the acknowledged ones and any sent while
    /// Redis went away that it applied without its answer arriving.
    pub(crate) recorded: u64,
    /// Sales beyond the stock, acknowledged or recorded (a Redis that
    /// forgot its data may record fewer than it acknowledged).
    pub(crate) oversold: u64,
    /// The stock left in Redis.
    pub(crate) left: u64,
    /// The stock at the start.
    pub(crate) stock: u64,
}

impl Sale {
    /// The fence held: the checker's invariants, `a` refused, every item
    /// sold exactly once. A sale whose answer was lost when Redis died may
    /// have been applied (the checker reads it back as an in-doubt write):
    /// it is a sale, recorded once, just not acknowledged.
    pub(crate) fn assert_sold_out_safely(&self) {
        let report = &self.report;
        report.assert_safe();
        report.assert_holds(&[Invariant::Live]);
        assert_eq!(self.late, "stale", "a's late sale is refused: {self:?}");
        assert_eq!(self.oversold, 0, "{self:?}");
        assert_eq!(
            (self.recorded, self.left),
            (self.stock, 0),
            "every item sold once: {self:?}"
        );
        assert!(
            self.acknowledged <= self.recorded
                && self.recorded - self.acknowledged <= report.in_doubt_visible as u64,
            "every recorded sale was acknowledged or is an in-doubt write read back: {self:?}"
        );
    }

    /// The regression row: the newer mark was lost (`why`), `a`'s late
    /// sale landed, and the checker reports it and the sales lost
    /// (`lost`).
    pub(crate) fn assert_caught(&self, why: &str, lost: &str) {
        let report = &self.report;
        assert_eq!(
            self.late, "accepted",
            "{why}, a's late sale lands: {self:?}"
        );
        assert!(
            report.count(Invariant::Stale) >= 1,
            "the checker reports the stale sale: {report}"
        );
        assert!(
            report.lost_writes() >= 1,
            "the checker reports {lost}: {report}"
        );
    }
}

/// How the row is named and judged.
pub(crate) struct Row<'a> {
    pub(crate) name: &'a str,
    pub(crate) backend: &'a str,
    pub(crate) options: CheckOptions,
    pub(crate) stock: u64,
}

/// Resumes `a` (held generation `held`) and the `others`, heals `fault`,
/// waits for every buyer to sell out and exit, reads each sale and the
/// stock through `get` (a key of the sale's hash tag: `stock`,
/// `sale/...`), and judges the run.
pub(crate) async fn finish(
    run: &mut FaultRun,
    mut a: ClientProcess,
    mut others: Vec<ClientProcess>,
    held: u64,
    fault: &str,
    get: impl Fn(&str) -> std::io::Result<String>,
    row: Row<'_>,
) -> anyhow::Result<Sale> {
    a.resume()?;
    a.go()?;
    let late = a
        .wait_for(STEP, |line| match line {
            ClientLine::Wrote { generation, .. } if *generation == held => Some("accepted"),
            ClientLine::Refused {
                generation, detail, ..
            } if *generation == held => Some(if detail == "stale" { "stale" } else { "other" }),
            ClientLine::GaveUp { generation, .. } if *generation == held => Some("unknown"),
            _ => None,
        })
        .await?
        .to_owned();
    for other in &others {
        other.resume()?;
    }
    run.heal(fault)?;
    // Everyone sells until the stock (or what Redis kept of it) runs out.
    for buyer in others.iter_mut().chain([&mut a]) {
        let status = buyer.wait_exit(EXIT).await?;
        anyhow::ensure!(
            status.success(),
            "buyer {} exited with {status}",
            buyer.id()
        );
    }

    let events = run.events()?;
    let mut final_state = FinalState::new();
    let mut acknowledged: u64 = 0;
    for event in &events {
        let Some(key) = &event.key else { continue };
        if event.phase == Phase::Ok {
            acknowledged += 1;
        }
        let value = get(key)?;
        final_state.insert(
            (event.lock.clone(), key.clone()),
            Some(value).filter(|value| !value.is_empty()),
        );
    }
    let left: u64 = get("stock")?.parse().unwrap_or(0);
    let recorded = final_state.values().filter(|value| value.is_some()).count() as u64;
    let oversold = acknowledged.max(recorded).saturating_sub(row.stock);
    let report = run.judge(
        &events,
        &final_state,
        &row.options,
        &Scenario::new(row.name, row.backend).note(format!(
            "late sale {late}; {acknowledged} sales acknowledged and {recorded} recorded of {}, {oversold} oversold, {left} left",
            row.stock
        )),
    )?;
    Ok(Sale {
        report,
        late,
        acknowledged,
        recorded,
        oversold,
        left,
        stock: row.stock,
    })
}
