//! The etcd storage engine's integration tests in one binary (one link of
//! the dependency tree), against real etcd processes started on loopback by
//! the testkit: the engine suite, limits, replicas, a leader killed, and
//! no etcd at all.

mod common;
mod conformance;
mod leader_kill;
mod limits;
mod replicas;
mod unreachable;
