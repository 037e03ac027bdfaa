//! A named thread fed through a channel, stopped with its owner: dropping
//! a [`Worker`] closes the channel (the thread's loop over it ends) and
//! joins the thread, so nothing it was handed is left half done.

use std::io;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

pub(crate) struct Worker<T> {
    sender: Option<Sender<T>>,
    thread: Option<JoinHandle<()>>,
}

/// By the thread, whatever is sent to it.
impl<T> std::fmt::Debug for Worker<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self
            .thread
            .as_ref()
            .and_then(|thread| thread.thread().name());
        f.debug_struct("Worker").field("thread", &name).finish()
    }
}

impl<T: Send + 'static> Worker<T> {
    /// Starts thread `name` running `body` over the channel's receiving
    /// end.
    pub(crate) fn start(
        name: &str,
        body: impl FnOnce(Receiver<T>) + Send + 'static,
    ) -> io::Result<Worker<T>> {
        let (sender, receiver) = channel();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(receiver))?;
        Ok(Worker {
            sender: Some(sender),
            thread: Some(thread),
        })
    }

    /// Hands `value` to the thread; gives it back if the thread has ended.
    pub(crate) fn send(&self, value: T) -> Result<(), T> {
        match &self.sender {
            Some(sender) => sender.send(value).map_err(|unsent| unsent.0),
            None => Err(value),
        }
    }
}

impl<T> Drop for Worker<T> {
    fn drop(&mut self) {
        drop(self.sender.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
