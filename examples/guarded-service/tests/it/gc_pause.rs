//! The GC-pause story against the guarded inventory service, over real
//! HTTP on 127.0.0.1, with the in-process lock backend:
//!
//! 1. holder A takes lock `items/widget` and reads the stock (100);
//! 2. A pauses (stops renewing its lease) past its TTL;
//! 3. B takes the lock with a newer generation and sells 50;
//! 4. A wakes up and writes the stock it computed before the pause (70):
//!    `409 stale`, and the data holds B's change only.
//!
//! Then the same with signatures required, against the `guarded-service`
//! binary itself: forged and unsigned sequencers are refused without moving
//! the mark, and a holder whose lease was revoked is fenced.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use example_guarded_service::{AppState, Options, run};
use palisade_core::{
    Generation, Lock as _, LockGuard as _, LockName, Mode, Sequencer, SessionOptions, Signer,
    SigningKey,
};
use palisade_lock_embedded::EmbeddedLockClient;
use palisade_testkit::process::ChildProcess;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// A bound for anything expected within a few lease TTLs; generous, for a
/// loaded CI machine.
const BOUND: Duration = Duration::from_secs(30);

/// The service, running in this process on a free port.
struct Running {
    base: String,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    async fn start(data_dir: &std::path::Path, options: Options) -> Running {
        let state = AppState::open(data_dir, options).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = tokio::spawn(run(listener, state, async {
            let _ = stop.await;
        }));
        Running {
            base,
            shutdown: Some(shutdown),
            task,
        }
    }

    async fn stop(mut self) {
        let _ = self.shutdown.take().unwrap().send(());
        tokio::time::timeout(BOUND, self.task)
            .await
            .expect("the service shuts down")
            .unwrap()
            .unwrap();
    }
}

/// A small HTTP client for the service's routes.
struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    fn new(base: &str) -> Self {
        Client {
            http: reqwest::Client::new(),
            base: base.to_owned(),
        }
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        sequencer: Option<&Sequencer>,
    ) -> (StatusCode, Value) {
        let request = match sequencer {
            Some(sequencer) => request.header(Sequencer::HTTP_HEADER, sequencer.to_string()),
            None => request,
        };
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn set_stock(&self, sku: &str, stock: i64, sequencer: &Sequencer) -> (StatusCode, Value) {
        let request = self
            .http
            .put(format!("{}/items/{sku}", self.base))
            .json(&json!({"stock": stock}));
        self.send(request, Some(sequencer)).await
    }

    async fn adjust(&self, sku: &str, delta: i64, sequencer: &Sequencer) -> (StatusCode, Value) {
        let request = self
            .http
            .post(format!("{}/items/{sku}/adjust", self.base))
            .json(&json!({"delta": delta}));
        self.send(request, Some(sequencer)).await
    }

    async fn item(&self, sku: &str, sequencer: Option<&Sequencer>) -> (StatusCode, Value) {
        let request = self.http.get(format!("{}/items/{sku}", self.base));
        self.send(request, sequencer).await
    }

    async fn ledger(&self, sku: &str) -> Value {
        let request = self.http.get(format!("{}/items/{sku}/ledger", self.base));
        let (status, body) = self.send(request, None).await;
        assert_eq!(status, StatusCode::OK);
        body
    }

    async fn metrics(&self) -> Value {
        let request = self.http.get(format!("{}/metrics", self.base));
        self.send(request, None).await.1
    }
}

fn widget() -> LockName {
    LockName::new("items/widget").unwrap()
}

