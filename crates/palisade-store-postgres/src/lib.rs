//! Palisade's storage engine on PostgreSQL.
//!
//! Marks, data and idempotency records live in tables of the user's
//! PostgreSQL (created, or checked, on open: [`SCHEMA_VERSION`]). Every
//! fenced step is one transaction that first locks the lock's row in
//! `palisade_store_marks`, so steps on one lock are serialised by
//! PostgreSQL, whichever `palisade serve` process (replica) they come
//! through: any number of replicas may serve one database.
//!
//! # How a write flows
//!
//! One call of the SQL function `palisade_store_write` (created with the
//! tables; its text is in `schema.rs`), auto-committed: one round trip,
//! one transaction, READ COMMITTED. The function locks the lock's mark row
//! (`SELECT ... FOR UPDATE`, inserting it first for a lock never seen),
//! answers a recorded request id from its record, applies the rule, the
//! ops in order (each sees the earlier ops of the request), raises the
//! mark, takes the commit number and records the id. A refusal
//! is an error with the engine's own SQLSTATE (`PS001` stale, `PS002` CAS
//! mismatch, `PS003` id reused), so PostgreSQL rolls the whole step back
//! and the engine turns it into a [`Refused`](palisade_store::Refused).
//!
//! A holder's later writes (one put at the generation already in the
//! mark, no request id) skip the function: one plain statement that locks
//! the row and writes only at the mark. Such puts from concurrent
//! requests on different locks go together, one statement and one commit
//! for up to 64 of them, each decided on its own lock's marks and answered
//! from its own row ([`PostgresEngine::batched_puts`]; docs/engines.md,
//! "Batches across locks").
//!
//! A fenced read or an admit is one call of `palisade_store_fence`, the
//! same way: lock the row, the rule, the raise, the read, committed when
//! the call returns.
//!
//! # No request waits on another process
//!
//! Every request is one statement, so no transaction is ever held open
//! across a round trip to a `palisade serve` process: a replica that stops
//! (SIGSTOP, a GC pause, a partition) in the middle of a request holds no
//! lock's row, and the other replicas go on. Each session also carries
//! `lock_timeout` (2 s by default: the longest a request waits for its
//! lock's row), `statement_timeout` (5 s) and
//! `idle_in_transaction_session_timeout` (5 s), and a request that gets no
//! connection within 1 s fails within another [`PROBE_TIMEOUT`], saying
//! whether PostgreSQL refused the connection or gave no answer
//! ([`Unreachable`]). See [`PostgresConfig`].
//!
//! # Durability
//!
//! Every session is opened with `synchronous_commit = on` (a startup option,
//! stronger than any server or role default) and [`PostgresEngine::open`]
//! checks it, and refuses a server with `fsync = off` unless told
//! otherwise. So a write is acknowledged only once its COMMIT record is
//! flushed to PostgreSQL's WAL. A write whose answer is lost (the
//! connection drops) or is an error other than a refusal is reported as
//! `StoreError::Storage` saying the outcome is unknown, never as success
//! or failure: the client retries with the same request id and the
//! idempotency record settles it.
//!
//! # Commit numbers
//!
//! `commit_seq` comes from the sequence `palisade_store_commit_seq`, taken
//! while the lock's mark row is locked. So among the writes of one lock the
//! numbers follow commit order, and a write acknowledged before another is
//! sent has the smaller number. Two concurrent writes on different locks
//! may commit in the other order than their numbers; nothing compares
//! them (see obligation 8 of [`Engine`](palisade_store::Engine)).

mod batch;
mod config;
mod engine;
mod error;
mod record;
mod schema;

pub use batch::BatchedPuts;
pub use config::PostgresConfig;
pub use engine::{PROBE_TIMEOUT, PostgresEngine};
pub use error::{OpenError, Unreachable};
pub use schema::SCHEMA_VERSION;

/// The engine's name in [`EngineInfo`](palisade_store::EngineInfo) and
/// errors.
pub(crate) const ENGINE: &str = "postgres";
