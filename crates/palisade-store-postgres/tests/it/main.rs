//! The PostgreSQL storage engine's integration tests in one binary (one link
//! of the dependency tree), against a real PostgreSQL started on loopback
//! by the testkit: the engine suite, opening, the single-put fast path and
//! its batches across locks,
//! the SQL functions against core's rule table, a replica cut off
//! mid-request, answers when PostgreSQL is gone, TLS, and no password in any output.

mod batch;
mod conformance;
mod fast_path;
mod open;
mod paused_replica;
mod rule;
mod secrets;
mod tls;
mod unreachable;
