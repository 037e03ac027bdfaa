//! A hold's watch on its own node: deleted by anyone but the session's own
//! release (a forced release), the hold is lost.
//!
//! What it costs ZooKeeper, by how the hold was granted:
//! - **after a listing** (contended): it starts from the one-shot watch
//!   the listing set on the directory's children, which costs no request
//!   of its own; only once that fires is the node itself watched (one
//!   `exists`);
//! - **from an empty directory** (no listing): nothing at the grant. The
//!   session's keep-alive arms the watches of such holds at its next tick,
//!   pipelined with its own requests: so a hold is watched within one
//!   keep-alive interval of its grant, and one released sooner (the usual
//!   uncontended acquire and release) costs no request and no task.
//!
//! The session's own release sets `released` before its delete and stops
//! the task once the delete is answered, so a watch ends fired, never
//! removed (removing one costs a request, sent ahead of the delete).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use palisade_core::{LeaseTracker, LostReason};
use zookeeper_client as zk;

use crate::client::lock;
use crate::errors::BACKEND;
use crate::session::Session;
use crate::task::AbortOnDrop;

/// One hold's node and the task watching it.
pub(crate) struct NodeWatch {
    /// The contender node's path.
    pub(crate) path: String,
    tracker: Arc<LeaseTracker>,
    /// Set before the session's own delete is sent: the watch then takes
    /// the deletion for what it is.
    released: AtomicBool,
    /// The watching task, once armed; checked and set under this lock
    /// together with `released`, so a release never misses it.
    task: Mutex<Option<AbortOnDrop>>,
}

impl NodeWatch {
    pub(crate) fn new(path: String, tracker: Arc<LeaseTracker>) -> Arc<NodeWatch> {
        Arc::new(NodeWatch {
            path,
            tracker,
            released: AtomicBool::new(false),
            task: Mutex::new(None),
        })
    }

    /// Starts watching: from `children` (the listing's watch) if given,
    /// else the node at once. Does nothing once the release has begun.
    pub(crate) fn arm(
        self: &Arc<Self>,
        session: &Arc<Session>,
        children: Option<zk::OneshotWatcher>,
    ) {
        let mut task = lock(&self.task);
        if self.released.load(Ordering::Acquire) || task.is_some() {
            return;
        }
        let watching = watch(Arc::downgrade(session), Arc::downgrade(self), children);
        *task = Some(AbortOnDrop(tokio::spawn(watching)));
    }

    /// The session's own release is under way: its deletion of the node
    /// is not a forced release. Returns the task, to be dropped (stopped)
    /// once the delete is answered.
    pub(crate) fn release(&self) -> Option<AbortOnDrop> {
        self.released.store(true, Ordering::Release);
        lock(&self.task).take()
    }

    fn deleted(&self) {
        if self.released.load(Ordering::Acquire) {
            return;
        }
        if self.tracker.lose(LostReason::KeyDeleted) {
            tracing::warn!(backend = BACKEND, node = %self.path, "the hold's node was deleted by someone else: lease lost");
        }
    }
}

/// The watching task. Holds neither the session nor the hold: it ends
/// when either is gone.
async fn watch(
    session: Weak<Session>,
    hold: Weak<NodeWatch>,
    children: Option<zk::OneshotWatcher>,
) {
    if let Some(children) = children {
        if children.changed().await.event_type == zk::EventType::Session {
            // The session's own end is followed elsewhere.
            return;
        }
        match hold.upgrade() {
            // Fired by the session's own release.
            Some(hold) if hold.released.load(Ordering::Acquire) => return,
            Some(_) => {}
            None => return,
        }
    }
    loop {
        let (Some(strong), Some(node)) = (session.upgrade(), hold.upgrade()) else {
            return;
        };
        let Ok(zk) = strong.zk() else {
            return;
        };
        let watch = zk.check_and_watch_stat(&node.path);
        let watched = strong.client.inner.bounded("watch hold", watch).await;
        drop((zk, strong));
        let watcher = match watched {
            Ok((Some(_), watcher)) => watcher,
            Ok((None, _)) => return node.deleted(),
            // The session's own end is followed elsewhere.
            Err(_) => return,
        };
        drop(node);
        let event = watcher.changed().await.event_type;
        let Some(node) = hold.upgrade() else {
            return;
        };
        match event {
            zk::EventType::NodeDeleted => return node.deleted(),
            zk::EventType::Session => return,
            _ => {}
        }
    }
}
