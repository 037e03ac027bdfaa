//! What the `oneshot` test binaries share: a server over a real sled in a
//! temporary directory, requests sent to its router without a socket, and
//! answers read whole.

// Each test binary compiles this module and uses its own part of it.
#![allow(dead_code)]

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, StatusCode};
use palisade_server::{AppState, app};
use palisade_store::{Store, StoreConfig};
use serde_json::Value;
use tempfile::TempDir;
use tower::ServiceExt as _;

/// A server: its state (for looking at the store directly) and its router.
pub(crate) struct Server {
    /// Keeps the store's directory alive.
    pub(crate) dir: TempDir,
    pub(crate) state: AppState,
    pub(crate) router: Router,
}

/// An answer, read whole.
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }

    pub(crate) fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or_default().to_owned()
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// Asserts an error answer: status and code, a message, and JSON.
    pub(crate) fn assert_error(&self, status: StatusCode, code: &str) -> Value {
        let body = self.json();
        assert_eq!(
            (self.status, self.code().as_str()),
            (status, code),
            "body: {body}"
        );
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "errors are JSON"
        );
        body
    }
}

/// A server over a fresh store with `config`, its state shaped by `adjust`.
pub(crate) fn server_with(
    config: StoreConfig,
    adjust: impl FnOnce(AppState) -> AppState,
) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config).unwrap();
    Server::over(dir, adjust(AppState::new(store)))
}

impl Server {
    /// `GET /metrics`, asserted to be OpenMetrics text.
    pub(crate) async fn metrics(&self) -> String {
        let answer = self.send(Method::GET, "/metrics", &[], Body::empty()).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert!(
            answer
                .header("content-type")
                .unwrap()
                .starts_with("application/openmetrics-text")
        );
        String::from_utf8(answer.body.to_vec()).unwrap()
    }

    /// A server for `state`, whose store lives in `dir`.
    pub(crate) fn over(dir: TempDir, state: AppState) -> Server {
        Server {
            dir,
            router: app(state.clone()),
            state,
        }
    }

    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Body>,
    ) -> Answer {
        let mut request = Request::builder().method(method).uri(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self
            .router
            .clone()
            .oneshot(request.body(body.into()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        Answer {
            status,
            headers,
            body,
        }
    }
}
