//! Scenario 14: a SQL backend (PostgreSQL) lock holder's process is stopped
//! (SIGSTOP) past its lease with a write in hand: its keep-alive stops with
//! it, the database's clock ends its session row, a contender is granted a
//! newer generation and writes; the holder resumes and sends its write.
//!
//! Invariants asserted: I-MONO and I-STALE (every late write refused),
//! I-DUR, I-ONCE, I-TOKEN (the generation column only grows), I-LIVE (after
//! the last resume a client acquires and writes within TTL + 20 s). The
//! mutation check runs the same story with fencing off.

use palisade_testkit::sql::SqlServer;
use palisade_tests::fault::{ClientConfig, Scenario};

use crate::story::paused_holder_is_fenced;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_holder_paused_past_its_lease_is_fenced() -> anyhow::Result<()> {
    let postgres = SqlServer::postgres();
    paused_holder_is_fenced(
        "s14",
        Scenario::new("14 SQL holder paused past its lease", "sql (PostgreSQL)"),
        |server| ClientConfig::sql(&postgres.url(), server),
    )
    .await
}
