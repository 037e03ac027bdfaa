//! A spawned task that is aborted when its owner is dropped.

use tokio::task::JoinHandle;

/// Aborts the task when dropped: background work (a keep-alive, a node
/// watch) lives exactly as long as what it serves.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub(crate) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
