//! Wake-ups on a Redis Cluster through shard channels (Redis 7
//! `SSUBSCRIBE`/`SPUBLISH`).
//!
//! A `PUBLISH` on a cluster is copied to every node over the cluster bus,
//! so with one inbox channel per client every hand-off costs every node a
//! message. Here the channel is per lock and client, named with the lock's
//! hash tag (`<prefix>{<segment>}:inbox:<client id>`), so the release
//! script may `SPUBLISH` it from the lock's own slot and only that shard
//! carries it. The client subscribes a lock's channel when its first
//! waiter on that lock registers, before the acquire is sent, and drops it
//! once no waiter has used it for [`IDLE_BEFORE_UNSUBSCRIBE`].
//!
//! A slot that moves takes its shard channels with it: the old owner
//! unsubscribes the client (a `sunsubscribe` push it did not ask for).
//! The channel is then subscribed again, now routed to the new owner, and
//! its waiters look at the lock at once, as after a dropped connection.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use redis::cluster_async::ClusterConnection;
use redis::{ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::{OnceCell, mpsc, watch};
use tokio::task::JoinHandle;

use crate::error::BACKEND;
use crate::inbox::{Notice, Routes, dispatch};
use crate::keys::LockKeys;
use crate::{RedisConfig, RedisLockError};

/// How long a lock's channel stays subscribed after its last waiter left:
/// a lock waited on again soon costs no new subscription.
const IDLE_BEFORE_UNSUBSCRIBE: Duration = Duration::from_secs(5);

/// When the waiters of a channel the server dropped look again, after
/// the first look at once.
const FOLLOW_UPS: [Duration; 3] = [
    Duration::from_millis(250),
    Duration::from_secs(1),
    Duration::from_secs(3),
];

/// How often idle channels are dropped and failed subscriptions retried.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The shard channels of one client.
#[derive(Debug)]
pub(crate) struct ShardInbox {
    shared: Arc<Shared>,
    client_id: String,
    /// How long a registration waits for its subscription.
    timeout: Duration,
    /// Reads the pushes and sweeps; stopped when the client is dropped.
    task: JoinHandle<()>,
}

impl Drop for ShardInbox {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Shared {
    /// A RESP3 cluster connection whose pushes go to the task, once made.
    connection: OnceCell<ClusterConnection>,
    routes: Routes,
    channels: Mutex<HashMap<String, Channel>>,
    /// False from a dropped node connection until a subscription is
    /// confirmed again.
    connected: AtomicBool,
    /// Whether `connection` is made.
    up: watch::Sender<bool>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("channels", &self.channels)
            .field("connected", &self.connected)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Channel {
    /// This client's waiters on the lock, by lease id.
    leases: HashSet<String>,
    /// Whether an `SSUBSCRIBE` is sent or confirmed for it.
    requested: bool,
    /// Whether the server confirmed the subscription.
    confirmed: watch::Sender<bool>,
    /// When its last waiter left.
    idle_since: Option<Instant>,
}

impl Channel {
    fn new() -> Self {
        Channel {
            leases: HashSet::new(),
            requested: false,
            confirmed: watch::Sender::new(false),
            idle_since: None,
        }
    }
}

/// A waiter's interest in its lock's channel; withdrawn on drop.
#[derive(Debug)]
pub(crate) struct Interest {
    shared: Weak<Shared>,
    channel: String,
    lease: String,
}

impl Drop for Interest {
    fn drop(&mut self) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let mut channels = shared.channels.lock().expect("shard channels poisoned");
        if let Some(channel) = channels.get_mut(&self.channel) {
            channel.leases.remove(&self.lease);
            if channel.leases.is_empty() {
                channel.idle_since = Some(Instant::now());
            }
        }
    }
}

impl ShardInbox {
    /// Starts the subscription connection (RESP3, the same seeds,
    /// timeouts and TLS as the command connection) and waits for it up to
    /// twice the connect timeout; then goes on without it, connecting in
    /// the background: a cluster node that does not answer (a stopped
    /// replica) must not keep a client from locking. Until it is up,
    /// waiters re-check every 100 ms.
    pub(crate) async fn start(
        config: &RedisConfig,
        client_id: &str,
    ) -> Result<Self, RedisLockError> {
        let (pushes_tx, pushes) = mpsc::unbounded_channel::<PushInfo>();
        let client = crate::connection::cluster_client(config, |builder| {
            builder
                .use_protocol(ProtocolVersion::RESP3)
                .push_sender(pushes_tx)
        })?;
        let shared = Arc::new(Shared {
            connection: OnceCell::new(),
            routes: Routes::default(),
            channels: Mutex::default(),
            connected: AtomicBool::new(false),
            up: watch::Sender::new(false),
        });
        let task = tokio::spawn(run(
            Arc::downgrade(&shared),
            client,
            pushes,
            config.connect_timeout,
        ));
        let mut up = shared.up.subscribe();
        let wait = config.connect_timeout * 2;
        if tokio::time::timeout(wait, up.wait_for(|up| *up))
            .await
            .is_err()
        {
            tracing::warn!(
                backend = BACKEND,
                ?wait,
                "shard-channel connection not up yet; connecting in the background, waiters re-check meanwhile"
            );
        }
        Ok(ShardInbox {
            shared,
            client_id: client_id.to_owned(),
            timeout: config.connect_timeout,
            task,
        })
    }

    /// The channel of this client for the lock with `keys`.
    pub(crate) fn channel(&self, keys: &LockKeys) -> String {
        keys.inbox_channel(&self.client_id)
    }

    pub(crate) fn routes(&self) -> &Routes {
        &self.shared.routes
    }

    /// Whether a grant published on `channel` now would reach this client:
    /// the connection is up and the channel's subscription confirmed.
    pub(crate) fn is_listening(&self, channel: &str) -> bool {
        self.shared.connected.load(Ordering::Relaxed)
            && self
                .shared
                .channels
                .lock()
                .expect("shard channels poisoned")
                .get(channel)
                .is_some_and(|entry| *entry.confirmed.borrow())
    }

    /// Notes `lease`'s interest in `channel` and returns once the channel
    /// is subscribed, or after the connect timeout (logged: the waiter
    /// then relies on its bounded re-checks).
    pub(crate) async fn subscribe(&self, lease: &str, channel: &str) -> Interest {
        let interest = Interest {
            shared: Arc::downgrade(&self.shared),
            channel: channel.to_owned(),
            lease: lease.to_owned(),
        };
        let (send, mut confirmed) = {
            let mut channels = self
                .shared
                .channels
                .lock()
                .expect("shard channels poisoned");
            let entry = channels
                .entry(channel.to_owned())
                .or_insert_with(Channel::new);
            entry.leases.insert(lease.to_owned());
            entry.idle_since = None;
            let send = !entry.requested;
            entry.requested = true;
            (send, entry.confirmed.subscribe())
        };
        if *confirmed.borrow() {
            return interest;
        }
        let subscribed = async {
            if send {
                self.shared.ssubscribe(channel).await?;
            }
            confirmed
                .wait_for(|confirmed| *confirmed)
                .await
                .map(|_| ())
                .map_err(|_| redis::RedisError::from(std::io::Error::other("inbox closed")))
        };
        match tokio::time::timeout(self.timeout, subscribed).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(backend = BACKEND, %channel, %error, "shard channel subscription failed; the waiter re-checks on its interval");
                self.shared.retry_later(channel);
            }
            Err(_elapsed) => {
                tracing::warn!(backend = BACKEND, %channel, timeout = ?self.timeout, "shard channel subscription not confirmed in time; the waiter re-checks on its interval");
                self.shared.retry_later(channel);
            }
        }
        interest
    }
}

