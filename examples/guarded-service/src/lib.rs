//! An inventory service with its own data, fenced by `palisade-guard`.
//!
//! Run with: `cargo run -p example-guarded-service -- --data-dir /tmp/inventory`
//!
//! This is not the Palisade resource server: it is the kind of service a
//! team already has (stock levels and a ledger, in its own sled trees,
//! behind its own routes), made safe against paused lock holders by adding
//! one layer. Item `<sku>` is guarded by lock `items/<sku>`: a write must
//! carry an exclusive sequencer for it, and a holder that was superseded
//! gets `409 stale` instead of overwriting the newer holder's change.
//!
//! The marks are kept with [`SledMarks`] (a fenced store of their own, in
//! `<data-dir>/marks`), fsynced before a handler runs; the inventory is in
//! `<data-dir>/inventory`, fsynced ([`palisade_store::DurableSled`]) before
//! a change is acknowledged. The guard runs in serialised mode, so the
//! read-modify-write of `adjust` can never interleave with a newer holder's
//! request.
//!
//! # Where to start
//!
//! - [`app`]: the routes and where the guard sits.
//! - [`AppState::open`]: the database, the marks and the guard.
//! - [`Inventory`]: the service's own data; it knows nothing of fencing.

mod error;
mod inventory;

use std::future::Future;
use std::path::Path;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::routing::{get, post};
use palisade_core::{LockName, Verifier};
use palisade_guard::{Fenced, Guard, LockSource, MetricsSnapshot, SledMarks};
use palisade_store::StoreConfig;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;

pub use error::ServiceError;
pub use inventory::{Inventory, Item, LedgerEntry};

/// Whether `sku` is a valid item id: 1 to 64 bytes of `A-Z a-z 0-9 - _ .`.
pub fn valid_sku(sku: &str) -> bool {
    (1..=64).contains(&sku.len())
        && sku
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// The lock that guards item `sku`.
pub fn item_lock(sku: &str) -> Result<LockName, String> {
    if !valid_sku(sku) {
        return Err(format!(
            "`{sku}` is not a valid SKU (1 to 64 of A-Z a-z 0-9 - _ .)"
        ));
    }
    LockName::new(format!("items/{sku}")).map_err(|error| error.to_string())
}

/// How the service is set up beyond its data directory.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Require sequencers signed by one of these keys (and issuers).
    pub verifier: Option<Verifier>,
    /// Refuse a generation more than this far above an item's mark.
    pub max_raise: Option<u64>,
}

/// Everything the handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The service's own data.
    pub inventory: Inventory,
    /// The guard in front of the item routes (its counters are served at
    /// `/metrics`).
    pub guard: Guard,
}

impl AppState {
    /// Opens (or creates) the service's data in `data_dir`: the inventory
    /// in `inventory/`, the marks in `marks/`.
    ///
    /// The marks get a fenced store of their own, opened with
    /// [`SledMarks::open`] (`Store::open`), which owns its directory and so
    /// can make every admission fully durable before the handler runs.
    pub fn open(data_dir: &Path, options: Options) -> Result<AppState, ServiceError> {
        let inventory = Inventory::open(&data_dir.join("inventory"))?;
        let marks = SledMarks::open(data_dir.join("marks"), StoreConfig::default())?;
        let mut guard = Guard::builder(marks).lock_source(LockSource::from_fn(|_parts, params| {
            item_lock(params.get("sku").ok_or("the route has no {sku}")?)
        }));
        if let Some(verifier) = options.verifier {
            guard = guard.require_signatures(verifier);
        }
        if let Some(max_raise) = options.max_raise {
            guard = guard.max_raise(max_raise);
        }
        Ok(AppState {
            inventory,
            guard: guard.build(),
        })
    }
}

