//! Leader election whose term is the generation.
//!
//! A candidate is elected when its session is granted the election's lock
//! `NAME` in exclusive mode; the grant's sequencer is the **term**, which
//! every fence accepts as it accepts any lock's (the resource server, the
//! guard, the SQL fence). The leader then publishes its value by holding a
//! second lock on the same session whose name carries the term, a counter
//! and the value: `NAME/.leader/<term>/<counter>/<value>` (term and counter
//! zero-padded, so names sort in their order). Both stand on the session's
//! one lease, so a leader that dies takes its publication with it, and an
//! observer reads who leads through [`Inspect`] alone, taking no lock:
//! the exclusive holder of `NAME`, and the newest publication of that
//! holder's term. A publication of an older term is never mistaken for the
//! current leader's.
//!
//! This needs nothing of a backend beyond [`Lock`] and [`Inspect`], so it
//! runs on every backend with an inspection API. Observing reads again on
//! each of [`Inspect::changes`]'s hints: the service's own watch where it
//! has one, every [`Election::with_poll_interval`] where it has none.

use std::time::Duration;

use futures::Stream;
use palisade_core::{
    Changes, Generation, Inspect, LeaseWatch, Lock, LockError, LockGuard, LockName, Mode, Sequencer,
};

use crate::error::RecipeError;

/// The infix between an election's name and its publications.
const PUBLISHED: &str = "/.leader/";

/// An election: its name, and how often an observer reads it.
///
/// ```
/// # async fn run() -> Result<(), palisade_recipes::RecipeError> {
/// use palisade_core::{LockName, SessionOptions};
/// use palisade_lock_embedded::EmbeddedLockClient;
/// use palisade_recipes::Election;
///
/// let service = EmbeddedLockClient::new();
/// let session = service.session(SessionOptions::default()).unwrap();
/// let election = Election::new(LockName::new("scheduler").unwrap());
/// let leadership = election.campaign(&session, "10.0.0.7:8080").await?;
/// let term = leadership.term()?; // send it with every write
/// let leader = election.leader(&service).await?.expect("elected");
/// assert_eq!((leader.term, leader.value.as_deref()), (term.generation(), Some("10.0.0.7:8080")));
/// leadership.resign().await?;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(run()).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    name: LockName,
    poll: Duration,
}

/// Who leads, as an observer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The leader's term: the generation of its hold of the election's lock.
    pub term: Generation,
    /// The value the leader published last, or `None` in the moment
    /// between its election and its first publication.
    pub value: Option<String>,
}

impl Election {
    /// An election named `name`; observers of a lock service that cannot
    /// watch read it every 100 ms.
    pub fn new(name: LockName) -> Self {
        Election {
            name,
            poll: Duration::from_millis(100),
        }
    }

    /// Sets how often [`Election::observe`] reads a lock service that
    /// cannot watch (Redis, PostgreSQL, MariaDB), or one that can while
    /// its watch is down.
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll = interval;
        self
    }

    /// The election's lock.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// Waits until `session` is elected, then publishes `value` and returns
    /// the leadership. A value that cannot be published is refused before
    /// anything is asked of the lock service.
    ///
    /// One campaign per session and election: a second one on the same
    /// session re-enters the first one's hold (the same term).
    pub async fn campaign<L: Lock + Clone>(
        &self,
        session: &L,
        value: &str,
    ) -> Result<Leadership<L>, RecipeError> {
        self.publication(Generation::MIN, 0, value)?;
        let term = session.acquire(&self.name, Mode::Exclusive).await?;
        tracing::info!(election = %self.name, term = term.generation().get(), "elected");
        let mut leadership = Leadership {
            election: self.clone(),
            session: session.clone(),
            term,
            published: None,
            counter: 0,
            value: String::new(),
        };
        // On an error the leadership is dropped, which resigns.
        leadership.publish(value).await?;
        Ok(leadership)
    }

    /// Who leads now, read through `inspector` without taking any lock;
    /// `None` when nobody does.
    pub async fn leader<I: Inspect>(&self, inspector: &I) -> Result<Option<Leader>, RecipeError> {
        let info = inspector.inspect(&self.name).await?;
        let Some(term) = info
            .holders
            .iter()
            .filter(|holder| holder.mode == Mode::Exclusive)
            .map(|holder| holder.generation)
            .max()
        else {
            return Ok(None);
        };
        let prefix = self.term_prefix(term);
        let value = inspector
            .list(&prefix)
            .await?
            .into_iter()
            .filter(|info| !info.holders.is_empty())
            .filter_map(|info| {
                let (counter, value) = info.name.as_str().strip_prefix(&prefix)?.split_once('/')?;
                Some((counter.parse::<u32>().ok()?, value.to_owned()))
            })
            .max()
            .map(|(_, value)| value);
        Ok(Some(Leader { term, value }))
    }

    /// A stream of who leads: the leader now, then each change (a new
    /// term, a new value, or nobody), in the order the lock service made
    /// them. Read again on each hint of [`Inspect::changes`]: pushed by the
    /// service's own watch where it has one (etcd, ZooKeeper, the embedded
    /// service), every poll interval where it has none. A term whose
    /// leader has not yet published its value is reported once it has.
    pub fn observe<I: Inspect>(
        &self,
        inspector: I,
    ) -> impl Stream<Item = Result<Option<Leader>, RecipeError>> + Send + 'static {
        let election = self.clone();
        futures::stream::unfold(
            (inspector, None::<Changes>, None::<Option<Leader>>),
            move |(inspector, changes, last)| {
                let election = election.clone();
                async move {
                    // Hints first, so that no change after the first read
                    // goes unseen.
                    let mut changes = match changes {
                        Some(changes) => changes,
                        None => {
                            let prefix = election.name.as_str();
                            match inspector.changes(prefix, election.poll).await {
                                Ok(changes) => changes,
                                Err(error) => {
                                    return Some((Err(error.into()), (inspector, None, last)));
                                }
                            }
                        }
                    };
                    loop {
                        if let Err(error) = changes.next().await {
                            return Some((Err(error.into()), (inspector, None, last)));
                        }
                        match election.leader(&inspector).await {
                            Err(error) => {
                                return Some((Err(error), (inspector, Some(changes), last)));
                            }
                            Ok(Some(Leader { value: None, .. })) => {}
                            Ok(now) if last.as_ref() != Some(&now) => {
                                tracing::debug!(election = %election.name, leader = ?now, "leader changed");
                                return Some((
                                    Ok(now.clone()),
                                    (inspector, Some(changes), Some(now)),
                                ));
                            }
                            Ok(_) => {}
                        }
                    }
                }
            },
        )
    }

    /// The name prefix of the publications of `term`.
    fn term_prefix(&self, term: Generation) -> String {
        format!("{}{PUBLISHED}{:020}/", self.name, term.get())
    }

    /// The lock name that publishes `value` as the `counter`-th value of
    /// `term`. Term and counter have fixed widths, so a value that fits
    /// for one term fits for all.
    fn publication(
        &self,
        term: Generation,
        counter: u32,
        value: &str,
    ) -> Result<LockName, RecipeError> {
        LockName::new(format!("{}{counter:010}/{value}", self.term_prefix(term))).map_err(
            |reason| RecipeError::Value {
                name: self.name.clone(),
                len: value.len(),
                reason,
            },
        )
    }
}

