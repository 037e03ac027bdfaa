//! Hints that the holders of some locks may have changed
//! ([`Inspect::changes`](crate::Inspect::changes)): an observer reads the
//! locks again after each, instead of at a fixed interval.
//!
//! A hint carries no state: the read that follows it is the truth. Hints
//! are coalesced (several changes may give one hint) and may come with
//! nothing changed; what must never happen is a change with no hint after
//! it, once the [`Changes`] exists.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Interval, MissedTickBehavior};

use crate::LockError;

/// The hints of one observer.
#[derive(Debug)]
pub struct Changes(Source);

#[derive(Debug)]
enum Source {
    /// The lock service cannot watch: a hint every period.
    Every(Interval),
    /// Pushed by whoever follows the service's own watch.
    Pushed(watch::Receiver<()>),
}

impl Changes {
    /// A hint every `period` (the first at once): for a lock service that
    /// cannot watch, the provided [`Inspect::changes`](crate::Inspect::changes).
    pub fn every(period: Duration) -> Changes {
        let mut interval = tokio::time::interval(period.max(Duration::from_millis(1)));
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Changes(Source::Every(interval))
    }

    /// Hints pushed through the returned [`ChangeSender`], the first at
    /// once (the observer's first read).
    pub fn pushed() -> (ChangeSender, Changes) {
        let sender = ChangeSender::new();
        let changes = sender.subscribe();
        (sender, changes)
    }

    /// Whether the hints come from the lock service's own watch (not an
    /// interval).
    pub fn is_pushed(&self) -> bool {
        matches!(self.0, Source::Pushed(_))
    }

    /// Waits for the next hint. An error when the sender is gone: the
    /// watch ended (its client closed), and no more hints will come.
    pub async fn next(&mut self) -> Result<(), LockError> {
        match &mut self.0 {
            Source::Every(interval) => {
                interval.tick().await;
                Ok(())
            }
            Source::Pushed(receiver) => {
                // Marks what it saw as seen: hints sent meanwhile coalesce.
                receiver
                    .changed()
                    .await
                    .map_err(|_| LockError::SessionClosed)
            }
        }
    }
}

/// The pushing side of [`Changes`]: kept by the task that follows the lock
/// service's watch, or by a service that sees every change itself (one
/// sender, any number of observers).
#[derive(Debug)]
pub struct ChangeSender(watch::Sender<()>);

impl ChangeSender {
    /// A sender with no observer yet.
    pub fn new() -> ChangeSender {
        ChangeSender(watch::Sender::new(()))
    }

    /// A new observer's hints, the first at once (its first read).
    pub fn subscribe(&self) -> Changes {
        let mut receiver = self.0.subscribe();
        receiver.mark_changed();
        Changes(Source::Pushed(receiver))
    }

    /// Hints every observer (coalesced with any hint it has not taken
    /// yet).
    pub fn notify(&self) {
        self.0.send_replace(());
    }

    /// Resolves once every observer is gone: the watch can stop.
    pub async fn closed(&self) {
        self.0.closed().await;
    }

    /// While the service's watch is down: hints at once (events may have
    /// been missed), then every `every` while `open` sets the watch again
    /// (a failed attempt is tried again after `every`), and once more when
    /// it has. `None` once every observer is gone.
    pub async fn reopen<T, E, F>(&self, every: Duration, mut open: impl FnMut() -> F) -> Option<T>
    where
        E: std::fmt::Display,
        F: Future<Output = Result<T, E>>,
    {
        self.notify();
        let mut ticks = tokio::time::interval(every.max(Duration::from_millis(1)));
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let opening = open();
            let mut opening = std::pin::pin!(opening);
            let opened = loop {
                tokio::select! {
                    () = self.closed() => return None,
                    _ = ticks.tick() => self.notify(),
                    opened = &mut opening => break opened,
                }
            };
            match opened {
                Ok(watch) => {
                    self.notify();
                    return Some(watch);
                }
                Err(error) => {
                    tracing::debug!(%error, "setting a changes watch again failed");
                    tokio::select! {
                        () = self.closed() => return None,
                        () = tokio::time::sleep(every) => {}
                    }
                }
            }
        }
    }
}

impl Default for ChangeSender {
    fn default() -> Self {
        ChangeSender::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn pushed_hints_come_once_per_batch_and_end_with_the_sender() {
        let (sender, mut changes) = Changes::pushed();
        assert!(changes.is_pushed());
        // The first read is hinted at once.
        changes.next().await.unwrap();
        sender.notify();
        sender.notify();
        changes.next().await.unwrap();
        // Coalesced: nothing more until the next notify.
        let idle = tokio::time::timeout(Duration::from_secs(60), changes.next()).await;
        assert!(idle.is_err(), "no hint without a change");
        drop(sender);
        assert!(matches!(
            changes.next().await,
            Err(LockError::SessionClosed)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn interval_hints_tick_at_the_period() {
        let mut changes = Changes::every(Duration::from_millis(100));
        assert!(!changes.is_pushed());
        let start = tokio::time::Instant::now();
        changes.next().await.unwrap();
        changes.next().await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(100));
    }

    #[tokio::test(start_paused = true)]
    async fn the_sender_sees_the_observer_leave() {
        let (sender, changes) = Changes::pushed();
        drop(changes);
        tokio::time::timeout(Duration::from_secs(1), sender.closed())
            .await
            .expect("closed once the observer is dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn reopening_hints_while_down_and_once_the_watch_is_back() {
        let (sender, mut changes) = Changes::pushed();
        changes.next().await.unwrap();
        let mut attempts = 0;
        let reopened = sender
            .reopen(Duration::from_millis(100), || {
                attempts += 1;
                let attempt = attempts;
                async move {
                    match attempt {
                        3 => Ok(attempt),
                        _ => Err("refused"),
                    }
                }
            })
            .await;
        assert_eq!(reopened, Some(3));
        changes.next().await.unwrap();
        drop(changes);
        let gone = sender
            .reopen(Duration::from_millis(100), || async {
                Err::<(), _>("refused")
            })
            .await;
        assert_eq!(gone, None, "no observer left: reopening stops");
    }
}
