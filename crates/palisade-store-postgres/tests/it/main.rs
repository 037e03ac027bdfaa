//! The PostgreSQL storage engine's integration tests in one binary (one link
//! of the dependency tree), against a real PostgreSQL started on loopback
//! by the testkit: the engine suite and opening.

mod conformance;
mod open;
