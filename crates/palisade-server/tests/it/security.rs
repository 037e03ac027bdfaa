//! Authentication and hostile sequencers through `app(state).oneshot(..)`:
//! signed sequencers (forged, unknown key, other issuer, rotation), the
//! raise cap, bearer tokens and their prefixes, the bound on requests in
//! flight. Every refusal is checked to change nothing: marks and data are
//! compared before and after.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{Method, Request, StatusCode};
use palisade_core::{Generation, LockName, Mode, Sequencer, Signer, SigningKey, Verifier};
use palisade_server::{ServerConfig, ServerError, ServerLimits, TokenTable};
use palisade_store::StoreConfig;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tower::ServiceExt as _;

use crate::common;
use common::{Answer, Server, server_with};

const ISSUER: &str = "etcd-prod";
const TOKEN_ORDERS: &str = "orders-token-0123456789";
const TOKEN_ALL: &str = "operator-token-0123456789";

fn key(id: &str, fill: u8) -> SigningKey {
    SigningKey::new(id, vec![fill; 32]).unwrap()
}

fn sequencer(lock: &str, mode: Mode, generation: u64) -> Sequencer {
    Sequencer::new(
        LockName::new(lock).unwrap(),
        mode,
        Generation::new(generation).unwrap(),
    )
}

/// Signed by `key_id` with the secret `fill` repeated, as `issuer`.
fn signed(lock: &str, generation: u64, key_id: &str, fill: u8, issuer: &str) -> String {
    Signer::new(issuer, key(key_id, fill))
        .unwrap()
        .sign(sequencer(lock, Mode::Exclusive, generation))
        .to_string()
}

fn honest(lock: &str, generation: u64) -> String {
    signed(lock, generation, "k1", 1, ISSUER)
}

fn unsigned(lock: &str, generation: u64) -> String {
    sequencer(lock, Mode::Exclusive, generation).to_string()
}

/// A server that verifies with key `k1` (secret 1) and trusts `etcd-prod`.
fn verifying_server() -> Server {
    server_with(StoreConfig::default(), |state| {
        let verifier = Verifier::new()
            .with_key(key("k1", 1))
            .unwrap()
            .with_issuer(ISSUER)
            .unwrap();
        state.with_verifier(verifier, true)
    })
}

impl Server {
    async fn put_as(
        &self,
        token: Option<&str>,
        lock: &str,
        sequencer: &str,
        value: &str,
    ) -> Answer {
        let authorization = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![(Sequencer::HTTP_HEADER, sequencer)];
        if let Some(authorization) = &authorization {
            headers.push(("authorization", authorization.as_str()));
        }
        self.send(
            Method::PUT,
            &format!("/v1/locks/{}/keys/k", lock.replace('/', "%2F")),
            &headers,
            value.to_owned(),
        )
        .await
    }

    /// `put_as` without a token.
    async fn put_k(&self, lock: &str, sequencer: &str, value: &str) -> Answer {
        self.put_as(None, lock, sequencer, value).await
    }

    /// The marks and the value of key `k`, read without a sequencer.
    async fn snapshot(&self, lock: &str) -> (u64, u64, Option<Bytes>) {
        let marks = self
            .state
            .store()
            .marks(&LockName::new(lock).unwrap())
            .unwrap();
        let read = self
            .state
            .store()
            .get(&LockName::new(lock).unwrap(), b"k", None)
            .unwrap()
            .unwrap();
        (
            marks.exclusive,
            marks.shared,
            read.value.map(|v| Bytes::copy_from_slice(&v)),
        )
    }
}

