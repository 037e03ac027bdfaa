//! `GET /v1/events` over a real socket: the first event is the recent
//! decisions and marks, then each write accepted or refused arrives as it
//! happens, a token sees only its own locks, and an open stream does not
//! hold up shutdown.

use std::time::Duration;

use palisade_server::TokenTable;
use serde_json::Value;

use crate::tcp;
use tcp::{put, start_with};

const TOKEN: &str = "Zs8AkP2v1nQxWm4rT7yBk3Lp";
const OTHER_TOKEN: &str = "Qq7RtY2mVb9NcX4zLk8PwE3s";
/// Generous: the event itself takes milliseconds.
const WAIT: Duration = Duration::from_secs(10);

fn tokens() -> TokenTable {
    format!("{TOKEN} orders/\n{OTHER_TOKEN} billing/")
        .parse()
        .unwrap()
}

/// An open event stream, read event by event.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    async fn open(http: &reqwest::Client, base: &str, token: &str) -> Events {
        let response = http
            .get(format!("{base}/v1/events"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream",
            "server-sent events"
        );
        Events {
            response,
            buffer: String::new(),
        }
    }

    /// The next event that is not a keep-alive comment: (name, data).
    async fn next(&mut self) -> (String, Value) {
        tokio::time::timeout(WAIT, async {
            loop {
                if let Some(end) = self.buffer.find("\n\n") {
                    let block: String = self.buffer.drain(..end + 2).collect();
                    let mut name = String::new();
                    let mut data = String::new();
                    for line in block.lines() {
                        if let Some(rest) = line.strip_prefix("event:") {
                            name = rest.trim().to_owned();
                        } else if let Some(rest) = line.strip_prefix("data:") {
                            data.push_str(rest.trim_start());
                        }
                    }
                    if !data.is_empty() {
                        return (name, serde_json::from_str(&data).unwrap());
                    }
                    continue;
                }
                let chunk = self.response.chunk().await.unwrap().expect("stream open");
                self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        })
        .await
        .expect("an event arrives in time")
    }
}

#[tokio::test]
async fn decisions_stream_live_and_only_for_the_tokens_locks() {
    let server = start_with(|state| state.with_tokens(tokens())).await;
    let http = reqwest::Client::new();
    let base = &server.base;
    assert_eq!(put(&http, base, "orders/a", 5, TOKEN).await, 200);
    assert_eq!(put(&http, base, "billing/x", 7, OTHER_TOKEN).await, 200);

    let mut events = Events::open(&http, base, TOKEN).await;
    let (name, snapshot) = events.next().await;
    assert_eq!(name, "snapshot");
    let decisions = snapshot["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 1, "only orders/: {snapshot}");
    assert_eq!(decisions[0]["lock"], "orders/a");
    assert_eq!(decisions[0]["outcome"], "accepted");
    assert_eq!(snapshot["marks"]["orders/a"]["exclusive"], 5);
    assert!(snapshot["marks"].get("billing/x").is_none());

    // Another token's lock: not shown. Then a stale write on ours.
    assert_eq!(put(&http, base, "billing/x", 8, OTHER_TOKEN).await, 200);
    assert_eq!(put(&http, base, "orders/a", 4, TOKEN).await, 409);
    let (name, decision) = events.next().await;
    assert_eq!(name, "decision");
    assert_eq!(decision["lock"], "orders/a", "{decision}");
    assert_eq!(decision["outcome"], "refused");
    assert_eq!(decision["reason"], "stale");
    assert_eq!(decision["generation"], 4);
    assert_eq!(decision["status"], 409);
    assert_eq!(decision["marks"]["exclusive"], 5);
    drop(events);
    server.shut_down().await;
}

#[tokio::test]
async fn events_need_a_valid_token() {
    let server = start_with(|state| state.with_tokens(tokens())).await;
    let http = reqwest::Client::new();
    let answer = http
        .get(format!("{}/v1/events", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 401);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["code"], "unauthenticated");
    let answer = http
        .get(format!("{}/v1/events", server.base))
        .bearer_auth("not-a-token-not-a-token")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 401);
    server.shut_down().await;
}

