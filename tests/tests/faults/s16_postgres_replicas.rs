//! Scenario 16: three resource servers over one PostgreSQL (`--store
//! postgres://...`), the clients' writes spread over them. A SQL-backend
//! lock holder writing through replica 0 is stopped (SIGSTOP) past its
//! lease with a write in hand; a contender is granted a newer generation
//! and writes through another replica; the holder resumes and sends its
//! late write to replica 0. Then one replica is killed (SIGKILL) while
//! clients write through it, and restarted.
//!
//! Invariants asserted: I-MONO and I-STALE (every late write refused by
//! whichever replica gets it: the marks live in the database, not in a
//! replica), I-DUR (nothing acknowledged by any replica is lost, the
//! killed one included), I-ONCE, I-TOKEN, I-LIVE. The final state is read
//! through a replica the holder never wrote to.

use palisade_testkit::sql::SqlServer;
use palisade_tests::fault::{ClientConfig, Scenario};

use crate::story::replicas_fence_a_paused_holder;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_replicas_fence_a_paused_holder_and_lose_nothing() -> anyhow::Result<()> {
    let postgres = SqlServer::postgres();
    replicas_fence_a_paused_holder(
        "s16",
        &postgres.url(),
        Scenario::new(
            "16 three replicas over one PostgreSQL: paused holder, replica kill -9",
            "sql (PostgreSQL), PostgreSQL engine",
        ),
        |server| ClientConfig::sql(&postgres.url(), server),
    )
    .await
}