impl Shared {
    /// Sends `SSUBSCRIBE channel`; marks it confirmed once answered.
    async fn ssubscribe(&self, channel: &str) -> Result<(), redis::RedisError> {
        let connection = self.connection.get().ok_or_else(|| {
            redis::RedisError::from(std::io::Error::other(
                "the shard-channel connection is not up yet",
            ))
        })?;
        connection.clone().ssubscribe(channel).await?;
        if let Some(entry) = self
            .channels
            .lock()
            .expect("shard channels poisoned")
            .get(channel)
        {
            entry.confirmed.send_replace(true);
        }
        self.connected.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Leaves `channel` for the sweep to subscribe again.
    fn retry_later(&self, channel: &str) {
        if let Some(entry) = self
            .channels
            .lock()
            .expect("shard channels poisoned")
            .get_mut(channel)
            && !*entry.confirmed.borrow()
        {
            entry.requested = false;
        }
    }

    /// Tells the waiters on `channel` (all waiters when `None`) to look at
    /// their lock again.
    fn recheck(&self, channel: Option<&str>) {
        let channels = self.channels.lock().expect("shard channels poisoned");
        let routes = self.routes.lock().expect("inbox routes poisoned");
        let leases = channels
            .iter()
            .filter(|(name, _)| channel.is_none_or(|wanted| wanted == name.as_str()))
            .flat_map(|(_, entry)| entry.leases.iter());
        for lease in leases {
            if let Some(sender) = routes.get(lease) {
                let _ = sender.send(Notice::Recheck);
            }
        }
    }

    fn on_push(self: &Arc<Self>, push: PushInfo) {
        let channel = match push.data.first() {
            Some(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
            _ => None,
        };
        match push.kind {
            PushKind::SMessage => match push.data.get(1) {
                Some(Value::BulkString(payload)) => dispatch(&self.routes, payload),
                other => {
                    tracing::warn!(backend = BACKEND, ?other, "unreadable shard message");
                }
            },
            PushKind::SSubscribe => {
                let was_connected = self.connected.swap(true, Ordering::Relaxed);
                if let Some(channel) = channel {
                    if let Some(entry) = self
                        .channels
                        .lock()
                        .expect("shard channels poisoned")
                        .get(&channel)
                    {
                        entry.confirmed.send_replace(true);
                    }
                    if !was_connected {
                        // Subscribed again after a dropped connection:
                        // grants published meanwhile were lost.
                        self.recheck(Some(&channel));
                    }
                }
            }
            PushKind::SUnsubscribe => {
                let Some(channel) = channel else { return };
                let wanted = {
                    let mut channels = self.channels.lock().expect("shard channels poisoned");
                    match channels.get_mut(&channel) {
                        // Not subscribed any more, whether asked (the
                        // sweep's unsubscribe crossing a new waiter's
                        // subscribe) or not (the slot moved): the next
                        // waiter subscribes again; a waiting one now.
                        Some(entry) => {
                            entry.requested = false;
                            entry.confirmed.send_replace(false);
                            entry.idle_since.is_none()
                        }
                        None => false,
                    }
                };
                if wanted {
                    tracing::info!(backend = BACKEND, %channel, "shard channel unsubscribed by the server (slot moved?); subscribing again");
                    self.recheck(Some(&channel));
                    self.follow_up(&channel);
                    self.resubscribe(channel);
                }
            }
            PushKind::Disconnection => {
                self.connected.store(false, Ordering::Relaxed);
                tracing::warn!(
                    backend = BACKEND,
                    "a shard-channel connection dropped; the driver subscribes again"
                );
                self.recheck(None);
            }
            _ => {}
        }
    }

    /// Has the waiters on `channel` look again a few times over the next
    /// seconds: while a slot moves, the nodes' views of its owner settle
    /// on their own schedule, and a subscription made meanwhile can sit on
    /// a node that no longer publishes there. This bounds what such a
    /// subscription can cost a waiter to [`FOLLOW_UPS`]' last delay.
    fn follow_up(self: &Arc<Self>, channel: &str) {
        let (shared, channel) = (Arc::downgrade(self), channel.to_owned());
        tokio::spawn(async move {
            let mut waited = Duration::ZERO;
            for after in FOLLOW_UPS {
                tokio::time::sleep(after - waited).await;
                waited = after;
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                shared.recheck(Some(&channel));
            }
        });
    }

    fn resubscribe(self: &Arc<Self>, channel: String) {
        {
            let mut channels = self.channels.lock().expect("shard channels poisoned");
            match channels.get_mut(&channel) {
                Some(entry) if !entry.requested => entry.requested = true,
                _ => return,
            }
        }
        let shared = self.clone();
        tokio::spawn(async move {
            let subscribed =
                tokio::time::timeout(SWEEP_EVERY * 2, shared.ssubscribe(&channel)).await;
            match subscribed {
                // A grant published before the subscription was confirmed
                // (the release raced the move) was lost: look again now.
                Ok(Ok(())) => shared.recheck(Some(&channel)),
                _ => shared.retry_later(&channel),
            }
        });
    }

    /// Drops channels idle long enough and subscribes those whose
    /// subscription failed.
    fn sweep(self: &Arc<Self>) {
        let (idle, retry): (Vec<String>, Vec<String>) = {
            let mut channels = self.channels.lock().expect("shard channels poisoned");
            let idle: Vec<String> = channels
                .iter()
                .filter(|(_, entry)| {
                    entry
                        .idle_since
                        .is_some_and(|since| since.elapsed() >= IDLE_BEFORE_UNSUBSCRIBE)
                })
                .map(|(name, _)| name.clone())
                .collect();
            for name in &idle {
                channels.remove(name);
            }
            let retry = channels
                .iter()
                .filter(|(_, entry)| !entry.requested && !entry.leases.is_empty())
                .map(|(name, _)| name.clone())
                .collect();
            (idle, retry)
        };
        if let (false, Some(connection)) = (idle.is_empty(), self.connection.get()) {
            // One at a time: the channels live in different slots.
            let mut connection = connection.clone();
            tokio::spawn(async move {
                for channel in idle {
                    if let Err(error) = connection.sunsubscribe(&channel).await {
                        tracing::debug!(backend = BACKEND, %channel, %error, "unsubscribing an idle shard channel failed");
                    }
                }
            });
        }
        for channel in retry {
            self.resubscribe(channel);
        }
    }
}

/// Connects, then routes pushes and sweeps until the inbox is dropped.
async fn run(
    shared: Weak<Shared>,
    client: redis::cluster::ClusterClient,
    mut pushes: mpsc::UnboundedReceiver<PushInfo>,
    connect_timeout: Duration,
) {
    let mut pauses = palisade_core::retry_pauses(Duration::from_millis(50), Duration::from_secs(2));
    loop {
        // The driver gives each node the connect timeout; a node that does
        // not answer is skipped, so allow for one such node and the rest.
        match tokio::time::timeout(connect_timeout * 2, client.get_async_connection()).await {
            Ok(Ok(connection)) => {
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                let _ = shared.connection.set(connection);
                shared.connected.store(true, Ordering::Relaxed);
                shared.up.send_replace(true);
                // Waiters registered before this could not subscribe.
                shared.recheck(None);
                break;
            }
            Ok(Err(error)) => {
                tracing::warn!(backend = BACKEND, kind = ?error.kind(), "shard-channel connection failed; trying again");
            }
            Err(_elapsed) => {
                tracing::warn!(backend = BACKEND, timeout = ?connect_timeout * 2, "shard-channel connection not made in time; trying again");
            }
        }
        tokio::time::sleep(pauses.next().unwrap_or(Duration::from_secs(2))).await;
    }
    let mut sweep = tokio::time::interval(SWEEP_EVERY);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            push = pushes.recv() => {
                let (Some(push), Some(shared)) = (push, shared.upgrade()) else { return };
                shared.on_push(push);
            }
            _ = sweep.tick() => {
                let Some(shared) = shared.upgrade() else { return };
                shared.sweep();
            }
        }
    }
}
