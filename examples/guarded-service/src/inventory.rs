//! The service's own data: stock levels and a ledger of every change, in
//! sled. Nothing here knows about fencing; the guard in front of the
//! routes decides who may call it.

use std::path::Path;
use std::sync::Arc;

use palisade_store::DurableSled;
use serde::{Deserialize, Serialize};
use sled::Transactional as _;
use sled::transaction::ConflictableTransactionError;

use crate::ServiceError;

/// One item: how many are in stock, and which lock generation last changed
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// Units in stock.
    pub stock: i64,
    /// The generation of the sequencer that made the last change.
    pub generation: u64,
}

/// One ledger line: a change to an item, in the order it was applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// The generation of the sequencer that made the change.
    pub generation: u64,
    /// What was done: `set` or `adjust`.
    pub change: String,
    /// The value set, or the delta applied.
    pub amount: i64,
    /// The stock right after the change.
    pub stock_after: i64,
}

/// The inventory: items and their ledger, two sled trees of the service's
/// own database.
#[derive(Debug, Clone)]
pub struct Inventory {
    /// The database, flushed *and fsynced* before a change is acknowledged.
    durable: Arc<DurableSled>,
    /// SKU → [`Item`] (JSON).
    items: sled::Tree,
    /// SKU, `/`, a sequence number (u64 big-endian) → [`LedgerEntry`] (JSON).
    /// SKUs never contain `/` ([`valid_sku`](crate::valid_sku)), so one
    /// SKU's lines are exactly the keys under `<sku>/`.
    ledger: sled::Tree,
}

impl Inventory {
    /// Opens (or creates) the inventory's sled database in `path`, through
    /// [`DurableSled`]: sled's own `flush()` only reaches the page cache on
    /// Linux (a process crash keeps it, a power loss does not), so every
    /// change is also fsynced before it is acknowledged.
    pub fn open(path: &Path) -> Result<Self, ServiceError> {
        let durable = DurableSled::open(path)?;
        let db = durable.db();
        Ok(Inventory {
            items: db.open_tree("inventory-items")?,
            ledger: db.open_tree("inventory-ledger")?,
            durable: Arc::new(durable),
        })
    }

    /// How many changes have been synced to disk (each acknowledged change
    /// is one).
    pub fn syncs(&self) -> u64 {
        self.durable.syncs()
    }

    /// The item with `sku`, if any.
    pub fn item(&self, sku: &str) -> Result<Option<Item>, ServiceError> {
        self.items.get(sku)?.map(|bytes| decode(&bytes)).transpose()
    }

    /// Every ledger line of `sku`, oldest first.
    pub fn ledger(&self, sku: &str) -> Result<Vec<LedgerEntry>, ServiceError> {
        let mut prefix = sku.as_bytes().to_vec();
        prefix.push(b'/');
        self.ledger
            .scan_prefix(prefix)
            .map(|entry| decode(&entry?.1))
            .collect()
    }

    /// Applies `change` to the item's stock (read, compute, write item and
    /// ledger line in one sled transaction), then flushes and fsyncs sled's
    /// files before returning, so an acknowledged change survives a process
    /// crash and, on a disk that honours fsync, a power loss. A failed sync
    /// fails this change and every later one (`503`) until the service
    /// restarts.
    ///
    /// `change` gets the current stock (0 for a new item) and returns the
    /// new stock, or refuses.
    pub async fn change(
        &self,
        sku: &str,
        generation: u64,
        what: &str,
        amount: i64,
        change: impl Fn(i64) -> Result<i64, ServiceError>,
    ) -> Result<Item, ServiceError> {
        let sequence = self.durable.db().generate_id()?;
        let mut ledger_key = sku.as_bytes().to_vec();
        ledger_key.push(b'/');
        ledger_key.extend_from_slice(&sequence.to_be_bytes());
        let outcome = (&self.items, &self.ledger).transaction(|(items, ledger)| {
            let current = match items.get(sku)? {
                Some(bytes) => decode(&bytes).map_err(ConflictableTransactionError::Abort)?,
                None => Item {
                    stock: 0,
                    generation: 0,
                },
            };
            let stock = change(current.stock).map_err(ConflictableTransactionError::Abort)?;
            let item = Item { stock, generation };
            let line = LedgerEntry {
                generation,
                change: what.to_owned(),
                amount,
                stock_after: stock,
            };
            items.insert(sku.as_bytes(), encode(&item))?;
            ledger.insert(ledger_key.as_slice(), encode(&line))?;
            Ok(item)
        });
        let item = match outcome {
            Ok(item) => item,
            Err(sled::transaction::TransactionError::Abort(error)) => return Err(error),
            Err(sled::transaction::TransactionError::Storage(error)) => return Err(error.into()),
        };
        // The flush and fsync block: keep them off the async worker threads.
        let durable = Arc::clone(&self.durable);
        tokio::task::spawn_blocking(move || durable.flush())
            .await
            .map_err(|_| ServiceError::Internal("the flush task panicked".into()))?
            .map_err(ServiceError::NotDurable)?;
        Ok(item)
    }
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("plain structs always serialise")
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, ServiceError> {
    serde_json::from_slice(bytes).map_err(|error| {
        ServiceError::Internal(format!("a stored record does not decode: {error}"))
    })
}
