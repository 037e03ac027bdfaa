//! The flash sale's stock in the user's own PostgreSQL table (`--store`).
//!
//! Without fencing the buyers read and write the row with plain
//! statements, as a service that trusts its lock would. With fencing every
//! read and every write is a `palisade_fence_sql` fenced transaction: the fence
//! is its first statement, so a buyer whose lease ran out while it paused
//! is refused (`Refused::Stale`) and its transaction rolls back before
//! it can write anything.

use palisade_core::LockName;
#[cfg(not(feature = "sql"))]
use palisade_core::Sequencer;

#[cfg(not(feature = "sql"))]
use crate::DemoError;
#[cfg(not(feature = "sql"))]
use crate::storage::{Stale, WriteOutcome};

#[cfg(feature = "sql")]
mod postgres;
#[cfg(feature = "sql")]
pub(crate) use postgres::SqlStock;

/// The table the demo keeps its stock in, one row per item.
pub(crate) const TABLE: &str = "palisade_demo_stock";

/// A build without the `sql` feature has no PostgreSQL client: `--store`
/// is refused with the feature to turn on, and no stock table exists.
#[cfg(not(feature = "sql"))]
#[derive(Debug, Clone)]
pub(crate) struct SqlStock(std::convert::Infallible);

#[cfg(not(feature = "sql"))]
impl SqlStock {
    pub(crate) fn connect(_url: &str, _fenced: bool) -> Result<SqlStock, DemoError> {
        Err(DemoError::usage(
            "--store keeps the stock in PostgreSQL, which this build leaves out: build with `--features sql` (cargo run -p example-flash-sale --features sql -- --store postgres://...)",
        ))
    }

    pub(crate) async fn prepare(&self) -> Result<(), DemoError> {
        match self.0 {}
    }

    pub(crate) fn is_fenced(&self) -> bool {
        match self.0 {}
    }

    pub(crate) async fn read(
        &self,
        _item: &str,
        _sequencer: Option<&Sequencer>,
    ) -> Result<Result<Option<i64>, Stale>, DemoError> {
        match self.0 {}
    }

    pub(crate) async fn write(
        &self,
        _item: &str,
        _sequencer: Option<&Sequencer>,
        _value: i64,
    ) -> Result<WriteOutcome, DemoError> {
        match self.0 {}
    }

    pub(crate) async fn stale_writes(&self, _item: &str) -> Result<u64, DemoError> {
        match self.0 {}
    }
}

/// The row of `key` under `lock`: the lock name keeps the rows of demo
/// runs apart, as the resource server's per-lock keyspaces do.
pub(crate) fn item(lock: &LockName, key: &str) -> String {
    format!("{}/{key}", lock.as_str())
}
