//! The fault suite, part one: clients, lock services and their clocks
//! (scenarios 1, 2, 3, 4, 9, 10, the SQL backend's 13, 14, 15, the
//! PostgreSQL engine's replicas 16, the etcd engine's replicas 17, the
//! PostgreSQL store's failover to a synchronous standby 18, PostgreSQL
//! killed and restarted under the PostgreSQL store 19, a replica of the
//! PostgreSQL store stopped mid fenced reads 20, Redis killed and
//! restarted under the flash sale fenced inside Redis 22, a Redis Cluster
//! master killed and its replica promoted without the last grants 40, the
//! same failover under the flash sale fenced inside Redis 41, the slot of
//! a contended lock moved between masters 42, and the mutation check).
//!
//! Every scenario runs real processes on loopback: etcd, Redis, PostgreSQL
//! (alone or a primary with its standby) or MariaDB from the testkit, the resource server
//! (`src/bin/resource-server.rs`) and workload clients
//! (`src/bin/fault-client.rs`) as children of this test, each recording
//! its history. The scenario injects its faults, stops the
//! clients, and the checker judges the merged history against the resource
//! server's final state (`palisade_tests::fault`). Each module states the
//! invariants its scenario asserts.
//!
//! Short by default (each scenario well under a minute); the long form runs
//! with `PALISADE_FAULT_SOAK=1`. Each run appends its row to the table
//! file named by `PALISADE_FAULT_TABLE` (`scripts/faults.sh` sets it).

mod mutation;
mod s01_redis_holder_paused;
mod s02_etcd_holder_paused;
mod s03_redis_restart_empty;
mod s04_redis_aof_kill;
mod s09_client_clock_jumps;
mod s10_early_expiry;
mod s13_sql_restart;
mod s14_sql_holder_paused;
mod s15_sql_connection_cut;
mod s16_postgres_replicas;
mod s17_etcd_replicas;
mod s18_postgres_failover;
mod s19_postgres_restart;
mod s20_postgres_paused_replica;
mod s22_redis_fence_restart;
mod s40_redis_cluster_failover;
mod s41_redis_fence_cluster_failover;
mod s42_redis_cluster_slot_migration;
mod sale;
mod story;

use std::time::Duration;

use palisade_tests::fault::CheckOptions;

/// The lease TTL of every client: etcd's smallest (2 s), and the same on
/// Redis so the stories match.
pub(crate) const TTL: Duration = Duration::from_secs(2);

/// The bound on any one wait for a client's step (a lease to lapse and a
/// newer holder to write, a restart): many TTLs, for a loaded 2-core box.
pub(crate) const STEP: Duration = Duration::from_secs(30);

/// How long clients may take to release and exit once asked to stop.
pub(crate) const EXIT: Duration = Duration::from_secs(60);

/// I-LIVE's bound after the last heal: TTL + restart or election time +
/// a wide margin for a loaded machine.
pub(crate) fn live_within(bound: Duration) -> CheckOptions {
    CheckOptions {
        live_bound: Some(bound),
    }
}
