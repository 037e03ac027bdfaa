//! Hints at changes of the locks under a name prefix ([`Inspect::changes`]):
//! one persistent recursive watch on the lock root per observer, on the
//! client's reader session.
//!
//! A grant, a release and a session's end each create or delete a
//! contender node (or write a lock directory's data) under the lock's
//! directory: an event of the recursive watch, kept when the directory is
//! a lock's whose name starts with the prefix. The hint waits for the
//! watch's registration: once [`changes`] returns, no such change goes
//! without a hint. ZooKeeper does not replay a persistent watch's events
//! missed while disconnected (ZOOKEEPER-4698): the observer is hinted on
//! the disconnect, and on the reconnect the watch is set again (the client
//! library does not set persistent watches again by itself) and the
//! observer hinted once more. When the reader session ends, the watch is
//! set on a new one; while it cannot be, hints come every `every`, as
//! without a watch.
//!
//! [`Inspect::changes`]: palisade_core::Inspect::changes

use std::sync::Arc;
use std::time::Duration;

use palisade_core::{ChangeSender, Changes, LockError, name_has_prefix};
use zookeeper_client as zk;

use crate::client::ClientInner;
use crate::names::name_of_segment;

/// Watches the lock root and hints at each change of a lock under
/// `prefix`.
pub(crate) async fn changes(
    inner: Arc<ClientInner>,
    prefix: String,
    every: Duration,
) -> Result<Changes, LockError> {
    let watcher = register(&inner).await?;
    let (sender, changes) = Changes::pushed();
    tokio::spawn(follow(inner, prefix, every, sender, watcher));
    Ok(changes)
}

/// The recursive watch on the lock root, registered.
async fn register(inner: &ClientInner) -> Result<zk::PersistentWatcher, LockError> {
    let reader = inner.reader().await?;
    let watch = reader.watch(inner.layout.root(), zk::AddWatchMode::PersistentRecursive);
    inner
        .bounded("watch locks", watch)
        .await
        .map_err(|error| inner.error("watch locks", error))
}

/// Whether an event at `path` concerns a lock under `prefix`.
fn concerns(root: &str, path: &str, prefix: &str) -> bool {
    let Some(rest) = path
        .strip_prefix(root)
        .and_then(|rest| rest.strip_prefix('/'))
    else {
        return false;
    };
    let segment = rest.split('/').next().unwrap_or_default();
    name_of_segment(segment).is_some_and(|name| name_has_prefix(&name, prefix))
}

async fn follow(
    inner: Arc<ClientInner>,
    prefix: String,
    every: Duration,
    sender: ChangeSender,
    watcher: zk::PersistentWatcher,
) {
    let mut watcher = Some(watcher);
    loop {
        // Follow the watch until it needs setting again or the observer
        // leaves.
        while let Some(following) = watcher.as_mut() {
            let event = tokio::select! {
                () = sender.closed() => return,
                event = following.changed() => event,
            };
            match (event.event_type, event.session_state) {
                (zk::EventType::Session, state) if state.is_terminated() => break,
                // Reconnected: the client library does not set persistent
                // watches again on a reconnect, and ZooKeeper would not
                // replay what was missed anyway.
                (zk::EventType::Session, zk::SessionState::SyncConnected) => break,
                (zk::EventType::Session, _) => sender.notify(),
                _ if concerns(inner.layout.root(), &event.path, &prefix) => sender.notify(),
                _ => {}
            }
        }
        tracing::debug!(prefix, "setting a changes watch again");
        // Dropped first: dropping sends its removal, and the server keeps
        // one persistent watch per path and session, so the removal must
        // go before the new registration.
        drop(watcher.take());
        watcher = Some(match sender.reopen(every, || register(&inner)).await {
            Some(registered) => registered,
            None => return,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::concerns;

    #[test]
    fn events_are_kept_for_the_locks_under_the_prefix() {
        let root = "/palisade/locks";
        assert!(concerns(
            root,
            "/palisade/locks/jobs%2Fa/x__lock__0000000001",
            "jobs/"
        ));
        assert!(concerns(root, "/palisade/locks/jobs%2Fa", "jobs/"));
        assert!(concerns(root, "/palisade/locks/jobs", ""));
        assert!(!concerns(root, "/palisade/locks/mail%2Fa/x", "jobs/"));
        assert!(!concerns(root, "/palisade/locksmith/jobs%2Fa", "jobs/"));
        assert!(!concerns(root, "/palisade/locks", "jobs/"));
    }
}
