//! Raising a lock's generation floor, for a database restored from an old
//! backup: its `palisade_locks.generation` went backwards, so new holders
//! get generations the resource servers already refused.

use palisade_core::{LockError, LockName};
use sqlx::Row;

use crate::error::from_sqlx;
use crate::{SqlLockClient, SqlLockError};

/// What [`SqlLockClient::raise_floor`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloorRaised {
    /// The lock's generation before (0 when its row did not exist).
    pub before: u64,
    /// The lock's generation after: `max(before, above)`. The next grant
    /// is above it.
    pub after: u64,
}

impl SqlLockClient {
    /// Raises `name`'s generation to at least `above`, so the next grant is
    /// above it: the lock row is created if absent, then
    /// `generation = GREATEST(generation, above)`, in one transaction with
    /// the row locked. Never lowers a generation; holders keep theirs.
    pub async fn raise_floor(
        &self,
        name: &LockName,
        above: u64,
    ) -> Result<FloorRaised, SqlLockError> {
        let target = i64::try_from(above).map_err(|_| SqlLockError::InvalidConfig {
            reason: format!(
                "floor {above} is above the largest generation the lock table holds ({})",
                i64::MAX
            ),
        })?;
        let store = &self.inner.store;
        let backend = store.dialect.backend();
        let raise = async {
            let mut tx = store.pool.begin().await?;
            sqlx::query(sqlx::AssertSqlSafe(store.sql.insert_lock.as_str()))
                .bind(name.as_str())
                .execute(&mut *tx)
                .await?;
            let row = sqlx::query(sqlx::AssertSqlSafe(store.sql.lock_row.as_str()))
                .bind(name.as_str())
                .fetch_one(&mut *tx)
                .await?;
            let before: i64 = row.try_get(0)?;
            let delay_until: i64 = row.try_get(1)?;
            let after = before.max(target);
            if after != before {
                sqlx::query(sqlx::AssertSqlSafe(store.sql.update_lock.as_str()))
                    .bind(after)
                    .bind(delay_until)
                    .bind(name.as_str())
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok::<_, sqlx::Error>((before, after))
        };
        let (before, after) = store
            .bounded("raise floor", async {
                raise.await.map_err(|error| from_sqlx(backend, error))
            })
            .await
            .map_err(SqlLockError::Lock)?;
        let as_u64 = |generation: i64| {
            u64::try_from(generation).map_err(|_| {
                SqlLockError::Lock(LockError::Backend {
                    backend,
                    source: format!("negative generation {generation} in palisade_locks").into(),
                })
            })
        };
        Ok(FloorRaised {
            before: as_u64(before)?,
            after: as_u64(after)?,
        })
    }
}
