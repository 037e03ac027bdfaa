//! Every decision of the guard, one request at a time through
//! `tower::ServiceExt::oneshot`: admissions, every refusal code with its
//! status and body, the mark never moving on a refusal, signatures, the
//! raise cap, read policies, lock sources, the extractor with and without
//! the layer, transaction mode, and the counters.

use std::sync::{Arc, Mutex};

use crate::common;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Extension, Router};
use common::*;
use palisade_core::{LockName, Mode, Sequencer, Verifier};
use palisade_guard::{
    Admission, Fenced, FencingMode, Guard, GuardError, LockSource, MarkStore, MarkStoreError,
    Marks, MemoryMarks, ReadPolicy, SledMarks,
};
use palisade_store::{Op, StoreConfig, StoreError};
use serde_json::{Value, json};
use tower::ServiceExt as _;

/// What the handlers ran, in order: `write <gen>`, `read <mode> <gen>`,
/// `read unfenced`.
#[derive(Clone, Default)]
struct Ran(Arc<Mutex<Vec<String>>>);

impl Ran {
    fn push(&self, entry: String) {
        self.0.lock().unwrap().push(entry);
    }

    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

async fn write(State(ran): State<Ran>, fenced: Fenced) -> String {
    ran.push(format!("write {}", fenced.generation()));
    format!("written under {}", fenced.generation())
}

async fn read(State(ran): State<Ran>, fenced: Option<Fenced>) -> String {
    let entry = match fenced {
        Some(fenced) => format!("read {} {}", fenced.mode(), fenced.generation()),
        None => "read unfenced".to_owned(),
    };
    ran.push(entry.clone());
    entry
}

fn guarded_app(guard: &Guard, ran: &Ran) -> Router {
    Router::new()
        .route("/v1/{lock}/items/{key}", get(read).put(write).delete(write))
        .route_layer(guard.layer())
        .with_state(ran.clone())
}

fn memory_guard(marks: &MemoryMarks) -> Guard {
    Guard::builder(marks.clone()).build()
}

fn marks(exclusive: u64, shared: u64) -> Marks {
    Marks { exclusive, shared }
}

#[tokio::test]
async fn a_current_write_is_admitted_and_a_stale_one_gets_the_servers_409_body() {
    let mark_store = MemoryMarks::new();
    let guard = memory_guard(&mark_store);
    let ran = Ran::default();
    let app = guarded_app(&guard, &ran);

    let response = app.clone().oneshot(put_item(&exclusive(34))).await.unwrap();
    assert_eq!(response.headers()["palisade-mark-exclusive"], "34");
    assert_eq!(response.headers()["palisade-mark-shared"], "0");
    let (status, text) = status_and_text(response).await;
    assert_eq!(
        (status, text.as_str()),
        (StatusCode::OK, "written under 34")
    );

    // Equal generations are accepted: one holder writes many times.
    let (status, _) =
        status_and_text(app.clone().oneshot(put_item(&exclusive(34))).await.unwrap()).await;
    assert_eq!(status, StatusCode::OK);

    let response = app.clone().oneshot(put_item(&exclusive(33))).await.unwrap();
    assert_eq!(response.headers()["content-type"], "application/json");
    let (status, body) = status_and_json(response).await;
    assert_eq!(status, StatusCode::CONFLICT);
    // The Palisade server's fields (docs/http-api.md), from the same
    // `ErrorBody::from_refused`; `regression` stays false without a live check.
    assert_eq!(
        body,
        json!({
            "code": "stale",
            "message": "stale sequencer for lock `orders/42`: exclusive generation 33 is below the required 34 (H_excl=34 H_shared=0)",
            "lock": "orders/42",
            "mode": "exclusive",
            "presented": 33,
            "required": 34,
            "marks": {"exclusive": 34, "shared": 0},
            "regression": false,
            "recovery": "palisade raise-floor orders/42"
        })
    );
    assert_eq!(
        ran.all(),
        ["write 34", "write 34"],
        "the stale handler never ran"
    );
    assert_eq!(mark_store.get(&lock()), marks(34, 0));
}

#[tokio::test]
async fn every_refusal_has_its_status_and_code_and_moves_nothing() {
    let mark_store = MemoryMarks::new();
    let guard = memory_guard(&mark_store);
    let ran = Ran::default();
    let app = guarded_app(&guard, &ran);
    let (status, _) =
        status_and_text(app.clone().oneshot(put_item(&exclusive(10))).await.unwrap()).await;
    assert_eq!(status, StatusCode::OK);

    let path = format!("/v1/{LOCK_SEGMENT}/items/k");
    let mut twice = put_item(&exclusive(11));
    twice.headers_mut().append(
        Sequencer::HTTP_HEADER,
        exclusive(12).to_string().parse().unwrap(),
    );
    let mut not_ascii = put_item(&exclusive(11));
    not_ascii.headers_mut().insert(
        Sequencer::HTTP_HEADER,
        axum::http::HeaderValue::from_bytes(b"v1;lock=orders/42;mode=exclusive;gen=11\xff")
            .unwrap(),
    );
    let cases = [
        (
            request("PUT", &path, None, "v"),
            StatusCode::BAD_REQUEST,
            "missing_sequencer",
        ),
        (
            request(
                "PUT",
                &path,
                Some("v1;lock=orders/42;mode=exclusive;gen=0"),
                "v",
            ),
            StatusCode::BAD_REQUEST,
            "malformed_sequencer",
        ),
        (
            request(
                "PUT",
                &path,
                Some("v2;lock=orders/42;mode=exclusive;gen=99"),
                "v",
            ),
            StatusCode::BAD_REQUEST,
            "malformed_sequencer",
        ),
        (twice, StatusCode::BAD_REQUEST, "malformed_sequencer"),
        (not_ascii, StatusCode::BAD_REQUEST, "malformed_sequencer"),
        (
            request(
                "PUT",
                "/v1/bad%07name/items/k",
                Some("v1;lock=orders/42;mode=exclusive;gen=99"),
                "v",
            ),
            StatusCode::BAD_REQUEST,
            "bad_lock_name",
        ),
        (
            put_item(&sequencer("orders/43", Mode::Exclusive, 99)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "lock_mismatch",
        ),
        (
            put_item(&shared(99)),
            StatusCode::FORBIDDEN,
            "shared_on_write",
        ),
        (
            request("DELETE", &path, Some(&shared(99).to_string()), ""),
            StatusCode::FORBIDDEN,
            "shared_on_write",
        ),
        (put_item(&exclusive(9)), StatusCode::CONFLICT, "stale"),
    ];
    let n_cases = cases.len();
    for (request, expected_status, expected_code) in cases {
        let described = format!(
            "{} {:?}",
            request.method(),
            request.headers().get(Sequencer::HTTP_HEADER)
        );
        let (status, body) = status_and_json(app.clone().oneshot(request).await.unwrap()).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (expected_status, Some(expected_code)),
            "{described}: {body}"
        );
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
        assert_eq!(
            mark_store.get(&lock()),
            marks(10, 0),
            "{described} moved the mark"
        );
    }
    assert_eq!(
        ran.all(),
        ["write 10"],
        "no refused request reached its handler"
    );

    let metrics = guard.metrics();
    assert_eq!(metrics.admitted, 1);
    assert_eq!(metrics.total_refused(), n_cases as u64);
    assert_eq!(metrics.refused("malformed_sequencer"), 4);
    assert_eq!(metrics.refused("shared_on_write"), 2);
    assert_eq!(metrics.refused("stale"), 1);
}

#[tokio::test]
async fn refusal_bodies_carry_the_fields_of_their_code() {
    let mark_store = MemoryMarks::new();
    let app = guarded_app(&memory_guard(&mark_store), &Ran::default());
    let (_, body) = status_and_json(
        app.clone()
            .oneshot(put_item(&sequencer("orders/43", Mode::Exclusive, 5)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(body["path_lock"], "orders/42");
    assert_eq!(body["sequencer_lock"], "orders/43");

    let (_, body) = status_and_json(app.clone().oneshot(put_item(&shared(5))).await.unwrap()).await;
    assert_eq!(
        (&body["lock"], &body["presented"]),
        (&json!("orders/42"), &json!(5))
    );

    // A shared reader at 7 fences writers granted before it: the required
    // generation for a writer is max(H_excl, H_shared).
    let (status, _) = status_and_text(
        app.clone()
            .oneshot(get_item(Some(&shared(7))))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) =
        status_and_json(app.clone().oneshot(put_item(&exclusive(6))).await.unwrap()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["required"], 7);
    assert_eq!(body["marks"], json!({"exclusive": 0, "shared": 7}));
}

fn signing_guard(mark_store: &MemoryMarks) -> Guard {
    let verifier = Verifier::new()
        .with_key(key("k1", 1))
        .unwrap()
        .with_issuer("etcd-prod")
        .unwrap();
    Guard::builder(mark_store.clone())
        .require_signatures(verifier)
        .build()
}

#[tokio::test]
async fn with_signatures_required_no_forgery_moves_the_mark_and_an_honest_holder_still_writes() {
    let mark_store = MemoryMarks::new();
    let ran = Ran::default();
    let app = guarded_app(&signing_guard(&mark_store), &ran);
    let honest = signer("etcd-prod", "k1", 1);
    let forged_max = exclusive(u64::MAX);

    let cases = [
        // The denial-of-service attempt: generation u64::MAX, unsigned.
        (forged_max.clone(), StatusCode::UNAUTHORIZED, "unsigned"),
        // Signed with a key of the right id but the wrong secret.
        (
            signer("etcd-prod", "k1", 2).sign(forged_max.clone()),
            StatusCode::UNAUTHORIZED,
            "bad_signature",
        ),
        // Signed with a key this service does not know.
        (
            signer("etcd-prod", "k9", 1).sign(forged_max.clone()),
            StatusCode::UNAUTHORIZED,
            "unknown_key",
        ),
        // A genuine signature, from a deployment this service does not trust.
        (
            signer("redis-eu", "k1", 1).sign(forged_max.clone()),
            StatusCode::FORBIDDEN,
            "wrong_issuer",
        ),
        // An honest sequencer whose generation was raised after signing.
        (
            honest
                .sign(exclusive(2))
                .to_string()
                .replace("gen=2", &format!("gen={}", u64::MAX))
                .parse()
                .unwrap(),
            StatusCode::UNAUTHORIZED,
            "bad_signature",
        ),
        // A lock mismatch is not even looked at before the signature.
        (
            sequencer("orders/43", Mode::Exclusive, u64::MAX),
            StatusCode::UNAUTHORIZED,
            "unsigned",
        ),
    ];
    for (sequencer, expected_status, expected_code) in cases {
        let (status, body) =
            status_and_json(app.clone().oneshot(put_item(&sequencer)).await.unwrap()).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (expected_status, Some(expected_code)),
            "{sequencer}: {body}"
        );
        assert_eq!(
            mark_store.get(&lock()),
            Marks::ZERO,
            "{sequencer} moved the mark"
        );
    }
    let response = app
        .clone()
        .oneshot(put_item(&signer("redis-eu", "k9", 1).sign(exclusive(3))))
        .await
        .unwrap();
    assert!(response.headers().get("www-authenticate").is_some());
    let (status, body) = status_and_json(response).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        (
            &body["lock"],
            &body["presented"],
            &body["key_id"],
            &body["issuer"]
        ),
        (
            &json!("orders/42"),
            &json!(3),
            &json!("k9"),
            &json!("redis-eu")
        )
    );
    let response = app
        .clone()
        .oneshot(put_item(&signer("redis-eu", "k1", 1).sign(exclusive(3))))
        .await
        .unwrap();
    assert!(
        response.headers().get("www-authenticate").is_none(),
        "403 is not a challenge"
    );
    let (status, body) = status_and_json(response).await;
    assert_eq!(
        (status, &body["issuer"]),
        (StatusCode::FORBIDDEN, &json!("redis-eu"))
    );

    // After every forgery, the honest holder with generation 2 writes.
    let response = app
        .clone()
        .oneshot(put_item(&honest.sign(exclusive(2))))
        .await
        .unwrap();
    let (status, text) = status_and_text(response).await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "written under 2"));
    assert_eq!(mark_store.get(&lock()), marks(2, 0));
    assert_eq!(ran.all(), ["write 2"]);

