//! The watchdog: one task per client keeps every hold's lease alive.
//!
//! A hold is *scheduled* for its next extension (a map entry, under a
//! mutex); the keeper task sleeps until the earliest entry is due, then
//! extends the due holds, each in a task of its own so that one slow reply
//! does not delay the others. Scheduling costs no task spawn and, in the
//! steady state, no wake-up: the keeper never sleeps longer than
//! [`IDLE_TICK`], so a hold due later than that is simply found on a later
//! tick. A hold that is released leaves the map.
//!
//! Per extension:
//! - extended → the lease's validity moves to the extension's send time
//!   plus `ttl − safety margin`, and the next one is scheduled;
//! - refused (the key is gone or another token's) → lease lost
//!   (`KeyDeleted`) at once;
//! - no answer → retried while validity lasts; the lease watch fires by
//!   itself (`Expired`) at the deadline.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use palisade_core::{LeaseState, LostReason};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::RedisLockClient;
use crate::client::ClientInner;
use crate::error::BACKEND;
use crate::guard::{Held, RedisHold};

/// The longest the keeper sleeps. Holds due later are not announced to it.
const IDLE_TICK: Duration = Duration::from_millis(500);

/// Where a hold sits in the schedule: its due time and a tie-breaker.
pub(crate) type SlotKey = (Instant, u64);

#[derive(Debug, Default)]
struct Schedule {
    due: BTreeMap<SlotKey, Weak<Held>>,
    /// When the keeper will next look, if it is asleep. A hold due earlier
    /// wakes it.
    sleeping_until: Option<Instant>,
    next_id: u64,
}

/// The schedule, shared by the keeper task and the holds.
#[derive(Debug, Default)]
pub(crate) struct KeeperShared {
    schedule: Mutex<Schedule>,
    wake: Notify,
}

impl KeeperShared {
    /// Schedules `hold`'s next extension at `at`, replacing any earlier slot.
    pub(crate) fn schedule(&self, hold: &Arc<Held>, at: Instant) {
        let mut slot = hold
            .data()
            .keeper_slot
            .lock()
            .expect("keeper slot poisoned");
        let wake = {
            let mut schedule = self.schedule.lock().expect("keeper schedule poisoned");
            if let Some(old) = slot.take() {
                schedule.due.remove(&old);
            }
            let key = (at, schedule.next_id);
            schedule.next_id += 1;
            schedule.due.insert(key, Arc::downgrade(hold));
            *slot = Some(key);
            schedule.sleeping_until.is_none_or(|until| at < until)
        };
        if wake {
            self.wake.notify_one();
        }
    }

    /// Takes `hold` out of the schedule (it was released or lost).
    pub(crate) fn cancel(&self, hold: &RedisHold) {
        if let Some(key) = hold
            .keeper_slot
            .lock()
            .expect("keeper slot poisoned")
            .take()
        {
            self.schedule
                .lock()
                .expect("keeper schedule poisoned")
                .due
                .remove(&key);
        }
    }
}

/// Starts the keeper task of a client.
pub(crate) fn start(client: Weak<ClientInner>, shared: Arc<KeeperShared>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let now = Instant::now();
            let (due, wake_at) = {
                let mut schedule = shared.schedule.lock().expect("keeper schedule poisoned");
                let later = schedule.due.split_off(&(now, u64::MAX));
                let due = std::mem::replace(&mut schedule.due, later);
                let next = schedule
                    .due
                    .keys()
                    .next()
                    .map(|(at, _)| *at)
                    .unwrap_or(now + IDLE_TICK)
                    .min(now + IDLE_TICK);
                schedule.sleeping_until = Some(next);
                (due, next)
            };
            if !due.is_empty() {
                let Some(client) = client.upgrade() else {
                    return;
                };
                let client = RedisLockClient { inner: client };
                for (_, hold) in due {
                    if let Some(hold) = hold.upgrade() {
                        *hold
                            .data()
                            .keeper_slot
                            .lock()
                            .expect("keeper slot poisoned") = None;
                        tokio::spawn(extend_once(client.clone(), hold));
                    }
                }
            }
            tokio::select! {
                () = tokio::time::sleep_until(wake_at) => {}
                () = shared.wake.notified() => {}
            }
        }
    })
}

/// When to extend next: a keep-alive interval after the last extension was
/// sent, or halfway to the validity deadline if that comes sooner.
pub(crate) fn next_extension(hold: &Held, last_sent: Instant) -> Option<Instant> {
    let LeaseState::Held { valid_until } = hold.tracker().state() else {
        return None;
    };
    let now = Instant::now();
    let half_left = valid_until.saturating_duration_since(now) / 2;
    Some(
        (last_sent + hold.data().options.keepalive_interval())
            .min(now + half_left)
            .max(now + Duration::from_millis(5)),
    )
}

async fn extend_once(client: RedisLockClient, hold: Arc<Held>) {
    if !hold.is_held() {
        return;
    }
    let (redis, generation, name) = (hold.data(), hold.generation(), hold.name());
    let sent_at = Instant::now();
    match client
        .extend_call(&redis.keys, &redis.token, hold.mode(), &redis.options)
        .await
    {
        Ok(true) => {
            if hold.tracker().extend(redis.options.valid_until(sent_at)) {
                tracing::trace!(backend = BACKEND, lock = %name, %generation, "lease extended");
                *redis.last_extension_sent.lock().expect("poisoned") = sent_at;
            } else {
                tracing::warn!(backend = BACKEND, lock = %name, %generation, "lease lost: extended too late, validity had already passed");
                return;
            }
        }
        Ok(false) => {
            if hold.tracker().lose(LostReason::KeyDeleted) {
                tracing::warn!(backend = BACKEND, lock = %name, %generation, "lease lost: the extension was refused (the hold is gone from Redis)");
            }
            return;
        }
        Err(error) => {
            tracing::warn!(backend = BACKEND, lock = %name, %generation, %error, "lease extension failed; retrying while validity lasts");
        }
    }
    if redis.ended.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let last_sent = *redis.last_extension_sent.lock().expect("poisoned");
    if let Some(at) = next_extension(&hold, last_sent) {
        client.inner.keeper.schedule(&hold, at);
    }
}
