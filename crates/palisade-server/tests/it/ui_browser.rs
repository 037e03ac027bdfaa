//! `/ui` in a real browser: Debian's headless Chromium, driven through
//! chromedriver's WebDriver protocol. A refused stale write shows on the
//! page within a second, with its reason; the marks show; the prefix
//! filter hides other locks. Leaves a screenshot in the target directory
//! (and in docs/ui.png with `PALISADE_WRITE_UI_SCREENSHOT=1`).

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use palisade_server::TokenTable;
use palisade_testkit::process::{ChildProcess, free_port, require_binary, wait_for_tcp};
use serde_json::{Value, json};

use crate::tcp;
use tcp::{put, start_with};

const TOKEN: &str = "Zs8AkP2v1nQxWm4rT7yBk3Lp";
/// What the page must do: show a refusal within a second of it.
const SHOWN_WITHIN: Duration = Duration::from_secs(1);
/// How long the browser and the driver may take to start, on a loaded
/// machine.
const START: Duration = Duration::from_secs(60);

/// A WebDriver session on chromedriver. Dropping it (also when a test
/// fails) deletes the session, which closes the browser, and then kills
/// the driver: killing the driver alone would leave Chromium running.
struct Browser {
    http: reqwest::Client,
    driver_addr: SocketAddr,
    session: String,
    _driver: ChildProcess,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let path = self
            .session
            .split_once("/session/")
            .map(|(_, id)| format!("/session/{id}"))
            .unwrap_or_default();
        let request = format!(
            "DELETE {path} HTTP/1.1\r\nhost: {}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            self.driver_addr
        );
        // Blocking on purpose: a drop cannot await, and the browser must be
        // gone before the driver is killed.
        if let Ok(mut stream) = TcpStream::connect_timeout(&self.driver_addr, START) {
            let _ = stream.set_read_timeout(Some(START));
            let _ = stream.write_all(request.as_bytes());
            // chromedriver answers once the browser has quit; it may keep
            // the connection open, so read the answer's start, not to EOF.
            let _ = stream.read(&mut [0; 512]);
        }
    }
}

impl Browser {
    async fn start() -> Browser {
        let chromium = require_binary("chromium");
        let chromedriver = require_binary("chromedriver");
        let port = free_port();
        let driver = ChildProcess::spawn(
            "chromedriver",
            // Its banner and log would land in the test run's output.
            Command::new(chromedriver)
                .arg(format!("--port={port}"))
                .arg("--silent")
                .stdout(std::process::Stdio::null()),
            None,
        )
        .expect("chromedriver starts");
        wait_for_tcp(([127, 0, 0, 1], port).into(), START).expect("chromedriver listens");
        let http = reqwest::Client::builder().timeout(START).build().unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,800"],
            },
        }}});
        let answer: Value = http
            .post(format!("{base}/session"))
            .json(&capabilities)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {answer}"))
            .to_owned();
        Browser {
            http,
            driver_addr: ([127, 0, 0, 1], port).into(),
            session: format!("{base}/session/{session}"),
            _driver: driver,
        }
    }

    async fn command(&self, path: &str, body: Value) -> Value {
        let answer: Value = self
            .http
            .post(format!("{}/{path}", self.session))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(answer["value"].get("error").is_none(), "{path}: {answer}");
        answer["value"].clone()
    }

    async fn open(&self, url: &str) {
        self.command("url", json!({"url": url})).await;
    }

    async fn script(&self, script: &str) -> Value {
        self.command("execute/sync", json!({"script": script, "args": []}))
            .await
    }

    /// Runs `script` (which calls its last argument when done) and waits.
    async fn script_async(&self, script: &str) -> Value {
        self.command("execute/async", json!({"script": script, "args": []}))
            .await
    }

    async fn screenshot(&self) -> Vec<u8> {
        let answer: Value = self
            .http
            .get(format!("{}/screenshot", self.session))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        base64::engine::general_purpose::STANDARD
            .decode(answer["value"].as_str().unwrap())
            .unwrap()
    }
}

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Resolves when the page's event stream is live (the script's callback
/// gets `true`), or after 30 s (`false`).
const WAIT_LIVE: &str = r#"
const done = arguments[arguments.length - 1];
const deadline = Date.now() + 30000;
(function poll() {
  if (document.body.dataset.status === "live") return done(true);
  if (Date.now() > deadline) return done(false);
  requestAnimationFrame(poll);
})();
"#;

