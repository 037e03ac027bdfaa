//! The request deadline: a store whose engine never answers, or a lock
//! service that never answers a live check, gets every request a `503
//! deadline_exceeded` that names what did not answer, within the deadline
//! (plus a margin for a loaded machine), never a silence. Issue #25: a
//! paused replica holding a PostgreSQL row made writes through healthy
//! replicas wait 60 to 120 s with no answer at all.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, StatusCode};
use palisade_core::{LiveCheck, Liveness, LockError, LockName, Sequencer};
use palisade_server::{AppState, ServerLimits};
use palisade_store::{
    Applied, Engine, EngineFuture, EngineInfo, Marks, Read, ReadRequest, Refused, Store,
    StoreConfig, WriteRequest,
};
use serde_json::{Value, json};

use crate::common::{Answer, Server, server_with};

/// The deadline under test: short, so the test is quick.
const DEADLINE: Duration = Duration::from_millis(300);
/// How late past the deadline an answer may come on a busy 2-core
/// machine; without a deadline there is no answer at all.
const MARGIN: Duration = Duration::from_secs(5);

/// An engine whose every call waits forever, as one stuck behind a row
/// lock held by a paused replica.
#[derive(Debug)]
struct Stalled;

fn never<T: Send + 'static>() -> EngineFuture<T> {
    Box::pin(std::future::pending())
}

impl Engine for Stalled {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            name: "stalled",
            durability: "never".into(),
            location: "nowhere".into(),
        }
    }

    fn write(&self, _: WriteRequest) -> EngineFuture<Result<Applied, Refused>> {
        never()
    }

    fn read(&self, _: ReadRequest<'_>) -> EngineFuture<Result<Read, Refused>> {
        never()
    }

    fn admit(&self, _: &Sequencer) -> EngineFuture<Result<Marks, Refused>> {
        never()
    }

    fn marks(&self, _: &LockName) -> EngineFuture<Marks> {
        never()
    }

    fn health(&self) -> EngineFuture<()> {
        never()
    }

    fn close(&self) -> EngineFuture<()> {
        never()
    }
}

/// A lock service that never answers.
struct Silent;

impl LiveCheck for Silent {
    async fn check(&self, _: &Sequencer) -> Result<Liveness, LockError> {
        std::future::pending().await
    }
}

fn limits() -> ServerLimits {
    let mut limits = ServerLimits::default();
    limits.request_timeout = DEADLINE;
    limits
}

const SEQUENCER: (&str, &str) = ("palisade-sequencer", "v1;lock=L;mode=exclusive;gen=3");

/// One request: method, path, headers, body.
type Request = (
    Method,
    &'static str,
    Vec<(&'static str, &'static str)>,
    String,
);

/// Every kind of request.
fn requests() -> Vec<Request> {
    vec![
        (
            Method::PUT,
            "/v1/locks/L/keys/k",
            vec![SEQUENCER],
            "v".into(),
        ),
        (
            Method::DELETE,
            "/v1/locks/L/keys/k",
            vec![SEQUENCER],
            String::new(),
        ),
        (
            Method::POST,
            "/v1/locks/L/cas/k",
            vec![SEQUENCER],
            json!({"expected": null, "new": "v"}).to_string(),
        ),
        (
            Method::POST,
            "/v1/locks/L/batch",
            vec![SEQUENCER],
            json!({"ops": []}).to_string(),
        ),
        (Method::GET, "/v1/locks/L/keys/k", vec![], String::new()),
        (
            Method::GET,
            "/v1/locks/L/keys/k",
            vec![SEQUENCER],
            String::new(),
        ),
        (Method::GET, "/v1/locks/L/marks", vec![], String::new()),
        (Method::GET, "/healthz", vec![], String::new()),
    ]
}

async fn send_within(
    server: &Server,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: String,
) -> Answer {
    let sent = tokio::time::Instant::now();
    let answer = tokio::time::timeout(
        DEADLINE + MARGIN,
        server.send(method.clone(), path, headers, Body::from(body)),
    )
    .await
    .unwrap_or_else(|_| panic!("{method} {path}: no answer within {:?}", DEADLINE + MARGIN));
    assert!(
        sent.elapsed() >= DEADLINE,
        "{method} {path}: answered before the deadline"
    );
    answer
}

fn assert_deadline(answer: &Answer, waiting_for: &str, label: &str) {
    let body: Value = answer.assert_error(StatusCode::SERVICE_UNAVAILABLE, "deadline_exceeded");
    assert_eq!(body["waiting_for"], waiting_for, "{label}: {body}");
    assert_eq!(body["deadline_ms"], 300, "{label}: {body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("did not answer within"),
        "{label}: {message}"
    );
}

#[tokio::test]
async fn a_store_that_never_answers_gets_503_deadline_exceeded_naming_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::with_engine(Arc::new(Stalled), StoreConfig::default());
    let server = Server::over(dir, AppState::new(store).with_limits(limits()));
    for (method, path, headers, body) in requests() {
        let label = format!("{method} {path} {headers:?}");
        let answer = send_within(&server, method, path, &headers, body).await;
        assert_deadline(&answer, "store", &label);
    }
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("palisade_requests_rejected_total{reason=\"deadline_exceeded\"} 8\n"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_live_check_that_never_answers_gets_503_deadline_exceeded_naming_it() {
    let server = server_with(StoreConfig::default(), |state| {
        state
            .with_limits(limits())
            .with_live_check(Arc::new(Silent))
    });
    for (method, path, headers, body) in requests() {
        if !headers.contains(&SEQUENCER) {
            continue; // No sequencer, no live check.
        }
        let label = format!("{method} {path}");
        let answer = send_within(&server, method, path, &headers, body).await;
        assert_deadline(&answer, "live_check", &label);
    }
    // Nothing reached the store.
    let marks = server
        .send(Method::GET, "/v1/locks/L/marks", &[], Body::empty())
        .await;
    assert_eq!(marks.json()["marks"]["exclusive"], 0);
}

#[test]
fn the_default_deadline_is_ten_seconds_at_most() {
    let default = ServerLimits::default().request_timeout;
    assert!(
        default > Duration::ZERO && default <= Duration::from_secs(10),
        "{default:?}"
    );
    let mut limits = ServerLimits::default();
    limits.request_timeout = Duration::ZERO;
    assert!(limits.validate().is_err(), "a zero deadline is refused");
}