/// A won election: the term's hold and the published value.
///
/// Leadership is lost exactly as a lease is ([`Leadership::lease`]); once
/// it is, [`Leadership::term`] refuses, and the fences refuse the term as
/// soon as a newer leader has written. Dropping a leadership resigns in the
/// background.
pub struct Leadership<L: Lock> {
    election: Election,
    session: L,
    term: L::Guard,
    published: Option<L::Guard>,
    counter: u32,
    value: String,
}

impl<L: Lock> std::fmt::Debug for Leadership<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.election.name)
            .field("term", &self.term.generation())
            .field("value", &self.value)
            .finish()
    }
}

impl<L: Lock + Clone> Leadership<L> {
    /// The term's sequencer, to send with every write; refused once the
    /// leadership may have been lost.
    pub fn term(&self) -> Result<Sequencer, LockError> {
        self.term.sequencer()
    }

    /// The term's sequencer as issued, valid or not (for logs).
    pub fn issued(&self) -> &Sequencer {
        self.term.issued()
    }

    /// The term's generation.
    pub fn generation(&self) -> Generation {
        self.term.generation()
    }

    /// The value published last.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The election.
    pub fn election(&self) -> &Election {
        &self.election
    }

    /// The leadership-lost signal: the term's lease.
    pub fn lease(&self) -> LeaseWatch {
        self.term.lease()
    }

    /// Publishes a new value for the same term. Observers see the new
    /// value; the term does not change.
    pub async fn proclaim(&mut self, value: &str) -> Result<(), RecipeError> {
        self.publish(value).await
    }

    /// Gives the leadership up: withdraws the value, then releases the
    /// term. A later leader has a higher term.
    pub async fn resign(self) -> Result<(), RecipeError> {
        tracing::info!(election = %self.election.name, term = self.generation().get(), "resigning");
        if let Some(published) = self.published {
            // The term's release below is what matters; a publication
            // already gone with a lost lease is no error of its own.
            let _ = published.release().await;
        }
        self.term.release().await?;
        Ok(())
    }

    /// Holds the next publication name, then lets the previous one go, so
    /// an observer always finds one.
    async fn publish(&mut self, value: &str) -> Result<(), RecipeError> {
        self.term.sequencer()?;
        let counter = match self.published {
            None => 0,
            Some(_) => self.counter.checked_add(1).ok_or_else(|| {
                RecipeError::Invalid(format!(
                    "{}: too many proclaims in one term",
                    self.election.name
                ))
            })?,
        };
        let name = self
            .election
            .publication(self.generation(), counter, value)?;
        let Some(published) = self.session.try_acquire(&name, Mode::Exclusive).await? else {
            return Err(RecipeError::Invalid(format!(
                "{}: the publication {name} of this term is held by another session",
                self.election.name
            )));
        };
        if let Some(previous) = self.published.replace(published) {
            let _ = previous.release().await;
        }
        self.counter = counter;
        self.value = value.to_owned();
        tracing::info!(election = %self.election.name, term = self.generation().get(), value, "published");
        Ok(())
    }
}