/// Notes, in the page, the wall-clock time a stale refusal for
/// `orders/a` appears (a MutationObserver: no polling).
const WATCH_STALE: &str = r#"
window.staleSeenAt = null;
const seen = () => document.querySelector('tr.decision[data-lock="orders/a"][data-reason="stale"]');
new MutationObserver(() => {
  if (window.staleSeenAt === null && seen()) window.staleSeenAt = Date.now();
}).observe(document.getElementById("decisions"), { childList: true, subtree: true });
return seen() === null;
"#;

/// Gives the time noted by `WATCH_STALE`, waiting up to 10 s for it.
const STALE_SEEN_AT: &str = r#"
const done = arguments[arguments.length - 1];
const deadline = Date.now() + 10000;
(function poll() {
  if (window.staleSeenAt !== null) return done(window.staleSeenAt);
  if (Date.now() > deadline) return done(null);
  setTimeout(poll, 20);
})();
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_stale_write_shows_on_the_page_within_a_second() {
    let tokens: TokenTable = format!("{TOKEN} orders/,billing/").parse().unwrap();
    let server = start_with(|state| state.with_tokens(tokens)).await;
    let http = reqwest::Client::new();
    let base = server.base.clone();
    assert_eq!(put(&http, &base, "orders/a", 5, TOKEN).await, 200);
    assert_eq!(put(&http, &base, "billing/x", 3, TOKEN).await, 200);

    let browser = Browser::start().await;
    browser.open(&format!("{base}/ui#token={TOKEN}")).await;
    assert_eq!(
        browser.script_async(WAIT_LIVE).await,
        json!(true),
        "the page's event stream went live"
    );
    let address = browser.script("return location.href;").await;
    assert_eq!(
        address,
        json!(format!("{base}/ui")),
        "the token left the address bar"
    );
    let marks = browser
        .script(r#"return [...document.querySelectorAll('tr.mark[data-lock="orders/a"] td')].map(td => td.textContent);"#)
        .await;
    assert_eq!(marks, json!(["orders/a", "5", "0"]), "the lock's marks");

    assert_eq!(
        browser.script(WATCH_STALE).await,
        json!(true),
        "no stale row yet"
    );
    let sent_at = now_ms();
    assert_eq!(put(&http, &base, "orders/a", 4, TOKEN).await, 409);
    let seen_at = browser.script_async(STALE_SEEN_AT).await;
    let seen_at = seen_at
        .as_u64()
        .unwrap_or_else(|| panic!("the stale refusal never showed (waited 10 s): {seen_at}"));
    let delay = Duration::from_millis(seen_at.saturating_sub(sent_at));
    assert!(
        delay <= SHOWN_WITHIN,
        "the stale refusal showed after {delay:?}, more than {SHOWN_WITHIN:?}"
    );
    let row = browser
        .script(r#"const r = document.querySelector('tr.decision[data-reason="stale"]'); return [r.dataset.generation, r.querySelector('.badge').textContent];"#)
        .await;
    assert_eq!(row, json!(["4", "stale"]));

    // The prefix filter: billing/ hides orders/.
    let shown = browser
        .script(r#"const p = document.getElementById("prefix"); p.value = "billing/"; p.dispatchEvent(new Event("input")); return [...document.querySelectorAll("tr.decision")].map(r => r.dataset.lock);"#)
        .await;
    assert_eq!(shown, json!(["billing/x"]), "only billing/ after filtering");
    browser
        .script(r#"const p = document.getElementById("prefix"); p.value = ""; p.dispatchEvent(new Event("input")); return null;"#)
        .await;

    let png = browser.screenshot().await;
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui.png");
    std::fs::write(&target, &png).unwrap();
    if std::env::var_os("PALISADE_WRITE_UI_SCREENSHOT").is_some() {
        let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/ui.png");
        std::fs::write(docs, &png).unwrap();
    }
    drop(browser);
    server.shut_down().await;
}
