//! The clean-ups a client runs in the background, counted, so a process
//! can wait for them before it exits.
//!
//! An abandoned acquire (a dropped or timed-out future) removes its queue
//! entry, and a dropped guard or release future finishes its release, in
//! a task of their own. A process that exits right after drops those tasks
//! with its runtime, and what they were removing stays on Redis until it
//! expires: a waiter queued behind it waits out that TTL.
//! [`RedisLockClient::settle`](crate::RedisLockClient::settle) waits for
//! them instead.

use std::future::Future;

use tokio::runtime::Handle;
use tokio::sync::watch;

/// How many background clean-ups are running.
#[derive(Debug)]
pub(crate) struct Cleanups(watch::Sender<usize>);

impl Default for Cleanups {
    fn default() -> Self {
        Cleanups(watch::Sender::new(0))
    }
}

impl Cleanups {
    /// Runs `task` on `runtime`, counted until it ends (or is dropped with
    /// its runtime).
    pub(crate) fn spawn(&self, runtime: &Handle, task: impl Future<Output = ()> + Send + 'static) {
        self.0.send_modify(|running| *running += 1);
        let counted = Counted(self.0.clone());
        runtime.spawn(async move {
            let _counted = counted;
            task.await;
        });
    }

    /// Returns once no clean-up is running.
    pub(crate) async fn settled(&self) {
        // The sender lives as long as `self`: the wait cannot fail.
        let _ = self.0.subscribe().wait_for(|running| *running == 0).await;
    }
}

/// One running clean-up; uncounted when dropped.
struct Counted(watch::Sender<usize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.send_modify(|running| *running -= 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn settled_waits_for_every_running_cleanup() {
        let cleanups = Cleanups::default();
        cleanups.settled().await;
        let (finish, finished) = tokio::sync::oneshot::channel::<()>();
        cleanups.spawn(&Handle::current(), async move {
            let _ = finished.await;
        });
        let mut settled = std::pin::pin!(cleanups.settled());
        assert!(
            futures_poll_once(settled.as_mut()).await.is_none(),
            "settled while a clean-up runs"
        );
        finish.send(()).unwrap();
        settled.await;
    }

    /// Polls `future` once: `Some` if it was ready.
    async fn futures_poll_once<F: Future + Unpin>(mut future: F) -> Option<F::Output> {
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut future).poll(cx) {
                std::task::Poll::Ready(output) => Some(output),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
