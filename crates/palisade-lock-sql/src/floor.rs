//! Raising a lock's generation floor, for a database restored from an old
//! backup: its `palisade_locks.generation` went backwards, so new holders
//! get generations the resource servers already refused.

use palisade_core::{FloorRaised, LockError, LockName, RaiseFloor, RaiseFloorError};
use sqlx::Row;

use crate::error::from_sqlx;
use crate::store::{Store, safe};
use crate::{SqlLockClient, SqlLockError};

impl SqlLockClient {
    /// Raises `name`'s generation to at least `above`, so the next grant is
    /// above it: a thin call of [`RaiseFloor::raise_floor`], with its
    /// refusal of an out-of-range mark as [`SqlLockError::InvalidConfig`].
    /// `before` is the lock's generation before (0 when its row did not
    /// exist), `after` is `max(before, above)`.
    pub async fn raise_floor(
        &self,
        name: &LockName,
        above: u64,
    ) -> Result<FloorRaised, SqlLockError> {
        RaiseFloor::raise_floor(self, name, above)
            .await
            .map_err(|error| match error {
                RaiseFloorError::Lock(error) => SqlLockError::Lock(error),
                refused => SqlLockError::InvalidConfig {
                    reason: refused.to_string(),
                },
            })
    }
}

/// The lock row is created if absent, then `generation =
/// GREATEST(generation, mark)`, in one transaction with the row locked.
/// Never lowers a generation; holders keep theirs.
impl RaiseFloor for SqlLockClient {
    async fn raise_floor(
        &self,
        name: &LockName,
        mark: u64,
    ) -> Result<FloorRaised, RaiseFloorError> {
        let target = i64::try_from(mark).map_err(|_| RaiseFloorError::OutOfRange {
            mark,
            limit: i64::MAX as u64,
        })?;
        let store = &self.inner.store;
        let backend = store.dialect.backend();
        let lock = name.clone();
        let (before, after) = store
            .detach("raise floor", move |store| async move {
                raise_once(&store, &lock, target)
                    .await
                    .map_err(|error| from_sqlx(backend, error))
            })
            .await?;
        let as_u64 = |generation: i64| {
            u64::try_from(generation).map_err(|_| LockError::Backend {
                backend,
                source: format!("negative generation {generation} in palisade_locks").into(),
            })
        };
        let raised = FloorRaised::new(as_u64(before)?, as_u64(after)?);
        tracing::info!(backend, lock = %name, mark, before = raised.before, after = raised.after, "generation floor raised");
        Ok(raised)
    }
}

/// One floor raise: the generations before and after it.
async fn raise_once(
    store: &Store,
    name: &LockName,
    target: i64,
) -> Result<(i64, i64), sqlx::Error> {
    let mut tx = store.pool.begin().await?;
    sqlx::query(safe(&store.sql.insert_lock))
        .bind(name.as_str())
        .execute(&mut *tx)
        .await?;
    let row = sqlx::query(safe(&store.sql.lock_row))
        .bind(name.as_str())
        .fetch_one(&mut *tx)
        .await?;
    let before: i64 = row.try_get(0)?;
    let delay_until: i64 = row.try_get(1)?;
    let after = before.max(target);
    if after != before {
        sqlx::query(safe(&store.sql.update_lock))
            .bind(after)
            .bind(delay_until)
            .bind(name.as_str())
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok((before, after))
}
