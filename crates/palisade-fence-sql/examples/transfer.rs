//! A fenced money transfer in the application's own PostgreSQL.
//!
//! `cargo run -p palisade-fence-sql --example transfer -- postgres://user@127.0.0.1/db <generation>`
//!
//! In a real service the sequencer comes from the lock (`guard.sequencer()`);
//! here the generation is an argument, so running it with a lower
//! generation than a previous run shows the refusal.

use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_fence_sql::{FenceError, Refused};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .ok_or("usage: transfer <postgres url> <generation>")?;
    let generation: u64 = args.next().ok_or("missing generation")?.parse()?;
    let generation = Generation::new(generation).ok_or("generation 0 is never granted")?;

    let pool = sqlx::PgPool::connect(&url).await?;
    palisade_fence_sql::migrate(&pool).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS accounts (id TEXT PRIMARY KEY, balance BIGINT NOT NULL)",
    )
    .execute(&pool)
    .await?;
    sqlx::query("INSERT INTO accounts VALUES ('alice', 100), ('bob', 0) ON CONFLICT DO NOTHING")
        .execute(&pool)
        .await?;

    let sequencer = Sequencer::new(LockName::new("accounts")?, Mode::Exclusive, generation);
    // Begin and fence in one call: nothing can run before the fence.
    let mut tx = match palisade_fence_sql::begin_fenced(&pool, &sequencer).await {
        Ok(tx) => tx,
        Err(FenceError::Refused(Refused::Stale { marks, .. })) => {
            eprintln!("refused: a newer holder has written ({marks}); nothing was changed");
            return Ok(());
        }
        Err(other) => return Err(other.into()),
    };
    for (id, delta) in [("alice", -10i64), ("bob", 10)] {
        sqlx::query("UPDATE accounts SET balance = balance + $1 WHERE id = $2")
            .bind(delta)
            .bind(id)
            .execute(&mut *tx)
            .await?;
    }
    let marks = tx.commit().await?;
    println!("transferred under generation {generation}; marks now {marks}");
    Ok(())
}
