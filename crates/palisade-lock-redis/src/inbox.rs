//! Where a client's waiters hear about their grants.
//!
//! A waiter does not poll. When the release script hands a lock to a
//! queued waiter, it publishes `"<lease id> granted <generation> <server
//! ms> <proof>"` on the channel recorded in the waiter's queue entry. The
//! client routes the message to the waiting future by lease id; the proof,
//! `sha1hex("<owner token> <generation>")`, lets that future check that the
//! grant is its own (the lease id is public, the token is not). So waiting
//! costs no request at all, and a hand-off costs the release script plus
//! one message.
//!
//! Two paths ([`WakeUps`]): one channel per client, subscribed once on
//! one node ([`ClientInbox`], here), or on a cluster a shard channel per
//! lock and client, subscribed while the client has a waiter on that lock
//! ([`ShardInbox`](crate::shard_inbox::ShardInbox)).
//!
//! Messages can be lost (the subscription drops and reconnects, a slot
//! moves). Nothing depends on them for correctness: the acquire script
//! also reports a grant made while the notification was lost, and waiters
//! look again after a bounded time. After every (re)subscription the
//! waiters it serves are told to look again at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::config::Endpoints;
use crate::error::BACKEND;
use crate::keys::{LockKeys, inbox_channel};
use crate::shard_inbox::{Interest, ShardInbox};
use crate::{RedisConfig, RedisLockError, WakeUps};

/// What the inbox tells a waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Notice {
    /// The lock was handed to this waiter with `generation`, at `server_ms`
    /// on the Redis clock; `proof` is `sha1hex("<owner token>
    /// <generation>")`, computed by Redis (see [`Notice::proves`]).
    Granted {
        generation: u64,
        server_ms: u64,
        proof: [u8; 40],
    },
    /// Something changed (or notifications may have been lost): look again.
    Recheck,
}

impl Notice {
    /// Whether this is a grant to the holder of `token`: its proof is
    /// `sha1hex("<token> <generation>")`. Anything else (a forged or
    /// misrouted message) must not be acted on.
    pub(crate) fn proves(&self, token: &str) -> bool {
        let Notice::Granted {
            generation, proof, ..
        } = self
        else {
            return false;
        };
        let expected = sha1_smol::Sha1::from(format!("{token} {generation}"))
            .digest()
            .to_string();
        expected.as_bytes() == proof
    }
}

/// Lease id of each waiting acquire → its notice sender.
pub(crate) type Routes = Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Notice>>>>;

/// The wake-up path of a client.
#[derive(Debug)]
pub(crate) enum Inbox {
    /// One channel for the client.
    Client(ClientInbox),
    /// A shard channel per lock waited on.
    Shard(ShardInbox),
}

impl Inbox {
    /// Starts the path `config` asks for, subscribed and ready.
    pub(crate) async fn start(
        config: &RedisConfig,
        client_id: &str,
    ) -> Result<Self, RedisLockError> {
        Ok(match config.wake_ups() {
            WakeUps::ShardChannels => Inbox::Shard(ShardInbox::start(config, client_id).await?),
            _ => Inbox::Client(
                ClientInbox::start(
                    &config.endpoints,
                    inbox_channel(&config.key_prefix, client_id),
                    config.connect_timeout,
                )
                .await?,
            ),
        })
    }

    /// The channel a waiter on the lock with `keys` records in its queue
    /// entry.
    pub(crate) fn channel(&self, keys: &LockKeys) -> String {
        match self {
            Inbox::Client(inbox) => inbox.channel.clone(),
            Inbox::Shard(inbox) => inbox.channel(keys),
        }
    }

    /// Whether a grant published on `channel` can reach this client right
    /// now. Waiters shorten their re-check interval while it cannot.
    pub(crate) fn is_listening(&self, channel: &str) -> bool {
        match self {
            Inbox::Client(inbox) => *inbox.connected.borrow(),
            Inbox::Shard(inbox) => inbox.is_listening(channel),
        }
    }

    /// Registers a waiter under `lease` for grants on `channel`, before
    /// its acquire is sent: once this returns, a grant published on the
    /// channel reaches it (unless the subscription could not be made in
    /// time; the waiter then re-checks on its bounded interval).
    pub(crate) async fn register(&self, lease: &str, channel: &str) -> Registration {
        let routes = match self {
            Inbox::Client(inbox) => &inbox.routes,
            Inbox::Shard(inbox) => inbox.routes(),
        };
        let (sender, notices) = mpsc::unbounded_channel();
        routes
            .lock()
            .expect("inbox routes poisoned")
            .insert(lease.to_owned(), sender);
        let interest = match self {
            Inbox::Client(_) => None,
            Inbox::Shard(inbox) => Some(inbox.subscribe(lease, channel).await),
        };
        Registration {
            lease: lease.to_owned(),
            routes: routes.clone(),
            notices,
            _interest: interest,
        }
    }
}

