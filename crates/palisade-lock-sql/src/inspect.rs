//! Looking at locks ([`Inspect`]) and ending a hold from outside
//! ([`ForceRelease`]) in the lock tables, for operators.
//!
//! Holder rows can outlive their session until the next grant cleans them
//! up; inspection shows only holders whose session the database's clock
//! says is alive, and counts a dead holder's lock-delay as a grant would
//! (`decide.rs`). Waiters are shown in queue order, live sessions only.

use std::time::Duration;

use palisade_core::{
    ForceRelease, Generation, Holder, Inspect, LockError, LockInfo, LockName, Waiter,
    name_has_prefix,
};
use sqlx::Row as _;
use sqlx::any::AnyRow;

use crate::SqlLockClient;
use crate::error::from_sqlx;
use crate::store::{Store, parse_mode, safe};

impl Inspect for SqlLockClient {
    async fn inspect(&self, name: &LockName) -> Result<LockInfo, LockError> {
        let store = &self.inner.store;
        store
            .bounded("inspect", async {
                inspect_once(store, name)
                    .await
                    .map_err(|e| from_sqlx(store.dialect.backend(), e))
            })
            .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockInfo>, LockError> {
        let store = &self.inner.store;
        let rows = store
            .bounded("list", async {
                sqlx::query(safe(&store.sql.active_names))
                    .fetch_all(&store.pool)
                    .await
                    .map_err(|e| from_sqlx(store.dialect.backend(), e))
            })
            .await?;
        let mut names: Vec<LockName> = rows
            .iter()
            .filter_map(name_of)
            .filter(|name| name_has_prefix(name, prefix))
            .collect();
        names.sort();
        names.dedup();
        self.inspect_active(names).await
    }
}

impl ForceRelease for SqlLockClient {
    /// Deletes the holder row with `generation`, with the lock row locked
    /// as every grant does, and wakes the waiters. The holder's session is
    /// left alone (its other locks stay held) and no lock-delay starts.
    async fn force_release(
        &self,
        name: &LockName,
        generation: Generation,
    ) -> Result<bool, LockError> {
        let store = &self.inner.store;
        let Ok(generation) = i64::try_from(generation.get()) else {
            return Ok(false);
        };
        let lock = name.clone();
        let deleted = store
            .detach("force release", move |store| async move {
                force_once(&store, &lock, generation)
                    .await
                    .map_err(|e| from_sqlx(store.dialect.backend(), e))
            })
            .await?;
        store.wake_local(name.as_str());
        tracing::warn!(backend = store.dialect.backend(), lock = %name, generation, released = deleted, "forced release");
        Ok(deleted)
    }
}

async fn force_once(store: &Store, name: &LockName, generation: i64) -> Result<bool, sqlx::Error> {
    let mut tx = store.pool.begin().await?;
    sqlx::query(safe(&store.sql.lock_row))
        .bind(name.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    let deleted = sqlx::query(safe(&store.sql.force_release))
        .bind(name.as_str())
        .bind(generation)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if let Some(notify) = &store.sql.notify {
        sqlx::query(safe(notify))
            .bind(name.as_str())
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(deleted > 0)
}

async fn inspect_once(store: &Store, name: &LockName) -> Result<LockInfo, sqlx::Error> {
    let mut info = LockInfo::free(name.clone());
    let lock = sqlx::query(safe(&store.sql.inspect_lock))
        .bind(name.as_str())
        .fetch_optional(&store.pool)
        .await?;
    let mut delay_until_us = 0_i64;
    let mut now_us = 0_i64;
    if let Some(row) = lock {
        delay_until_us = row.try_get(0)?;
        now_us = row.try_get(1)?;
    }
    let holders = sqlx::query(safe(&store.sql.inspect_holders))
        .bind(name.as_str())
        .fetch_all(&store.pool)
        .await?;
    for row in holders {
        let mode = parse_mode(&row.try_get::<String, _>(0)?);
        let generation: i64 = row.try_get(1)?;
        let session: String = row.try_get(2)?;
        let expires_at_us: Option<i64> = row.try_get(3)?;
        let lock_delay_us: Option<i64> = row.try_get(4)?;
        let ended = row.try_get::<Option<i64>, _>(5)?.unwrap_or(1) != 0;
        now_us = row.try_get(6)?;
        let alive = !ended && expires_at_us.is_some_and(|at| at > now_us);
        if !alive {
            // A lease that ended without a release: its lock-delay runs
            // from its expiry (a clean close records a delay of 0).
            if let (Some(at), Some(delay)) = (expires_at_us, lock_delay_us) {
                delay_until_us = delay_until_us.max(at.saturating_add(delay));
            }
            continue;
        }
        let Some(generation) = u64::try_from(generation).ok().and_then(Generation::new) else {
            continue;
        };
        let left = expires_at_us.map(|at| micros(at - now_us));
        info.holders.push(
            Holder::new(mode, generation)
                .with_lease_left(left)
                .with_lease(Some(session)),
        );
    }
    if delay_until_us > now_us {
        info.lock_delay_left = Some(micros(delay_until_us - now_us));
    }
    let waiters = sqlx::query(safe(&store.sql.waiters))
        .bind(name.as_str())
        .fetch_all(&store.pool)
        .await?;
    let mut queue = Vec::with_capacity(waiters.len());
    for row in waiters {
        let session: String = row.try_get(1)?;
        let mode = parse_mode(&row.try_get::<String, _>(2)?);
        let expires_at_us: Option<i64> = row.try_get(3)?;
        let ended = row.try_get::<Option<i64>, _>(4)?.unwrap_or(1) != 0;
        if !ended && expires_at_us.is_some_and(|at| at > now_us) {
            queue.push(Waiter::new(mode, Some(session), None));
        }
    }
    info.waiters = Some(queue);
    Ok(info)
}

/// A name column: text on PostgreSQL, bytes on MariaDB.
fn name_of(row: &AnyRow) -> Option<LockName> {
    let text = match row.try_get::<String, _>(0) {
        Ok(text) => text,
        Err(_) => String::from_utf8(row.try_get::<Vec<u8>, _>(0).ok()?).ok()?,
    };
    LockName::new(text).ok()
}

fn micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}