/// Short leases, so the pause outlives one quickly.
fn lease_options() -> SessionOptions {
    SessionOptions::default()
        .with_ttl(Duration::from_millis(800))
        .with_safety_margin(Duration::from_millis(200))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_write_is_refused_and_only_the_new_holders_change_lands() {
    let dir = tempfile::tempdir().unwrap();
    let service = Running::start(dir.path(), Options::default()).await;
    let client = Client::new(&service.base);
    let locks = EmbeddedLockClient::new();

    // Setup: someone stocks 100 widgets under the lock.
    let setup = locks.session(lease_options()).unwrap();
    let guard = setup.acquire(&widget(), Mode::Exclusive).await.unwrap();
    let setup_generation = guard.generation().get();
    let (status, _) = client
        .set_stock("widget", 100, &guard.sequencer().unwrap())
        .await;
    assert_eq!(status, StatusCode::OK);
    guard.release().await.unwrap();

    // 1. A takes the lock and reads the stock.
    let session_a = locks.session(lease_options()).unwrap();
    let guard_a = session_a.acquire(&widget(), Mode::Exclusive).await.unwrap();
    let generation_a = guard_a.generation().get();
    let (status, item) = client
        .item("widget", Some(&guard_a.sequencer().unwrap()))
        .await;
    assert_eq!(
        (status, item["stock"].as_i64()),
        (StatusCode::OK, Some(100))
    );
    let a_computed = item["stock"].as_i64().unwrap() - 30; // A sells 30

    // 2. A pauses: no more renewals, and its lease runs out.
    session_a.stop_keepalive();
    let mut lease_a = guard_a.lease();
    tokio::time::timeout(BOUND, lease_a.lost())
        .await
        .expect("A's guard signals lease lost");

    // 3. B takes the lock (once the service has expired A's lease) and
    //    sells 50.
    let session_b = locks.session(lease_options()).unwrap();
    let guard_b = tokio::time::timeout(BOUND, session_b.acquire(&widget(), Mode::Exclusive))
        .await
        .expect("B is granted the lock after A's lease expires")
        .unwrap();
    let generation_b = guard_b.generation().get();
    assert!(generation_b > generation_a);
    let (status, item) = client
        .adjust("widget", -50, &guard_b.sequencer().unwrap())
        .await;
    assert_eq!((status, item["stock"].as_i64()), (StatusCode::OK, Some(50)));

    // 4. A wakes up. Its guard no longer hands out the sequencer; a client
    //    that sends the one it was issued anyway is refused by the service.
    assert!(guard_a.sequencer().is_err());
    let (status, body) = client
        .set_stock("widget", a_computed, guard_a.issued())
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["code"], "stale");
    assert_eq!(body["lock"], "items/widget");
    assert_eq!(body["presented"], generation_a);
    assert_eq!(body["required"], generation_b);
    assert_eq!(body["marks"]["exclusive"], generation_b);
    // Its read-modify-write route is fenced the same way.
    let (status, body) = client.adjust("widget", -30, guard_a.issued()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("stale"))
    );

    // The data holds B's change only: 100 - 50, never A's 70 or 20.
    let (status, item) = client.item("widget", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        item,
        json!({"sku": "widget", "stock": 50, "generation": generation_b})
    );
    assert_eq!(
        client.ledger("widget").await,
        json!([
            {"generation": setup_generation, "change": "set", "amount": 100, "stock_after": 100},
            {"generation": generation_b, "change": "adjust", "amount": -50, "stock_after": 50},
        ])
    );
    let metrics = client.metrics().await;
    assert_eq!(metrics["refused"]["stale"], 2);
    assert_eq!(metrics["admitted"], 3);
    guard_b.release().await.unwrap();
    service.stop().await;
}

/// The `guarded-service` binary, started with `args`; killed by PID when
/// dropped.
fn spawn_binary(args: &[&str]) -> (ChildProcess, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_guarded-service"));
    command
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = ChildProcess::spawn("guarded-service", &mut command, None).unwrap();
    let stdout = child.child_mut().stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let address = line
        .trim()
        .strip_prefix("guarded-service listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_owned();
    (child, format!("http://{address}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_with_signatures_refuses_forgeries_and_fences_a_revoked_holder() {
    let dir = tempfile::tempdir().unwrap();
    let keys_file = dir.path().join("keys");
    std::fs::write(
        &keys_file,
        format!("# lock side keys\nk1 {}\n", "ab".repeat(32)),
    )
    .unwrap();
    let data_dir = dir.path().join("data");
    let (mut child, base) = spawn_binary(&[
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--keys-file",
        keys_file.to_str().unwrap(),
        "--issuer",
        "inventory-locks",
    ]);
    let client = Client::new(&base);
    let key = SigningKey::new("k1", vec![0xab; 32]).unwrap();
    let locks =
        EmbeddedLockClient::with_signer(Signer::new("inventory-locks", key.clone()).unwrap());

    // An unsigned sequencer with generation u64::MAX would fence the item
    // forever; a signature from another deployment, or with another
    // secret, proves nothing either. None of them moves the mark.
    let forged = Sequencer::new(widget(), Mode::Exclusive, Generation::MAX);
    let stranger = Signer::new("someone-else", key.clone()).unwrap();
    let wrong_secret = Signer::new(
        "inventory-locks",
        SigningKey::new("k1", vec![1; 32]).unwrap(),
    )
    .unwrap();
    for (sequencer, status, code) in [
        (forged.clone(), StatusCode::UNAUTHORIZED, "unsigned"),
        (
            wrong_secret.sign(forged.clone()),
            StatusCode::UNAUTHORIZED,
            "bad_signature",
        ),
        (
            stranger.sign(forged.clone()),
            StatusCode::FORBIDDEN,
            "wrong_issuer",
        ),
    ] {
        let (answered, body) = client.set_stock("widget", 1, &sequencer).await;
        assert_eq!(
            (answered, body["code"].as_str()),
            (status, Some(code)),
            "{body}"
        );
    }

    // An honest holder writes; its lease is then revoked (a crash).
    let session_a = locks.session(lease_options()).unwrap();
    let guard_a = session_a.acquire(&widget(), Mode::Exclusive).await.unwrap();
    let (status, body) = client
        .set_stock("widget", 10, &guard_a.sequencer().unwrap())
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["generation"],
        guard_a.generation().get(),
        "the forgeries did not move the mark"
    );
    session_a.kill_lease();

    let session_b = locks.session(lease_options()).unwrap();
    let guard_b = tokio::time::timeout(BOUND, session_b.acquire(&widget(), Mode::Exclusive))
        .await
        .unwrap()
        .unwrap();
    let (status, _) = client
        .adjust("widget", -4, &guard_b.sequencer().unwrap())
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = client.adjust("widget", -4, guard_a.issued()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("stale"))
    );
    let (_, item) = client.item("widget", None).await;
    assert_eq!(item["stock"], 6);
    let metrics = client.metrics().await;
    assert_eq!(
        (
            metrics["refused"]["unsigned"].as_u64(),
            metrics["refused"]["wrong_issuer"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert!(child.is_running());
    child.kill().unwrap();
}