/// One channel per client: the subscription and the routing table.
#[derive(Debug)]
pub(crate) struct ClientInbox {
    /// The channel name, recorded in every queue entry of this client.
    channel: String,
    /// Lease id of each waiting acquire → its notice sender.
    routes: Routes,
    /// Whether the subscription is up right now. Waiters shorten their
    /// re-check interval while it is down.
    connected: watch::Receiver<bool>,
    /// The subscriber task, stopped when the client is dropped.
    task: JoinHandle<()>,
}

impl Drop for ClientInbox {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A waiter's registration; unregisters on drop.
pub(crate) struct Registration {
    lease: String,
    routes: Routes,
    /// Notices for this waiter.
    pub(crate) notices: mpsc::UnboundedReceiver<Notice>,
    /// Keeps the lock's shard channel subscribed while this waiter waits.
    _interest: Option<Interest>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.routes
            .lock()
            .expect("inbox routes poisoned")
            .remove(&self.lease);
    }
}

impl ClientInbox {
    /// Subscribes to `channel` on the first reachable URL and keeps the
    /// subscription up in the background. Returns once the first
    /// subscription is confirmed, so no grant can be missed from the start.
    ///
    /// The subscription uses the same TLS settings as the command
    /// connection: grants travel on it, and they name lease ids.
    pub(crate) async fn start(
        endpoints: &Endpoints,
        channel: String,
        connect_timeout: Duration,
    ) -> Result<Self, RedisLockError> {
        crate::connection::ensure_crypto_provider(endpoints);
        let clients = endpoints
            .iter()
            .map(|url| crate::connection::open_client(url, &endpoints.tls))
            .collect::<Result<Vec<_>, _>>()?;
        let routes: Routes = Arc::default();
        let (connected_tx, connected) = watch::channel(false);

        // The first subscription, in the foreground.
        let mut last_error = None;
        let mut first = None;
        for (index, client) in clients.iter().enumerate() {
            match subscribe(client, &channel, connect_timeout).await {
                Ok(pubsub) => {
                    first = Some((index, pubsub));
                    break;
                }
                Err(error) => last_error = Some(error),
            }
        }
        let Some((first_index, first_pubsub)) = first else {
            let error = last_error.unwrap_or_else(|| {
                redis::RedisError::from(std::io::Error::other("no Redis URL to subscribe on"))
            });
            let urls = endpoints
                .iter()
                .map(|url| palisade_core::redact::redact_url(url))
                .collect::<Vec<_>>();
            return Err(RedisLockError::Lock(crate::connection::connect_error(
                &urls.join(","),
                "subscribe",
                connect_timeout,
                error,
            )));
        };
        connected_tx.send_replace(true);

        let task = tokio::spawn(run(
            clients,
            first_index,
            first_pubsub,
            channel.clone(),
            connect_timeout,
            routes.clone(),
            connected_tx,
        ));
        Ok(ClientInbox {
            channel,
            routes,
            connected,
            task,
        })
    }
}

async fn subscribe(
    client: &redis::Client,
    channel: &str,
    timeout: Duration,
) -> Result<redis::aio::PubSub, redis::RedisError> {
    let connect = async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok(pubsub)
    };
    match tokio::time::timeout(timeout, connect).await {
        Ok(result) => result,
        Err(_elapsed) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
    }
}

