//! The background tasks: the session keep-alive (the client's side) and the
//! service's timers (lease expiry, end of a lock-delay).
//!
//! Each task is owned by a [`TaskGuard`] stored next to the state it serves
//! (the armed lease, the lock entry), in the manner of mini-redis's
//! `DbDropGuard`: when that state goes away, the guard's `Drop` aborts the
//! task. The tasks hold only a `Weak` reference to the service, so they
//! never keep it alive. None of them polls: each sleeps until the one
//! instant it cares about.

use std::future::Future;
use std::sync::Weak;
use std::task::{Context, Waker};
use std::time::Duration;

use palisade_core::LockName;
use palisade_core::holds::Task;
use tokio::runtime::Handle;
use tokio::task::AbortHandle;
use tokio::time::{Instant, MissedTickBehavior};

use crate::client::ClientInner;
use crate::state::{LeaseEnd, SessionId};

/// Aborts its task when dropped.
#[derive(Debug)]
pub(crate) struct TaskGuard(AbortHandle);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Spawns `task` on `runtime`, or on the current runtime, and returns the
/// guard that owns it. Without any runtime the task cannot run: the service
/// then still expires leases lazily, on the next request that looks at them.
pub(crate) fn spawn<F>(runtime: Option<&Handle>, task: F) -> Option<TaskGuard>
where
    F: Future<Output = ()> + Send + 'static,
{
    let handle = runtime.cloned().or_else(|| Handle::try_current().ok());
    match handle {
        Some(handle) => Some(TaskGuard(handle.spawn(task).abort_handle())),
        None => {
            tracing::warn!("no Tokio runtime to run a lease task on; leases will expire lazily");
            None
        }
    }
}

/// Runs `task` as far as it gets without waiting, and spawns the rest, if
/// any, on `runtime` or the current runtime. The service is in-process: a
/// release gives the hold back at once unless the session's gate for the
/// name is taken, so a dropped guard is released before `drop` returns.
pub(crate) fn run_or_spawn(runtime: Option<&Handle>, mut task: Task) {
    if task
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_ready()
    {
        return;
    }
    match runtime.cloned().or_else(|| Handle::try_current().ok()) {
        Some(handle) => {
            handle.spawn(task);
        }
        None => {
            tracing::warn!("no Tokio runtime to finish a release on; the hold ends with its lease")
        }
    }
}

/// The session's keep-alive: renews the lease every `interval` until the
/// service says there is nothing to renew (the session holds nothing, its
/// lease ended, or the keep-alive was stopped).
///
/// The renewal is stamped with the instant it is *sent*; the service moves
/// the lease deadline to `sent_at + ttl` and every hold's tracker to
/// `options.valid_until(sent_at)`, so the client's view never outlives the
/// service's.
pub(crate) async fn keepalive(service: Weak<ClientInner>, session: SessionId, interval: Duration) {
    let mut ticker = tokio::time::interval_at(Instant::now() + interval, interval);
    // After a stall, renew once and carry on from there: catching up with a
    // burst of renewals would only hide how late the first one was.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(service) = service.upgrade() else {
            return;
        };
        let sent_at = Instant::now();
        if !service.lock_state().renew(session, sent_at, Instant::now()) {
            return;
        }
    }
}

/// The service's expiry timer for one armed lease: sleeps until the lease
/// deadline, and expires the lease if no renewal moved the deadline in the
/// meantime; otherwise sleeps again until the new deadline.
pub(crate) async fn lease_expiry_timer(service: Weak<ClientInner>, session: SessionId) {
    loop {
        let deadline = {
            let Some(service) = service.upgrade() else {
                return;
            };
            let Some(deadline) = service.lock_state().lease_deadline(session) else {
                return;
            };
            deadline
        };
        tokio::time::sleep_until(deadline).await;
        let Some(service) = service.upgrade() else {
            return;
        };
        let mut state = service.lock_state();
        let now = Instant::now();
        match state.lease_deadline(session) {
            Some(deadline) if deadline <= now => {
                state.end_lease(session, LeaseEnd::Expired, deadline, now);
                return;
            }
            Some(_renewed) => {}
            None => return,
        }
    }
}

/// Wakes `name`'s queue when its lock-delay ends at `until`.
pub(crate) async fn lock_delay_timer(service: Weak<ClientInner>, name: LockName, until: Instant) {
    tokio::time::sleep_until(until).await;
    if let Some(service) = service.upgrade() {
        service.lock_state().lock_delay_ended(&name, Instant::now());
    }
}
