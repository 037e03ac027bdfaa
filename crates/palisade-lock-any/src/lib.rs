//! Choosing a Palisade lock backend at run time.
//!
//! Everywhere else Palisade is generic over `L: Lock`; this crate is the one
//! place that picks a backend while running, for the `palisade` command and
//! the demos alike. A [`LockSpec`] says which service, where, and how its
//! sessions sign; it comes from the backend flags ([`BackendArgs`], feature
//! `clap`) or from one URL (`etcd://h:2379,h2:2379`, `redis://h:6379`,
//! `redis+cluster://a,b`, `redlock://a,b,c`, `postgres://...`, `mysql://...`,
//! `zookeeper://h:2181,h2:2181/chroot`, `embedded:`).
//! From a spec:
//!
//! - [`AnyClient::connect`] connects, and [`AnyClient::session`] opens
//!   [`AnyLock`] sessions, whose holds are [`AnyGuard`]s; both implement the
//!   core `Lock` and `LockGuard` traits by delegating;
//! - [`AnyInspector`] lists holders and waiters and ends stuck holds
//!   (`Inspect`, `ForceRelease`);
//! - [`raise_floor`] lifts a lock's generation floor after the lock service
//!   lost its counter;
//! - [`live_check`] makes the resource server's live check.
//!
//! Each backend is behind a cargo feature of its own name (`embedded`,
//! `etcd`, `redis` for Redis and Redlock, `sql` for PostgreSQL and
//! MariaDB, `zookeeper`), so a program compiles only the clients it can use; a service
//! whose backend is not compiled in is refused with the feature to turn on
//! ([`SelectError::NotCompiled`]). Every message shows connection strings
//! redacted.
//!
//! ```
//! # #[cfg(feature = "embedded")]
//! # async fn demo() -> Result<(), palisade_lock_any::SelectError> {
//! use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
//! use palisade_lock_any::{AnyClient, LockSpec};
//!
//! let spec: LockSpec = "embedded:".parse()?;
//! let session = AnyClient::open(&spec, SessionOptions::default()).await?;
//! let guard = session
//!     .acquire(&LockName::new("orders/42").unwrap(), Mode::Exclusive)
//!     .await
//!     .unwrap();
//! println!("holding generation {}", guard.generation());
//! # Ok(()) }
//! ```

// A build without every backend keeps every type (so its users compile);
// the arms and helpers of the missing backends are compiled out, which
// leaves parameters and fallbacks unused. The full build is linted whole.
#![cfg_attr(
    not(all(
        feature = "embedded",
        feature = "etcd",
        feature = "redis",
        feature = "sql",
        feature = "zookeeper"
    )),
    allow(unused_variables, unused_imports, unreachable_code, dead_code)
)]

#[cfg(feature = "clap")]
mod args;
mod connect;
mod error;
mod floor;
mod inspect;
mod live;
mod spec;
#[cfg(feature = "testing")]
mod testing;

#[cfg(feature = "clap")]
pub use args::{
    BackendArgs, BackendChoice, Defaults, LOCAL_ETCD_ENDPOINTS, LOCAL_MARIADB_URL,
    LOCAL_POSTGRES_URL, LOCAL_REDIS_URL, LOCAL_ZOOKEEPER,
};
pub use connect::{AnyClient, AnyGuard, AnyLock, sql_default_issuer};
pub use error::{SelectError, cause_chain, lock_error_text, root_cause};
pub use floor::{FloorOptions, FloorRaised, FloorStep, raise_floor};
pub use inspect::AnyInspector;
pub use live::live_check;
pub use spec::{BackendKind, LockSpec, RedisGenerations, Service, ZooKeeperNodeNames};