/// The routes:
///
/// | route | what | sequencer |
/// |---|---|---|
/// | `GET /items/{sku}` | `{"sku", "stock", "generation"}` | optional (checked if present) |
/// | `PUT /items/{sku}` | body `{"stock": n}`: set the stock | exclusive, for `items/{sku}` |
/// | `POST /items/{sku}/adjust` | body `{"delta": n}`: add `n` (refused below 0) | exclusive |
/// | `GET /items/{sku}/ledger` | every change, oldest first | optional |
/// | `GET /metrics` | the guard's counters (JSON) | none |
/// | `GET /healthz` | `{"status": "ok"}` | none |
pub fn app(state: AppState) -> Router {
    let items = Router::new()
        .route("/items/{sku}", get(get_item).put(set_stock))
        .route("/items/{sku}/adjust", post(adjust_stock))
        .route("/items/{sku}/ledger", get(get_ledger))
        .route_layer(state.guard.layer());
    Router::new()
        .route("/metrics", get(metrics))
        .route(
            "/healthz",
            get(|| async { axum::Json(json!({"status": "ok"})) }),
        )
        .merge(items)
        .with_state(state)
}

/// Serves `app(state)` on `listener` until `shutdown` resolves, then
/// finishes the requests in flight.
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown)
        .await
}

fn item_json(sku: &str, item: Item) -> Value {
    json!({"sku": sku, "stock": item.stock, "generation": item.generation})
}

fn parse_body<T: for<'de> Deserialize<'de>>(body: &Bytes) -> Result<T, ServiceError> {
    serde_json::from_slice(body).map_err(|error| ServiceError::BadRequest(error.to_string()))
}

async fn get_item(
    State(state): State<AppState>,
    UrlPath(sku): UrlPath<String>,
) -> Result<axum::Json<Value>, ServiceError> {
    let item = state
        .inventory
        .item(&sku)?
        .ok_or(ServiceError::NotFound { sku: sku.clone() })?;
    Ok(axum::Json(item_json(&sku, item)))
}

#[derive(Deserialize)]
struct SetStock {
    stock: i64,
}

async fn set_stock(
    State(state): State<AppState>,
    UrlPath(sku): UrlPath<String>,
    fenced: Fenced,
    body: Bytes,
) -> Result<axum::Json<Value>, ServiceError> {
    let SetStock { stock } = parse_body(&body)?;
    if stock < 0 {
        return Err(ServiceError::BadRequest("stock cannot be negative".into()));
    }
    let item = state
        .inventory
        .change(&sku, fenced.generation().get(), "set", stock, |_| Ok(stock))
        .await?;
    Ok(axum::Json(item_json(&sku, item)))
}

#[derive(Deserialize)]
struct Adjust {
    delta: i64,
}

async fn adjust_stock(
    State(state): State<AppState>,
    UrlPath(sku): UrlPath<String>,
    fenced: Fenced,
    body: Bytes,
) -> Result<axum::Json<Value>, ServiceError> {
    let Adjust { delta } = parse_body(&body)?;
    let item = state
        .inventory
        .change(
            &sku,
            fenced.generation().get(),
            "adjust",
            delta,
            |stock| match stock.checked_add(delta) {
                Some(after) if after >= 0 => Ok(after),
                _ => Err(ServiceError::InsufficientStock {
                    sku: sku.clone(),
                    stock,
                    delta,
                }),
            },
        )
        .await?;
    Ok(axum::Json(item_json(&sku, item)))
}

async fn get_ledger(
    State(state): State<AppState>,
    UrlPath(sku): UrlPath<String>,
) -> Result<axum::Json<Vec<LedgerEntry>>, ServiceError> {
    Ok(axum::Json(state.inventory.ledger(&sku)?))
}

async fn metrics(State(state): State<AppState>) -> axum::Json<Value> {
    let MetricsSnapshot {
        admitted,
        validated,
        unfenced,
        waited,
        refused,
        ..
    } = state.guard.metrics();
    axum::Json(json!({
        "admitted": admitted,
        "validated": validated,
        "unfenced": unfenced,
        "waited": waited,
        "refused": refused,
    }))
}
