//! What every handler shares.

use std::sync::Arc;

use palisade_core::SharedLiveCheck;
use palisade_store::Store;

use crate::metrics::Metrics;

/// The server's state: the store, the optional live check, limits and
/// metrics. Cheap to clone.
///
/// ```
/// use palisade_server::AppState;
/// use palisade_store::{Store, StoreConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let state = AppState::new(Store::open(dir.path(), StoreConfig::default())?)
///     .with_max_body_bytes(64 * 1024);
/// let router = palisade_server::app(state);
/// # drop(router);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct AppState {
    pub(crate) store: Store,
    /// Chubby's CheckSequencer, when the server is embedded next to a lock
    /// backend: asked before every request that carries a sequencer. `None`
    /// (the binary's default) means the generation check alone decides.
    pub(crate) live_check: Option<SharedLiveCheck>,
    pub(crate) max_body_bytes: usize,
    pub(crate) metrics: Arc<Metrics>,
}

impl AppState {
    /// State over `store`, with no live check and an 8 MiB body limit.
    pub fn new(store: Store) -> Self {
        AppState {
            store,
            live_check: None,
            max_body_bytes: 8 * 1024 * 1024,
            metrics: Arc::new(Metrics::default()),
        }
    }

    /// Refuses requests whose sequencer the lock side says is no longer
    /// held (409 `not_held`), and requests it cannot check (503
    /// `live_check_unavailable`).
    pub fn with_live_check(mut self, live_check: SharedLiveCheck) -> Self {
        self.live_check = Some(live_check);
        self
    }

    /// Sets the largest accepted request body, in bytes.
    pub fn with_max_body_bytes(mut self, max_body_bytes: usize) -> Self {
        self.max_body_bytes = max_body_bytes;
        self
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("store", &self.store)
            .field("live_check", &self.live_check.is_some())
            .field("max_body_bytes", &self.max_body_bytes)
            .finish_non_exhaustive()
    }
}
