//! The Palisade resource server: the fenced store ([`palisade_store`])
//! behind an HTTP API.
//!
//! A request names a lock and a key in its path and carries its sequencer in
//! the `palisade-sequencer` header. Writes need an exclusive sequencer;
//! reads may carry one. The store refuses a sequencer older than the newest
//! it has honoured for that lock, and the server turns that refusal into
//! `409` with a JSON body giving the presented generation and the current
//! marks. `docs/http-api.md` is the full contract.
//!
//! **Architecture Invariant:** the server depends on `palisade-core` and
//! `palisade-store` only, never on a lock backend. The optional live check
//! reaches a backend through [`palisade_core::SharedLiveCheck`].
//!
//! # Where to start
//!
//! - [`app`]: the router, for `oneshot` tests and embedding.
//! - [`run`]: serve a listener until a shutdown future resolves, then flush.
//! - [`ServerConfig`] and [`serve`]: flags/environment, and the whole
//!   start-up the `palisade-server` binary does.
//! - [`AppState`]: the store, the live check, limits, metrics.
//! - [`ApiError`]: the one place refusals and failures become statuses and
//!   `code`s.
//!
//! ```no_run
//! use palisade_server::{ServerConfig, serve, shutdown_signal};
//!
//! # async fn example() -> Result<(), palisade_server::ServerError> {
//! let config = ServerConfig::new("/var/lib/palisade");
//! serve(config, None, shutdown_signal()).await
//! # }
//! ```

mod config;
mod dto;
mod encoding;
mod error;
mod metrics;
mod routes;
mod serve;
mod state;

pub use config::{DurabilityMode, ServerConfig};
pub use error::{ApiError, ServerError};
pub use routes::{
    IDEMPOTENCY_KEY_HEADER, MARK_EXCLUSIVE_HEADER, MARK_SHARED_HEADER, REPLAYED_HEADER, app,
};
pub use serve::{run, serve, shutdown_signal};
pub use state::AppState;