#[tokio::test]
async fn an_open_event_stream_does_not_hold_up_shutdown() {
    let server = start_with(|state| state.with_tokens(tokens())).await;
    let http = reqwest::Client::new();
    let mut events = Events::open(&http, &server.base, TOKEN).await;
    let (name, _) = events.next().await;
    assert_eq!(name, "snapshot");
    // `shut_down` fails the test if the server has not stopped in 30 s.
    server.shut_down().await;
    let rest = tokio::time::timeout(WAIT, events.response.chunk())
        .await
        .expect("the stream ends with the server");
    assert!(matches!(rest, Ok(None) | Err(_)), "{rest:?}");
}

#[tokio::test]
async fn the_ui_page_is_self_contained() {
    let server = start_with(|state| state.with_tokens(tokens())).await;
    let answer = reqwest::get(format!("{}/ui", server.base)).await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["content-type"], "text/html; charset=utf-8");
    let csp = answer.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"));
    let page = answer.text().await.unwrap();
    for external in ["http://", "https://", "src=\"//", "<link"] {
        assert!(
            !page.contains(external),
            "the page loads nothing from elsewhere: {external}"
        );
    }
    assert!(page.contains("/v1/events"));
    server.shut_down().await;
}

/// A live check whose answer the test sets: held or not.
struct ScriptedLiveCheck(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl palisade_core::LiveCheck for ScriptedLiveCheck {
    async fn check(
        &self,
        _sequencer: &palisade_core::Sequencer,
    ) -> Result<palisade_core::Liveness, palisade_core::LockError> {
        Ok(if self.0.load(std::sync::atomic::Ordering::SeqCst) {
            palisade_core::Liveness::Held
        } else {
            palisade_core::Liveness::NotHeld
        })
    }
}

#[tokio::test]
async fn each_refusal_reason_the_page_shows_is_recorded() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let held = Arc::new(AtomicBool::new(true));
    let live_check = Arc::new(ScriptedLiveCheck(Arc::clone(&held)));
    let server = start_with(|state| state.with_tokens(tokens()).with_live_check(live_check)).await;
    let http = reqwest::Client::new();
    let base = &server.base;
    let mut events = Events::open(&http, base, TOKEN).await;
    assert_eq!(events.next().await.0, "snapshot");

    assert_eq!(put(&http, base, "orders/a", 5, TOKEN).await, 200);
    // Still granted by the lock service yet below the mark: a regression.
    assert_eq!(put(&http, base, "orders/a", 4, TOKEN).await, 409);
    held.store(false, Ordering::SeqCst);
    assert_eq!(put(&http, base, "orders/a", 6, TOKEN).await, 409);
    let mut reasons = Vec::new();
    for _ in 0..3 {
        let (name, decision) = events.next().await;
        assert_eq!(name, "decision");
        reasons.push((decision["reason"].clone(), decision["generation"].clone()));
    }
    assert_eq!(
        reasons,
        [
            (Value::Null, 5.into()),
            ("regression".into(), 4.into()),
            ("not_held".into(), 6.into()),
        ]
    );
    drop(events);
    server.shut_down().await;

    // Unsigned, on a server that requires signatures.
    let verifier = palisade_core::Verifier::new()
        .with_key(palisade_core::SigningKey::new("k1", vec![1; 32]).unwrap())
        .unwrap();
    let server =
        start_with(|state| state.with_tokens(tokens()).with_verifier(verifier, true)).await;
    let mut events = Events::open(&http, &server.base, TOKEN).await;
    assert_eq!(events.next().await.0, "snapshot");
    assert_eq!(put(&http, &server.base, "orders/a", 7, TOKEN).await, 401);
    let (_, decision) = events.next().await;
    assert_eq!(decision["reason"], "unsigned", "{decision}");
    assert_eq!(decision["generation"], 7);
    drop(events);
    server.shut_down().await;
}

/// The snapshot a token's event stream opens with.
async fn snapshot_for(http: &reqwest::Client, base: &str, token: &str) -> Value {
    let mut events = Events::open(http, base, token).await;
    let (name, snapshot) = events.next().await;
    assert_eq!(name, "snapshot");
    snapshot
}

