//! [`SledMarks`]: the fenced store's own marks, durable.

use std::future::Future;
use std::path::Path;

use palisade_core::{LockName, Sequencer};
use palisade_store::{Marks, Refused, Store, StoreConfig};

use crate::{Admission, MarkStore, MarkStoreError};

/// A durable [`MarkStore`]: the marks of a [`palisade_store::Store`], the
/// same records the fenced store checks in its write transactions.
///
/// Each admission is one request to the store's committer
/// ([`Store::submit_admit`]): check and raise in one sled transaction, and,
/// in the store's default [`Durability::Flushed`](palisade_store::Durability)
/// mode, an fsync before the admission is reported. So **the mark is on disk
/// before the handler runs**: a crash right after the handler's write cannot
/// bring the mark back below a generation that wrote.
///
/// The cost is that fsync. Admissions arriving together share one flush
/// (group commit), so throughput grows with concurrency while each request
/// waits for one flush. On the 2-core reference machine (the `admissions`
/// benchmark, docs/guard.md): about 2,000 admissions/s and 0.25 ms median
/// for one client, 25,000/s for 32 clients on separate locks; requests
/// under one lock are serialised, so one lock stays near the single-client
/// rate. A shared admission that does not
/// move a mark costs a transaction but no flush; an exclusive one is an
/// empty write to the store and is flushed like any write. With
/// [`Durability::Buffered`](palisade_store::Durability) the flush is skipped
/// and a crash can forget mark raises from the last flush interval: that
/// reopens the door for the holders they fenced, so it is not the default.
///
/// Sharing one `Store` with handlers that write through [`Store::apply`] is
/// the point: one set of marks fences both the guard's checks and the
/// store's own transactions.
#[derive(Debug, Clone)]
pub struct SledMarks {
    /// The fenced store whose marks these are. Its committer thread applies
    /// every admission, in the order they are submitted.
    store: Store,
}

impl SledMarks {
    /// Marks kept in `store`, as durable as that store is. Admissions are
    /// decided in call order only on sled (a store from [`Store::open`] or
    /// [`SledMarks::open`]); over another engine ([`Store::with_engine`])
    /// each admission is still one atomic check-and-raise, but two in
    /// flight at once may be decided in either order.
    pub fn new(store: Store) -> Self {
        SledMarks { store }
    }

    /// Opens (or creates) a fenced store in `path` and keeps the marks there.
    pub fn open(
        path: impl AsRef<Path>,
        config: StoreConfig,
    ) -> Result<Self, palisade_store::StoreError> {
        Ok(SledMarks::new(Store::open(path, config)?))
    }

    /// The store, for handlers that also write through it.
    pub fn store(&self) -> &Store {
        &self.store
    }
}

impl MarkStore for SledMarks {
    fn admit(
        &self,
        sequencer: &Sequencer,
    ) -> impl Future<Output = Result<Admission, MarkStoreError>> + Send {
        // Queue the request now, so admissions are decided in call order.
        let submitted = self.store.submit_admit(sequencer);
        let lock = sequencer.lock().clone();
        async move {
            match submitted?.await? {
                Ok(marks) => Ok(Admission::Admitted { marks }),
                Err(Refused::Stale { marks, .. }) => Ok(Admission::Stale { marks }),
                Err(other) => Err(MarkStoreError::Unexpected {
                    lock,
                    reason: other.reason(),
                }),
            }
        }
    }

    fn marks(&self, lock: &LockName) -> impl Future<Output = Result<Marks, MarkStoreError>> + Send {
        let submitted = self.store.submit_marks(lock);
        async move { Ok(submitted?.await?) }
    }
}
