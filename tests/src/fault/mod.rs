//! The fault suite's harness: real processes, real faults, and an offline
//! checker over what every client recorded.
//!
//! A scenario starts real lock services (the testkit's `EtcdServer`,
//! `EtcdCluster`, `RedisServer`), a resource server in a process of its own
//! ([`ResourceServerProcess`]) and clients in processes of their own
//! ([`ClientProcess`], running `src/bin/fault-client.rs`). It injects its
//! faults, writing each one into the run's nemesis history
//! ([`FaultRun::inject`] / [`FaultRun::heal`]), stops the clients, and hands
//! everything to [`FaultRun::verdict`]: the merged histories and the
//! resource server's final state go through
//! `crate::checker::check`, the [`TableRow`] is appended to the
//! suite's table, and the [`Report`] comes back for the scenario to assert.
//!
//! # Where to start
//!
//! - [`FaultRun`]: the run's directory, histories, nemesis and verdict.
//! - [`ResourceServerProcess`] and [`ResourceServerOptions`]: the resource
//!   server as a child (kill -9, restart on the same data directory and
//!   port, SIGSTOP, a command prefix such as `fiu-run -x`, and the mutation
//!   switches `--unfenced`, `--unsynced` and `--held-transactions`).
//! - [`ClientConfig`] and [`ClientProcess`]: a workload client; wait on its
//!   output lines ([`ClientLine`]), open its gate, pause, kill or stop it.
//! - [`fault_binaries!`](crate::fault_binaries): the paths of the two
//!   binaries, for the test crate's integration tests.
//! - [`FaultRun::wait_any`], [`FaultRun::wait_recovered`]: wait on what any
//!   client of the run says (no sleeps), e.g. a newer holder's write.
//! - [`net`]: the fault proxy in front of the processes, and scenario 7 as
//!   a function (so the mutation check can run it unfenced).
//! - [`TableRow`], [`append_row`], [`TABLE_ENV`]: the suite's table.
//! - [`soak`]: whether the long form was asked for (`PALISADE_FAULT_SOAK=1`).
//!
//! The conventions the checker relies on hold by construction: one
//! operation in flight per client, each `invoke` followed by exactly one
//! completion; a write's request id is its idempotency key, reused by its
//! retries; `fail` with detail `stale` is a fenced write; the nemesis
//! records `invoke` when a fault starts and `ok` when it heals.
//!
//! ```no_run
//! # async fn scenario() -> anyhow::Result<()> {
//! use palisade_tests::checker::CheckOptions;
//! use palisade_tests::fault::{
//!     ClientConfig, FaultBinaries, FaultRun, ResourceServerOptions, ResourceServerProcess, Scenario,
//! };
//!
//! // In an integration test of this crate: `palisade_tests::fault_binaries!()`.
//! let binaries = FaultBinaries {
//!     resource_server: "target/debug/resource-server".into(),
//!     fault_client: "target/debug/fault-client".into(),
//!     redis_buyer: "target/debug/redis-buyer".into(),
//! };
//! let redis = palisade_testkit::redis::RedisServer::start();
//! let mut run = FaultRun::new("example")?;
//! let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
//! let config = ClientConfig::redis(&redis.url(), &server.base_url()).lock("example").rounds(5);
//! let mut client = run.spawn_client(&binaries, "a", &config)?;
//! client.wait_exit(std::time::Duration::from_secs(60)).await?;
//! let report = run
//!     .verdict(&server.base_url(), &CheckOptions::default(), &Scenario::new("0 example", "redis"))
//!     .await?;
//! report.assert_safe();
//! # Ok(()) }
//! ```

mod client;
pub mod net;
pub mod object;
mod resource;
mod run;
mod table;

use std::path::PathBuf;

pub use crate::checker::{CheckOptions, FinalState, Invariant, Report};
pub use client::{ClientConfig, ClientLine, ClientProcess, stop_clients};
pub use resource::{ResourceServerOptions, ResourceServerProcess};
pub use run::{FaultRun, KEEP_ENV, Scenario, read_final_state};
pub use table::{TABLE_ENV, TABLE_HEADER, TableRow, append_row};

/// The environment variable that asks for the long form of every scenario.
pub const SOAK_ENV: &str = "PALISADE_FAULT_SOAK";

/// Whether the long form (more clients, operations and rounds) was asked
/// for: `PALISADE_FAULT_SOAK=1`.
pub fn soak() -> bool {
    std::env::var(SOAK_ENV).is_ok_and(|value| value == "1")
}

/// `short` normally, `long` under [`soak`].
pub fn scaled<T>(short: T, long: T) -> T {
    if soak() { long } else { short }
}

/// Where the harness's binaries are. Cargo tells integration tests of
/// this crate their paths (`CARGO_BIN_EXE_<name>`), so get one with
/// [`fault_binaries!`](crate::fault_binaries) in a test.
#[derive(Debug, Clone)]
pub struct FaultBinaries {
    /// `src/bin/resource-server.rs`.
    pub resource_server: PathBuf,
    /// `src/bin/fault-client.rs`.
    pub fault_client: PathBuf,
    /// `src/bin/redis-buyer.rs`: the flash-sale buyer on the Redis fence.
    pub redis_buyer: PathBuf,
}

/// The [`FaultBinaries`] of this crate, from an integration test (where
/// cargo defines `CARGO_BIN_EXE_*`).
#[macro_export]
macro_rules! fault_binaries {
    () => {
        $crate::fault::FaultBinaries {
            resource_server: ::std::path::PathBuf::from(env!("CARGO_BIN_EXE_resource-server")),
            fault_client: ::std::path::PathBuf::from(env!("CARGO_BIN_EXE_fault-client")),
            redis_buyer: ::std::path::PathBuf::from(env!("CARGO_BIN_EXE_redis-buyer")),
        }
    };
}
