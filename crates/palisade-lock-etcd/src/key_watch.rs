//! Holders watch their own keys: a hold is lost when its key is deleted
//! (lease revoked or expired on the server, an operator's delete), even if
//! the keep-alive has not noticed yet.
//!
//! One task per session follows the keys of all its holds, on the session's
//! watch stream. A hold's watch is armed [`ARMS_AFTER`] its grant, starting
//! at the revision after the read that proved the grant: a deletion in
//! between is replayed from etcd's history the moment the watch exists
//! (served by etcd's catch-up loop, within about 100 ms), so arming late
//! loses nothing. Most holds are shorter than that and never need a watch;
//! creating one per hold would cost a task hop and a watch create and
//! cancel on every acquire, about a tenth of an uncontended cycle.
//!
//! The task sleeps while the session holds nothing, and ticks every
//! [`ARMS_AFTER`] while it holds something.

use std::sync::{Arc, Weak};
use std::time::Duration;

use palisade_core::{LockName, LostReason};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use palisade_core::holds::HoldBackend;

use crate::session::Session;
use crate::task::AbortOnDrop;
use crate::watch_hub::{Registration, Signal};

/// How long after its grant a hold's key starts being watched.
pub(crate) const ARMS_AFTER: Duration = Duration::from_millis(50);

/// The session's key watcher.
pub(crate) struct KeyWatch {
    wake: Arc<Notify>,
    _task: AbortOnDrop,
}

impl KeyWatch {
    pub(crate) fn start(session: Weak<Session>) -> KeyWatch {
        let wake = Arc::new(Notify::new());
        let task = tokio::spawn(run(session, wake.clone()));
        KeyWatch {
            wake,
            _task: AbortOnDrop::new(task),
        }
    }

    /// A hold was added: if the task sleeps, it starts ticking. A notify
    /// while it ticks is kept as a permit and costs nothing.
    pub(crate) fn hold_added(&self) {
        self.wake.notify_one();
    }
}

/// A watched hold.
struct Watched {
    name: LockName,
    create_revision: i64,
    key: String,
    /// `None` after a failure, until re-armed.
    registration: Option<Registration>,
    /// The watch starts after this revision: the grant's, or a later read
    /// that found the key still there.
    known_at: i64,
}

async fn run(session: Weak<Session>, wake: Arc<Notify>) {
    let (sink, mut signals) = mpsc::unbounded_channel::<(i64, Signal)>();
    let mut watched: Vec<Watched> = Vec::new();
    let mut ticking = true;
    loop {
        tokio::select! {
            () = tokio::time::sleep(ARMS_AFTER), if ticking => {
                let Some(session) = session.upgrade() else { return };
                ticking = sweep(&session, &mut watched, &sink).await;
            }
            () = wake.notified(), if !ticking => ticking = true,
            Some((id, signal)) = signals.recv() => {
                let Some(session) = session.upgrade() else { return };
                on_signal(&session, &mut watched, id, signal);
            }
        }
    }
}

/// Arms the holds old enough, forgets the ones that are gone, and re-arms
/// the ones whose watch failed. Returns whether anything is held.
async fn sweep(
    session: &Arc<Session>,
    watched: &mut Vec<Watched>,
    sink: &mpsc::UnboundedSender<(i64, Signal)>,
) -> bool {
    let now = Instant::now();
    let held = {
        let holds = session.holds().holds();
        watched.retain(|entry| {
            holds.iter().any(|hold| {
                hold.name() == &entry.name
                    && hold.data().create_revision == entry.create_revision
                    && hold.is_held()
            })
        });
        for hold in &holds {
            let etcd = hold.data();
            let known = watched.iter().any(|entry| {
                entry.name == *hold.name() && entry.create_revision == etcd.create_revision
            });
            if !known && now >= etcd.granted_at + ARMS_AFTER && hold.is_held() {
                watched.push(Watched {
                    name: hold.name().clone(),
                    create_revision: etcd.create_revision,
                    key: etcd.key.clone(),
                    registration: Some(session.hub.watch(
                        etcd.key.clone(),
                        etcd.grant_revision + 1,
                        sink.clone(),
                    )),
                    known_at: etcd.grant_revision,
                });
            }
        }
        !holds.is_empty()
    };
    // Watches that broke: read the key (the watch may have missed its
    // deletion, and its start may have been compacted away), then watch
    // again from that read.
    for entry in watched
        .iter_mut()
        .filter(|entry| entry.registration.is_none())
    {
        match session.read_key(&entry.key).await {
            Ok((Some(current), revision)) if current == entry.create_revision => {
                entry.known_at = revision;
                entry.registration = Some(session.hub.watch(
                    entry.key.clone(),
                    revision + 1,
                    sink.clone(),
                ));
            }
            Ok(_) => key_deleted(session, &entry.name, entry.create_revision),
            Err(error) => {
                tracing::debug!(lock = %entry.name, %error, "re-reading a held key failed; retrying");
            }
        }
    }
    held
}

fn on_signal(session: &Session, watched: &mut [Watched], id: i64, signal: Signal) {
    let Some(entry) = watched
        .iter_mut()
        .find(|entry| entry.registration.as_ref().is_some_and(|r| r.id() == id))
    else {
        // A watch already dropped; its cancel is on the way.
        return;
    };
    match signal {
        Signal::Deleted { .. } => key_deleted(session, &entry.name, entry.create_revision),
        Signal::Put {
            create_revision, ..
        } if create_revision != entry.create_revision => {
            key_deleted(session, &entry.name, entry.create_revision);
        }
        Signal::Created { .. } | Signal::Put { .. } => {}
        Signal::Broken => {
            tracing::debug!(lock = %entry.name, known_at = entry.known_at, "a held key's watch broke");
            entry.registration = None;
        }
    }
}

/// Marks the hold with `create_revision` on `name` lost, if it is still
/// this session's.
fn key_deleted(session: &Session, name: &LockName, create_revision: i64) {
    if let Some(hold) = session.holds().hold(name)
        && hold.data().create_revision == create_revision
        && hold.tracker().lose(LostReason::KeyDeleted)
    {
        tracing::warn!(lock = %name, generation = create_revision, reason = %LostReason::KeyDeleted, "lease lost");
    }
}
