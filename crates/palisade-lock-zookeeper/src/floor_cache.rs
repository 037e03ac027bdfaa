//! A session's copy of the floor history, kept under a persistent watch,
//! so that an acquire need not read the floor node every time.
//!
//! **Why a copy is safe.** A grant needs the floor in force before its
//! node's creation zxid `c` (floor.rs). A raise is a change of the floor
//! node at some zxid `z`. The session watches that node (a persistent
//! watch, registered before the copy was read), and ZooKeeper sends a
//! watch event on a connection before any reply to a request it answers
//! after the change: the server that answers the create has applied every
//! transaction below `c`, so a raise at `z < c` has put its event on the
//! connection before the create's reply. The client library hands events
//! to watchers in the order it reads them, before the replies behind them.
//! So once the create's reply is in, every raise that matters to it has
//! an event in the watcher's channel: an acquire that finds none since it
//! looked at the copy may use the copy. Any event, a connection's loss
//! included (the watch's events while disconnected are not replayed for
//! persistent watches), throws the copy away, and the acquire reads the
//! floor after its create instead, as without a copy.

use std::future::Future;
use std::pin::pin;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use zookeeper_client as zk;

use crate::client::lock;
use crate::floor::FloorHistory;

/// The copy and the watch that keeps it honest.
#[derive(Default)]
pub(crate) struct FloorCache {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    watcher: Option<zk::PersistentWatcher>,
    history: Option<FloorHistory>,
    /// Counts the events seen: a copy read, or used, while it did not
    /// change is good.
    events: u64,
}

/// What an acquire does about the floor, decided before its create is
/// sent.
pub(crate) enum FloorPlan {
    /// Use the copy, unless an event arrives before the create's reply.
    Cached { history: FloorHistory, events: u64 },
    /// Read the floor in the create's pipeline, after the watch's
    /// registration (sent with it if there was none), so that the read
    /// may become the copy.
    Read { events: u64 },
}

impl FloorCache {
    /// Before the create: the copy, or a read to send (after registering
    /// the watch, if there is none, so that the read may become the copy).
    /// Registration needs the returned future awaited after the replies.
    pub(crate) fn plan<'a>(
        &self,
        zk: &'a zk::Client,
        floor_path: &str,
    ) -> (
        FloorPlan,
        Option<impl Future<Output = Result<zk::PersistentWatcher, zk::Error>> + Send + 'a>,
    ) {
        let mut state = lock(&self.state);
        state.drain();
        if let Some(history) = &state.history {
            let plan = FloorPlan::Cached {
                history: history.clone(),
                events: state.events,
            };
            return (plan, None);
        }
        // Concurrent first acquires may each register one: the last
        // registered is kept (read() drains the one it replaces).
        let register = state
            .watcher
            .is_none()
            .then(|| zk.watch(floor_path, zk::AddWatchMode::Persistent));
        let plan = FloorPlan::Read {
            events: state.events,
        };
        (plan, register)
    }

    /// After the create's reply: whether a copy planned on still holds
    /// (no event since the plan).
    pub(crate) fn still_holds(&self, events: u64) -> bool {
        let mut state = lock(&self.state);
        state.drain();
        state.events == events
    }

    /// After a planned read's reply (and the registration's, if this
    /// acquire sent it): keeps the read as the copy when the watch was in
    /// place before the read and nothing changed since the plan.
    pub(crate) fn read(
        &self,
        events: u64,
        registered: Option<Result<zk::PersistentWatcher, zk::Error>>,
        history: &FloorHistory,
    ) {
        let mut state = lock(&self.state);
        match registered {
            Some(Ok(watcher)) => {
                // The watch replaced may hold an event from before this
                // one was registered: count it first.
                state.drain();
                state.watcher = Some(watcher);
            }
            Some(Err(error)) => {
                // Another acquire's watch may be newer than this read.
                tracing::debug!(%error, "no watch on the floor node: the floor was read, not kept");
                return;
            }
            None => {}
        }
        state.drain();
        // No watcher: the one in place at the plan ended with an event.
        if state.watcher.is_some() && state.events == events {
            state.history = Some(history.clone());
        }
    }
}

impl State {
    /// Takes every event already handed to the watcher, without waiting:
    /// each one drops the copy; a session event drops the watch too (the
    /// watcher must not be asked again after the session's end).
    fn drain(&mut self) {
        while let Some(watcher) = &mut self.watcher {
            let event = {
                let mut changed = pin!(watcher.changed());
                match changed
                    .as_mut()
                    .poll(&mut Context::from_waker(Waker::noop()))
                {
                    Poll::Ready(event) => event,
                    Poll::Pending => return,
                }
            };
            self.events += 1;
            self.history = None;
            if event.event_type == zk::EventType::Session {
                self.watcher = None;
            }
        }
    }
}
