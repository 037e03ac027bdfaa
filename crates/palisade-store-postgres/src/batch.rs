//! Holders' single puts at their lock's mark, from concurrent requests on
//! different locks, committed together: one statement
//! ([`schema::FAST_PUTS`]), one transaction, one WAL flush and one round
//! trip for up to [`MAX_BATCH`] writes ([`MAX_BATCH_BYTES`]).
//!
//! A put with nothing else in flight goes alone, as the single statement
//! ([`LoneTurn`]). One that arrives while others are in flight joins a
//! queue; while fewer than the engine's leaders are at work, it starts
//! one (a task of its own, so a caller that goes away strands nobody). A
//! leader takes a connection, then everything queued (one request per
//! lock, the rest waits for its next turn), sends it as one statement and
//! answers each request from its own row; it goes on until the queue is
//! empty. So under load the requests that arrive while a batch is in
//! flight share the next one.
//!
//! Each request keeps its own guarantees: its mark row is locked and its
//! rule decided for it alone ([`schema::FAST_PUTS`] writes a row only at
//! the mark, as the single fast path does); it is answered only after the
//! commit that holds it; a request the statement did not write (its lock
//! not at the mark, never seen, or its row busy) goes on alone, the way
//! it would have without the batch. A statement that failed without
//! committing sends every member on alone, so no request's bad input
//! fails another's; one whose outcome is unknown answers each member
//! "unknown", as the single path does.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use palisade_core::LockName;
use tokio::sync::oneshot;

use crate::engine::Inner;
use crate::error::Failure;
use crate::schema;

/// The most requests one statement carries.
pub(crate) const MAX_BATCH: usize = 64;

/// The most key and value bytes one statement carries (a larger single
/// put goes alone in its batch): a few large writes do not make the
/// statement of many small ones slow.
pub(crate) const MAX_BATCH_BYTES: usize = 1 << 20;

/// The most leaders (batches in flight, each on a connection of its own)
/// at once. More batches in flight make each smaller; a few keep
/// PostgreSQL busy while one of them waits for its WAL flush.
pub(crate) const MAX_LEADERS: usize = 4;

/// One request's put, waiting for a batch.
struct Waiting {
    lock: LockName,
    generation: i64,
    key: Bytes,
    value: Bytes,
    answer: oneshot::Sender<Outcome>,
}

/// What the batch did with a request.
pub(crate) enum Outcome {
    /// Written and committed.
    Written {
        created: bool,
        marks: (i64, i64),
        commit_seq: i64,
    },
    /// Nothing written: the lock's marks are not the generation's (a first
    /// write of a hold, a raise, a refusal). The write function decides.
    NotAtMark,
    /// Nothing written, and nothing decided: the lock was never seen, its
    /// row was held by another transaction, or the statement rolled back.
    /// The single path decides.
    Alone,
    /// The request's outcome is unknown, or no connection could be had.
    Failed(Failure),
}

struct Queue {
    waiting: VecDeque<Waiting>,
    leaders: usize,
    /// Puts sent alone (with a [`LoneTurn`]) and not yet answered.
    lone: usize,
}

/// A put's turn to go alone, with nothing else in flight: a lone writer
/// pays neither a leader's task nor the batch statement. Counted until
/// dropped, so a put that comes meanwhile joins a batch.
pub(crate) struct LoneTurn<'a> {
    fast_puts: Option<&'a FastPuts>,
}

impl Drop for LoneTurn<'_> {
    fn drop(&mut self) {
        if let Some(fast_puts) = self.fast_puts {
            fast_puts.queue().lone -= 1;
        }
    }
}

/// The queue of single puts and its leaders.
pub(crate) struct FastPuts {
    queue: Mutex<Queue>,
    max_leaders: usize,
    statements: AtomicU64,
    puts: AtomicU64,
}

/// How many batch statements an engine has sent, and how many puts they
/// carried ([`PostgresEngine::batched_puts`](crate::PostgresEngine::batched_puts)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchedPuts {
    /// Statements sent, whatever they answered.
    pub statements: u64,
    /// Puts those statements carried.
    pub puts: u64,
}

impl FastPuts {
    /// Batches of at most [`MAX_LEADERS`] in flight, and never more than
    /// half the pool's connections, so a request the batch sends on alone
    /// finds one; none with a pool of one connection.
    pub(crate) fn new(max_connections: u32) -> FastPuts {
        FastPuts {
            queue: Mutex::new(Queue {
                waiting: VecDeque::new(),
                leaders: 0,
                lone: 0,
            }),
            max_leaders: MAX_LEADERS.min(max_connections as usize / 2),
            statements: AtomicU64::new(0),
            puts: AtomicU64::new(0),
        }
    }

