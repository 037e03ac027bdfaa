//! Palisade's demos as a library: the GC-pause story and the flash sale,
//! on the embedded backend, etcd, Redis, PostgreSQL or MariaDB. Each
//! backend but the embedded one is behind a cargo feature of its name
//! (`etcd`, `redis`, `sql`), so a run compiles only what it uses. The example binaries
//! (`examples/gc-pause`, `examples/flash-sale`), `palisade demo` and the
//! test suite all run these.
//!
//! Both demos run the same scenario without fencing and with it, print what
//! happened, and end with one verdict line per run. The fenced run's safety
//! decides the exit status ([`GcPauseReport::exit_code`],
//! [`FlashSaleReport::exit_code`]); a demo that could not run at all is a
//! [`DemoError`] (usage errors exit with 2).
//!
//! - The **unfenced** runs keep their numbers in a [`PlainStore`]: a tiny
//!   HTTP key-value service that applies whatever it is sent, the storage a
//!   plain lock relies on. It counts the stale writes it let through.
//! - The **fenced** runs go through Palisade's resource server
//!   (`palisade_server::run` on a free port with a temporary directory,
//!   see [`ResourceServer`]) and `palisade_client`.
//! - The flash sale with `--store postgres://...` keeps its stock in a
//!   table of that PostgreSQL instead (`palisade_demo_stock`): plain
//!   statements without fencing, `palisade_fence_sql` fenced transactions with
//!   it.
//! - With `--store redis://...` (feature `redis`) the stock is a counter
//!   per segment in that Redis: plain `DECRBY` without fencing,
//!   `palisade_fence_redis`'s fenced decrement ("only if at least 0
//!   stay") with it.
//!
//! # Where to start
//!
//! - [`gc_pause`]: the story of DESIGN.md, with client A paused in-process
//!   or stopped with SIGSTOP in a process of its own; writes an SVG
//!   timeline ([`svg`]).
//! - [`flash_sale`]: N items, many buyers, random pauses, three runs side
//!   by side; with `--stripes` the stock is split into separately locked
//!   and fenced segments, and [`flash_sale::measure`] runs the fenced sale
//!   alone for the `stripes` benchmark.
//! - [`child`]: how the demos re-run their own binary as client processes
//!   ([`ChildLauncher`], [`run_child`]).
//! - `backend.rs`: the backend flags of `palisade-lock-any` with the
//!   demos' defaults, and sessions that can be paused.
//!
//! ```no_run
//! use palisade_demo::{BackendArgs, ChildLauncher, GcPauseArgs, gc_pause};
//!
//! # async fn demo() -> Result<(), palisade_demo::DemoError> {
//! let args = GcPauseArgs::new(BackendArgs::default());
//! let launcher = ChildLauncher::current_exe(["--demo-child"])?;
//! let report = gc_pause::run(&args, &launcher).await?;
//! assert!(report.fenced_safe());
//! # Ok(()) }
//! ```

mod backend;
mod client;
mod error;
#[cfg(feature = "redis")]
mod redis_stock;
mod rng;
mod sql_stock;
mod storage;

pub mod child;
pub mod flash_sale;
pub mod gc_pause;
mod host;
pub mod plain_store;
pub mod svg;
pub mod timeline;

pub use child::{ChildLauncher, run_child};
pub use error::DemoError;
pub use flash_sale::{FlashSaleArgs, FlashSaleReport, SaleKind, SaleRun};
pub use gc_pause::{GcPauseArgs, GcPauseReport, GcRunReport, PauseVariant};
pub use host::host_main;
pub use palisade_lock_any::{BackendArgs, BackendKind, LockSpec};
pub use plain_store::PlainStore;
pub use storage::ResourceServer;
