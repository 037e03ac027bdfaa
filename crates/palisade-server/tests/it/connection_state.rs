//! What the server says about the connection when it refuses, over real
//! TCP with hand-written HTTP/1.1: after every refusal either the same
//! connection keeps working or the answer said `connection: close`; and
//! what malformed HTTP gets.

use std::time::Duration;

use palisade_server::{ServerLimits, TokenTable};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

use crate::tcp;
use tcp::{Running, exchange, excl, metric, read_answer, read_until_closed, start, start_with};

const TOKEN: &str = "Zs8AkP2v1nQxWm4rT7yBcD3e";

/// One way to be refused before the body is read.
struct Refusal {
    what: &'static str,
    status: u16,
    code: &'static str,
    head: String,
    body_len: usize,
}

/// Requests refused before their body is read, each with a body far
/// larger than what the server has buffered when it answers.
fn early_refusals() -> Vec<Refusal> {
    const BODY: usize = 256 * 1024;
    let put = |lock: &str, headers: &str, length: usize| {
        format!(
            "PUT /v1/locks/{lock}/keys/k HTTP/1.1\r\nhost: x\r\ncontent-length: {length}\r\n{headers}\r\n"
        )
    };
    let token = format!("authorization: Bearer {TOKEN}\r\n");
    vec![
        Refusal {
            what: "malformed sequencer",
            status: 400,
            code: "malformed_sequencer",
            head: put(
                "orders-1",
                &format!("{token}palisade-sequencer: v2;nope\r\n"),
                BODY,
            ),
            body_len: BODY,
        },
        Refusal {
            what: "no token",
            status: 401,
            code: "unauthenticated",
            head: put(
                "orders-1",
                &format!("palisade-sequencer: {}\r\n", excl("orders-1", 1)),
                BODY,
            ),
            body_len: BODY,
        },
        Refusal {
            what: "outside the token's prefixes",
            status: 403,
            code: "forbidden",
            head: put(
                "billing-1",
                &format!("{token}palisade-sequencer: {}\r\n", excl("billing-1", 1)),
                BODY,
            ),
            body_len: BODY,
        },
        Refusal {
            what: "declared body over the limit",
            status: 413,
            code: "too_large",
            head: put(
                "orders-1",
                &format!("{token}palisade-sequencer: {}\r\n", excl("orders-1", 1)),
                64 * 1024 * 1024,
            ),
            body_len: BODY,
        },
        Refusal {
            what: "sequencer for another lock",
            status: 422,
            code: "lock_mismatch",
            head: put(
                "orders-1",
                &format!("{token}palisade-sequencer: {}\r\n", excl("orders-2", 1)),
                BODY,
            ),
            body_len: BODY,
        },
    ]
}

