//! Request decoding: an arbitrary request (method, target, headers, body)
//! sent through `palisade_server::app` with `tower::ServiceExt::oneshot`,
//! on a sled store in a temporary directory.
//!
//! The input is a request file in the hostile corpus's format
//! (`tests/corpus/hostile/README.md`, parsed by the very same code), so
//! every corpus file is a seed and the mutations stay close to HTTP.
//!
//! Never panics; never answers a 5xx other than 503 (a 500 is a bug by the
//! HTTP API's own definition); every answer that is not a success is typed:
//! JSON with a `code`.

#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Method, Request, Uri, header};
use libfuzzer_sys::fuzz_target;
use palisade_core::{SigningKey, Verifier};
use palisade_server::{AppState, app};
use palisade_store::{Durability, Store, StoreConfig};
use tower::ServiceExt as _;

#[path = "../../tests/tests/it/hostile/request_file.rs"]
#[allow(dead_code)]
mod request_file;

/// What every run shares: one runtime and one store, set up on the first
/// input (opening sled per input would be all the fuzzer measures).
struct World {
    runtime: tokio::runtime::Runtime,
    state: AppState,
    /// Kept for as long as the process lives; `scripts/fuzz.sh` points
    /// `TMPDIR` at a directory it removes afterwards.
    _dir: tempfile::TempDir,
}

static WORLD: OnceLock<World> = OnceLock::new();

fn world() -> &'static World {
    WORLD.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let dir = tempfile::tempdir().expect("a temporary directory");
        // Buffered: an fsync per accepted write would be all the fuzzer
        // measures, and durability is not what is fuzzed here.
        let config = StoreConfig {
            durability: Durability::Buffered {
                flush_every: Duration::from_secs(1),
            },
            ..StoreConfig::default()
        };
        let store = Store::open(dir.path(), config).expect("a store");
        // Signed sequencers are verified when present (the seeds' key
        // `k1`), unsigned ones pass: both paths are reachable.
        let verifier = Verifier::new()
            .with_key(SigningKey::new("k1", [0x42; 32]).expect("a valid key"))
            .expect("one key");
        let state = AppState::new(store)
            .with_max_body_bytes(64 * 1024)
            .with_verifier(verifier, false);
        let world = World {
            runtime,
            state,
            _dir: dir,
        };
        // The hostile corpus's seed state (its README).
        for (lock, key, sequencer, value) in [
            (
                "orders%2F42",
                "stock",
                "v1;lock=orders/42;mode=exclusive;gen=10",
                "7",
            ),
            ("a", "secret", "v1;lock=a;mode=exclusive;gen=5", "s3cr3t"),
        ] {
            let request = Request::put(format!("/v1/locks/{lock}/keys/{key}"))
                .header("palisade-sequencer", sequencer)
                .body(Body::from(value))
                .expect("a valid request");
            let response = world
                .runtime
                .block_on(app(world.state.clone()).oneshot(request))
                .expect("infallible");
            assert!(
                response.status().is_success(),
                "seeding: {}",
                response.status()
            );
        }
        world
    })
}

/// The file as an `http::Request`, or `None` when it cannot be one (an
/// invalid method, target or header: hyper would have refused it before
/// the router).
fn http_request(file: &request_file::RequestFile) -> Option<Request<Body>> {
    let method = Method::from_bytes(&file.method).ok()?;
    let uri = Uri::try_from(file.target.as_slice()).ok()?;
    let mut builder = Request::builder().method(method).uri(uri);
    for (name, value) in &file.headers {
        builder = builder.header(
            HeaderName::from_bytes(name).ok()?,
            HeaderValue::from_bytes(value).ok()?,
        );
    }
    if !file.body.is_empty()
        && !file
            .headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case(b"content-length"))
    {
        builder = builder.header(header::CONTENT_LENGTH, file.body.len());
    }
    builder.body(Body::from(file.body.clone())).ok()
}

fuzz_target!(|data: &[u8]| {
    let Ok(file) = request_file::parse(data, 256 * 1024) else {
        return;
    };
    let Some(request) = http_request(&file) else {
        return;
    };
    let world = world();
    let (status, content_type, body) = world.runtime.block_on(async {
        let response = app(world.state.clone())
            .oneshot(request)
            .await
            .expect("infallible");
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("a body in memory");
        (status, content_type, body)
    });
    assert!(
        !status.is_server_error() || status.as_u16() == 503,
        "{status}: {:?} for {file:?}",
        String::from_utf8_lossy(&body)
    );
    if !status.is_success() {
        let typed = content_type
            .as_deref()
            .is_some_and(|content_type| content_type.starts_with("application/json"))
            && serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|json| {
                    json.get("code")
                        .and_then(|code| code.as_str())
                        .map(str::len)
                })
                .is_some_and(|len| len > 0);
        assert!(
            typed,
            "{status} without a JSON code: {:?} ({content_type:?}) for {file:?}",
            String::from_utf8_lossy(&body)
        );
    }
});