    pub(crate) fn counts(&self) -> BatchedPuts {
        BatchedPuts {
            statements: self.statements.load(Ordering::Relaxed),
            puts: self.puts.load(Ordering::Relaxed),
        }
    }

    /// A turn to send a put alone, when batching is off or nothing else
    /// is in flight; `None`: join a batch ([`FastPuts::put`]).
    pub(crate) fn lone_turn(&self) -> Option<LoneTurn<'_>> {
        if self.max_leaders == 0 {
            return Some(LoneTurn { fast_puts: None });
        }
        let mut queue = self.queue();
        if queue.leaders > 0 || queue.lone > 0 || !queue.waiting.is_empty() {
            return None;
        }
        queue.lone += 1;
        Some(LoneTurn {
            fast_puts: Some(self),
        })
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        // The queue is left consistent at every step: a panic elsewhere
        // while it was held does not make it unusable.
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues one put and waits for its batch's answer.
    pub(crate) async fn put(
        inner: &Arc<Inner>,
        lock: &LockName,
        generation: i64,
        key: &Bytes,
        value: &Bytes,
    ) -> Outcome {
        let (answer, outcome) = oneshot::channel();
        let lead = {
            let mut queue = inner.fast_puts.queue();
            queue.waiting.push_back(Waiting {
                lock: lock.clone(),
                generation,
                key: key.clone(),
                value: value.clone(),
                answer,
            });
            let lead = queue.leaders < inner.fast_puts.max_leaders;
            queue.leaders += usize::from(lead);
            lead
        };
        if lead {
            tokio::spawn(lead_batches(Arc::clone(inner)));
        }
        // A leader answers every request it took; one that is gone without
        // answering may have sent it: unknown.
        outcome.await.unwrap_or_else(|_| {
            Outcome::Failed(Failure::Corrupt(
                "a batch of puts ended without an answer".to_owned(),
            ))
        })
    }

    /// Up to [`MAX_BATCH`] queued requests of different locks and
    /// [`MAX_BATCH_BYTES`], oldest first; those whose caller has gone are
    /// dropped. Empty: the leader retires (counted under the same lock
    /// that a new request checks).
    fn take(&self) -> Vec<Waiting> {
        let mut queue = self.queue();
        let mut batch: Vec<Waiting> = Vec::new();
        let mut locks: HashSet<LockName> = HashSet::new();
        let mut bytes = 0;
        let mut later = VecDeque::new();
        while let Some(waiting) = queue.waiting.pop_front() {
            if waiting.answer.is_closed() {
                continue;
            }
            let size = waiting.key.len() + waiting.value.len();
            let full =
                batch.len() == MAX_BATCH || (!batch.is_empty() && bytes + size > MAX_BATCH_BYTES);
            if full {
                later.push_back(waiting);
                break;
            }
            if !locks.insert(waiting.lock.clone()) {
                later.push_back(waiting);
                continue;
            }
            bytes += size;
            batch.push(waiting);
        }
        later.append(&mut queue.waiting);
        queue.waiting = later;
        if batch.is_empty() {
            queue.leaders -= 1;
        }
        batch
    }
}

/// A leader at work. A leader leaves by finding the queue empty
/// ([`FastPuts::take`] then counts it out); one that ends any other way (a
/// panic, its runtime shutting down) is counted out here, and the puts
/// still queued are sent on alone, so no put waits for a leader that is
/// gone.
struct Leading<'a> {
    fast_puts: &'a FastPuts,
    retired: bool,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        if self.retired {
            return;
        }
        let waiting = {
            let mut queue = self.fast_puts.queue();
            queue.leaders -= 1;
            std::mem::take(&mut queue.waiting)
        };
        for waiting in waiting {
            let _ = waiting.answer.send(Outcome::Alone);
        }
    }
}

