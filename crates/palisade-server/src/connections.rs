//! Which open connections may be shed to admit a new one.
//!
//! At `max_connections`, refusing new connections (leaving them in the
//! kernel's accept queue) lets whoever holds the slots decide who is
//! served: 1500 connections trickling header bytes kept honest clients
//! waiting for whole header time limits. So, like a reverse proxy under
//! overload, the server sheds instead: a new connection takes the slot of
//! the connection that is **not inside a request** and has been so the
//! longest. Connections that never completed a request (a slowloris, a
//! TLS handshake that never ends) go first, oldest first; then idle
//! keep-alive connections, least recently used first. A connection inside
//! a request (its headers are in, its answer is not yet written) is never
//! shed, so no request that reached a handler is cut by shedding.
//!
//! Shedding does not look at addresses: many honest clients share one
//! (NAT, a proxy, loopback), so a per-address cap would refuse them with
//! the attacker.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// The open connections, in shedding order.
#[derive(Debug, Default)]
pub(crate) struct Connections {
    registry: Mutex<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    /// Increases with every registration and every finished request: the
    /// order of "last active".
    clock: u64,
    /// The connections outside a request, by shedding order: the first is
    /// shed first.
    idle: BTreeMap<IdleKey, u64>,
    open: HashMap<u64, Entry>,
}

/// Fresh connections (no request completed yet) sort before keep-alive
/// ones; within each, the least recently active first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct IdleKey {
    served: bool,
    last_active: u64,
}

#[derive(Debug)]
struct Entry {
    idle_key: Option<IdleKey>,
    requests_in_progress: u32,
    shed: bool,
    wake: Arc<Notify>,
}

impl Connections {
    fn registry(&self) -> MutexGuard<'_, Registry> {
        // A panic while holding the lock cannot leave the maps half
        // updated in a way that matters more than losing the server.
        self.registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a new connection; it is removed when the handle drops.
    pub(crate) fn register(self: &Arc<Self>) -> ConnectionHandle {
        let wake = Arc::new(Notify::new());
        let mut registry = self.registry();
        registry.clock += 1;
        let id = registry.clock;
        let key = IdleKey {
            served: false,
            last_active: id,
        };
        registry.idle.insert(key, id);
        registry.open.insert(
            id,
            Entry {
                idle_key: Some(key),
                requests_in_progress: 0,
                shed: false,
                wake: Arc::clone(&wake),
            },
        );
        ConnectionHandle {
            id,
            connections: Arc::clone(self),
            wake,
        }
    }

    /// Tells the connection first in shedding order to close. False when
    /// every open connection is inside a request.
    pub(crate) fn shed_one(&self) -> bool {
        let mut registry = self.registry();
        let Some((_, id)) = registry.idle.pop_first() else {
            return false;
        };
        let entry = registry
            .open
            .get_mut(&id)
            .expect("an idle connection is open");
        entry.idle_key = None;
        entry.shed = true;
        // `notify_one` keeps the wake-up if the task is not waiting yet.
        entry.wake.notify_one();
        true
    }
}

/// One connection's place in [`Connections`].
#[derive(Debug)]
pub(crate) struct ConnectionHandle {
    id: u64,
    connections: Arc<Connections>,
    wake: Arc<Notify>,
}

impl ConnectionHandle {
    /// Resolves when this connection has been shed.
    pub(crate) async fn shed(&self) {
        self.wake.notified().await;
    }

    /// A request's headers are in: the connection may not be shed until
    /// the returned guard drops (when its answer has been written). None
    /// if it has already been shed.
    pub(crate) fn begin_request(self: &Arc<Self>) -> Option<RequestInProgress> {
        let mut registry = self.connections.registry();
        let entry = registry.open.get_mut(&self.id)?;
        if entry.shed {
            return None;
        }
        entry.requests_in_progress += 1;
        if let Some(key) = entry.idle_key.take() {
            registry.idle.remove(&key);
        }
        Some(RequestInProgress {
            connection: Arc::clone(self),
        })
    }

    fn end_request(&self) {
        let mut registry = self.connections.registry();
        registry.clock += 1;
        let last_active = registry.clock;
        let Some(entry) = registry.open.get_mut(&self.id) else {
            return;
        };
        entry.requests_in_progress = entry.requests_in_progress.saturating_sub(1);
        if entry.shed || entry.requests_in_progress > 0 {
            return;
        }
        let key = IdleKey {
            served: true,
            last_active,
        };
        entry.idle_key = Some(key);
        registry.idle.insert(key, self.id);
    }
}

impl Drop for ConnectionHandle {
    fn drop(&mut self) {
        let mut registry = self.connections.registry();
        let idle_key = registry
            .open
            .remove(&self.id)
            .and_then(|entry| entry.idle_key);
        if let Some(key) = idle_key {
            registry.idle.remove(&key);
        }
    }
}

/// Held from a request's headers until its answer is written.
#[derive(Debug)]
pub(crate) struct RequestInProgress {
    connection: Arc<ConnectionHandle>,
}

impl Drop for RequestInProgress {
    fn drop(&mut self) {
        self.connection.end_request();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_connections_are_shed_first_then_the_least_recently_used() {
        let connections = Arc::new(Connections::default());
        let keep_alive = Arc::new(connections.register());
        let request = keep_alive.begin_request().unwrap();
        let fresh_old = Arc::new(connections.register());
        let fresh_new = Arc::new(connections.register());
        drop(request);

        assert!(connections.shed_one());
        assert!(fresh_old.begin_request().is_none(), "oldest fresh first");
        assert!(connections.shed_one());
        assert!(fresh_new.begin_request().is_none());
        assert!(connections.shed_one());
        assert!(keep_alive.begin_request().is_none(), "then keep-alive");
        assert!(!connections.shed_one(), "nothing left to shed");
    }

    #[test]
    fn a_connection_inside_a_request_is_never_shed() {
        let connections = Arc::new(Connections::default());
        let busy = Arc::new(connections.register());
        let request = busy.begin_request().unwrap();
        assert!(!connections.shed_one());
        drop(request);
        assert!(connections.shed_one());

        // A closed connection leaves nothing behind to shed.
        let closed = connections.register();
        drop(closed);
        assert!(!connections.shed_one());
    }
}
