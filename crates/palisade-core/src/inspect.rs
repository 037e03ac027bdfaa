//! Looking at locks from outside: who holds a lock, in which mode and
//! generation, how long its lease has left, who waits, and whether a
//! lock-delay is in force. For operators (`palisade locks ls|show`) and for
//! `palisade unlock --force`, which must know the generation it evicts.
//!
//! What a backend cannot know is `None`, never a guess.

use std::future::Future;
use std::time::Duration;

use crate::{Changes, Generation, LockError, LockName, Mode};

/// One hold of a lock, as the lock service shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The mode held.
    pub mode: Mode,
    /// The generation of the hold (the one in its sequencer).
    pub generation: Generation,
    /// How long the lock service keeps the hold without another renewal,
    /// when it can tell.
    pub lease_left: Option<Duration>,
    /// The lease (or session) the hold stands on, as the sequencer's
    /// `lease` field names it, when the backend records it.
    pub lease: Option<String>,
    /// Who holds it, as the holder described itself (the sequencer's
    /// `holder` field), when the backend records it.
    pub holder: Option<String>,
}

impl Holder {
    /// A holder with the two fields every backend knows.
    pub fn new(mode: Mode, generation: Generation) -> Self {
        Holder {
            mode,
            generation,
            lease_left: None,
            lease: None,
            holder: None,
        }
    }

    /// Sets how long the lease has left.
    pub fn with_lease_left(mut self, left: Option<Duration>) -> Self {
        self.lease_left = left;
        self
    }

    /// Sets the lease id.
    pub fn with_lease(mut self, lease: Option<String>) -> Self {
        self.lease = lease;
        self
    }

    /// Sets the holder id.
    pub fn with_holder(mut self, holder: Option<String>) -> Self {
        self.holder = holder;
        self
    }
}

/// One queued request for a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// The mode asked for.
    pub mode: Mode,
    /// The lease (or session) of the waiting session, when recorded.
    pub lease: Option<String>,
    /// Who waits, when recorded.
    pub holder: Option<String>,
}

impl Waiter {
    /// A waiter in `mode`, with its lease and holder ids where known.
    pub fn new(mode: Mode, lease: Option<String>, holder: Option<String>) -> Self {
        Waiter {
            mode,
            lease,
            holder,
        }
    }
}

/// The state of one lock at one moment of the lock service.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock.
    pub name: LockName,
    /// Its holders: none, one exclusive holder, or shared holders, by
    /// generation.
    pub holders: Vec<Holder>,
    /// The waiters in the order they will be granted, or `None` if the
    /// backend cannot see them.
    pub waiters: Option<Vec<Waiter>>,
    /// `Some(time left)` while a lock-delay keeps everyone out (a holder's
    /// lease ended without a release); `None` when none is in force.
    pub lock_delay_left: Option<Duration>,
}

impl LockInfo {
    /// A lock nobody holds, waits for or delays.
    pub fn free(name: LockName) -> Self {
        LockInfo {
            name,
            holders: Vec::new(),
            waiters: Some(Vec::new()),
            lock_delay_left: None,
        }
    }

    /// Whether nothing holds, waits for or delays the lock: what
    /// [`Inspect::list`] leaves out.
    pub fn is_idle(&self) -> bool {
        self.holders.is_empty()
            && self.waiters.as_ref().is_none_or(Vec::is_empty)
            && self.lock_delay_left.is_none()
    }

    /// The highest generation among the holders.
    pub fn newest_generation(&self) -> Option<Generation> {
        self.holders.iter().map(|holder| holder.generation).max()
    }
}

/// Whether `name` is selected by the prefix filter of [`Inspect::list`]:
/// a plain string prefix of the whole name, so `a/` selects `a/b` and
/// `a/bc` but not `ab`, and `a/b` selects `a/b` and `a/bc` but not `ab`.
pub fn name_has_prefix(name: &LockName, prefix: &str) -> bool {
    name.as_str().starts_with(prefix)
}

