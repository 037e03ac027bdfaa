//! One watch stream per session, shared by all its watches.
//!
//! A waiter watches one key (its blocker) and a holder its own key (see
//! `key_watch.rs`).
//! Opening a gRPC stream for each would cost a stream set-up per acquire;
//! instead each session keeps one stream and adds and cancels watches on it,
//! naming each watch with an id chosen here (etcd 3.4+ accepts client-chosen
//! watch ids, so creates need not wait for one another).
//!
//! When the stream fails, every watch on it receives [`Signal::Broken`] and
//! is forgotten; its owner re-reads what it was waiting for and watches
//! again. The stream is reopened on the next watch.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use etcd_client::{
    EventType, WatchOptions, WatchRequestSender, WatchResponse, WatchResponseStream,
};
use tokio::sync::mpsc;

use crate::client::{ClientInner, Resend};
use crate::task::AbortOnDrop;

/// What a watch reports to its owner, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// The watch exists. It reports every change after `revision` (etcd's
    /// revision when it created the watch; a start revision of "now" is that
    /// revision + 1).
    Created {
        /// The store revision at creation.
        revision: i64,
    },
    /// The key was deleted at `revision`.
    Deleted {
        /// The deletion's revision.
        revision: i64,
    },
    /// The key was written at `revision`, with this create-revision.
    Put {
        /// The write's revision.
        revision: i64,
        /// The key's create-revision after the write.
        create_revision: i64,
    },
    /// The watch ended without being cancelled (stream failure, member lost
    /// its leader, compaction). What it watched must be read again.
    Broken,
}

/// Where a watch's signals go, tagged with the watch's id: one task can
/// follow many watches on one channel.
type Sink = mpsc::UnboundedSender<(i64, Signal)>;

enum Command {
    Create {
        id: i64,
        key: Vec<u8>,
        start_revision: i64,
        sink: Sink,
    },
    Cancel {
        id: i64,
    },
}

/// A session's watch stream.
pub(crate) struct WatchHub {
    commands: mpsc::UnboundedSender<Command>,
    next_id: AtomicI64,
    _task: AbortOnDrop,
}

/// A watch's registration: cancels the watch when dropped.
pub(crate) struct Registration {
    id: i64,
    commands: mpsc::UnboundedSender<Command>,
}

impl Registration {
    /// The watch id, as it tags signals sent to a shared channel.
    pub(crate) fn id(&self) -> i64 {
        self.id
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Cancel { id: self.id });
    }
}

impl WatchHub {
    pub(crate) fn new(connection: Arc<ClientInner>) -> Self {
        let (commands, receiver) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(connection, receiver));
        WatchHub {
            commands,
            next_id: AtomicI64::new(1),
            _task: AbortOnDrop::new(task),
        }
    }

    /// Watches `key` from `start_revision` (inclusive; 0 means "from
    /// now"), sending what etcd reports to `sink`, tagged with the returned
    /// registration's id. Dropping the registration cancels the watch.
    ///
    /// Use "now" for a watch whose delay matters (a waiter's): etcd serves a
    /// watch that starts at a past revision from a catch-up loop that runs
    /// every 100 ms, and one that starts now at once.
    pub(crate) fn watch(
        &self,
        key: impl Into<Vec<u8>>,
        start_revision: i64,
        sink: Sink,
    ) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let _ = self.commands.send(Command::Create {
            id,
            key: key.into(),
            start_revision,
            sink,
        });
        Registration {
            id,
            commands: self.commands.clone(),
        }
    }
}

/// The stream's two halves, once open.
struct Stream {
    requests: WatchRequestSender,
    responses: WatchResponseStream,
}

/// What woke the hub up.
enum Step {
    Command(Option<Command>),
    Response(Result<Option<WatchResponse>, etcd_client::Error>),
}

