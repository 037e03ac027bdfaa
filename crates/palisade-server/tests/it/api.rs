//! The HTTP API through `app(state).oneshot(request)`, with a real sled in a
//! temporary directory and no socket: every rule, every error status with
//! its `code`, atomic batches, idempotent retries, marks, metrics, health.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use palisade_core::{LiveCheck, Liveness, LockError, Sequencer};
use palisade_server::AppState;
use palisade_store::{Durability, Limits, Store, StoreConfig};
use serde_json::{Value, json};
use tower::ServiceExt as _;

use crate::common;
use common::{Answer, Server, server_with};

fn server() -> Server {
    server_with(StoreConfig::default(), |state| state)
}

fn excl(lock: &str, generation: u64) -> String {
    format!(
        "v1;lock={};mode=exclusive;gen={generation}",
        encode_seq(lock)
    )
}

fn shared(lock: &str, generation: u64) -> String {
    format!("v1;lock={};mode=shared;gen={generation}", encode_seq(lock))
}

/// The sequencer text form escapes everything but `A-Za-z0-9-._~/`.
fn encode_seq(lock: &str) -> String {
    lock.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Path segments escape everything but unreserved characters.
fn seg(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (*b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn key_path(lock: &str, key: &[u8]) -> String {
    format!("/v1/locks/{}/keys/{}", seg(lock.as_bytes()), seg(key))
}

impl Server {
    async fn put(&self, lock: &str, key: &str, sequencer: &str, value: &str) -> Answer {
        self.send(
            Method::PUT,
            &key_path(lock, key.as_bytes()),
            &[(Sequencer::HTTP_HEADER, sequencer)],
            value.to_owned(),
        )
        .await
    }

    async fn get(&self, lock: &str, key: &str, sequencer: Option<&str>) -> Answer {
        let headers: Vec<(&str, &str)> = sequencer
            .map(|s| vec![(Sequencer::HTTP_HEADER, s)])
            .unwrap_or_default();
        self.send(
            Method::GET,
            &key_path(lock, key.as_bytes()),
            &headers,
            Body::empty(),
        )
        .await
    }

    async fn batch(&self, lock: &str, sequencer: &str, body: Value) -> Answer {
        self.send(
            Method::POST,
            &format!("/v1/locks/{}/batch", seg(lock.as_bytes())),
            &[(Sequencer::HTTP_HEADER, sequencer)],
            body.to_string(),
        )
        .await
    }

    async fn marks(&self, lock: &str) -> (u64, u64) {
        let answer = self
            .send(
                Method::GET,
                &format!("/v1/locks/{}/marks", seg(lock.as_bytes())),
                &[],
                Body::empty(),
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK);
        let body = answer.json();
        assert_eq!(body["lock"], lock);
        (
            body["marks"]["exclusive"].as_u64().unwrap(),
            body["marks"]["shared"].as_u64().unwrap(),
        )
    }
}

#[tokio::test]
async fn put_then_get_round_trips_with_marks_headers() {
    let server = server();
    let answer = server
        .put("orders/42", "stock", &excl("orders/42", 33), "7")
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.json(),
        json!({"lock": "orders/42", "results": ["created"], "marks": {"exclusive": 33, "shared": 0}, "commit_seq": 1, "replayed": false})
    );
    assert_eq!(answer.header("palisade-mark-exclusive"), Some("33"));
    assert_eq!(answer.header("palisade-mark-shared"), Some("0"));
    assert_eq!(answer.header("palisade-replayed"), None);

    let answer = server.get("orders/42", "stock", None).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(&answer.body[..], b"7");
    assert_eq!(
        answer.header("content-type"),
        Some("application/octet-stream")
    );
    assert_eq!(answer.header("palisade-mark-exclusive"), Some("33"));

    let answer = server
        .put("orders/42", "stock", &excl("orders/42", 33), "6")
        .await;
    assert_eq!(answer.json()["results"], json!(["replaced"]));
}

#[tokio::test]
async fn binary_keys_and_values_round_trip() {
    let server = server();
    let key = [0xffu8, 0x00, b'/', b'%'];
    let value = vec![0u8, 0xfe, 0xff, 10];
    let path = key_path("bin", &key);
    let answer = server
        .send(
            Method::PUT,
            &path,
            &[(Sequencer::HTTP_HEADER, &excl("bin", 1))],
            value.clone(),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    let answer = server.send(Method::GET, &path, &[], Body::empty()).await;
    assert_eq!(answer.body.to_vec(), value);
    // The key `ff 00 / %` is distinct from the key `ff 00` under lock `bin`.
    let answer = server
        .send(Method::GET, &key_path("bin", &key[..2]), &[], Body::empty())
        .await;
    answer.assert_error(StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn locks_whose_names_are_prefixes_are_isolated() {
    let server = server();
    assert_eq!(
        server.put("a", "b/c", &excl("a", 1), "A").await.status,
        StatusCode::OK
    );
    assert_eq!(
        server.put("a/b", "c", &excl("a/b", 9), "AB").await.status,
        StatusCode::OK
    );
    assert_eq!(&server.get("a", "b/c", None).await.body[..], b"A");
    assert_eq!(&server.get("a/b", "c", None).await.body[..], b"AB");
    assert_eq!(server.marks("a").await, (1, 0));
    assert_eq!(server.marks("a/b").await, (9, 0));
}

#[tokio::test]
async fn a_stale_write_gets_409_with_the_presented_generation_and_the_marks() {
    let server = server();
    server.put("L", "k", &excl("L", 34), "from 34").await;
    let answer = server.put("L", "k", &excl("L", 33), "from 33").await;
    let body = answer.assert_error(StatusCode::CONFLICT, "stale");
    assert_eq!(body["lock"], "L");
    assert_eq!(body["mode"], "exclusive");
    assert_eq!(body["presented"], 33);
    assert_eq!(body["required"], 34);
    assert_eq!(body["marks"], json!({"exclusive": 34, "shared": 0}));
    // Nothing changed.
    assert_eq!(&server.get("L", "k", None).await.body[..], b"from 34");
    assert_eq!(server.marks("L").await, (34, 0));
}

#[tokio::test]
async fn the_rules_of_design_md_over_http() {
    let server = server();
    // Equal generations pass.
    assert_eq!(
        server.put("L", "k", &excl("L", 5), "a").await.status,
        StatusCode::OK
    );
    assert_eq!(
        server.put("L", "k", &excl("L", 5), "b").await.status,
        StatusCode::OK
    );
    // A shared reader below H_excl is stale.
    let answer = server.get("L", "k", Some(&shared("L", 4))).await;
    let body = answer.assert_error(StatusCode::CONFLICT, "stale");
    assert_eq!(body["mode"], "shared");
    assert_eq!(body["required"], 5);
    // A shared reader with a newer generation reads and raises H_shared...
    let answer = server.get("L", "k", Some(&shared("L", 7))).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("palisade-mark-shared"), Some("7"));
    // ...which fences a writer granted before it.
    let body = server
        .put("L", "k", &excl("L", 6), "late")
        .await
        .assert_error(StatusCode::CONFLICT, "stale");
    assert_eq!(body["required"], 7);
    // A writer at or above max(H_excl, H_shared) passes.
    assert_eq!(
        server.put("L", "k", &excl("L", 7), "c").await.status,
        StatusCode::OK
    );
    assert_eq!(server.marks("L").await, (7, 7));
    // A stale read is refused (409 JSON), so the value is not served to it.
    server
        .get("L", "k", Some(&excl("L", 6)))
        .await
        .assert_error(StatusCode::CONFLICT, "stale");
}

#[tokio::test]
async fn a_write_needs_a_well_formed_exclusive_sequencer_for_the_path_lock() {
    let server = server();
    let path = key_path("L", b"k");
    // Missing.
    server
        .send(Method::PUT, &path, &[], "v")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "missing_sequencer");
    // Malformed: the message carries the parser's reason.
    let body = server
        .send(
            Method::PUT,
            &path,
            &[(Sequencer::HTTP_HEADER, "v1;lock=L;mode=exclusive;gen=007")],
            "v",
        )
        .await
        .assert_error(StatusCode::BAD_REQUEST, "malformed_sequencer");
    assert!(
        body["message"].as_str().unwrap().contains("leading zero"),
        "{body}"
    );
    server
        .send(
            Method::PUT,
            &path,
            &[(Sequencer::HTTP_HEADER, "v2;whatever")],
            "v",
        )
        .await
        .assert_error(StatusCode::BAD_REQUEST, "malformed_sequencer");
    // Twice.
    server
        .send(
            Method::PUT,
            &path,
            &[
                (Sequencer::HTTP_HEADER, &excl("L", 1)),
                (Sequencer::HTTP_HEADER, &excl("L", 2)),
            ],
            "v",
        )
        .await
        .assert_error(StatusCode::BAD_REQUEST, "malformed_sequencer");
    // For another lock.
    let body = server
        .put("L", "k", &excl("M", 1), "v")
        .await
        .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "lock_mismatch");
    assert_eq!(body["path_lock"], "L");
    assert_eq!(body["sequencer_lock"], "M");
    // Shared.
    let body = server
        .put("L", "k", &shared("L", 3), "v")
        .await
        .assert_error(StatusCode::FORBIDDEN, "shared_on_write");
    assert_eq!(body["presented"], 3);
    // A read with a sequencer for another lock.
    server
        .get("L", "k", Some(&shared("M", 1)))
        .await
        .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "lock_mismatch");
    // None of this touched the lock.
    assert_eq!(server.marks("L").await, (0, 0));
    assert_eq!(server.marks("M").await, (0, 0));
}

#[tokio::test]
async fn missing_keys_are_404_and_deletes_say_what_they_did() {
    let server = server();
    let body = server
        .get("L", "nope", None)
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    assert_eq!(body["marks"], json!({"exclusive": 0, "shared": 0}));
    let path = key_path("L", b"k");
    let delete = |generation| {
        let sequencer = excl("L", generation);
        let server = &server;
        let path = path.clone();
        async move {
            server
                .send(
                    Method::DELETE,
                    &path,
                    &[(Sequencer::HTTP_HEADER, &sequencer)],
                    Body::empty(),
                )
                .await
        }
    };
    assert_eq!(delete(1).await.json()["results"], json!(["absent"]));
    server.put("L", "k", &excl("L", 2), "v").await;
    assert_eq!(delete(2).await.json()["results"], json!(["deleted"]));
    server
        .get("L", "k", None)
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    delete(1).await.assert_error(StatusCode::CONFLICT, "stale");
}

#[tokio::test]
async fn compare_and_swap_412_changes_nothing() {
    let server = server();
    let path = format!("/v1/locks/L/cas/{}", seg(b"k"));
    let cas = |generation: u64, body: Value| {
        let sequencer = excl("L", generation);
        let server = &server;
        let path = path.clone();
        async move {
            server
                .send(
                    Method::POST,
                    &path,
                    &[(Sequencer::HTTP_HEADER, &sequencer)],
                    body.to_string(),
                )
                .await
        }
    };
    // Expected absent: created.
    let answer = cas(1, json!({"expected": null, "new": "v1"})).await;
    assert_eq!(answer.json()["results"], json!(["swapped"]));
    // Wrong expectation, with a newer generation: 412 and the mark stays.
    let body = cas(5, json!({"expected": "v0", "new": "v2"}))
        .await
        .assert_error(StatusCode::PRECONDITION_FAILED, "cas_mismatch");
    assert_eq!(body["op_index"], 0);
    assert_eq!(body["current_exists"], true);
    assert_eq!(body["current"], "v1");
    assert_eq!(server.marks("L").await, (1, 0));
    // Base64 values.
    let answer = cas(
        2,
        json!({"expected": {"base64": "djE="}, "new": {"base64": "/wA="}}),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.json());
    assert_eq!(&server.get("L", "k", None).await.body[..], &[0xff, 0x00]);
    // A mismatch carries a value that is not UTF-8 in base64.
    let body = cas(2, json!({"expected": "v1", "new": "v3"}))
        .await
        .assert_error(StatusCode::PRECONDITION_FAILED, "cas_mismatch");
    assert_eq!(body["current"], json!({"base64": "/wA="}));
    // Compare-and-delete (new omitted).
    let answer = cas(2, json!({"expected": {"base64": "/wA="}})).await;
    assert_eq!(answer.status, StatusCode::OK);
    server
        .get("L", "k", None)
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    // A typo in a field name is a 400, never a silent "expected absent".
    cas(2, json!({"expect": "v1", "new": "x"}))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "bad_request");
    cas(2, json!({"expected": {"base64": "not base64!"}}))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "bad_request");
}