/// Reading a lock service's state: implemented by every backend's client
/// (the embedded service, etcd's connection, Redis's client, the SQL
/// client).
///
/// ### To ensure correctness
///
/// - Read from the source of truth with the consistency the backend's
///   grants use (a linearizable read on etcd, the primary on Redis), so a
///   hold shown is a hold the service granted.
/// - Report only live holds: a hold whose lease the service has already
///   ended is not a holder.
/// - Never guess: what the backend cannot know is `None`.
/// - `list` filters with [`name_has_prefix`] exactly (no look-alikes from
///   key encoding), and leaves out idle locks ([`LockInfo::is_idle`]).
pub trait Inspect: Send + Sync + 'static {
    /// The state of one lock; [`LockInfo::free`]-like when nothing is there.
    fn inspect(&self, name: &LockName) -> impl Future<Output = Result<LockInfo, LockError>> + Send;

    /// Every lock whose name starts with `prefix` that is held, waited for
    /// or in a lock-delay, sorted by name. An empty prefix lists them all.
    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<LockInfo>, LockError>> + Send;

    /// Hints at every change of the holders of the locks whose names start
    /// with `prefix` (a grant, a release, a lease's end): once this
    /// resolves, no such change goes without a hint after it. The provided
    /// method hints every `every` (polling); a backend whose service can
    /// watch (etcd watches, ZooKeeper watches, the embedded service's own
    /// state) pushes hints instead ([`Changes::pushed`]), and falls back
    /// to `every` only while its watch is down.
    fn changes(
        &self,
        prefix: &str,
        every: Duration,
    ) -> impl Future<Output = Result<Changes, LockError>> + Send {
        let _ = prefix;
        std::future::ready(Ok(Changes::every(every)))
    }

    /// [`Inspect::inspect`] for each of `names`, in their order, keeping the
    /// locks that are held, waited for or in a lock-delay: what
    /// [`Inspect::list`] answers once a backend has found the candidate
    /// names (by a key scan, a table read).
    fn inspect_active<I>(
        &self,
        names: I,
    ) -> impl Future<Output = Result<Vec<LockInfo>, LockError>> + Send
    where
        I: IntoIterator<Item = LockName> + Send,
        I::IntoIter: Send,
    {
        async move {
            let mut locks = Vec::new();
            for name in names {
                let info = self.inspect(&name).await?;
                if !info.is_idle() {
                    locks.push(info);
                }
            }
            Ok(locks)
        }
    }
}

/// Ending someone else's hold from outside: `palisade unlock --force`.
///
/// This alone is **not safe**: the evicted holder may be paused and write
/// when it wakes. A caller must fence afterwards, raising the lock's marks
/// at the resource servers past `generation` (the CLI acquires the lock and
/// sends an empty fenced batch before it reports success).
///
/// ### To ensure correctness
///
/// - End only the hold whose generation is `generation`, compared on the
///   lock service in the same atomic step as the delete, so a newer holder
///   is never evicted by a stale request. Answer `false` if there is none.
/// - Start no lock-delay: the fence, not the delay, keeps the evicted
///   holder out, and a delay renewed by a live holder's keep-alive would
///   keep the lock blocked.
/// - Wake the waiters as a release does.
pub trait ForceRelease: Send + Sync + 'static {
    /// Ends the hold of `name` with `generation`; `true` if there was one.
    fn force_release(
        &self,
        name: &LockName,
        generation: Generation,
    ) -> impl Future<Output = Result<bool, LockError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> LockName {
        LockName::new(text).unwrap()
    }

    #[test]
    fn prefixes_are_plain_string_prefixes_of_the_whole_name() {
        assert!(name_has_prefix(&name("a/b"), "a/"));
        assert!(name_has_prefix(&name("a/bc"), "a/b"));
        assert!(name_has_prefix(&name("ab"), ""));
        assert!(!name_has_prefix(&name("ab"), "a/"));
        assert!(!name_has_prefix(&name("ab"), "a/b"));
        assert!(!name_has_prefix(&name("a"), "a/"));
    }

    #[test]
    fn idle_means_nothing_holds_waits_or_delays() {
        let free = LockInfo::free(name("x"));
        assert!(free.is_idle());
        assert_eq!(free.newest_generation(), None);
        let mut held = free.clone();
        held.holders
            .push(Holder::new(Mode::Shared, Generation::new(3).unwrap()));
        held.holders
            .push(Holder::new(Mode::Shared, Generation::new(5).unwrap()));
        assert!(!held.is_idle());
        assert_eq!(held.newest_generation(), Generation::new(5));
        let mut delayed = free.clone();
        delayed.lock_delay_left = Some(Duration::from_secs(1));
        assert!(!delayed.is_idle());
        let mut waited = free;
        waited.waiters = Some(vec![Waiter::new(Mode::Exclusive, None, None)]);
        assert!(!waited.is_idle());
    }
}
