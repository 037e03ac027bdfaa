//! Scenario 18: the resource server keeps its fence in PostgreSQL
//! (`--store postgres://`), on a primary with a synchronous standby
//! (streaming on loopback). Mid-stream, with a holder paused past its
//! lease and a newer holder's write acknowledged, the primary's machine is
//! lost (SIGKILL to every process of the primary, while the contenders
//! write), the standby is promoted and the resource server restarts over
//! it. The contenders are stopped meanwhile, so the paused holder's late
//! write is the first the promoted standby judges: it is refused only if
//! the newer generation's mark survived the failover. A second
//! paused-holder round runs on the promoted standby alone.
//!
//! What makes it safe: the primary acknowledges a commit only once the
//! standby has it on disk (`synchronous_commit` on, the standby named in
//! `synchronous_standby_names`), so every mark and write the server
//! acknowledged is on the standby when it is promoted.
//!
//! Invariants asserted: I-MONO and I-STALE (every late write refused),
//! I-DUR (no acknowledged write lost across the failover), I-ONCE,
//! I-TOKEN, I-LIVE (a grant and a write within TTL + 30 s of the last
//! heal); the time from the kill to the first grant and write on the
//! promoted standby is in the table's note.

use std::time::{Duration, Instant};

use palisade_testkit::redis::RedisServer;
use palisade_testkit::sql::SqlServer;
use palisade_testkit::sql::pair::PostgresPair;
use palisade_tests::fault::{
    ClientConfig, ClientLine, FaultRun, Invariant, Report, ResourceServerOptions,
    ResourceServerProcess, Scenario, stop_clients,
};

use crate::story::{LateWrites, late_write};
use crate::{EXIT, STEP, TTL, live_within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_primary_lost_and_standby_promoted_keeps_the_fence() -> anyhow::Result<()> {
    let (report, late) = primary_lost(
        "s18",
        Scenario::new(
            "18 PostgreSQL primary lost, synchronous standby promoted",
            "redis lock, postgres store",
        ),
        FailoverTo::PromotedStandby,
    )
    .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    late.assert_fenced(2);
    assert!(report.fenced_writes >= late.fenced, "{report}");
    assert_eq!(report.faults, 2);
    Ok(())
}

/// Where the resource server goes after the primary is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailoverTo {
    /// The synchronous standby, promoted: the scenario.
    PromotedStandby,
    /// A fresh, empty PostgreSQL: a standby that had nothing, the mutation
    /// check (the checker must report the late write).
    EmptyDatabase,
}

/// Scenario 18's story; returns the checker's report and what became of
/// the two late writes.
pub(crate) async fn primary_lost(
    tag: &str,
    scenario: Scenario,
    failover_to: FailoverTo,
) -> anyhow::Result<(Report, LateWrites)> {
    let binaries = palisade_tests::fault_binaries!();
    let redis = RedisServer::start();
    let mut pair = PostgresPair::start();
    let mut run = FaultRun::new(tag)?;
    let mut server = ResourceServerProcess::start(
        &binaries,
        &run,
        ResourceServerOptions::default().store(pair.primary().url()),
    )?;
    let base = ClientConfig::redis(&redis.url(), &server.base_url())
        .lock(format!("faults/{tag}"))
        .ttl(TTL);
    let mut holder = run.spawn_client(&binaries, "a", &base.clone().gate().writes_per_hold(2))?;
    let mut others = Vec::new();
    for index in 0..2 {
        let config = base.clone().writes_per_hold(3);
        others.push(run.spawn_client(&binaries, &format!("c{index}"), &config)?);
    }

    let mut late = LateWrites::default();
    let mut failover = None;
    let mut empty_database = None;
    for round in 1..=2 {
        // The holder has its sequencer and its write ready; it stops.
        let held = holder.wait_holding(STEP).await?;
        holder.pause()?;
        let fault = if round == 1 {
            format!(
                "round 1: SIGSTOP holder a (generation {held}); SIGKILL the PostgreSQL primary, \
                 promote the standby, restart the resource server over it"
            )
        } else {
            format!("round {round}: SIGSTOP holder a (generation {held}), on the promoted standby")
        };
        run.inject(&fault)?;

        // Its lease lapses; a contender takes the lock and its write is
        // acknowledged: the newer mark is committed.
        let newer = run
            .wait_any(STEP, |client, line| match line {
                ClientLine::Wrote { generation, .. } if client != "a" && *generation > held => {
                    Some(*generation)
                }
                _ => None,
            })
            .await?;

        if round == 1 {
            // Mid-stream: the contenders are writing when the primary goes.
            let killed_at = Instant::now();
            pair.kill_primary()?;
            // They stop now, so the first write the promoted standby judges
            // is the paused holder's, with nothing newer written there
            // since: it is refused only if the newer mark survived.
            for other in &others {
                other.pause()?;
            }
            let promotion = pair.promote_standby()?;
            match failover_to {
                FailoverTo::PromotedStandby => server.restart_on_store(pair.standby().url())?,
                FailoverTo::EmptyDatabase => {
                    let empty = SqlServer::postgres();
                    server.restart_on_store(empty.url())?;
                    empty_database = Some(empty);
                }
            }
            holder.resume()?;
            late_write(&mut holder, held, newer, &mut late).await?;
            let judged = killed_at.elapsed();
            for other in &others {
                other.resume()?;
            }
            run.wait_recovered(STEP).await?;
            failover = Some((promotion, judged, killed_at.elapsed()));
        } else {
            // The holder wakes up and its write goes out, late.
            holder.resume()?;
            late_write(&mut holder, held, newer, &mut late).await?;
        }
        run.heal(&fault)?;
    }

    holder.stop_and_wait(EXIT).await?;
    run.wait_recovered(STEP).await?;
    stop_clients(others.iter_mut(), EXIT).await?;

    let (promotion, judged, recovered) = failover.expect("round 1 fails over");
    let report = run
        .verdict(
            &server.base_url(),
            &live_within(TTL + Duration::from_secs(30)),
            &scenario.note(format!(
                "from kill -9 of the primary: promotion {:.1} s, late write judged by the \
                 promoted standby {:.1} s, a fresh grant and write {:.1} s",
                promotion.as_secs_f64(),
                judged.as_secs_f64(),
                recovered.as_secs_f64()
            )),
        )
        .await?;
    drop(empty_database);
    Ok((report, late))
}
