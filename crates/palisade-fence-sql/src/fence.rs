//! The fence: the sequencer check and mark raise as the first statements of
//! the application's own transaction, and the fenced transaction it yields.

use std::ops::{Deref, DerefMut};

use palisade_core::marks::Marks;
use palisade_core::{Generation, LockName, Mode, Refused, Sequencer, Verifier};
use sqlx::{Pool, Transaction};

use crate::dialect::{FenceDatabase, RowOutcome};
use crate::{FenceError, RowUpdate, SchemaError};

/// Creates (or checks) the `palisade_marks` table and records the schema
/// version. Run once at startup; running it again, or from several
/// processes at once, is harmless. Refuses a database whose schema is newer
/// than this library ([`SchemaError::TooNew`]).
pub async fn migrate<DB: FenceDatabase>(pool: &Pool<DB>) -> Result<(), SchemaError> {
    DB::migrate(pool).await
}

/// Fences `tx` for writes under the exclusive `sequencer`: see
/// [`Fence::write`]. The transaction must be fresh: the fence must be its
/// first statement.
pub async fn fence<'c, DB: FenceDatabase>(
    tx: Transaction<'c, DB>,
    sequencer: &Sequencer,
) -> Result<Fenced<'c, DB>, FenceError> {
    Fence::new().write(tx, sequencer).await
}

/// Begins a transaction on `pool` and fences it for writes at once, so no
/// statement can come before the fence. The recommended entry point.
pub async fn begin_fenced<'c, DB: FenceDatabase>(
    pool: &Pool<DB>,
    sequencer: &Sequencer,
) -> Result<Fenced<'c, DB>, FenceError> {
    Fence::new().begin_write(pool, sequencer).await
}

/// Fence settings: today, optional signature verification.
#[derive(Debug, Clone, Default)]
pub struct Fence {
    verifier: Option<Verifier>,
}

impl Fence {
    /// A fence that accepts unsigned sequencers.
    pub fn new() -> Self {
        Fence::default()
    }

    /// Requires every sequencer to carry a valid signature from `verifier`'s
    /// keys (and issuers), checked before anything is sent to the database,
    /// with the resource server's refusals ([`FenceError::Signature`]).
    pub fn with_verifier(mut self, verifier: Verifier) -> Self {
        self.verifier = Some(verifier);
        self
    }

    /// Begins a transaction on `pool` and fences it for writes.
    pub async fn begin_write<'c, DB: FenceDatabase>(
        &self,
        pool: &Pool<DB>,
        sequencer: &Sequencer,
    ) -> Result<Fenced<'c, DB>, FenceError> {
        // Check what needs no database before taking a connection.
        self.precheck(sequencer, true)?;
        let tx = pool.begin().await?;
        self.write(tx, sequencer).await
    }

    /// Fences `tx` for writes: `sequencer` must be exclusive
    /// ([`Refused::SharedOnWrite`] otherwise). In `tx`, locks the lock's
    /// marks row until commit, applies the fencing rule of
    /// [`Marks::admit`] to the committed marks and raises them, or rolls
    /// `tx` back and refuses with [`Refused::Stale`].
    ///
    /// Must be the first statement of `tx`: a read taken before it may come
    /// from a snapshot older than the previous holder's commit (MariaDB and
    /// MySQL at REPEATABLE READ take the snapshot at the first read).
    pub async fn write<'c, DB: FenceDatabase>(
        &self,
        tx: Transaction<'c, DB>,
        sequencer: &Sequencer,
    ) -> Result<Fenced<'c, DB>, FenceError> {
        self.run(tx, sequencer, true).await
    }

    /// Fences `tx` for reads: shared or exclusive sequencers. A shared one
    /// raises `H_shared`, which fences older writers out, exactly as a
    /// fenced read on the resource server does.
    pub async fn read<'c, DB: FenceDatabase>(
        &self,
        tx: Transaction<'c, DB>,
        sequencer: &Sequencer,
    ) -> Result<Fenced<'c, DB>, FenceError> {
        self.run(tx, sequencer, false).await
    }

    fn precheck(&self, sequencer: &Sequencer, write: bool) -> Result<i64, FenceError> {
        let lock = sequencer.lock();
        if let Some(verifier) = &self.verifier {
            verifier
                .verify(sequencer)
                .map_err(|source| FenceError::Signature {
                    lock: lock.clone(),
                    source,
                })?;
        }
        if write && sequencer.mode() != Mode::Exclusive {
            return Err(Refused::SharedOnWrite {
                lock: lock.clone(),
                presented: sequencer.generation(),
            }
            .into());
        }
        i64::try_from(sequencer.generation().get()).map_err(|_| FenceError::GenerationOutOfRange {
            lock: lock.clone(),
            presented: sequencer.generation(),
        })
    }

    async fn run<'c, DB: FenceDatabase>(
        &self,
        mut tx: Transaction<'c, DB>,
        sequencer: &Sequencer,
        write: bool,
    ) -> Result<Fenced<'c, DB>, FenceError> {
        // On every early return `tx` is dropped, which rolls it back.
        self.precheck(sequencer, write)?;
        let lock = sequencer.lock();
        let Some((exclusive, shared)) = DB::lock_marks(&mut tx, lock.as_str()).await? else {
            // Only at REPEATABLE READ or stricter on PostgreSQL: another
            // transaction created the row after this one's snapshot.
            return Err(FenceError::Database(sqlx::Error::RowNotFound));
        };
        let before = match (u64::try_from(exclusive), u64::try_from(shared)) {
            (Ok(exclusive), Ok(shared)) => Marks { exclusive, shared },
            _ => {
                return Err(FenceError::CorruptMarks {
                    lock: lock.clone(),
                    exclusive,
                    shared,
                });
            }
        };
        let Some(after) = before.admit(sequencer.mode(), sequencer.generation()) else {
            // Release the row lock now rather than when the pool gets to it.
            let _ = tx.rollback().await;
            return Err(Refused::stale(sequencer, before).into());
        };
        if after != before {
            // Both fit: each is a committed mark or the checked generation.
            let as_i64 = |mark: u64| i64::try_from(mark).unwrap_or(i64::MAX);
            DB::store_marks(
                &mut tx,
                lock.as_str(),
                as_i64(after.exclusive),
                as_i64(after.shared),
            )
            .await?;
        }
        Ok(Fenced {
            tx,
            marks: after,
            lock: lock.clone(),
            mode: sequencer.mode(),
            generation: sequencer.generation(),
        })
    }
}