async fn run(connection: Arc<ClientInner>, mut commands: mpsc::UnboundedReceiver<Command>) {
    let mut watchers: HashMap<i64, Sink> = HashMap::new();
    let mut stream: Option<Stream> = None;
    loop {
        let step = {
            let response = async {
                match &mut stream {
                    Some(open) => open.responses.message().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                command = commands.recv() => Step::Command(command),
                response = response => Step::Response(response),
            }
        };
        match step {
            Step::Command(None) => return,
            Step::Command(Some(Command::Create {
                id,
                key,
                start_revision,
                sink,
            })) => {
                watchers.insert(id, sink);
                connection.counters.bump(|counts| &mut counts.watch_creates);
                let options = WatchOptions::new()
                    .with_watch_id(id)
                    .with_start_revision(start_revision);
                let sent = match &mut stream {
                    Some(open) => open.requests.watch(key, Some(options)).await.is_ok(),
                    None => match open_stream(&connection, key, options).await {
                        Some(opened) => {
                            stream = Some(opened);
                            true
                        }
                        None => false,
                    },
                };
                if !sent {
                    stream = None;
                    break_all(&mut watchers);
                }
            }
            Step::Command(Some(Command::Cancel { id })) => {
                if watchers.remove(&id).is_some() {
                    if let Some(open) = &mut stream {
                        if open.requests.cancel(id).await.is_err() {
                            stream = None;
                            break_all(&mut watchers);
                        }
                    }
                }
            }
            Step::Response(Ok(Some(response))) => route(&mut watchers, &response),
            Step::Response(ended) => {
                if let Err(error) = &ended {
                    tracing::debug!(%error, "etcd watch stream failed");
                }
                stream = None;
                break_all(&mut watchers);
            }
        }
    }
}

/// Opens the stream with its first watch.
async fn open_stream(
    connection: &ClientInner,
    key: Vec<u8>,
    options: WatchOptions,
) -> Option<Stream> {
    connection.counters.bump(|counts| &mut counts.watch_streams);
    let client = connection.client.watch_client();
    let opened = crate::client::within(
        "watch",
        connection.request_timeout(),
        Resend::Always,
        || {
            let (mut client, key, options) = (client.clone(), key.clone(), options.clone());
            async move { client.watch(key, Some(options)).await }
        },
    )
    .await;
    match opened {
        Ok(opened) => {
            let (requests, responses) = opened.split();
            Some(Stream {
                requests,
                responses,
            })
        }
        Err(error) => {
            tracing::debug!(%error, "cannot open an etcd watch stream");
            None
        }
    }
}

fn route(watchers: &mut HashMap<i64, Sink>, response: &WatchResponse) {
    let id = response.watch_id();
    let Some(sink) = watchers.get(&id) else {
        // A watch cancelled by its owner; late events are dropped.
        return;
    };
    let mut delivered = true;
    if response.created() {
        let revision = response
            .header()
            .map(|header| header.revision())
            .unwrap_or_default();
        delivered &= sink.send((id, Signal::Created { revision })).is_ok();
    }
    for event in response.events() {
        let Some(kv) = event.kv() else { continue };
        let signal = match event.event_type() {
            EventType::Delete => Signal::Deleted {
                revision: kv.mod_revision(),
            },
            EventType::Put => Signal::Put {
                revision: kv.mod_revision(),
                create_revision: kv.create_revision(),
            },
        };
        delivered &= sink.send((id, signal)).is_ok();
    }
    if response.canceled() {
        tracing::debug!(
            watch_id = id,
            reason = response.cancel_reason(),
            compact_revision = response.compact_revision(),
            "etcd cancelled a watch"
        );
        let _ = sink.send((id, Signal::Broken));
        watchers.remove(&id);
    } else if !delivered {
        // The owner is gone and its cancel is on the way.
        watchers.remove(&id);
    }
}

fn break_all(watchers: &mut HashMap<i64, Sink>) {
    for (id, sink) in watchers.drain() {
        let _ = sink.send((id, Signal::Broken));
    }
}
