//! The SQL lock backend's integration tests in one binary (one link of the
//! dependency tree), against real PostgreSQL and MariaDB servers started
//! on loopback by the testkit: the conformance suite, the backend's own
//! behaviour, and TLS.

mod common;
mod conformance;
mod durability;
mod secrets;
mod sql_lock;
mod tls;
