//! Helpers shared by the integration tests: requests, sequencers, bodies.

#![allow(dead_code, unreachable_pub)]

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use palisade_core::{Generation, LockName, Mode, Sequencer, Signer, SigningKey};
use serde_json::Value;

/// The lock every test route uses, and its percent-encoded path segment.
pub const LOCK: &str = "orders/42";
pub const LOCK_SEGMENT: &str = "orders%2F42";

pub fn lock() -> LockName {
    LockName::new(LOCK).unwrap()
}

pub fn sequencer(lock_name: &str, mode: Mode, generation: u64) -> Sequencer {
    Sequencer::new(
        LockName::new(lock_name).unwrap(),
        mode,
        Generation::new(generation).unwrap(),
    )
}

pub fn exclusive(generation: u64) -> Sequencer {
    sequencer(LOCK, Mode::Exclusive, generation)
}

pub fn shared(generation: u64) -> Sequencer {
    sequencer(LOCK, Mode::Shared, generation)
}

pub fn key(id: &str, fill: u8) -> SigningKey {
    SigningKey::new(id, vec![fill; 32]).unwrap()
}

pub fn signer(issuer: &str, id: &str, fill: u8) -> Signer {
    Signer::new(issuer, key(id, fill)).unwrap()
}

/// A request to `path` with `method`, the sequencer header set to `header`
/// (raw text) when given, and `body`.
pub fn request(method: &str, path: &str, header: Option<&str>, body: &str) -> Request<Body> {
    let mut builder = Request::builder().method(method).uri(path);
    if let Some(header) = header {
        builder = builder.header(Sequencer::HTTP_HEADER, header);
    }
    builder.body(Body::from(body.to_owned())).unwrap()
}

/// `PUT /v1/{LOCK}/items/k` with `sequencer`.
pub fn put_item(sequencer: &Sequencer) -> Request<Body> {
    request(
        "PUT",
        &format!("/v1/{LOCK_SEGMENT}/items/k"),
        Some(&sequencer.to_string()),
        "v",
    )
}

/// `GET /v1/{LOCK}/items/k`, with `sequencer` if given.
pub fn get_item(sequencer: Option<&Sequencer>) -> Request<Body> {
    let header = sequencer.map(ToString::to_string);
    request(
        "GET",
        &format!("/v1/{LOCK_SEGMENT}/items/k"),
        header.as_deref(),
        "",
    )
}

/// Status and JSON body (or `Value::Null` for a non-JSON body).
pub async fn status_and_json(response: Response<Body>) -> (StatusCode, Value) {
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Status and body text.
pub async fn status_and_text(response: Response<Body>) -> (StatusCode, String) {
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}
