//! The stock table on PostgreSQL, through sqlx and `palisade_fence_sql`.

use palisade_core::Sequencer;
use palisade_fence_sql::{FenceError, Refused};
use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::DemoError;
use crate::storage::{Stale, WriteOutcome};

const CREATE: &str = "CREATE TABLE IF NOT EXISTS palisade_demo_stock (\
    item TEXT PRIMARY KEY, \
    stock BIGINT NOT NULL, \
    newest_generation BIGINT NOT NULL, \
    stale_writes BIGINT NOT NULL)";
const READ: &str = "SELECT stock FROM palisade_demo_stock WHERE item = $1";
/// Writes the stock. It also counts (never refuses) a write whose
/// generation is older than one already applied: the stale writes a plain
/// store lets through, as the demo's plain store counts them.
const WRITE: &str = "INSERT INTO palisade_demo_stock AS t \
    (item, stock, newest_generation, stale_writes) VALUES ($1, $2, $3, 0) \
    ON CONFLICT (item) DO UPDATE SET stock = EXCLUDED.stock, \
    newest_generation = GREATEST(t.newest_generation, EXCLUDED.newest_generation), \
    stale_writes = t.stale_writes + \
    CASE WHEN EXCLUDED.newest_generation < t.newest_generation THEN 1 ELSE 0 END";
const STALE_WRITES: &str = "SELECT stale_writes FROM palisade_demo_stock WHERE item = $1";

/// A connection pool to the stock table, fenced or not.
#[derive(Debug, Clone)]
pub(crate) struct SqlStock {
    pool: PgPool,
    fenced: bool,
}

impl SqlStock {
    /// A pool to `url`; connects on first use.
    pub(crate) fn connect(url: &str, fenced: bool) -> Result<SqlStock, DemoError> {
        let pool = PgPoolOptions::new().max_connections(2).connect_lazy(url)?;
        Ok(SqlStock { pool, fenced })
    }

    /// Creates the stock table and `palisade_fence_sql`'s marks table if missing.
    pub(crate) async fn prepare(&self) -> Result<(), DemoError> {
        palisade_fence_sql::migrate(&self.pool).await?;
        sqlx::query(CREATE).execute(&self.pool).await?;
        Ok(())
    }

    pub(crate) fn is_fenced(&self) -> bool {
        self.fenced
    }

    /// Reads the stock of `item`. Fenced and with a sequencer, in a fenced
    /// transaction (which raises the lock's mark, as a fenced read on the
    /// resource server does); otherwise a plain `SELECT`.
    pub(crate) async fn read(
        &self,
        item: &str,
        sequencer: Option<&Sequencer>,
    ) -> Result<Result<Option<i64>, Stale>, DemoError> {
        let select = || sqlx::query_scalar::<_, i64>(READ).bind(item);
        match (self.fenced, sequencer) {
            (true, Some(sequencer)) => {
                let mut tx = match self.begin_fenced(sequencer).await? {
                    Ok(tx) => tx,
                    Err(stale) => return Ok(Err(stale)),
                };
                let stock = select().fetch_optional(&mut *tx).await?;
                tx.commit().await?;
                Ok(Ok(stock))
            }
            _ => Ok(Ok(select().fetch_optional(&self.pool).await?)),
        }
    }

    /// Writes `value` as the stock of `item`. Fenced, in a fenced
    /// transaction that commits the write and the lock's raised mark
    /// together, or is refused before the write.
    pub(crate) async fn write(
        &self,
        item: &str,
        sequencer: Option<&Sequencer>,
        value: i64,
    ) -> Result<WriteOutcome, DemoError> {
        let generation = match sequencer {
            Some(sequencer) => i64::try_from(sequencer.generation().get())
                .map_err(|_| DemoError::story("a generation above i64::MAX"))?,
            None => 0,
        };
        let write = || sqlx::query(WRITE).bind(item).bind(value).bind(generation);
        if !self.fenced {
            write().execute(&self.pool).await?;
            return Ok(WriteOutcome::Accepted { mark: None });
        }
        let sequencer = sequencer
            .ok_or_else(|| DemoError::story("a fenced write to the stock needs a sequencer"))?;
        let mut tx = match self.begin_fenced(sequencer).await? {
            Ok(tx) => tx,
            Err(Stale { presented, mark }) => {
                return Ok(WriteOutcome::Refused { presented, mark });
            }
        };
        write().execute(&mut *tx).await?;
        let marks = tx.commit().await?;
        Ok(WriteOutcome::Accepted {
            mark: Some(marks.exclusive),
        })
    }

    /// How many writes older than an applied one the row took.
    pub(crate) async fn stale_writes(&self, item: &str) -> Result<u64, DemoError> {
        let count: Option<i64> = sqlx::query_scalar(STALE_WRITES)
            .bind(item)
            .fetch_optional(&self.pool)
            .await?;
        Ok(count.map_or(0, i64::unsigned_abs))
    }

    /// A transaction fenced by `sequencer`, or the refusal.
    async fn begin_fenced(
        &self,
        sequencer: &Sequencer,
    ) -> Result<Result<palisade_fence_sql::Fenced<'static, sqlx::Postgres>, Stale>, DemoError> {
        match palisade_fence_sql::begin_fenced(&self.pool, sequencer).await {
            Ok(tx) => Ok(Ok(tx)),
            Err(FenceError::Refused(Refused::Stale {
                presented, marks, ..
            })) => Ok(Err(Stale {
                presented: presented.get(),
                mark: marks.exclusive,
            })),
            Err(other) => Err(other.into()),
        }
    }
}
