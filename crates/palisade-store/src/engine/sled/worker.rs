//! A named thread fed through a channel, stopped with its owner: dropping
//! a [`Worker`] closes the channel (the thread's loop over it ends) and
//! joins the thread, so nothing it was handed is left half done.

use std::io;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

#[derive(Debug)]
pub(crate) struct Worker<T> {
    sender: Option<Sender<T>>,
    thread: Option<JoinHandle<()>>,
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

    /// Hands `value` to the thread (lost only if the thread has ended).
    pub(crate) fn send(&self, value: T) {
        if let Some(sender) = &self.sender {
            let _ = sender.send(value);
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