/// A transaction fenced by a sequencer: the lock's marks row is locked
/// until it ends, so no older holder can commit meanwhile, and it can only
/// have been built by passing the fence.
///
/// Use `&mut *fenced` as the executor for the application's statements, and
/// end with [`Fenced::commit`]. Dropping it rolls back.
#[derive(Debug)]
pub struct Fenced<'c, DB: FenceDatabase> {
    tx: Transaction<'c, DB>,
    marks: Marks,
    lock: LockName,
    mode: Mode,
    generation: Generation,
}

impl<'c, DB: FenceDatabase> Fenced<'c, DB> {
    /// The lock's marks as this transaction will commit them.
    pub fn marks(&self) -> Marks {
        self.marks
    }

    /// The lock this transaction is fenced by.
    pub fn lock(&self) -> &LockName {
        &self.lock
    }

    /// The generation this transaction is fenced with.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// Commits the application's statements and the raised marks together.
    pub async fn commit(self) -> Result<Marks, sqlx::Error> {
        self.tx.commit().await?;
        Ok(self.marks)
    }

    /// Rolls everything back, the mark raise included.
    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        self.tx.rollback().await
    }

    /// Runs a per-row fenced update (see [`RowUpdate`]) in this
    /// transaction, with this transaction's generation. `Ok(())` when the
    /// row was updated; [`FenceError::NoSuchRow`] or
    /// [`FenceError::StaleRow`] otherwise (the transaction stays usable;
    /// roll it back to drop what it did before).
    pub async fn update_row(&mut self, update: RowUpdate<'_>) -> Result<(), FenceError> {
        let valid = update.validate()?;
        if self.mode != Mode::Exclusive {
            return Err(Refused::SharedOnWrite {
                lock: self.lock.clone(),
                presented: self.generation,
            }
            .into());
        }
        // Checked by the fence.
        let generation = i64::try_from(self.generation.get()).unwrap_or(i64::MAX);
        match DB::update_row(&mut self.tx, &valid, generation).await? {
            RowOutcome::Updated => Ok(()),
            RowOutcome::NoSuchRow => Err(FenceError::NoSuchRow {
                table: update.table.to_owned(),
            }),
            RowOutcome::Newer(stored) => Err(FenceError::StaleRow {
                table: update.table.to_owned(),
                stored,
                presented: self.generation,
            }),
        }
    }
}

impl<DB: FenceDatabase> Deref for Fenced<'_, DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        &self.tx
    }
}

impl<DB: FenceDatabase> DerefMut for Fenced<'_, DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        &mut self.tx
    }
}