fn rejected(metrics: &str, code: &str) -> u64 {
    let prefix = format!("palisade_requests_rejected_total{{reason=\"{code}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no series for {code}"))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn forged_u64_max_never_moves_the_mark_and_honest_clients_carry_on() {
    let server = verifying_server();
    assert_eq!(
        server.put_k("L", &honest("L", 1), "one").await.status,
        StatusCode::OK
    );
    let before = server.snapshot("L").await;
    assert_eq!(before, (1, 0, Some(Bytes::from_static(b"one"))));

    let max = u64::MAX;
    let cases = [
        (unsigned("L", max), StatusCode::UNAUTHORIZED, "unsigned"),
        // The right key id, the wrong secret: a forger guessing.
        (
            signed("L", max, "k1", 9, ISSUER),
            StatusCode::UNAUTHORIZED,
            "bad_signature",
        ),
        (
            signed("L", max, "k9", 1, ISSUER),
            StatusCode::UNAUTHORIZED,
            "unknown_key",
        ),
        // A real key, but another deployment's generations.
        (
            signed("L", max, "k1", 1, "redis-eu"),
            StatusCode::FORBIDDEN,
            "wrong_issuer",
        ),
        // A signed sequencer edited after signing.
        (
            honest("L", 2).replace("gen=2", &format!("gen={max}")),
            StatusCode::UNAUTHORIZED,
            "bad_signature",
        ),
    ];
    for (sequencer, status, code) in &cases {
        let answer = server.put_k("L", sequencer, "forged").await;
        let body = answer.assert_error(*status, code);
        assert_eq!(body["lock"], "L");
        assert_eq!(body["presented"], max);
        if *status == StatusCode::UNAUTHORIZED {
            assert!(
                answer
                    .header("www-authenticate")
                    .is_some_and(|c| c.starts_with("Palisade-Sequencer")),
                "{code}: a 401 carries a challenge"
            );
        }
        // Every write route and a fenced read refuse it the same way.
        let encoded = sequencer.as_str();
        for (method, path, body) in [
            (Method::DELETE, "/v1/locks/L/keys/k", String::new()),
            (
                Method::POST,
                "/v1/locks/L/batch",
                json!({"ops": []}).to_string(),
            ),
            (
                Method::POST,
                "/v1/locks/L/cas/k",
                json!({"expected": "one", "new": "x"}).to_string(),
            ),
        ] {
            server
                .send(method, path, &[(Sequencer::HTTP_HEADER, encoded)], body)
                .await
                .assert_error(*status, code);
        }
        assert_eq!(server.snapshot("L").await, before, "{code} changed nothing");
    }
    let shared_forgery = sequencer("L", Mode::Shared, max).to_string();
    server
        .send(
            Method::GET,
            "/v1/locks/L/keys/k",
            &[(Sequencer::HTTP_HEADER, &shared_forgery)],
            Body::empty(),
        )
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unsigned");
    assert_eq!(server.snapshot("L").await, before);

    // The lock is still usable: the next honest holder writes.
    let answer = server.put_k("L", &honest("L", 2), "two").await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.json());
    assert_eq!(
        server.snapshot("L").await,
        (2, 0, Some(Bytes::from_static(b"two")))
    );
    let honest_read = Signer::new(ISSUER, key("k1", 1))
        .unwrap()
        .sign(sequencer("L", Mode::Shared, 3))
        .to_string();
    let read = server
        .send(
            Method::GET,
            "/v1/locks/L/keys/k",
            &[(Sequencer::HTTP_HEADER, &honest_read)],
            Body::empty(),
        )
        .await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.header("palisade-mark-shared"), Some("3"));

    let metrics = server.metrics().await;
    assert_eq!(rejected(&metrics, "unsigned"), 4 + 1);
    assert_eq!(rejected(&metrics, "bad_signature"), 8);
    assert_eq!(rejected(&metrics, "unknown_key"), 4);
    assert_eq!(rejected(&metrics, "wrong_issuer"), 4);
}

