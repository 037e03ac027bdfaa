//! The PostgreSQL storage engine's integration tests in one binary (one link
//! of the dependency tree), against a real PostgreSQL started on loopback
//! by the testkit: the engine suite, opening, and the single-put fast path.

mod conformance;
mod fast_path;
mod open;
