//! Palisade's test kit: what every backend's tests and the integration
//! tests share.
//!
//! - [`lock_suite`]: the backend conformance suite. A backend is done when
//!   `lock_suite::test_all(backend)` passes against it.
//! - [`signing_suite`]: the signed-sequencer cases every signing backend
//!   runs, one test each through [`signing_tests!`].
//! - [`recipe_suite`]: `palisade-recipes`' election, semaphore and striping
//!   on a lock backend, through the lock suite's view of it.
//! - [`engine_suite`]: the storage engine conformance suite. An engine of
//!   `palisade-store` is done when `engine_suite::test_all(factory)` passes
//!   against it.
//! - [`etcd`], [`redis`], [`sql`]: spawners that start real `etcd`,
//!   `redis-server`, PostgreSQL and MariaDB processes on free loopback ports
//!   in temporary directories and kill them (by PID) on drop;
//!   [`sql::pair::PostgresPair`], a PostgreSQL primary with a synchronous
//!   streaming standby, for failover tests.
//! - [`zookeeper`]: a standalone ZooKeeper and a 3-member ensemble on
//!   loopback, killed by PID, restartable and wipeable.
//! - [`proxy`]: a fault-injecting TCP proxy on loopback (partition,
//!   one-way drop, delay, loss, resets), for a backend's or engine's tests
//!   of a cut connection and for the fault suite's network faults.
//! - [`process`]: the shared plumbing: free ports, child processes killed on
//!   drop, SIGSTOP/SIGCONT, waiting for a port, and failing a test with an
//!   install hint when a binary it needs is missing.
//! - [`tls`]: a certificate authority made at test time; [`logs`]: every
//!   log line a test writes, to show a secret never reaches one.
//!
//! Its audience is the author of a backend, an engine or a server feature.
//! The fault suite's own harness (operation histories and their checker)
//! lives with the suite, in the `tests/` crate.
//!
//! **Architecture Invariant:** the testkit depends on `palisade-core`, on
//! `palisade-store` for the engine trait the engine suite drives, and on
//! `palisade-recipes` for the recipes the recipe suite drives. Backends
//! and engines depend on it as a dev-dependency, never the other way round.

pub mod bench;
pub mod changes_case;
pub mod engine_suite;
pub mod etcd;
pub mod grafana;
pub mod lock_suite;
pub mod logs;
pub mod process;
pub mod proxy;
pub mod recipe_suite;
pub mod redis;
pub mod s3;
pub mod signing_suite;
pub mod sql;
pub mod tls;
pub mod zookeeper;