/// `(lock, reason)` of each decision in a snapshot, oldest first.
fn decisions_of(snapshot: &Value) -> Vec<(String, Value)> {
    snapshot["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["lock"].as_str().unwrap().to_owned(), d["reason"].clone()))
        .collect()
}

/// Issue #25: 300 requests with no token emptied every token's view of its
/// real refusals. Refusals of requests that are not authenticated are not
/// decisions on any lock; they are only counted.
#[tokio::test]
async fn unauthenticated_requests_leave_a_tokens_view_of_its_refusals_intact() {
    let server = start_with(|state| state.with_tokens(tokens())).await;
    let http = reqwest::Client::new();
    let base = &server.base;
    assert_eq!(put(&http, base, "orders/a", 5, TOKEN).await, 200);
    assert_eq!(put(&http, base, "orders/a", 4, TOKEN).await, 409);
    for generation in 0..300 {
        let status = http
            .put(format!("{base}/v1/locks/orders%2Fa/keys/k"))
            .header(
                "palisade-sequencer",
                tcp::excl("orders/a", 100 + generation),
            )
            .body("forged")
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 401);
    }
    let snapshot = snapshot_for(&http, base, TOKEN).await;
    assert_eq!(
        decisions_of(&snapshot),
        [
            ("orders/a".to_owned(), Value::Null),
            ("orders/a".to_owned(), "stale".into()),
        ],
        "{snapshot}"
    );
    let rejected = "palisade_requests_rejected_total{reason=\"unauthenticated\"}";
    assert_eq!(tcp::metric(&http, base, rejected).await, 300);
    server.shut_down().await;
}

/// Issue #25: a token scoped to `a/` filled the `b/` token's view with
/// refusals of `b/` lock names it chose (403 `forbidden`), and its own
/// traffic on `a/` pushed the `b/` token's decisions out of the one ring.
#[tokio::test]
async fn a_token_scoped_to_a_cannot_push_refusals_into_the_b_tokens_view() {
    const A_TOKEN: &str = "Aa7RtY2mVb9NcX4zLk8PwE3s";
    const B_TOKEN: &str = "Bb3eJ8sKq2WmZ5xR9tLc6VnD";
    let tokens: TokenTable = format!("{A_TOKEN} a/\n{B_TOKEN} b/").parse().unwrap();
    let server = start_with(|state| state.with_tokens(tokens)).await;
    let http = reqwest::Client::new();
    let base = &server.base;
    assert_eq!(put(&http, base, "b/x", 5, B_TOKEN).await, 200);
    assert_eq!(put(&http, base, "b/x", 4, B_TOKEN).await, 409);
    for index in 0..300 {
        // Lock names of b/ that A chose: forbidden, not b/'s decisions.
        assert_eq!(
            put(&http, base, &format!("b/{index}"), 1, A_TOKEN).await,
            403
        );
    }
    assert_eq!(put(&http, base, "a/y", 500, A_TOKEN).await, 200);
    for generation in 1..=300 {
        // A's own refusals, on its own locks.
        assert_eq!(put(&http, base, "a/y", generation, A_TOKEN).await, 409);
    }
    let snapshot = snapshot_for(&http, base, B_TOKEN).await;
    assert_eq!(
        decisions_of(&snapshot),
        [
            ("b/x".to_owned(), Value::Null),
            ("b/x".to_owned(), "stale".into()),
        ],
        "{snapshot}"
    );
    assert_eq!(
        snapshot["marks"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["b/x"]
    );
    // A's view holds its own latest decisions, up to its bound.
    let a_view = decisions_of(&snapshot_for(&http, base, A_TOKEN).await);
    assert_eq!(a_view.len(), 256);
    assert!(
        a_view
            .iter()
            .all(|(lock, reason)| lock == "a/y" && reason == "stale")
    );
    let rejected = "palisade_requests_rejected_total{reason=\"forbidden\"}";
    assert_eq!(tcp::metric(&http, base, rejected).await, 300);
    server.shut_down().await;
}
