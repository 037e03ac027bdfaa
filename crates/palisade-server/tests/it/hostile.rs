//! Hostile clients over real TCP (`run` on 127.0.0.1:0): slowloris
//! connections, a trickling body, huge headers, more connections than the
//! bound. Each test asserts a bound on what an honest client sees, never a
//! speed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use palisade_server::ServerLimits;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::{Mutex, mpsc};

use crate::tcp;
use tcp::{KeepAlive, exchange, excl, metric, read_until_closed, start};

/// One slowloris connection after another: each sends a request line and
/// then one header byte every 100 ms, forever, until the server closes it;
/// then it reconnects. Reports each connection's lifetime.
async fn slowloris(
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    first_byte_sent: mpsc::Sender<()>,
    lifetimes: Arc<Mutex<Vec<Duration>>>,
) {
    let mut first = Some(first_byte_sent);
    while !stop.load(Ordering::SeqCst) {
        // Timed from before the connect: the server's header timer starts
        // at its accept, which can come before this task is polled again
        // on a busy machine, so a time taken after `connect` returns can
        // be late and make the server look early.
        let connecting = Instant::now();
        let Ok(mut stream) = TcpStream::connect(addr).await else {
            continue;
        };
        if stream
            .write_all(b"PUT /v1/locks/victim/keys/k HTTP/1.1\r\nhost: x\r\nx-slow: ")
            .await
            .is_err()
        {
            continue;
        }
        if let Some(first) = first.take() {
            let _ = first.send(()).await;
        }
        let mut buffer = [0u8; 256];
        let closed_by_server = loop {
            if stop.load(Ordering::SeqCst) {
                break false;
            }
            tokio::select! {
                read = stream.read(&mut buffer) => match read {
                    Ok(0) | Err(_) => break true,
                    Ok(_) => {}
                },
                () = tokio::time::sleep(Duration::from_millis(100)) => {
                    if stream.write_all(b"a").await.is_err() {
                        break true;
                    }
                }
            }
        };
        if closed_by_server {
            lifetimes.lock().await.push(connecting.elapsed());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_connections_do_not_delay_honest_writes_and_are_closed() {
    const ATTACKERS: usize = 200;
    const HONEST_WRITES: u64 = 40;
    /// The bound each honest write must meet: generous for a loaded
    /// 2-core machine, far below what an unbounded slowloris would cost.
    const HONEST_BOUND: Duration = Duration::from_secs(2);
    let header_timeout = Duration::from_secs(1);
    let mut limits = ServerLimits::default();
    limits.header_read_timeout = header_timeout;
    limits.max_connections = 1024;
    let running = start(limits).await;

    let stop = Arc::new(AtomicBool::new(false));
    let lifetimes = Arc::new(Mutex::new(Vec::new()));
    let (first_byte_sent, mut started) = mpsc::channel(ATTACKERS);
    let attackers: Vec<_> = (0..ATTACKERS)
        .map(|_| {
            tokio::spawn(slowloris(
                running.addr,
                Arc::clone(&stop),
                first_byte_sent.clone(),
                Arc::clone(&lifetimes),
            ))
        })
        .collect();
    drop(first_byte_sent);
    for _ in 0..ATTACKERS {
        started.recv().await.expect("every attacker connects");
    }

    // The honest client writes throughout, across several header-timeout
    // periods, while the attackers reconnect.
    let http = reqwest::Client::new();
    let mut slowest = Duration::ZERO;
    for generation in 1..=HONEST_WRITES {
        let sent = Instant::now();
        let response = http
            .put(format!(
                "{}/v1/locks/honest/keys/k{generation}",
                running.base
            ))
            .header("palisade-sequencer", excl("honest", generation))
            .body(format!("value {generation}"))
            .timeout(HONEST_BOUND * 5)
            .send()
            .await
            .unwrap();
        let took = sent.elapsed();
        assert_eq!(response.status(), 200);
        assert!(
            took < HONEST_BOUND,
            "honest write {generation} took {took:?} with {ATTACKERS} slowloris connections"
        );
        slowest = slowest.max(took);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Every attacker has been cut off by the server at least once, each
    // after the header time limit and well within a bound of it.
    let waited = Instant::now();
    while lifetimes.lock().await.len() < ATTACKERS {
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "only {} slow connections were closed",
            lifetimes.lock().await.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for attacker in attackers {
        attacker.await.unwrap();
    }
    let lifetimes = lifetimes.lock().await.clone();
    for lifetime in &lifetimes {
        assert!(
            *lifetime >= header_timeout - Duration::from_millis(50),
            "a slow connection was closed early: {lifetime:?}"
        );
        assert!(
            *lifetime < header_timeout + Duration::from_secs(4),
            "a slow connection lived {lifetime:?}"
        );
    }
    let timed_out = metric(
        &http,
        &running.base,
        "palisade_connections_closed_total{reason=\"header_timeout\"}",
    )
    .await;
    assert!(timed_out >= ATTACKERS as u64, "{timed_out}");
    eprintln!(
        "slowloris: {} slow connections closed, honest writes: slowest {slowest:?}",
        lifetimes.len()
    );
    running.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_body_is_cut_at_the_body_timeout_with_408() {
    let body_timeout = Duration::from_secs(1);
    let mut limits = ServerLimits::default();
    limits.body_read_timeout = body_timeout;
    let running = start(limits).await;

    let stream = TcpStream::connect(running.addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let head = format!(
        "PUT /v1/locks/slow-body/keys/k HTTP/1.1\r\nhost: x\r\npalisade-sequencer: {}\r\ncontent-length: 1000\r\n\r\n",
        excl("slow-body", 7)
    );
    writer.write_all(head.as_bytes()).await.unwrap();
    let sent = Instant::now();
    let trickle = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if writer.write_all(b"x").await.is_err() {
                return;
            }
        }
    });
    let answer = read_until_closed(&mut reader, Duration::from_secs(10)).await;
    let took = sent.elapsed();
    trickle.abort();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":\"body_timeout\""), "{answer}");
    assert!(took >= body_timeout, "cut after {took:?}");
    assert!(
        took < body_timeout + Duration::from_secs(8),
        "cut after {took:?}"
    );

    // Nothing was applied: the mark never moved.
    let http = reqwest::Client::new();
    let marks: serde_json::Value = http
        .get(format!("{}/v1/locks/slow-body/marks", running.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(marks["marks"]["exclusive"], 0);
    let refused = metric(
        &http,
        &running.base,
        "palisade_requests_rejected_total{reason=\"body_timeout\"}",
    )
    .await;
    assert_eq!(refused, 1);
    running.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_or_countless_headers_get_431_and_the_server_stays_healthy() {
    let running = start(ServerLimits::default()).await;
    let mut huge = b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 64 * 1024));
    huge.extend_from_slice(b"\r\n\r\n");
    let answer = exchange(running.addr, huge).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");

    let answer = exchange(running.addr, with_headers(150)).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");

    // A header just under the limit is fine.
    let mut large = b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\nx-big: ".to_vec();
    large.extend(std::iter::repeat_n(b'a', 12 * 1024));
    large.extend_from_slice(b"\r\n\r\n");
    let answer = exchange(running.addr, large).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");

    // Counted as each connection task ends, maybe just after the close
    // was seen.
    let http = reqwest::Client::new();
    let series = "palisade_connections_closed_total{reason=\"header_too_large\"}";
    let waited = Instant::now();
    while metric(&http, &running.base, series).await < 2 {
        assert!(waited.elapsed() < Duration::from_secs(10), "not counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(metric(&http, &running.base, series).await, 2);
    running.shut_down().await;

    // A tighter bound on the count than hyper's default.
    let mut limits = ServerLimits::default();
    limits.max_headers = 8;
    let running = start(limits).await;
    let answer = exchange(running.addr, with_headers(10)).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    let answer = exchange(running.addr, with_headers(4)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    running.shut_down().await;
}

/// A health check with `host`, `connection: close` and `extra` more
/// header fields.
fn with_headers(extra: usize) -> Vec<u8> {
    let mut request = b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n".to_vec();
    for index in 0..extra {
        request.extend_from_slice(format!("x-h{index}: v\r\n").as_bytes());
    }
    request.extend_from_slice(b"\r\n");
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_connection_bound_the_oldest_unfinished_connection_is_shed() {
    const BOUND: usize = 4;
    // Long enough that no slow connection reaches it during the test: any
    // connection closed here was shed.
    let header_timeout = Duration::from_secs(30);
    let mut limits = ServerLimits::default();
    limits.max_connections = BOUND;
    limits.header_read_timeout = header_timeout;
    let running = start(limits).await;

    // The honest client's keep-alive connection: 1 of 4.
    let mut honest = KeepAlive::open(running.addr).await;
    assert_eq!(honest.send("GET /healthz HTTP/1.1", b"").await.status, 200);
    // Three connections that never finish their headers fill the rest,
    // the first one oldest.
    let open = "palisade_open_connections";
    let mut slow = Vec::new();
    for opened in 1..BOUND {
        let mut stream = TcpStream::connect(running.addr).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nx-slow: ")
            .await
            .unwrap();
        slow.push(stream);
        // Accepted in this order: the first is the oldest.
        let waited = Instant::now();
        while honest.metric(open).await < 1 + opened as u64 {
            assert!(
                waited.elapsed() < Duration::from_secs(10),
                "slow connection {opened} was not accepted"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // A fifth connection is served at once...
    let sent = Instant::now();
    let answer = exchange(
        running.addr,
        b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".to_vec(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "served after {:?}",
        sent.elapsed()
    );
    // ...in the place of the oldest slow connection, closed without an
    // answer; the younger ones and the honest keep-alive one stay.
    let mut slow = slow.into_iter();
    let mut oldest = slow.next().unwrap();
    let rest = read_until_closed(&mut oldest, Duration::from_secs(10)).await;
    assert!(rest.is_empty(), "the shed connection got an answer");
    for mut younger in slow {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_millis(200), younger.read(&mut byte)).await;
        assert!(read.is_err(), "a younger slow connection was closed");
    }
    let write = honest
        .send(
            &format!(
                "PUT /v1/locks/bound/keys/k HTTP/1.1\r\npalisade-sequencer: {}",
                excl("bound", 1)
            ),
            b"v",
        )
        .await;
    assert_eq!(write.status, 200);
    // Counted as the shed connection's task ends, maybe just after the
    // close was seen.
    let shed = "palisade_connections_closed_total{reason=\"shed\"}";
    let waited = Instant::now();
    while honest.metric(shed).await < 1 {
        assert!(waited.elapsed() < Duration::from_secs(10), "not counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(honest.metric(shed).await, 1);
    drop(honest);
    running.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_connection_is_inside_a_request_a_new_one_waits_at_most_the_header_time_limit() {
    const BOUND: usize = 2;
    let header_timeout = Duration::from_secs(1);
    let mut limits = ServerLimits::default();
    limits.max_connections = BOUND;
    limits.header_read_timeout = header_timeout;
    limits.body_read_timeout = Duration::from_secs(60);
    let running = start(limits).await;

    // Both slots inside a request: headers in, the handler waiting for
    // the body (hyper's `100 Continue` says the handler has started
    // reading it).
    let mut busy = Vec::new();
    for index in 0..BOUND {
        let mut stream = TcpStream::connect(running.addr).await.unwrap();
        let lock = format!("busy{index}");
        let head = format!(
            "PUT /v1/locks/{lock}/keys/k HTTP/1.1\r\nhost: x\r\npalisade-sequencer: {}\r\ncontent-length: 100\r\nexpect: 100-continue\r\n\r\n",
            excl(&lock, 1)
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut continue_line = Vec::new();
        while !continue_line.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut byte))
                .await
                .expect("100 Continue in time")
                .unwrap();
            continue_line.push(byte[0]);
        }
        assert!(continue_line.starts_with(b"HTTP/1.1 100"));
        busy.push(stream);
    }

    // A third connection is neither served nor allowed to shed a request
    // in progress: it is closed, unanswered, after the header time limit.
    let sent = Instant::now();
    let answer = exchange(
        running.addr,
        b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".to_vec(),
    )
    .await;
    let waited = sent.elapsed();
    assert!(answer.is_empty(), "answered over the bound: {answer}");
    assert!(
        waited >= header_timeout - Duration::from_millis(100),
        "closed after {waited:?}"
    );
    // Both requests in progress are intact: they finish and are applied.
    for (index, mut stream) in busy.into_iter().enumerate() {
        stream.write_all(&[b'y'; 100]).await.unwrap();
        let mut answer = vec![0u8; 12];
        stream.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"HTTP/1.1 200", "request {index}");
    }
    running.shut_down().await;
}

/// `seven`, gzip-compressed (RFC 1952, mtime 0).
const GZIPPED_SEVEN: &[u8] = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\x2b\x4e\x2d\x4b\xcd\x03\x00\x6c\xad\x54\x96\x05\x00\x00\x00";

/// A `PUT` of `body` as one chunk, under the given transfer-encoding
/// header lines.
fn chunked_put(lock: &str, generation: u64, codings: &[&str], body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "PUT /v1/locks/{lock}/keys/k HTTP/1.1\r\nhost: x\r\nconnection: close\r\npalisade-sequencer: {}\r\n",
        excl(lock, generation)
    )
    .into_bytes();
    for coding in codings {
        request.extend_from_slice(format!("transfer-encoding: {coding}\r\n").as_bytes());
    }
    request.extend_from_slice(format!("\r\n{:x}\r\n", body.len()).as_bytes());
    request.extend_from_slice(body);
    request.extend_from_slice(b"\r\n0\r\n\r\n");
    request
}

/// Issue #25: `transfer-encoding: gzip, chunked` was accepted and the
/// still-compressed bytes stored as the value. A transfer coding the
/// server does not implement is answered 501 (RFC 9112 §6.1) and nothing
/// is stored; plain `chunked` still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_coding_other_than_chunked_is_501_and_stores_nothing() {
    let running = start(ServerLimits::default()).await;
    let http = reqwest::Client::new();
    for codings in [
        &["gzip, chunked"][..],
        &["gzip", "chunked"],
        &["chunked, chunked"],
        &["x-custom ,Chunked"],
    ] {
        let answer = exchange(running.addr, chunked_put("te", 7, codings, GZIPPED_SEVEN)).await;
        assert!(answer.starts_with("HTTP/1.1 501"), "{codings:?}: {answer}");
        assert!(
            answer.contains("\"code\":\"unsupported_transfer_coding\""),
            "{codings:?}: {answer}"
        );
        assert!(
            answer.contains("content-type: application/json"),
            "{answer}"
        );
        let stored = http
            .get(format!("{}/v1/locks/te/keys/k", running.base))
            .send()
            .await
            .unwrap();
        assert_eq!(stored.status(), 404, "{codings:?}: nothing stored");
        let marks: serde_json::Value = stored.json().await.unwrap();
        assert_eq!(
            marks["marks"]["exclusive"], 0,
            "{codings:?}: the mark never moved"
        );
    }
    let refused = metric(
        &http,
        &running.base,
        "palisade_requests_rejected_total{reason=\"unsupported_transfer_coding\"}",
    )
    .await;
    assert_eq!(refused, 4);

    // Plain chunked is HTTP/1.1's own framing: accepted.
    let answer = exchange(running.addr, chunked_put("te", 7, &["chunked"], b"seven")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let stored = http
        .get(format!("{}/v1/locks/te/keys/k", running.base))
        .send()
        .await
        .unwrap();
    assert_eq!(stored.text().await.unwrap(), "seven");
    running.shut_down().await;
}