async fn start_with_tokens() -> Running {
    start_with(|state| {
        let mut tokens = TokenTable::new();
        tokens.insert(TOKEN, ["orders-"]).unwrap();
        state
            .with_tokens(tokens)
            .with_limits(ServerLimits::default())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_early_refusal_the_connection_works_or_the_answer_says_close() {
    let running = start_with_tokens().await;
    for refusal in early_refusals() {
        let stream = TcpStream::connect(running.addr).await.unwrap();
        let (mut reader, mut writer) = stream.into_split();
        // The body follows the head as a real client sends it; the server
        // may answer (and close) before it has all arrived.
        let request = [refusal.head.as_bytes(), &vec![b'x'; refusal.body_len]].concat();
        let sender = tokio::spawn(async move {
            let _ = writer.write_all(&request).await;
            writer
        });
        let answer = read_answer(&mut reader).await;
        let writer = tokio::time::timeout(Duration::from_secs(10), sender)
            .await
            .expect("the body is sent or refused in time")
            .unwrap();
        let mut stream = reader.reunite(writer).unwrap();
        let what = refusal.what;
        assert_eq!(answer.status, refusal.status, "{what}");
        let body: serde_json::Value = serde_json::from_slice(&answer.body)
            .unwrap_or_else(|e| panic!("{what}: the body is not JSON ({e})"));
        assert_eq!(body["code"], refusal.code, "{what}");

        if answer.says_close() {
            // Honest: the server closes, and says so.
            let rest = read_until_closed(&mut stream, Duration::from_secs(10)).await;
            assert!(rest.is_empty(), "{what}: more after a closing answer");
        } else {
            // Kept alive: the next request on it is served.
            let next = stream
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
                .await;
            assert!(
                next.is_ok(),
                "{what}: the connection was closed although the answer kept it alive: {next:?}"
            );
            let mut first = [0u8; 1];
            let read = tokio::time::timeout(Duration::from_secs(10), stream.peek(&mut first)).await;
            assert!(
                matches!(read, Ok(Ok(1))),
                "{what}: no answer on a connection the refusal kept alive: {read:?}"
            );
            let health = read_answer(&mut stream).await;
            assert_eq!(health.status, 200, "{what}");
        }
    }
    running.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_body_was_read_keeps_its_connection() {
    let running = start(ServerLimits::default()).await;
    let mut stream = TcpStream::connect(running.addr).await.unwrap();
    for generation in 1..=3u64 {
        let body = format!("value {generation}");
        let request = format!(
            "PUT /v1/locks/kept/keys/k HTTP/1.1\r\nhost: x\r\npalisade-sequencer: {}\r\ncontent-length: {}\r\n\r\n{body}",
            excl("kept", generation),
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let answer = read_answer(&mut stream).await;
        assert_eq!(answer.status, 200);
        assert!(!answer.says_close(), "a served write closed its connection");
    }
    // A refusal that read the whole body (bad JSON) keeps it too.
    let request = "POST /v1/locks/kept/batch HTTP/1.1\r\nhost: x\r\npalisade-sequencer: v1;lock=kept;mode=exclusive;gen=3\r\ncontent-length: 5\r\n\r\n{nope";
    stream.write_all(request.as_bytes()).await.unwrap();
    let answer = read_answer(&mut stream).await;
    assert_eq!(answer.status, 400);
    assert!(!answer.says_close());
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_answer(&mut stream).await.status, 200);
    running.shut_down().await;
}

/// Malformed HTTP/1.1 that hyper refuses while parsing, before a request
/// exists: no handler runs, so the answer is hyper's own.
const MALFORMED: [(&str, &[u8]); 6] = [
    (
        "NUL in a header value",
        b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-a: a\0b\r\n\r\n",
    ),
    (
        "bare newline inside a header value",
        b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-a: a\nb\r\n\r\n",
    ),
    (
        "space in the path",
        b"GET /v1/locks/a b/keys/k HTTP/1.1\r\nhost: x\r\n\r\n",
    ),
    (
        "negative content-length",
        b"PUT /v1/locks/a/keys/k HTTP/1.1\r\nhost: x\r\ncontent-length: -1\r\n\r\n",
    ),
    (
        "two different content-lengths",
        b"PUT /v1/locks/a/keys/k HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab",
    ),
    (
        "unknown transfer-encoding",
        b"PUT /v1/locks/a/keys/k HTTP/1.1\r\nhost: x\r\ntransfer-encoding: gzip\r\n\r\n",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_http_gets_an_empty_400_that_closes_the_connection() {
    let running = start(ServerLimits::default()).await;
    for (what, request) in MALFORMED {
        let answer = exchange(running.addr, request.to_vec()).await;
        // The documented exception to JSON error bodies: exactly this.
        let (head, body) = answer
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("{what}: no answer: {answer:?}"));
        let head = head.to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 400 "), "{what}: {answer:?}");
        assert!(head.contains("\r\nconnection: close"), "{what}: {answer:?}");
        assert!(head.contains("\r\ncontent-length: 0"), "{what}: {answer:?}");
        assert!(body.is_empty(), "{what}: {answer:?}");
    }
    // Bare newlines as line ends are accepted (RFC 9112 allows it).
    let answer = exchange(
        running.addr,
        b"GET /healthz HTTP/1.1\nhost: x\nconnection: close\n\n".to_vec(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");

    // Counted as each connection task ends, which may be just after the
    // client saw the close.
    let http = reqwest::Client::new();
    let series = "palisade_connections_closed_total{reason=\"bad_request\"}";
    let waited = std::time::Instant::now();
    loop {
        let counted = metric(&http, &running.base, series).await;
        assert!(counted <= MALFORMED.len() as u64, "{counted}");
        if counted == MALFORMED.len() as u64 {
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "only {counted} counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.shut_down().await;
}
