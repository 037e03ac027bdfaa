//! Hostile clients over real TCP (`run` on 127.0.0.1:0): slowloris
//! connections, a trickling body, huge headers, more connections than the
//! bound. Each test asserts a bound on what an honest client sees, never a
//! speed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use palisade_server::{AppState, ServerLimits, run};
use palisade_store::{Store, StoreConfig};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, mpsc, oneshot};

struct Running {
    addr: std::net::SocketAddr,
    base: String,
    stop: oneshot::Sender<()>,
    server: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

async fn start(limits: ServerLimits) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let state = AppState::new(store).with_limits(limits);
    let server = tokio::spawn(async move {
        run(listener, state, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    Running {
        addr,
        base: format!("http://{addr}"),
        stop,
        server,
        _dir: dir,
    }
}

impl Running {
    async fn shut_down(self) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(30), self.server)
            .await
            .expect("the server shuts down")
            .unwrap();
    }
}

fn excl(lock: &str, generation: u64) -> String {
    format!("v1;lock={lock};mode=exclusive;gen={generation}")
}

async fn metric(http: &reqwest::Client, base: &str, series: &str) -> u64 {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no series {series}"))
        .parse()
        .unwrap()
}

/// Reads until the peer closes (or `limit` passes); what arrived.
async fn read_until_closed(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    limit: Duration,
) -> Vec<u8> {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return received,
            Ok(Ok(n)) => received.extend_from_slice(&buffer[..n]),
            Err(_elapsed) => panic!(
                "the server did not close within {limit:?}; got {:?}",
                String::from_utf8_lossy(&received)
            ),
        }
    }
}

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
        let Ok(mut stream) = TcpStream::connect(addr).await else {
            continue;
        };
        let connected = Instant::now();
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
            lifetimes.lock().await.push(connected.elapsed());
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

/// Sends `request` on a fresh connection and returns what comes back
/// before the server closes.
async fn exchange(addr: std::net::SocketAddr, request: Vec<u8>) -> String {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    // The server may answer and close before it has read everything.
    let sender = tokio::spawn(async move {
        let _ = writer.write_all(&request).await;
        writer
    });
    let answer = read_until_closed(&mut reader, Duration::from_secs(10)).await;
    drop(sender.await);
    String::from_utf8_lossy(&answer).into_owned()
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

    let http = reqwest::Client::new();
    let too_large = metric(
        &http,
        &running.base,
        "palisade_connections_closed_total{reason=\"header_too_large\"}",
    )
    .await;
    assert_eq!(too_large, 2);
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
async fn over_the_connection_bound_new_connections_wait_and_open_ones_keep_working() {
    const BOUND: usize = 4;
    // Long enough that the slow connections outlive every check below on a
    // loaded machine (a flushed write can take a while there).
    let header_timeout = Duration::from_secs(10);
    let mut limits = ServerLimits::default();
    limits.max_connections = BOUND;
    limits.header_read_timeout = header_timeout;
    let running = start(limits).await;

    // The honest client's keep-alive connection: 1 of 4.
    let http = reqwest::Client::new();
    let health = http
        .get(format!("{}/healthz", running.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    // Three connections that never finish their headers fill the rest.
    let mut slow = Vec::new();
    for _ in 1..BOUND {
        let mut stream = TcpStream::connect(running.addr).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nx-slow: ")
            .await
            .unwrap();
        slow.push(stream);
    }
    let open = "palisade_open_connections";
    let waited = Instant::now();
    while metric(&http, &running.base, open).await < BOUND as u64 {
        assert!(
            waited.elapsed() < Duration::from_secs(2),
            "the slow connections were not accepted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A fifth connection is not served while the bound is reached...
    let mut fifth = TcpStream::connect(running.addr).await.unwrap();
    fifth
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let sent = Instant::now();
    let mut first_byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), fifth.read(&mut first_byte)).await;
    assert!(
        early.is_err(),
        "the fifth connection was served over the bound"
    );
    // ...while the open connection keeps working and the bound holds.
    let write = http
        .put(format!("{}/v1/locks/bound/keys/k", running.base))
        .header("palisade-sequencer", excl("bound", 1))
        .body("v")
        .send()
        .await
        .unwrap();
    assert_eq!(write.status(), 200);
    assert_eq!(metric(&http, &running.base, open).await, BOUND as u64);

    // Once the header time limit closes the slow ones, it is served.
    let answer = read_until_closed(&mut fifth, header_timeout + Duration::from_secs(10)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        sent.elapsed() < header_timeout + Duration::from_secs(5),
        "served after {:?}",
        sent.elapsed()
    );
    for mut stream in slow {
        let rest = read_until_closed(&mut stream, Duration::from_secs(10)).await;
        assert!(rest.is_empty(), "a slow connection got an answer");
    }
    running.shut_down().await;
}