    // Reads that carry a sequencer need a signature too.
    let (status, body) = status_and_json(
        app.clone()
            .oneshot(get_item(Some(&shared(9))))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unsigned"))
    );
    assert_eq!(mark_store.get(&lock()), marks(2, 0));
}

#[tokio::test]
async fn the_raise_cap_refuses_large_jumps_and_is_off_by_default() {
    let mark_store = MemoryMarks::new();
    let capped = Guard::builder(mark_store.clone()).max_raise(100).build();
    let app = guarded_app(&capped, &Ran::default());

    // A lock with no mark has nothing to measure a jump from.
    let (status, _) = status_and_text(
        app.clone()
            .oneshot(put_item(&exclusive(1_000_000)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = status_and_text(
        app.clone()
            .oneshot(put_item(&exclusive(1_000_100)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "exactly the cap is allowed");

    for generation in [1_000_201, u64::MAX] {
        let (status, body) = status_and_json(
            app.clone()
                .oneshot(put_item(&exclusive(generation)))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(body["code"], "raise_too_large");
        assert_eq!(body["max_raise"], 100);
        assert_eq!(body["allowed_up_to"], 1_000_200);
        assert_eq!(body["presented"], generation);
        assert_eq!(body["marks"], json!({"exclusive": 1_000_100, "shared": 0}));
    }
    // Measured from the highest mark, shared included.
    let (status, _) = status_and_text(
        app.clone()
            .oneshot(get_item(Some(&shared(1_000_150))))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = status_and_text(
        app.clone()
            .oneshot(put_item(&exclusive(1_000_250)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(mark_store.get(&lock()), marks(1_000_250, 1_000_150));
    assert_eq!(capped.metrics().refused("raise_too_large"), 2);

    // Without a cap, any jump is accepted (the default).
    let uncapped = MemoryMarks::new();
    let app = app_default(&uncapped);
    let (status, _) =
        status_and_text(app.clone().oneshot(put_item(&exclusive(1))).await.unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) =
        status_and_text(app.oneshot(put_item(&exclusive(u64::MAX))).await.unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(uncapped.get(&lock()).exclusive, u64::MAX);
}

/// Microseconds since the Unix epoch, as Redis's default generations are.
fn now_micros() -> u64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(since_epoch.as_micros()).unwrap()
}

#[tokio::test]
async fn the_raise_cap_judges_a_clock_mark_by_the_clock() {
    const DAY_US: u64 = 86_400_000_000;
    let mark_store = MemoryMarks::new();
    let capped = Guard::builder(mark_store.clone())
        .max_raise(100)
        .max_raise_time(std::time::Duration::from_secs(600))
        .build();
    let app = guarded_app(&capped, &Ran::default());
    let put = |generation: u64| {
        let app = app.clone();
        async move {
            status_and_json(app.oneshot(put_item(&exclusive(generation))).await.unwrap()).await
        }
    };

    // A Redis clock generation from a day ago, then the next one after the
    // lock sat idle for that day: a raise of 8.64 × 10^10, far beyond the
    // count, judged by the clock instead.
    let day_ago = now_micros() - DAY_US;
    assert_eq!(put(day_ago).await.0, StatusCode::OK);
    let now = now_micros();
    assert_eq!(
        put(now).await.0,
        StatusCode::OK,
        "an idle clock lock stays writable"
    );

    // An hour ahead of the clock is beyond the ten-minute lead.
    let before = mark_store.get(&lock());
    let (status, body) = put(now_micros() + 3_600_000_000).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("raise_too_large"))
    );
    let allowed_up_to = body["allowed_up_to"].as_u64().unwrap();
    assert!(
        allowed_up_to >= now + 600_000_000 && allowed_up_to <= now_micros() + 600_000_000,
        "{body}"
    );
    assert_eq!(mark_store.get(&lock()), before, "the refusal moved nothing");

    // A lock with no mark yet is held to the clock as well.
    let fresh = MemoryMarks::new();
    let app = guarded_app(
        &Guard::builder(fresh.clone()).max_raise(100).build(),
        &Ran::default(),
    );
    let (status, body) =
        status_and_json(app.oneshot(put_item(&exclusive(u64::MAX))).await.unwrap()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("raise_too_large"))
    );
    assert_eq!(fresh.get(&lock()), marks(0, 0));
}

fn app_default(mark_store: &MemoryMarks) -> Router {
    guarded_app(&memory_guard(mark_store), &Ran::default())
}

#[tokio::test]
async fn read_policies() {
    // Optional (default): a read without a sequencer passes unfenced; with
    // one, it is checked and raises the mark.
    let mark_store = MemoryMarks::new();
    let guard = memory_guard(&mark_store);
    let ran = Ran::default();
    let app = guarded_app(&guard, &ran);
    let response = app.clone().oneshot(get_item(None)).await.unwrap();
    assert!(response.headers().get("palisade-mark-exclusive").is_none());
    assert_eq!(status_and_text(response).await.1, "read unfenced");
    let response = app
        .clone()
        .oneshot(get_item(Some(&exclusive(4))))
        .await
        .unwrap();
    assert_eq!(response.headers()["palisade-mark-exclusive"], "4");
    assert_eq!(status_and_text(response).await.1, "read exclusive 4");
    let (status, body) = status_and_json(
        app.clone()
            .oneshot(get_item(Some(&shared(3))))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("stale"))
    );
    let (status, body) = status_and_json(
        app.clone()
            .oneshot(request(
                "GET",
                &format!("/v1/{LOCK_SEGMENT}/items/k"),
                Some("garbage"),
                "",
            ))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("malformed_sequencer"))
    );
    assert_eq!(ran.all(), ["read unfenced", "read exclusive 4"]);
    assert_eq!(guard.metrics().unfenced, 1);

    // Every safe method is a read: a CORS preflight needs no sequencer.
    let preflight_app = Router::new()
        .route(
            "/v1/{lock}/items/{key}",
            axum::routing::options(|| async { "preflight" }).put(|| async { "written" }),
        )
        .route_layer(guard.layer());
    let path = format!("/v1/{LOCK_SEGMENT}/items/k");
    let (status, text) = status_and_text(
        preflight_app
            .clone()
            .oneshot(request("OPTIONS", &path, None, ""))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "preflight"));
    let (status, _) = status_and_text(
        preflight_app
            .oneshot(request("PUT", &path, None, ""))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Required: a read must carry one.
    let guard = Guard::builder(MemoryMarks::new())
        .reads(ReadPolicy::Required)
        .build();
    let app_required = guarded_app(&guard, &Ran::default());
    let (status, body) =
        status_and_json(app_required.clone().oneshot(get_item(None)).await.unwrap()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("missing_sequencer"))
    );
    let (status, _) = status_and_text(
        app_required
            .oneshot(get_item(Some(&shared(1))))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    // Unfenced: reads are not looked at, not even a malformed header, and
    // never move a mark; writes are still fenced.
    let mark_store = MemoryMarks::new();
    let guard = Guard::builder(mark_store.clone())
        .reads(ReadPolicy::Unfenced)
        .build();
    let app_unfenced = guarded_app(&guard, &Ran::default());
    let response = app_unfenced
        .clone()
        .oneshot(request(
            "GET",
            &format!("/v1/{LOCK_SEGMENT}/items/k"),
            Some("garbage"),
            "",
        ))
        .await
        .unwrap();
    assert_eq!(
        status_and_text(response).await,
        (StatusCode::OK, "read unfenced".to_owned())
    );
    let (status, _) = status_and_text(
        app_unfenced
            .clone()
            .oneshot(get_item(Some(&shared(50))))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(mark_store.get(&lock()), Marks::ZERO);
    let (status, _) = status_and_text(
        app_unfenced
            .oneshot(request(
                "PUT",
                &format!("/v1/{LOCK_SEGMENT}/items/k"),
                None,
                "",
            ))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn lock_sources_fixed_path_param_and_custom() {
    // A fixed lock: every request is under `inventory`.
    let guard = Guard::builder(MemoryMarks::new())
        .fixed_lock(LockName::new("inventory").unwrap())
        .build();
    let app = Router::new()
        .route(
            "/stock",
            axum::routing::put(|fenced: Fenced| async move { fenced.lock().to_string() }),
        )
        .route_layer(guard.layer());
    let put_stock =
        |sequencer: Sequencer| request("PUT", "/stock", Some(&sequencer.to_string()), "");
    let (status, text) = status_and_text(
        app.clone()
            .oneshot(put_stock(sequencer("inventory", Mode::Exclusive, 1)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "inventory"));
    let (status, body) = status_and_json(app.oneshot(put_stock(exclusive(2))).await.unwrap()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("lock_mismatch"))
    );

    // A custom resolver: `/items/{sku}` is lock `items/<sku>`.
    let guard = Guard::builder(MemoryMarks::new())
        .lock_source(LockSource::from_fn(|_parts, params| {
            let sku = params.get("sku").ok_or("no {sku}")?;
            LockName::new(format!("items/{sku}")).map_err(|e| e.to_string())
        }))
        .build();
    let app = Router::new()
        .route(
            "/items/{sku}",
            axum::routing::put(|fenced: Fenced| async move { fenced.lock().to_string() }),
        )
        .route_layer(guard.layer());
    let (status, text) = status_and_text(
        app.clone()
            .oneshot(request(
                "PUT",
                "/items/a%20b",
                Some(&sequencer("items/a b", Mode::Exclusive, 1).to_string()),
                "",
            ))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "items/a b"));
    let (status, body) = status_and_json(
        app.oneshot(request(
            "PUT",
            "/items/x",
            Some(&sequencer("items/y", Mode::Exclusive, 1).to_string()),
            "",
        ))
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["path_lock"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("items/x"))
    );

    // A route without the configured parameter cannot name its lock.
    let guard = Guard::builder(MemoryMarks::new()).build();
    let app = Router::new()
        .route("/elsewhere", axum::routing::put(|| async { "unreachable" }))
        .route_layer(guard.layer());
    let (status, body) = status_and_json(app.oneshot(put_stock(exclusive(1))).await.unwrap()).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "route_layer leaves unmatched paths alone: {body}"
    );
    let app = Router::new()
        .route("/stock", axum::routing::put(|| async { "unreachable" }))
        .route_layer(guard.layer());
    let (status, body) = status_and_json(app.oneshot(put_stock(exclusive(1))).await.unwrap()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_lock_name"))
    );
}

#[tokio::test]
async fn the_extractor_works_without_the_layer_and_says_when_nothing_is_configured() {
    let mark_store = MemoryMarks::new();
    let guard = memory_guard(&mark_store);
    let ran = Ran::default();
    let app = Router::new()
        .route("/v1/{lock}/items/{key}", get(read).put(write))
        .with_state(ran.clone())
        .layer(Extension(guard.clone()));

    let (status, text) =
        status_and_text(app.clone().oneshot(put_item(&exclusive(5))).await.unwrap()).await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "written under 5"));
    let (status, body) =
        status_and_json(app.clone().oneshot(put_item(&exclusive(4))).await.unwrap()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("stale"))
    );
    let (status, text) = status_and_text(app.clone().oneshot(get_item(None)).await.unwrap()).await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "read unfenced"));
    assert_eq!(ran.all(), ["write 5", "read unfenced"]);
    assert_eq!(mark_store.get(&lock()), marks(5, 0));
    assert_eq!(
        guard.locks_in_flight(),
        0,
        "the extractor's per-lock lock was released"
    );

    // No layer and no guard extension: a wiring mistake, answered 500.
    let app = Router::new()
        .route("/v1/{lock}/items/{key}", get(read).put(write))
        .with_state(Ran::default());
    let (status, body) = status_and_json(app.oneshot(put_item(&exclusive(5))).await.unwrap()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::INTERNAL_SERVER_ERROR, Some("internal"))
    );
}

