//! `GET /v1/events` over a real socket: the first event is the recent
//! decisions and marks, then each write accepted or refused arrives as it
//! happens, a token sees only its own locks, and an open stream does not
//! hold up shutdown.

use std::time::Duration;

use palisade_server::TokenTable;
use serde_json::Value;

mod tcp;

use tcp::{excl, start_with};

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

async fn put(http: &reqwest::Client, base: &str, lock: &str, generation: u64, token: &str) -> u16 {
    http.put(format!(
        "{base}/v1/locks/{}/keys/k",
        lock.replace('/', "%2F")
    ))
    .bearer_auth(token)
    .header("palisade-sequencer", excl(lock, generation))
    .body("v")
    .send()
    .await
    .unwrap()
    .status()
    .as_u16()
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
