//! The per-lock read-write locks that serialise requests from the mark
//! check until the handler is done.
//!
//! Why a read-write lock and not a mutex: an exclusive request raises
//! `H_excl` and writes, so it must run alone; shared requests only read and
//! raise `H_shared`, which the fencing rule allows in any order among
//! readers, so they may run together. tokio's `RwLock` is fair (first come,
//! first served), so a stream of readers cannot starve a writer.
//!
//! Why entries are counted and removed: a service sees an unbounded number
//! of lock names over its life. An entry exists only while some request
//! holds or waits for it; the last one out removes it, so memory is bounded
//! by the requests in flight, not by the names ever seen. The count is
//! changed only under the table's mutex, which is also the only place new
//! handles are made, so "count reached zero" cannot race with "someone took
//! a new handle".

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use palisade_core::{Generation, LockName, Mode};
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

/// The table: one entry per lock with requests in flight.
#[derive(Debug, Default)]
pub(crate) struct LockTable {
    entries: Mutex<HashMap<LockName, Entry>>,
}

#[derive(Debug)]
struct Entry {
    lock: Arc<RwLock<()>>,
    /// Requests holding or waiting for `lock`. The entry is removed when
    /// this drops to zero.
    users: usize,
    /// Requests waiting for `lock`: found it taken, not yet granted.
    waiting: usize,
}

/// A request's place on one lock: counted from the moment it asks until it
/// is dropped (granted and finished, or cancelled while waiting).
#[derive(Debug)]
struct Ticket {
    table: Arc<LockTable>,
    name: LockName,
    waiting: bool,
}

/// A granted per-lock lock. Dropping it lets the next request in.
#[derive(Debug)]
pub(crate) struct Held {
    // Field order matters (fields drop in order): the lock is released
    // first, then the ticket gives the entry back and removes it if this
    // was the last request on it.
    _guard: HeldGuard,
    _ticket: Ticket,
}

#[derive(Debug)]
enum HeldGuard {
    Shared(#[allow(dead_code)] OwnedRwLockReadGuard<()>),
    Exclusive(#[allow(dead_code)] OwnedRwLockWriteGuard<()>),
}

impl LockTable {
    fn entries(&self) -> MutexGuard<'_, HashMap<LockName, Entry>> {
        // Critical sections are a few counter updates; a panic cannot leave
        // them half done.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for `name`'s lock in `mode` (exclusive: alone; shared: with
    /// other shared requests). Returns the held lock and whether the request
    /// had to wait behind another one. Dropping the future while it waits
    /// gives its place back.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        name: &LockName,
        mode: Mode,
        generation: Generation,
    ) -> (Held, bool) {
        let (lock, mut ticket) = {
            let mut entries = self.entries();
            let entry = entries.entry(name.clone()).or_insert_with(|| Entry {
                lock: Arc::new(RwLock::new(())),
                users: 0,
                waiting: 0,
            });
            entry.users += 1;
            (
                Arc::clone(&entry.lock),
                Ticket {
                    table: Arc::clone(self),
                    name: name.clone(),
                    waiting: false,
                },
            )
        };
        let immediate = match mode {
            Mode::Exclusive => Arc::clone(&lock)
                .try_write_owned()
                .ok()
                .map(HeldGuard::Exclusive),
            Mode::Shared => Arc::clone(&lock)
                .try_read_owned()
                .ok()
                .map(HeldGuard::Shared),
        };
        let waited = immediate.is_none();
        let guard = match immediate {
            Some(guard) => guard,
            None => {
                // Counted as waiting only now that the lock is known to be
                // taken: a request seen waiting is one that waits.
                ticket.waits();
                tracing::debug!(
                    target: "palisade_guard::fence",
                    lock = %name,
                    mode = mode.as_str(),
                    generation = generation.get(),
                    decision = "queued",
                    "queued behind an earlier request on the same lock"
                );
                let guard = match mode {
                    Mode::Exclusive => HeldGuard::Exclusive(lock.write_owned().await),
                    Mode::Shared => HeldGuard::Shared(lock.read_owned().await),
                };
                tracing::debug!(
                    target: "palisade_guard::fence",
                    lock = %name,
                    mode = mode.as_str(),
                    generation = generation.get(),
                    decision = "woken",
                    "woken: the earlier request on the lock finished"
                );
                guard
            }
        };
        ticket.granted();
        (
            Held {
                _guard: guard,
                _ticket: ticket,
            },
            waited,
        )
    }

    /// How many requests are waiting (not yet granted) for `name`.
    pub(crate) fn waiting(&self, name: &LockName) -> usize {
        self.entries().get(name).map_or(0, |entry| entry.waiting)
    }

    /// How many locks have requests in flight (the table's size).
    pub(crate) fn len(&self) -> usize {
        self.entries().len()
    }
}

impl Ticket {
    fn waits(&mut self) {
        self.waiting = true;
        if let Some(entry) = self.table.entries().get_mut(&self.name) {
            entry.waiting += 1;
        }
    }