/// A handler writing through the fenced store in transaction mode.
async fn store_write(
    State(store): State<palisade_store::Store>,
    fenced: Fenced,
    value: String,
) -> Result<String, GuardError> {
    let applied = store
        .submit(
            fenced.sequencer(),
            &[Op::put("k", value.into_bytes())],
            None,
        )?
        .await??;
    Ok(format!("marks {}", applied.marks))
}

#[tokio::test]
async fn in_transaction_mode_the_store_fences_and_stale_writes_get_the_same_409() {
    let dir = tempfile::tempdir().unwrap();
    let mark_store = SledMarks::open(dir.path(), StoreConfig::default()).unwrap();
    let store = mark_store.store().clone();
    let guard = Guard::builder(mark_store)
        .mode(FencingMode::StoreTransaction)
        .build();
    let app = Router::new()
        .route("/v1/{lock}/items/{key}", axum::routing::put(store_write))
        .route_layer(guard.layer())
        .with_state(store.clone());
    let put_value = |generation: u64, value: &str| {
        request(
            "PUT",
            &format!("/v1/{LOCK_SEGMENT}/items/k"),
            Some(&exclusive(generation).to_string()),
            value,
        )
    };

    let (status, text) =
        status_and_text(app.clone().oneshot(put_value(5, "five")).await.unwrap()).await;
    assert_eq!(
        (status, text.as_str()),
        (StatusCode::OK, "marks H_excl=5 H_shared=0")
    );
    // The guard lets the stale request through; the store's transaction
    // refuses it, and the handler answers with the guard's 409.
    let (status, body) =
        status_and_json(app.clone().oneshot(put_value(4, "four")).await.unwrap()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["code"], "stale");
    assert_eq!(body["required"], 5);
    assert_eq!(body["marks"], json!({"exclusive": 5, "shared": 0}));
    // The guard still validates: a shared sequencer on a write never
    // reaches the store.
    let (status, body) = status_and_json(
        app.clone()
            .oneshot(request(
                "PUT",
                &format!("/v1/{LOCK_SEGMENT}/items/k"),
                Some(&shared(9).to_string()),
                "x",
            ))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("shared_on_write"))
    );

    let read = store.get(&lock(), b"k", None).unwrap().unwrap();
    assert_eq!(read.value.as_deref(), Some(&b"five"[..]));
    assert_eq!(read.marks, marks(5, 0));
    let metrics = guard.metrics();
    assert_eq!((metrics.validated, metrics.admitted), (2, 0));
    assert_eq!(metrics.refused("shared_on_write"), 1);
    assert_eq!(guard.locks_in_flight(), 0);
}