/// A leader: batches until the queue is empty, on one connection.
async fn lead_batches(inner: Arc<Inner>) {
    let mut leading = Leading {
        fast_puts: &inner.fast_puts,
        retired: false,
    };
    let mut connection = None;
    loop {
        if connection.is_none() {
            match inner.connection().await {
                Ok(fresh) => connection = Some(fresh),
                Err(failure) => {
                    answer_all(&inner, &failure);
                    leading.retired = true;
                    return;
                }
            }
        }
        let batch = inner.fast_puts.take();
        leading.retired = batch.is_empty();
        let Some(live) = connection.as_mut().filter(|_| !batch.is_empty()) else {
            return;
        };
        let fast_puts = &inner.fast_puts;
        fast_puts.statements.fetch_add(1, Ordering::Relaxed);
        fast_puts
            .puts
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        if let Err(error) = send(live, batch, inner.batch_deadline).await {
            // The connection may be broken, or still inside the statement:
            // closed, not returned to the pool; the next batch takes another.
            tracing::debug!(error = %inner.origin.scrub(&error), "a batch of puts failed");
            if let Some(mut broken) = connection.take() {
                broken.close_on_drop();
            }
        }
    }
}

/// No connection: every request queued now would meet the same. Those
/// PostgreSQL is unreachable for are told so; after any other failure to
/// connect, they try alone. Returns once the queue is empty, the leader
/// counted out.
fn answer_all(inner: &Inner, failure: &Failure) {
    loop {
        let batch = inner.fast_puts.take();
        if batch.is_empty() {
            return;
        }
        for waiting in batch {
            let outcome = match failure {
                Failure::Unreachable(why) => Outcome::Failed(Failure::Unreachable(why.clone())),
                _ => Outcome::Alone,
            };
            let _ = waiting.answer.send(outcome);
        }
    }
}

/// One batch as one statement; every member answered. The error, if the
/// statement failed, is only for the log. No answer within `deadline`
/// (PostgreSQL's `statement_timeout` and a margin: a connection that went
/// silent) leaves every member's outcome unknown, as a request's own
/// deadline does on the single path; a leader is bound by no request's.
async fn send(
    connection: &mut sqlx::PgConnection,
    batch: Vec<Waiting>,
    deadline: Duration,
) -> Result<(), Arc<sqlx::Error>> {
    let locks: Vec<&str> = batch.iter().map(|waiting| waiting.lock.as_str()).collect();
    let generations: Vec<i64> = batch.iter().map(|waiting| waiting.generation).collect();
    let keys: Vec<&[u8]> = batch.iter().map(|waiting| &waiting.key[..]).collect();
    let values: Vec<&[u8]> = batch.iter().map(|waiting| &waiting.value[..]).collect();
    let rows = sqlx::query_as::<_, (i64, Option<i64>, Option<i64>, Option<bool>, Option<i64>)>(
        schema::FAST_PUTS,
    )
    .bind(&locks)
    .bind(&generations)
    .bind(&keys)
    .bind(&values)
    .fetch_all(connection);
    let rows = tokio::time::timeout(deadline, rows)
        .await
        .unwrap_or_else(|_| {
            Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no answer from PostgreSQL within {}",
                    palisade_core::format_duration(deadline)
                ),
            )))
        });
    drop((locks, keys, values));
    let rows = match rows {
        Ok(rows) => rows,
        Err(error) => {
            let error = Arc::new(error);
            let rolled_back = Failure::rolled_back(&error);
            for waiting in batch {
                let outcome = if rolled_back {
                    Outcome::Alone
                } else {
                    Outcome::Failed(Failure::InDoubt(Arc::clone(&error)))
                };
                let _ = waiting.answer.send(outcome);
            }
            return Err(error);
        }
    };
    let mut answers: Vec<Option<Outcome>> = batch.iter().map(|_| None).collect();
    for (index, exclusive, shared, created, commit_seq) in rows {
        let Some(slot) = usize::try_from(index - 1)
            .ok()
            .and_then(|index| answers.get_mut(index))
        else {
            continue;
        };
        *slot = Some(match (exclusive, shared, created, commit_seq) {
            (Some(exclusive), Some(shared), Some(created), Some(commit_seq)) => Outcome::Written {
                created,
                marks: (exclusive, shared),
                commit_seq,
            },
            (Some(_), Some(_), None, _) => Outcome::NotAtMark,
            _ => Outcome::Alone,
        });
    }
    for (waiting, answer) in batch.into_iter().zip(answers) {
        // A row missing from the answer: the statement committed, but what
        // it did with this request is not known.
        let outcome = answer.unwrap_or_else(|| {
            Outcome::Failed(Failure::Corrupt(format!(
                "no row for lock `{}` in a batch of puts' answer",
                waiting.lock
            )))
        });
        let _ = waiting.answer.send(outcome);
    }
    Ok(())
}
