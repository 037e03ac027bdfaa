//! Fencing for your own service: validate Palisade sequencers in any
//! axum (or tower) service, and refuse the requests of lock holders that
//! have been superseded.
//!
//! A lock cannot protect data by itself: a holder can pause past its lease,
//! another client takes the lock with a newer generation and writes, and
//! the first one wakes up and writes too. A resource that remembers the
//! newest generation it has honoured (its high-water mark) and refuses
//! older ones closes that hole. This crate is that check, for a service
//! that is not the Palisade resource server: a [`GuardLayer`], a [`Fenced`]
//! extractor, and [`MarkStore`]s to keep the marks in.
//!
//! ```
//! use axum::{Router, routing::put};
//! use palisade_guard::{Fenced, Guard, MemoryMarks};
//!
//! async fn set_stock(fenced: Fenced, stock: String) -> String {
//!     // Runs only for a current holder of lock `{lock}`, and no newer
//!     // holder's request can run until this one is done.
//!     format!("stock is {stock}, under generation {}", fenced.generation())
//! }
//!
//! let guard = Guard::builder(MemoryMarks::new()).build(); // SledMarks in production
//! let app: Router = Router::new()
//!     .route("/stock/{lock}", put(set_stock))
//!     .route_layer(guard.layer());
//! # use tower::ServiceExt as _;
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! # let put = |generation: u64| axum::http::Request::put("/stock/orders%2F42")
//! #     .header("palisade-sequencer", format!("v1;lock=orders/42;mode=exclusive;gen={generation}"))
//! #     .body(axum::body::Body::from("7")).unwrap();
//! # assert_eq!(app.clone().oneshot(put(34)).await.unwrap().status(), 200);
//! # assert_eq!(app.clone().oneshot(put(33)).await.unwrap().status(), 409);
//! # });
//! ```
//!
//! A write needs an exclusive sequencer for the route's lock in the
//! `palisade-sequencer` header; a stale one is answered `409` with the same
//! JSON body as the Palisade server (`{"code": "stale", "message": ...,
//! "lock", "mode", "presented", "required", "marks"}`), and the handler
//! never runs. Every refusal code is listed on [`GuardError`].
//!
//! # The two modes, and what each guarantees
//!
//! Checking the mark and then running the handler leaves a gap: generation
//! 4 passes the check, stalls, and writes after generation 5 has passed and
//! written. Each [`FencingMode`] closes it differently.
//!
//! - [`FencingMode::Serialised`] (the default): requests under one lock are
//!   serialised from the check until the handler's response future
//!   resolves (exclusive requests alone, shared ones together). **A handler
//!   never runs for generation `g` after a handler for a higher exclusive
//!   generation has run, whatever the handler writes to.** The mark is
//!   raised (and, with [`SledMarks`], flushed to disk) before the handler
//!   runs. Scope: one process, and work that is finished when the
//!   handler's future resolves (a spawned task or a streaming body is
//!   covered only while it keeps a clone of its [`Fenced`]).
//! - [`FencingMode::StoreTransaction`]: the handler writes through
//!   [`palisade_store::Store::apply`] with [`Fenced::sequencer`]; the store
//!   checks and raises the mark **in the same sled transaction as the
//!   write**, and the guard only validates (format, signature, lock, mode,
//!   raise cap). **A write under generation `g` is never applied after one
//!   under a higher exclusive generation, across any number of replicas
//!   sharing the store.** Only what goes through the store is fenced; no
//!   per-lock lock, so requests under one lock run in parallel.
//!
//! # Signatures and the raise cap
//!
//! A high-water mark is a denial-of-service hole: anyone who can reach the
//! service can present `gen=18446744073709551615` and lock everyone out
//! forever. [`GuardBuilder::require_signatures`] closes it: unsigned,
//! badly signed and unknown-key sequencers get `401`, a trusted key from an
//! untrusted issuer `403`, and the mark never moves for any of them.
//! [`GuardBuilder::max_raise`] (off by default) additionally refuses a
//! generation more than N above the lock's highest counter mark, or a
//! clock generation (Redis's default scheme) more than
//! [`GuardBuilder::max_raise_time`] ahead of the clock (`409
//! raise_too_large`), against a buggy issuer.
//!
//! **Architecture Invariant:** the guard never applies the fencing rule
//! itself. [`Marks::admit`] is the rule; a [`MarkStore`] applies it (in
//! serialised mode) or the fenced store's transaction does (in transaction
//! mode). The guard depends on `palisade-core` and `palisade-store` only,
//! never on a lock backend.
//!
//! # Where to start
//!
//! - [`Guard`] and [`GuardBuilder`]: the configuration, and the order of
//!   checks.
//! - [`GuardLayer`]: the tower layer; [`Fenced`]: the extractor (with or
//!   without the layer).
//! - [`MarkStore`]: where marks live, and its correctness obligations;
//!   [`MemoryMarks`] for tests, [`SledMarks`] for production.
//! - [`FencingMode`], [`ReadPolicy`], [`LockSource`]: the choices.
//! - [`GuardError`]: every refusal, its status and its code.
//! - [`MetricsSnapshot`]: admitted and refused counts, by code.
//! - `docs/guard.md` in the repository: the same, as a guide.
//!
//! # Observability
//!
//! Every decision is a `tracing` event with target `palisade_guard::fence`
//! and fields `lock`, `mode`, `generation`, `decision` (`admitted`,
//! `validated`, `unfenced`, `queued`, `woken`, `released`, `refused`) and,
//! for refusals, `reason` (the error code). Refusals are logged at `INFO`,
//! the rest at `DEBUG`; the guard's own failures (5xx) at `ERROR`.

mod error;
mod fenced;
mod guard;
mod layer;
mod lock_table;
mod mark_store;
mod memory;
mod metrics;
mod policy;
mod sled_marks;

pub use error::{GuardError, MarkStoreError};
pub use fenced::Fenced;
pub use guard::{Guard, GuardBuilder};
pub use layer::{GuardFuture, GuardLayer, GuardService};
pub use mark_store::{Admission, MarkStore};
pub use memory::MemoryMarks;
pub use metrics::MetricsSnapshot;
pub use palisade_store::Marks;
pub use policy::{FencingMode, LockSource, ReadPolicy, RouteParams};
pub use sled_marks::SledMarks;