#[tokio::test]
async fn a_batch_is_atomic() {
    let server = server();
    server.put("L", "c", &excl("L", 1), "current").await;
    let answer = server
        .batch(
            "L",
            &excl("L", 4),
            json!({"ops": [
                {"op": "put", "key": "a", "value": "1"},
                {"op": "delete", "key": "c"},
                {"op": "put", "key": {"base64": "/w=="}, "value": "2"},
                {"op": "cas", "key": "c", "expected": "current", "new": "x"}
            ]}),
        )
        .await;
    let body = answer.assert_error(StatusCode::PRECONDITION_FAILED, "cas_mismatch");
    assert_eq!(body["op_index"], 3);
    assert_eq!(body["current_exists"], false);
    assert_eq!(body.get("current"), Some(&json!(null)));
    server
        .get("L", "a", None)
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    assert_eq!(&server.get("L", "c", None).await.body[..], b"current");
    assert_eq!(server.marks("L").await, (1, 0));

    let answer = server
        .batch(
            "L",
            &excl("L", 4),
            json!({"ops": [
                {"op": "put", "key": "a", "value": "1"},
                {"op": "cas", "key": "a", "expected": "1", "new": "2"},
                {"op": "delete", "key": "c"},
                {"op": "delete", "key": "zz"}
            ]}),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.json()["results"],
        json!(["created", "swapped", "deleted", "absent"])
    );
    assert_eq!(&server.get("L", "a", None).await.body[..], b"2");
    // An empty batch fences without writing.
    assert_eq!(
        server
            .batch("L", &excl("L", 10), json!({"ops": []}))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(server.marks("L").await, (10, 0));
    // Malformed batches.
    server
        .batch(
            "L",
            &excl("L", 10),
            json!({"ops": [{"op": "frobnicate", "key": "a"}]}),
        )
        .await
        .assert_error(StatusCode::BAD_REQUEST, "bad_request");
    server
        .batch(
            "L",
            &excl("L", 10),
            json!({"ops": [{"op": "cas", "key": "a", "expectd": "1"}]}),
        )
        .await
        .assert_error(StatusCode::BAD_REQUEST, "bad_request");
    server
        .send(
            Method::POST,
            "/v1/locks/L/batch",
            &[(Sequencer::HTTP_HEADER, &excl("L", 10))],
            "{not json",
        )
        .await
        .assert_error(StatusCode::BAD_REQUEST, "bad_request");
}

#[tokio::test]
async fn limits_answer_413() {
    let limits = Limits {
        max_key_bytes: 8,
        max_value_bytes: 16,
        max_batch_ops: 2,
    };
    let server = server_with(
        StoreConfig {
            limits,
            ..StoreConfig::default()
        },
        |state| state.with_max_body_bytes(1024),
    );
    let body = server
        .put("L", "123456789", &excl("L", 1), "v")
        .await
        .assert_error(StatusCode::PAYLOAD_TOO_LARGE, "too_large");
    assert_eq!(
        (
            body["limit"].as_str(),
            body["max"].as_u64(),
            body["actual"].as_u64()
        ),
        (Some("key"), Some(8), Some(9))
    );
    let body = server
        .put("L", "k", &excl("L", 1), &"x".repeat(17))
        .await
        .assert_error(StatusCode::PAYLOAD_TOO_LARGE, "too_large");
    assert_eq!(body["limit"], "value");
    let body = server
        .put("L", "k", &excl("L", 1), &"x".repeat(2000))
        .await
        .assert_error(StatusCode::PAYLOAD_TOO_LARGE, "too_large");
    assert_eq!(
        (body["limit"].as_str(), body["max"].as_u64()),
        (Some("body"), Some(1024))
    );
    let body = server
        .batch(
            "L",
            &excl("L", 1),
            json!({"ops": [{"op": "delete", "key": "a"}, {"op": "delete", "key": "b"}, {"op": "delete", "key": "c"}]}),
        )
        .await
        .assert_error(StatusCode::PAYLOAD_TOO_LARGE, "too_large");
    assert_eq!(body["limit"], "batch_ops");
    assert_eq!(server.marks("L").await, (0, 0));
}

#[tokio::test]
async fn an_idempotent_retry_is_answered_from_the_record() {
    let server = server();
    let path = key_path("L", b"k");
    let put = |value: &'static str, generation: u64, key: &'static str| {
        let sequencer = excl("L", generation);
        let server = &server;
        let path = path.clone();
        async move {
            server
                .send(
                    Method::PUT,
                    &path,
                    &[
                        (Sequencer::HTTP_HEADER, &sequencer),
                        ("idempotency-key", key),
                    ],
                    value,
                )
                .await
        }
    };
    let first = put("one", 3, "req-1").await;
    assert_eq!(first.status, StatusCode::OK);
    server.put("L", "k", &excl("L", 3), "two").await;
    let retry = put("one", 3, "req-1").await;
    assert_eq!(retry.status, StatusCode::OK);
    assert_eq!(retry.header("palisade-replayed"), Some("true"));
    assert_eq!(retry.json()["replayed"], true);
    assert_eq!(retry.json()["results"], first.json()["results"]);
    assert_eq!(&server.get("L", "k", None).await.body[..], b"two");
    // The same key for another request.
    let body = put("different", 3, "req-1")
        .await
        .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused");
    assert_eq!(body["idempotency_key"], "req-1");
    // A malformed key.
    put("one", 3, "has space")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "bad_request");
}

