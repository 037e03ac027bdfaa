//! Fencing for object storage: writes to S3 (and compatibles, through the
//! `object_store` crate) that the store itself refuses once a newer holder
//! of the lock has fenced or written.
//!
//! A lease cannot stop a paused writer from writing to a bucket after its
//! lock has moved on. S3's conditional writes can: `If-None-Match: *`
//! (create only) and `If-Match` (replace only the version read). This
//! crate builds the resource server's fence on them, with the same rule
//! ([`palisade_core::marks::Marks::admit`]), the same sequencers and the
//! same refusal ([`Refused`]):
//!
//! - [`ObjectFence`]: fenced [`put`](ObjectFence::put),
//!   [`delete`](ObjectFence::delete) and [`copy`](ObjectFence::copy) of
//!   objects in place, checked against the lock's fence object and
//!   conditional on the object's own version;
//!   [`fence`](ObjectFence::fence) on acquire.
//! - [`FencedLog`]: numbered write-once log objects whose entries carry
//!   the lock's marks, for write-ahead logs and table formats' commit
//!   logs: the full guarantee of the resource server, even against a
//!   writer paused inside its own call.
//! - The start-up probe ([`ObjectFence::open`]): a store that accepts a
//!   write it had to refuse is never used.
//! - [`S3Config`]: `s3://bucket/prefix` plus endpoint, region and
//!   credentials, shown only with the secret masked.
//!
//! Every call returns `Result<Result<T, Refused>, FenceError>`: a refusal
//! is an outcome, apart from failures.
//!
//! ```no_run
//! # async fn example(guard: impl palisade_core::LockGuard) -> Result<(), Box<dyn std::error::Error>> {
//! use palisade_fence_object::S3Config;
//! use object_store::path::Path;
//!
//! let fence = S3Config::parse("s3://tables/orders")?
//!     .with_endpoint("http://127.0.0.1:9000")
//!     .with_credentials("key-id", "secret")
//!     .open() // probes the store first
//!     .await?;
//! fence.fence(&guard).await?.expect("a new holder fences first");
//! match fence.put(&guard, &Path::from("42.json"), "{\"stock\": 7}").await? {
//!     Ok(written) => println!("version {}", written.version),
//!     Err(refused) => println!("a newer holder has the lock: {refused}"),
//! }
//! # Ok(()) }
//! ```
//!
//! The design, the guarantee per operation and what is not guaranteed
//! are in `docs/object-storage.md`.

mod config;
mod connector;
mod error;
mod fence;
mod log;
mod outcome;
pub mod probe;
mod record;
#[cfg(feature = "testing")]
pub mod testing;

pub use config::S3Config;
pub use error::FenceError;
pub use fence::{FenceStats, MARKS_REUSE, Object, ObjectFence, Written};
pub use log::{Appended, FencedLog, LogEntry};
/// `object_store`'s path type, which every call takes.
pub use object_store::path::Path;
pub use outcome::RetryBudget;
/// Core's one refusal type, in every call's inner `Result`.
pub use palisade_core::Refused;
pub use record::RESERVED;