/// Reads messages until the subscription drops, then resubscribes (trying
/// each URL in turn, with backoff) and tells every waiter to look again.
async fn run(
    clients: Vec<redis::Client>,
    mut index: usize,
    first: redis::aio::PubSub,
    channel: String,
    connect_timeout: Duration,
    routes: Routes,
    connected: watch::Sender<bool>,
) {
    let mut pubsub = Some(first);
    let fresh = || palisade_core::retry_pauses(Duration::from_millis(20), Duration::from_secs(1));
    let mut pauses = fresh();
    loop {
        if let Some(current) = pubsub.take() {
            connected.send_replace(true);
            pauses = fresh();
            let mut messages = current.into_on_message();
            while let Some(message) = messages.next().await {
                dispatch(&routes, message.get_payload_bytes());
            }
            connected.send_replace(false);
            tracing::warn!(backend = BACKEND, %channel, "inbox subscription lost; resubscribing");
            broadcast_recheck(&routes);
        }
        tokio::time::sleep(pauses.next().unwrap_or(Duration::from_secs(1))).await;
        index = (index + 1) % clients.len();
        match subscribe(&clients[index], &channel, connect_timeout).await {
            Ok(resubscribed) => {
                tracing::info!(backend = BACKEND, %channel, "inbox subscription restored");
                pubsub = Some(resubscribed);
                // Grants published while we were away were lost: look again.
                broadcast_recheck(&routes);
            }
            Err(error) => {
                tracing::debug!(backend = BACKEND, %channel, %error, "inbox resubscription failed");
            }
        }
    }
}

pub(crate) fn broadcast_recheck(routes: &Routes) {
    for sender in routes.lock().expect("inbox routes poisoned").values() {
        let _ = sender.send(Notice::Recheck);
    }
}

/// Routes one message: `"<lease> granted <generation> <server ms> <proof>"` or
/// `"<lease> recheck"`. Anything else is ignored (and logged).
pub(crate) fn dispatch(routes: &Routes, payload: &[u8]) {
    let Some((lease, notice)) = parse_notice(payload) else {
        tracing::warn!(backend = BACKEND, payload = %String::from_utf8_lossy(payload), "unreadable inbox message");
        return;
    };
    let routes = routes.lock().expect("inbox routes poisoned");
    match routes.get(lease) {
        Some(sender) => {
            let _ = sender.send(notice);
        }
        // The waiter gave up (its acquire was dropped). Its cleanup releases
        // whatever it was granted; nothing to do here.
        None => tracing::debug!(
            backend = BACKEND,
            lease,
            ?notice,
            "notice for a waiter that is gone"
        ),
    }
}

fn parse_notice(payload: &[u8]) -> Option<(&str, Notice)> {
    let text = std::str::from_utf8(payload).ok()?;
    let mut parts = text.split(' ');
    let lease = parts.next()?;
    let notice = match parts.next()? {
        "granted" => Notice::Granted {
            generation: parts.next()?.parse().ok()?,
            server_ms: parts.next()?.parse().ok()?,
            proof: parts.next()?.as_bytes().try_into().ok()?,
        },
        "recheck" => Notice::Recheck,
        _ => return None,
    };
    if parts.next().is_some() {
        return None;
    }
    Some((lease, notice))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_parse_exactly() {
        let proof = "a9993e364706816aba3e25717850c26c9cd0d89d";
        assert_eq!(
            parse_notice(format!("ab12 granted 42 1700000000000 {proof}").as_bytes()),
            Some((
                "ab12",
                Notice::Granted {
                    generation: 42,
                    server_ms: 1_700_000_000_000,
                    proof: proof.as_bytes().try_into().unwrap(),
                }
            ))
        );
        assert_eq!(
            parse_notice(b"ab12 recheck"),
            Some(("ab12", Notice::Recheck))
        );
        assert_eq!(
            parse_notice(format!("ab12 granted x 1 {proof}").as_bytes()),
            None
        );
        assert_eq!(parse_notice(b"ab12 granted 1 1"), None);
        assert_eq!(parse_notice(b"ab12 granted 1 1 short"), None);
        assert_eq!(
            parse_notice(format!("ab12 granted 1 1 {proof} extra").as_bytes()),
            None
        );
        assert_eq!(parse_notice(b"ab12 recheck extra"), None);
        assert_eq!(parse_notice(b"ab12 other"), None);
        assert_eq!(parse_notice(b"\xff"), None);
    }

    #[test]
    fn a_grant_proves_only_its_own_token() {
        let grant = |token: &str, generation: u64| Notice::Granted {
            generation,
            server_ms: 1,
            proof: sha1_smol::Sha1::from(format!("{token} {generation}"))
                .digest()
                .to_string()
                .as_bytes()
                .try_into()
                .unwrap(),
        };
        assert!(grant("secret", 7).proves("secret"));
        assert!(!grant("secret", 7).proves("other"));
        let Notice::Granted { proof, .. } = grant("secret", 7) else {
            unreachable!()
        };
        let replayed = Notice::Granted {
            generation: 8,
            server_ms: 1,
            proof,
        };
        assert!(!replayed.proves("secret"));
        assert!(!Notice::Recheck.proves("secret"));
    }
}
