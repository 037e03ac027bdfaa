//! Background tasks owned by a value and stopped with it.

use tokio::task::JoinHandle;

/// Aborts its task when dropped, so a background task (keep-alive, watch
/// stream, key watch) never outlives what it works for.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(JoinHandle<()>);

impl AbortOnDrop {
    pub(crate) fn new(handle: JoinHandle<()>) -> Self {
        AbortOnDrop(handle)
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