    fn granted(&mut self) {
        if self.waiting {
            self.waiting = false;
            if let Some(entry) = self.table.entries().get_mut(&self.name) {
                entry.waiting -= 1;
            }
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut entries = self.table.entries();
        if let Some(entry) = entries.get_mut(&self.name) {
            entry.users -= 1;
            if self.waiting {
                entry.waiting -= 1;
            }
            if entry.users == 0 {
                entries.remove(&self.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> LockName {
        LockName::new(text).unwrap()
    }

    /// Returns once a request for `lock` waits in `table` (within 10 s,
    /// else fails saying `what` did not happen).
    async fn queued(table: &LockTable, lock: &LockName, what: &str) {
        let waiting = async {
            while table.waiting(lock) == 0 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
            .await
            .expect(what);
    }

    #[tokio::test]
    async fn entries_exist_only_while_requests_are_in_flight() {
        let table = Arc::new(LockTable::default());
        for i in 0..1000 {
            let (held, waited) = table
                .acquire(&name(&format!("l/{i}")), Mode::Exclusive, Generation::MIN)
                .await;
            assert!(!waited);
            assert_eq!(table.len(), 1);
            drop(held);
        }
        assert_eq!(table.len(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_waiter_gives_its_place_back() {
        let table = Arc::new(LockTable::default());
        let lock = name("a");
        let (held, _) = table.acquire(&lock, Mode::Exclusive, Generation::MIN).await;
        let waiter = tokio::spawn({
            let table = Arc::clone(&table);
            let lock = lock.clone();
            async move { table.acquire(&lock, Mode::Exclusive, Generation::MIN).await }
        });
        queued(&table, &lock, "the second request queues").await;
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        assert_eq!(table.waiting(&lock), 0);
        drop(held);
        assert_eq!(table.len(), 0);
    }

    #[tokio::test]
    async fn shared_requests_share_and_exclusive_ones_wait() {
        let table = Arc::new(LockTable::default());
        let lock = name("a");
        let (reader_one, waited_one) = table.acquire(&lock, Mode::Shared, Generation::MIN).await;
        let (reader_two, waited_two) = table.acquire(&lock, Mode::Shared, Generation::MIN).await;
        assert!(!waited_one && !waited_two);
        let writer = tokio::spawn({
            let table = Arc::clone(&table);
            let lock = lock.clone();
            async move {
                table
                    .acquire(&lock, Mode::Exclusive, Generation::MIN)
                    .await
                    .1
            }
        });
        queued(&table, &lock, "the writer queues behind the readers").await;
        drop(reader_one);
        assert_eq!(table.waiting(&lock), 1, "one reader still holds it");
        drop(reader_two);
        assert!(writer.await.unwrap(), "the writer reports that it waited");
        assert_eq!(table.len(), 0);
    }
}