/// A mark store that always fails, as a disk would.
struct BrokenMarks;

impl MarkStore for BrokenMarks {
    async fn admit(&self, _sequencer: &Sequencer) -> Result<Admission, MarkStoreError> {
        Err(StoreError::FlushFailed {
            message: "injected: fsync failed".into(),
        }
        .into())
    }

    async fn marks(&self, _lock: &LockName) -> Result<Marks, MarkStoreError> {
        Err(StoreError::ShutDown.into())
    }
}

#[tokio::test]
async fn a_failing_mark_store_is_refused_503_and_the_handler_never_runs() {
    let ran = Ran::default();
    let guard = Guard::builder(BrokenMarks).build();
    let app = guarded_app(&guard, &ran);
    let (status, body) =
        status_and_json(app.clone().oneshot(put_item(&exclusive(1))).await.unwrap()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["code"], "storage_unavailable");
    assert!(body["message"].as_str().unwrap().contains("injected"));
    // With a raise cap the failure comes from reading the marks: same answer.
    let guard = Guard::builder(BrokenMarks).max_raise(10).build();
    let (status, _) = status_and_json(
        guarded_app(&guard, &ran)
            .oneshot(put_item(&exclusive(1)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(ran.all().is_empty());
    assert_eq!(guard.locks_in_flight(), 0);
}

#[tokio::test]
async fn store_refusals_and_failures_map_to_the_servers_codes() {
    let cases: Vec<(GuardError, StatusCode, &str, Value)> = vec![
        (
            palisade_store::Refused::CasMismatch {
                op_index: 2,
                current: None,
            }
            .into(),
            StatusCode::PRECONDITION_FAILED,
            "cas_mismatch",
            json!({"op_index": 2, "current_exists": false, "current": null}),
        ),
        (
            palisade_store::Refused::CasMismatch {
                op_index: 0,
                current: Some(vec![0xff, 0x00].into()),
            }
            .into(),
            StatusCode::PRECONDITION_FAILED,
            "cas_mismatch",
            json!({"op_index": 0, "current_exists": true, "current": {"base64": "/wA="}}),
        ),
        (
            StoreError::TooLarge {
                kind: palisade_store::LimitKind::Value,
                actual: 9,
                max: 8,
            }
            .into(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            json!({"limit": "value", "max": 8, "actual": 9}),
        ),
        (
            StoreError::ShutDown.into(),
            StatusCode::SERVICE_UNAVAILABLE,
            "storage_unavailable",
            json!({}),
        ),
    ];
    for (error, status, code, extra) in cases {
        assert_eq!((error.status(), error.code()), (status, code));
        let (answered, body) =
            status_and_json(axum::response::IntoResponse::into_response(error)).await;
        assert_eq!(answered, status);
        for (field, value) in extra.as_object().unwrap() {
            assert_eq!(&body[field], value, "{code}: {field}");
        }
    }
}

#[tokio::test]
async fn marks_of_a_memory_store_follow_the_fencing_rule() {
    let mark_store = MemoryMarks::new();
    let cases = [
        (exclusive(5), Some(marks(5, 0))),
        (shared(7), Some(marks(5, 7))),
        (shared(6), Some(marks(5, 7))),
        (exclusive(6), None),
        (shared(4), None),
        (exclusive(7), Some(marks(7, 7))),
    ];
    for (sequencer, expected) in cases {
        let admission = mark_store.admit(&sequencer).await.unwrap();
        let expected = match expected {
            Some(after) => Admission::Admitted { marks: after },
            None => Admission::Stale {
                marks: mark_store.get(&lock()),
            },
        };
        assert_eq!(admission, expected, "{sequencer}");
    }
    assert_eq!(mark_store.marks(&lock()).await.unwrap(), marks(7, 7));
    assert_eq!(
        mark_store
            .marks(&LockName::new("never").unwrap())
            .await
            .unwrap(),
        Marks::ZERO
    );
}
