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
//! The server can also demand more of a request before the store sees it
//! (docs/SECURITY.md): a bearer token allowed the lock's name (401/403), a
//! sequencer signed by a known key from a trusted issuer (401/403), a
//! generation not too far above the marks (409 `raise_too_large`, which a
//! write's engine checks in the write's own step). A refused request
//! changes nothing. Its own accept loop bounds
//! connections, requests in flight, header time and size, and body time
//! and size, so a slow or huge client cannot starve the others; a request
//! deadline bounds every wait on the store and the lock service, so a
//! stalled dependency gets an answer (503), not a silence; TLS is rustls.
//!
//! **Architecture Invariant:** the server depends on `palisade-core` and
//! `palisade-store`, never on a lock backend; the PostgreSQL and etcd
//! engines come only with the `postgres` and `etcd` features (sled alone by
//! default), and `--store` for an engine not built in is refused naming
//! its feature. The optional live check reaches a backend through
//! [`palisade_core::SharedLiveCheck`].
//!
//! # Where to start
//!
//! - [`app`]: the router, for `oneshot` tests and embedding.
//! - [`run`]: serve a listener until a shutdown future resolves, then flush.
//! - [`ServerConfig`] and [`serve`]: flags/environment, and the whole
//!   start-up the `palisade-server` binary does.
//! - [`AppState`]: the store, the live check, the security settings,
//!   limits, metrics.
//! - [`TokenTable`], [`TlsConfig`], [`ServerLimits`]: bearer tokens, TLS,
//!   and the limits against slow or greedy clients.
//! - [`ApiError`]: the one place refusals and failures become answers, as
//!   `palisade_wire::ErrorBody`s (every body the server writes or reads is
//!   a `palisade-wire` type).
//! - [`OPENAPI_JSON`]: the OpenAPI 3.1 document (`GET /openapi.json`),
//!   generated from those wire types (with the `openapi` feature,
//!   `openapi_document()` generates it; a test keeps the served copy equal);
//!   [`exported_metric_names`]: what `GET /metrics` exports. `GET /ui` is a
//!   live dashboard of the latest fencing decisions, fed by `GET
//!   /v1/events` (server-sent events).
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
mod connection_service;
mod connections;
mod deadline;
mod decisions;
mod engines;
mod error;
mod events;
mod limits;
mod metrics;
#[cfg(feature = "openapi")]
mod openapi;
mod routes;
mod sequencer_policy;
mod serve;
mod state;
mod store_spec;
// Without the `tls` feature, `--tls-cert` is refused.
#[cfg_attr(not(feature = "tls"), path = "tls_off.rs")]
mod tls;
mod tokens;

pub use config::{DurabilityMode, ServerConfig};
pub use error::{ApiError, ServerError};
pub use limits::ServerLimits;
pub use metrics::exported_metric_names;
#[cfg(feature = "openapi")]
pub use openapi::openapi_document;

/// The OpenAPI 3.1 document of the HTTP API, as `GET /openapi.json` serves
/// it: the document generated from the handlers and the wire types
/// (`openapi_document()`, with the `openapi` feature), committed beside the
/// crate so that a server built without `utoipa` serves the same bytes. A
/// test fails when the two differ.
pub const OPENAPI_JSON: &str = include_str!("../openapi.json");
pub use routes::{
    IDEMPOTENCY_KEY_HEADER, MARK_EXCLUSIVE_HEADER, MARK_SHARED_HEADER, REPLAYED_HEADER, app,
};
pub use serve::{run, serve, shutdown_signal};
pub use state::AppState;
pub use store_spec::{StoreSpec, StoreSpecError};
pub use tls::TlsConfig;
pub use tokens::TokenTable;
