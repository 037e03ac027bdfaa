//! The etcd storage engine's integration tests in one binary (one link of
//! the dependency tree), against real etcd processes started on loopback by
//! the testkit: the engine suite, limits, replicas and a leader killed.

mod common;
mod conformance;
mod leader_kill;
mod limits;
mod replicas;