#[tokio::test]
async fn rotation_accepts_both_keys_until_the_old_one_is_dropped() {
    let both = Verifier::from_keys(
        format!("k1 {}\nk2 {}\n", "01".repeat(32), "02".repeat(32))
            .parse()
            .unwrap(),
    );
    let server = server_with(StoreConfig::default(), |state| {
        state.with_verifier(both, true)
    });
    let old_key = |generation| signed("R", generation, "k1", 1, ISSUER);
    let new_key = |generation| signed("R", generation, "k2", 2, ISSUER);
    assert_eq!(
        server.put_k("R", &old_key(1), "a").await.status,
        StatusCode::OK
    );
    assert_eq!(
        server.put_k("R", &new_key(2), "b").await.status,
        StatusCode::OK
    );
    assert_eq!(
        server.put_k("R", &old_key(3), "c").await.status,
        StatusCode::OK
    );

    // The same store, now verified with k2 only (the restart after the
    // rotation's last step).
    let only_new = Verifier::from_keys(format!("k2 {}", "02".repeat(32)).parse().unwrap());
    let rotated = Server::over(
        tempfile::tempdir().unwrap(),
        server.state.clone().with_verifier(only_new, true),
    );
    let body = rotated
        .put_k("R", &old_key(4), "d")
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unknown_key");
    assert_eq!(body["key_id"], "k1");
    assert_eq!(
        rotated.snapshot("R").await,
        (3, 0, Some(Bytes::from_static(b"c")))
    );
    assert_eq!(
        rotated.put_k("R", &new_key(4), "e").await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_rollout_mode_verifies_signed_sequencers_and_lets_unsigned_ones_pass() {
    let server = server_with(StoreConfig::default(), |state| {
        state.with_verifier(Verifier::new().with_key(key("k1", 1)).unwrap(), false)
    });
    assert_eq!(
        server.put_k("P", &unsigned("P", 1), "a").await.status,
        StatusCode::OK
    );
    server
        .put_k("P", &signed("P", 2, "k1", 7, ISSUER), "b")
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "bad_signature");
    assert_eq!(
        server.put_k("P", &honest("P", 2), "c").await.status,
        StatusCode::OK
    );
    assert_eq!(
        server.snapshot("P").await,
        (2, 0, Some(Bytes::from_static(b"c")))
    );
}

#[tokio::test]
async fn the_raise_cap_refuses_a_runaway_generation_and_changes_nothing() {
    // Off by default: any raise passes.
    let uncapped = server_with(StoreConfig::default(), |state| state);
    assert_eq!(
        uncapped.put_k("C", &unsigned("C", 1), "a").await.status,
        StatusCode::OK
    );
    assert_eq!(
        uncapped
            .put_k("C", &unsigned("C", u64::MAX - 1), "b")
            .await
            .status,
        StatusCode::OK
    );

    let server = server_with(StoreConfig::default(), |state| {
        state.with_max_mark_raise(Some(100))
    });
    // A lock never fenced has no reference point: its first generation
    // may be anything (etcd revisions are global).
    assert_eq!(
        server
            .put_k("C", &unsigned("C", 1_000_000), "a")
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        server
            .put_k("C", &unsigned("C", 1_000_100), "b")
            .await
            .status,
        StatusCode::OK
    );
    let before = server.snapshot("C").await;
    let body = server
        .put_k("C", &unsigned("C", 1_000_201), "runaway")
        .await
        .assert_error(StatusCode::CONFLICT, "raise_too_large");
    assert_eq!(body["presented"], 1_000_201);
    assert_eq!(body["max_raise"], 100);
    assert_eq!(body["allowed_up_to"], 1_000_200);
    assert_eq!(body["marks"], json!({"exclusive": 1_000_100, "shared": 0}));
    let shared_runaway = sequencer("C", Mode::Shared, u64::MAX).to_string();
    server
        .send(
            Method::GET,
            "/v1/locks/C/keys/k",
            &[(Sequencer::HTTP_HEADER, &shared_runaway)],
            Body::empty(),
        )
        .await
        .assert_error(StatusCode::CONFLICT, "raise_too_large");
    assert_eq!(server.snapshot("C").await, before);
    // Exactly the cap is allowed.
    assert_eq!(
        server
            .put_k("C", &unsigned("C", 1_000_200), "c")
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(rejected(&server.metrics().await, "raise_too_large"), 2);
}

fn token_server() -> Server {
    server_with(StoreConfig::default(), |state| {
        let tokens: TokenTable = format!("{TOKEN_ORDERS} orders/\n{TOKEN_ALL} *\n")
            .parse()
            .unwrap();
        state.with_tokens(tokens)
    })
}

#[tokio::test]
async fn tokens_gate_every_lock_route_and_only_within_their_prefixes() {
    let server = token_server();
    // No token, an unknown token, a malformed header: 401 with a Bearer
    // challenge, checked before the sequencer (malformed here) is looked at.
    for authorization in [
        None,
        Some("Bearer not-a-known-token-000"),
        Some("Basic b3JkZXJz"),
    ] {
        let mut headers = vec![(Sequencer::HTTP_HEADER, "garbage")];
        if let Some(authorization) = authorization {
            headers.push(("authorization", authorization));
        }
        let answer = server
            .send(Method::PUT, "/v1/locks/orders%2F1/keys/k", &headers, "v")
            .await;
        answer.assert_error(StatusCode::UNAUTHORIZED, "unauthenticated");
        assert!(
            answer
                .header("www-authenticate")
                .is_some_and(|c| c.starts_with("Bearer realm=\"palisade\"")),
            "{authorization:?}"
        );
    }
    for path in ["/v1/locks/orders%2F1/marks", "/v1/locks/orders%2F1/keys/k"] {
        server
            .send(Method::GET, path, &[], Body::empty())
            .await
            .assert_error(StatusCode::UNAUTHORIZED, "unauthenticated");
    }

    // A known token outside its prefixes: 403, and the mark does not move.
    let answer = server
        .put_as(
            Some(TOKEN_ORDERS),
            "inventory/1",
            &unsigned("inventory/1", 5),
            "v",
        )
        .await;
    let body = answer.assert_error(StatusCode::FORBIDDEN, "forbidden");
    assert_eq!(body["lock"], "inventory/1");
    assert!(!String::from_utf8_lossy(&answer.body).contains(TOKEN_ORDERS));
    assert_eq!(server.snapshot("inventory/1").await, (0, 0, None));
    // `orders/` is a string prefix: `orders` itself is outside it.
    server
        .put_as(Some(TOKEN_ORDERS), "orders", &unsigned("orders", 1), "v")
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");

    // Within its prefixes, and the `*` token everywhere.
    assert_eq!(
        server
            .put_as(
                Some(TOKEN_ORDERS),
                "orders/1",
                &unsigned("orders/1", 5),
                "v"
            )
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        server
            .put_as(
                Some(TOKEN_ALL),
                "inventory/1",
                &unsigned("inventory/1", 5),
                "v"
            )
            .await
            .status,
        StatusCode::OK
    );
    let marks = server
        .send(
            Method::GET,
            "/v1/locks/orders%2F1/marks",
            &[("authorization", &format!("bearer {TOKEN_ORDERS}"))],
            Body::empty(),
        )
        .await;
    assert_eq!(marks.status, StatusCode::OK);
    assert_eq!(marks.json()["marks"]["exclusive"], 5);

    // Health and metrics need no token.
    let health = server
        .send(Method::GET, "/healthz", &[], Body::empty())
        .await;
    assert_eq!(health.status, StatusCode::OK);
    let metrics = server.metrics().await;
    assert_eq!(rejected(&metrics, "unauthenticated"), 5);
    assert_eq!(rejected(&metrics, "forbidden"), 2);
    assert!(!metrics.contains(TOKEN_ORDERS) && !metrics.contains(TOKEN_ALL));
}

#[tokio::test]
async fn tokens_and_signatures_together_check_the_token_first() {
    let server = server_with(StoreConfig::default(), |state| {
        let tokens: TokenTable = format!("{TOKEN_ORDERS} orders/").parse().unwrap();
        let verifier = Verifier::new().with_key(key("k1", 1)).unwrap();
        state.with_tokens(tokens).with_verifier(verifier, true)
    });
    let forged = unsigned("orders/9", u64::MAX);
    server
        .put_k("orders/9", &forged, "v")
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthenticated");
    // A legitimate token does not make a forged sequencer acceptable.
    server
        .put_as(Some(TOKEN_ORDERS), "orders/9", &forged, "v")
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unsigned");
    assert_eq!(
        server
            .put_as(
                Some(TOKEN_ORDERS),
                "orders/9",
                &signed("orders/9", 3, "k1", 1, ISSUER),
                "v"
            )
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(server.snapshot("orders/9").await.0, 3);
}

/// A request body that tells the test when the handler starts reading it,
/// then yields what the test sends.
struct SignallingBody {
    started: Option<oneshot::Sender<()>>,
    chunks: mpsc::Receiver<Bytes>,
}

impl futures::Stream for SignallingBody {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(started) = self.started.take() {
            let _ = started.send(());
        }
        self.chunks.poll_recv(cx).map(|chunk| chunk.map(Ok))
    }
}

#[tokio::test]
async fn over_the_in_flight_bound_a_request_is_refused_at_once() {
    let mut limits = ServerLimits::default();
    limits.max_in_flight = 1;
    let server = server_with(StoreConfig::default(), |state| state.with_limits(limits));

    // Request 1 holds the only place while its body is still arriving.
    let (started_tx, started) = oneshot::channel();
    let (chunks_tx, chunks) = mpsc::channel(1);
    let body = Body::from_stream(SignallingBody {
        started: Some(started_tx),
        chunks,
    });
    let request = Request::put("/v1/locks/F/keys/k")
        .header(Sequencer::HTTP_HEADER, unsigned("F", 1))
        .body(body)
        .unwrap();
    let first = tokio::spawn(server.router.clone().oneshot(request));
    started.await.unwrap();

    let answer = server.put_k("F", &unsigned("F", 2), "second").await;
    answer.assert_error(StatusCode::SERVICE_UNAVAILABLE, "overloaded");
    assert_eq!(answer.header("retry-after"), Some("1"));
    assert!(
        server
            .metrics()
            .await
            .contains("palisade_requests_in_flight 1\n")
    );
    // Health is not counted against the bound.
    let health = server
        .send(Method::GET, "/healthz", &[], Body::empty())
        .await;
    assert_eq!(health.status, StatusCode::OK);

    chunks_tx.send(Bytes::from_static(b"first")).await.unwrap();
    drop(chunks_tx);
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    // The place is free again.
    assert_eq!(
        server.put_k("F", &unsigned("F", 2), "third").await.status,
        StatusCode::OK
    );
    let metrics = server.metrics().await;
    assert!(metrics.contains("palisade_requests_in_flight 0\n"));
    assert_eq!(rejected(&metrics, "overloaded"), 1);
}

fn write_file(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn the_configuration_loads_keys_and_tokens_and_refuses_bad_combinations() {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        server: ServerConfig,
    }

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let keys = write_file(
        dir.path(),
        "keys",
        &format!("# current\nk1 {}\n", "01".repeat(32)),
    );
    let tokens = write_file(dir.path(), "tokens", &format!("{TOKEN_ORDERS} orders/\n"));
    let never_opened = dir.path().join("never-opened");
    let parse_for = |data: &std::path::Path, extra: &[&str]| {
        let mut args = vec!["palisade-server", "--data-dir", data.to_str().unwrap()];
        args.extend_from_slice(extra);
        Cli::try_parse_from(args).map(|cli| cli.server)
    };
    let parse = |extra: &[&str]| parse_for(&never_opened, extra);

    let config = parse_for(
        &data,
        &[
            "--verify-keys-file",
            keys.to_str().unwrap(),
            "--issuer",
            ISSUER,
            "--issuer",
            "etcd-dr",
            "--tokens-file",
            tokens.to_str().unwrap(),
            "--max-mark-raise",
            "1000",
            "--max-in-flight",
            "7",
        ],
    )
    .unwrap();
    assert_eq!(config.issuers, [ISSUER, "etcd-dr"]);
    let (verifier, required) = config.verifier().unwrap().unwrap();
    assert!(required, "signatures are required when a key ring is given");
    assert_eq!(verifier.issuers().collect::<Vec<_>>(), ["etcd-dr", ISSUER]);
    let state = config.open_state(None).unwrap();
    assert_eq!(state.limits().max_in_flight, 7);
    let shown = format!("{state:?}");
    assert!(
        shown.contains("signatures_required: true") && shown.contains("\"k1\""),
        "{shown}"
    );
    assert!(
        !shown.contains(TOKEN_ORDERS) && !shown.contains(&"01".repeat(32)),
        "{shown}"
    );
    let server = Server::over(tempfile::tempdir().unwrap(), state);
    server
        .put_as(
            Some(TOKEN_ORDERS),
            "orders/1",
            &unsigned("orders/1", 1),
            "v",
        )
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unsigned");
    assert_eq!(
        server
            .put_as(
                Some(TOKEN_ORDERS),
                "orders/1",
                &signed("orders/1", 1, "k1", 1, ISSUER),
                "v"
            )
            .await
            .status,
        StatusCode::OK
    );
    drop(server);

    let rollout = parse(&[
        "--verify-keys-file",
        keys.to_str().unwrap(),
        "--require-signatures=false",
    ])
    .unwrap();
    assert!(!rollout.verifier().unwrap().unwrap().1);

    // Settings that cannot work are refused before the store opens.
    let refused = |config: ServerConfig, words: &str| {
        let error = config.open_state(None).unwrap_err();
        assert!(error.to_string().contains(words), "{error}");
        error
    };
    refused(
        parse(&["--issuer", ISSUER]).unwrap(),
        "--issuer needs --verify-keys-file",
    );
    refused(
        parse(&["--require-signatures"]).unwrap(),
        "--require-signatures needs",
    );
    refused(
        parse(&["--max-mark-raise", "0"]).unwrap(),
        "must be positive",
    );
    refused(
        parse(&["--max-connections", "0"]).unwrap(),
        "--max-connections",
    );
    refused(
        parse(&["--max-header-bytes", "100"]).unwrap(),
        "at least 8192",
    );
    let missing = refused(
        parse(&["--tokens-file", dir.path().join("nope").to_str().unwrap()]).unwrap(),
        "cannot read --tokens-file",
    );
    assert!(matches!(missing, ServerError::ReadFile { .. }));
    let bad_keys = write_file(
        dir.path(),
        "bad-keys",
        &format!("k1 {}\nk1 {}\n", "01".repeat(32), "02".repeat(32)),
    );
    let error = refused(
        parse(&["--verify-keys-file", bad_keys.to_str().unwrap()]).unwrap(),
        "appears more than once",
    );
    assert!(
        !error.to_string().contains(&"02".repeat(32)),
        "secrets never show"
    );
    let bad_tokens = write_file(dir.path(), "bad-tokens", &format!("# ops\n{TOKEN_ALL}\n"));
    let error = refused(
        parse(&["--tokens-file", bad_tokens.to_str().unwrap()]).unwrap(),
        "line 2",
    );
    assert!(!error.to_string().contains(TOKEN_ALL));
    assert!(
        !never_opened.exists(),
        "no refused configuration opened the store"
    );
    // The TLS flags go together.
    assert!(parse(&["--tls-cert", "cert.pem"]).is_err());
    assert!(parse(&["--tls-key", "key.pem"]).is_err());
}