#[tokio::test]
async fn marks_of_an_unknown_lock_are_zero() {
    let server = server();
    assert_eq!(server.marks("never/seen").await, (0, 0));
    server.get("x", "k", Some(&shared("x", 4))).await;
    assert_eq!(server.marks("x").await, (0, 4));
}

#[tokio::test]
async fn bad_paths_and_methods() {
    let server = server();
    server
        .send(Method::GET, "/v1/locks/a%0Ab/keys/k", &[], Body::empty())
        .await
        .assert_error(StatusCode::BAD_REQUEST, "bad_lock_name");
    server
        .send(Method::GET, "/v1/locks/%FF/keys/k", &[], Body::empty())
        .await
        .assert_error(StatusCode::BAD_REQUEST, "bad_lock_name");
    server
        .send(Method::GET, "/v1/locks/a%/marks", &[], Body::empty())
        .await
        .assert_error(StatusCode::BAD_REQUEST, "bad_lock_name");
    server
        .send(Method::GET, "/v1/locks/a/keys/%zz", &[], Body::empty())
        .await
        .assert_error(StatusCode::BAD_REQUEST, "bad_key");
    server
        .send(Method::GET, "/v2/anything", &[], Body::empty())
        .await
        .assert_error(StatusCode::NOT_FOUND, "no_route");
    let refused = server
        .send(Method::POST, "/v1/locks/a/keys/k", &[], Body::empty())
        .await;
    refused.assert_error(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    // The router names the methods of the path, made from one table.
    let allow = refused.header("allow").unwrap_or_default().to_owned();
    for method in ["GET", "HEAD", "PUT", "DELETE"] {
        assert!(allow.contains(method), "allow: {allow}");
    }
    assert!(!allow.contains("POST"), "allow: {allow}");
    // `HEAD` of a key is its `GET` without the body.
    server.put("a", "k", &excl("a", 1), "v").await;
    let got = server
        .send(Method::GET, "/v1/locks/a/keys/k", &[], Body::empty())
        .await;
    let head = server
        .send(Method::HEAD, "/v1/locks/a/keys/k", &[], Body::empty())
        .await;
    assert_eq!((head.status, got.status), (StatusCode::OK, StatusCode::OK));
    assert!(head.body.is_empty());
    assert_eq!(
        head.header("palisade-mark-exclusive"),
        got.header("palisade-mark-exclusive")
    );
}

#[tokio::test]
async fn health_and_metrics() {
    let server = server();
    let answer = server
        .send(Method::GET, "/healthz", &[], Body::empty())
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.json(),
        json!({
            "status": "ok",
            "durability": "flushed",
            "engine": {"name": "sled", "durability": "flushed"},
        })
    );

    let before = server.metrics().await;
    assert!(
        before.contains("palisade_requests_accepted_total{op=\"put\"} 0\n"),
        "{before}"
    );
    assert!(before.contains("palisade_requests_rejected_total{reason=\"stale\"} 0\n"));
    server.put("L", "k", &excl("L", 2), "v").await;
    server.put("L", "k", &excl("L", 1), "v").await;
    server.put("L", "k", &excl("L", 2), "v").await;
    let after = server.metrics().await;
    assert!(
        after.contains("palisade_requests_accepted_total{op=\"put\"} 2\n"),
        "{after}"
    );
    assert!(after.contains("palisade_requests_rejected_total{reason=\"stale\"} 1\n"));
    assert!(after.contains("palisade_request_duration_seconds_count{op=\"put\"} 3\n"));
    assert!(after.contains("palisade_request_duration_seconds_bucket{le=\"+Inf\",op=\"put\"} 3\n"));
    let flushes: u64 = after
        .lines()
        .find_map(|l| l.strip_prefix("palisade_store_flushes_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(flushes >= 1, "durable writes were flushed");
}

#[tokio::test]
async fn buffered_mode_is_reported_by_health() {
    let server = server_with(
        StoreConfig {
            durability: Durability::buffered(),
            ..StoreConfig::default()
        },
        |state| state,
    );
    let answer = server
        .send(Method::GET, "/healthz", &[], Body::empty())
        .await;
    assert_eq!(answer.json()["durability"], "buffered");
    assert_eq!(
        server.put("L", "k", &excl("L", 1), "v").await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_storage_failure_is_503() {
    // A lock whose state record is damaged on disk: the store reports
    // corruption, which the server must answer with 503, not 500 or 200.
    let dir = tempfile::tempdir().unwrap();
    {
        // Damaged with sled itself, then closed: the store opens it.
        let db = sled::open(dir.path()).unwrap();
        db.open_tree("palisade-meta")
            .unwrap()
            .insert(b"L", b"short".to_vec())
            .unwrap();
        db.flush().unwrap();
    }
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let server = Server::over(dir, AppState::new(store));
    server
        .put("L", "k", &excl("L", 1), "v")
        .await
        .assert_error(StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable");
    server
        .get("L", "k", Some(&shared("L", 1)))
        .await
        .assert_error(StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable");
    // Other locks are unaffected.
    assert_eq!(
        server.put("M", "k", &excl("M", 1), "v").await.status,
        StatusCode::OK
    );
}

/// A live check whose answer the test sets: 0 = held, 1 = not held,
/// 2 = the lock service is down.
struct ScriptedLiveCheck(Arc<AtomicU8>);

impl LiveCheck for ScriptedLiveCheck {
    async fn check(&self, _sequencer: &Sequencer) -> Result<Liveness, LockError> {
        match self.0.load(Ordering::SeqCst) {
            0 => Ok(Liveness::Held),
            1 => Ok(Liveness::NotHeld),
            _ => Err(LockError::Unavailable {
                backend: "scripted",
                source: "connection refused".into(),
            }),
        }
    }
}

#[tokio::test]
async fn the_live_check_refuses_lapsed_holders_and_fails_closed() {
    let answer_with = Arc::new(AtomicU8::new(0));
    let server = server_with(StoreConfig::default(), |state| {
        state.with_live_check(Arc::new(ScriptedLiveCheck(Arc::clone(&answer_with))))
    });
    assert_eq!(
        server.put("L", "k", &excl("L", 1), "v").await.status,
        StatusCode::OK
    );

    answer_with.store(1, Ordering::SeqCst);
    let body = server
        .put("L", "k", &excl("L", 2), "v2")
        .await
        .assert_error(StatusCode::CONFLICT, "not_held");
    assert_eq!(body["presented"], 2);
    server
        .get("L", "k", Some(&shared("L", 3)))
        .await
        .assert_error(StatusCode::CONFLICT, "not_held");
    // Reads without a sequencer are not checked.
    assert_eq!(server.get("L", "k", None).await.status, StatusCode::OK);

    answer_with.store(2, Ordering::SeqCst);
    server
        .put("L", "k", &excl("L", 2), "v2")
        .await
        .assert_error(StatusCode::SERVICE_UNAVAILABLE, "live_check_unavailable");
    // Nothing refused moved the mark.
    assert_eq!(server.marks("L").await, (1, 0));
    assert_eq!(&server.get("L", "k", None).await.body[..], b"v");
}

/// A live check that gives its answers in turn (the last one for good):
/// the lock service as seen before the store and again after a refusal.
#[derive(Clone, Default)]
struct AnswersInTurn(Arc<std::sync::Mutex<std::collections::VecDeque<Result<Liveness, ()>>>>);

impl AnswersInTurn {
    fn set(&self, answers: &[Result<Liveness, ()>]) {
        *self.0.lock().unwrap() = answers.iter().copied().collect();
    }
}

impl LiveCheck for AnswersInTurn {
    async fn check(&self, _sequencer: &Sequencer) -> Result<Liveness, LockError> {
        let mut answers = self.0.lock().unwrap();
        let answer = if answers.len() > 1 {
            answers.pop_front()
        } else {
            answers.front().copied()
        };
        answer
            .expect("the test sets the answers")
            .map_err(|()| LockError::Unavailable {
                backend: "scripted",
                source: "connection refused".into(),
            })
    }
}

/// A stale refusal is a regression only when the lock service still
/// grants the refused sequencer after the refusal; a holder that lost the
/// lock in between (a newer holder wrote), or a lock service that cannot
/// answer, leaves the plain "either/or" stale.
#[tokio::test]
async fn a_stale_holder_that_still_holds_is_named_a_regression() {
    const HELD: Result<Liveness, ()> = Ok(Liveness::Held);
    const NOT_HELD: Result<Liveness, ()> = Ok(Liveness::NotHeld);
    let answers = AnswersInTurn::default();
    let server = server_with(StoreConfig::default(), |state| {
        state.with_live_check(Arc::new(answers.clone()))
    });
    answers.set(&[HELD]);
    assert_eq!(
        server.put("L", "k", &excl("L", 5), "v").await.status,
        StatusCode::OK
    );

    // Still held after the refusal: the lock service went backwards.
    answers.set(&[HELD, HELD]);
    let body = server
        .put("L", "k", &excl("L", 2), "low")
        .await
        .assert_error(StatusCode::CONFLICT, "stale");
    assert_eq!(body["regression"], true, "{body}");
    assert_eq!(body["presented"], 2);
    assert_eq!(body["required"], 5);
    assert_eq!(body["recovery"], "palisade raise-floor L");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with("generation regression on lock `L`"),
        "{message}"
    );
    assert!(message.contains("`palisade raise-floor L`"), "{message}");
    // Fenced reads are classified the same way.
    answers.set(&[HELD, HELD]);
    let body = server
        .get("L", "k", Some(&shared("L", 2)))
        .await
        .assert_error(StatusCode::CONFLICT, "stale");
    assert_eq!(body["regression"], true, "{body}");

    // Held before the store, gone after: a newer holder may have written.
    answers.set(&[HELD, NOT_HELD]);
    let body = server
        .put("L", "k", &excl("L", 2), "low")
        .await
        .assert_error(StatusCode::CONFLICT, "stale");
    assert_eq!(body["regression"], false, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("either a newer holder has been honoured, or the lock service's generations are behind this mark"),
        "{message}"
    );
    assert!(message.contains("`palisade raise-floor L`"), "{message}");

    // The lock service cannot answer the second question: not established.
    answers.set(&[HELD, Err(())]);
    let body = server
        .put("L", "k", &excl("L", 2), "low")
        .await
        .assert_error(StatusCode::CONFLICT, "stale");
    assert_eq!(body["regression"], false, "{body}");

    // Nothing refused moved the mark or the data.
    assert_eq!(server.marks("L").await, (5, 0));
    assert_eq!(&server.get("L", "k", None).await.body[..], b"v");
}

mod never_panics {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Arbitrary path segments, sequencer headers and bodies: always a
        /// JSON error or a 2xx, never a 5xx.
        #[test]
        fn arbitrary_requests_get_a_typed_answer(
            lock in "[ -~]{0,12}",
            key in proptest::collection::vec(any::<u8>(), 0..8),
            sequencer in prop_oneof![Just(None), "[ -~]{0,40}".prop_map(Some), (1u64..5, any::<bool>()).prop_map(|(g, s)| Some(if s { shared("L", g) } else { excl("L", g) }))],
            method in prop_oneof![Just(Method::GET), Just(Method::PUT), Just(Method::DELETE), Just(Method::POST)],
            route in 0..4usize,
            body in proptest::collection::vec(any::<u8>(), 0..32),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let server = server_with(StoreConfig { durability: Durability::buffered(), ..StoreConfig::default() }, |s| s);
                let lock_segment: String = lock.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect();
                let path = match route {
                    0 => format!("/v1/locks/{lock_segment}/keys/{}", seg(&key)),
                    1 => format!("/v1/locks/{lock_segment}/cas/{}", seg(&key)),
                    2 => format!("/v1/locks/{lock_segment}/batch"),
                    _ => format!("/v1/locks/{lock_segment}/marks"),
                };
                let mut request = Request::builder().method(method).uri(&path);
                if let Some(sequencer) = &sequencer {
                    request = request.header(Sequencer::HTTP_HEADER, sequencer.as_str());
                }
                let Ok(request) = request.body(Body::from(body)) else { return };
                let response = server.router.clone().oneshot(request).await.unwrap();
                let status = response.status();
                let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
                assert!(!status.is_server_error(), "{path}: {status} {:?}", String::from_utf8_lossy(&bytes));
                if !status.is_success() {
                    let body: Value = serde_json::from_slice(&bytes).expect("error bodies are JSON");
                    assert!(body["code"].is_string());
                }
            });
        }
    }
}
