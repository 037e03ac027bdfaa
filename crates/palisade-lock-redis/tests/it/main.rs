//! The Redis lock backend's integration tests in one binary (one link of the
//! dependency tree), against real `redis-server` processes started on
//! loopback by the testkit: the conformance suites (single Redis, Cluster,
//! Redlock), signing, TLS and the Redlock model.

mod cluster;
mod common;
mod conformance;
mod redis_lock;
mod redlock_conformance;
mod secrets;
mod signing;
mod tls;
