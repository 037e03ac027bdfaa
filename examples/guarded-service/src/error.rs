//! The service's errors, answered in the same JSON shape as the guard's
//! refusals: `{"code": ..., "message": ...}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use palisade_guard::GuardError;
use serde_json::json;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// The guard refused the request (stale, unsigned, ...).
    #[error(transparent)]
    Guard(#[from] GuardError),
    /// No such item.
    #[error("no item `{sku}`")]
    NotFound {
        /// The SKU asked for.
        sku: String,
    },
    /// An adjustment would take the stock below zero.
    #[error("item `{sku}` has {stock} in stock; cannot apply {delta}")]
    InsufficientStock {
        /// The SKU.
        sku: String,
        /// The stock now.
        stock: i64,
        /// The delta refused.
        delta: i64,
    },
    /// The body is not the JSON the route takes.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// sled failed.
    #[error("storage failure: {0}")]
    Storage(#[from] sled::Error),
    /// A change could not be made durable (its flush or fsync failed, now
    /// or earlier): it is not acknowledged, and neither is any later one.
    #[error("the change could not be made durable: {0}")]
    NotDurable(palisade_store::StoreError),
    /// The fenced store (the marks) failed to open.
    #[error("mark store failure: {0}")]
    Marks(#[from] palisade_store::StoreError),
    /// A bug.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ServiceError {
    /// The HTTP status and the stable code.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ServiceError::Guard(refusal) => (refusal.status(), refusal.code()),
            ServiceError::NotFound { .. } => (StatusCode::NOT_FOUND, "not_found"),
            ServiceError::InsufficientStock { .. } => {
                (StatusCode::UNPROCESSABLE_ENTITY, "insufficient_stock")
            }
            ServiceError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ServiceError::Storage(_) | ServiceError::NotDurable(_) | ServiceError::Marks(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable")
            }
            ServiceError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl IntoResponse for ServiceError {
    fn into_response(self) -> Response {
        match self {
            // The guard's refusals keep their full body (marks and all).
            ServiceError::Guard(refusal) => refusal.into_response(),
            other => {
                let (status, code) = other.status_and_code();
                if status.is_server_error() {
                    tracing::error!(error = %other, "request failed");
                }
                let body = json!({"code": code, "message": other.to_string()});
                (status, axum::Json(body)).into_response()
            }
        }
    }
}
