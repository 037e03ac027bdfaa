//! Fencing for the application's own database: the sequencer check inside
//! the application's SQL transaction, on PostgreSQL or MariaDB/MySQL.
//!
//! A service that keeps its data in its own tables asks: how does the
//! database refuse a write from a lock holder that paused past its lease?
//! [`fence`] answers in the transaction itself. As its first statements it
//! locks the lock's row in `palisade_marks` until commit, applies the
//! resource server's rule ([`palisade_core::marks::Marks::admit`], the same
//! function) and raises the marks, or rolls the transaction back with
//! [`Refused::Stale`] (in [`FenceError::Refused`]). Every statement after the fence runs while the
//! mark row is locked, so a stale holder's transaction can commit nothing.
//!
//! ```no_run
//! # async fn example(pool: sqlx::PgPool, sequencer: palisade_core::Sequencer) -> Result<(), Box<dyn std::error::Error>> {
//! palisade_fence_sql::migrate(&pool).await?; // once, at startup
//!
//! let tx = pool.begin().await?;
//! let mut tx = palisade_fence_sql::fence(tx, &sequencer).await?; // first statement
//! sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = 1")
//!     .execute(&mut *tx)
//!     .await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! The guide, with every statement the library issues and the isolation
//! notes, is `docs/own-database.md`.

mod dialect;
mod error;
mod fence;
mod row;

pub use dialect::{FenceDatabase, SCHEMA_VERSION, mysql, postgres};
pub use error::{FenceError, SchemaError};
pub use fence::{Fence, Fenced, begin_fenced, fence, migrate};
/// Core's one refusal type, inside [`FenceError::Refused`].
pub use palisade_core::Refused;
pub use row::RowUpdate;
#[doc(hidden)]
pub use row::ValidRowUpdate;
