//! A server over real TCP (`run` on 127.0.0.1:0) and raw-socket helpers,
//! for the test binaries that talk HTTP/1.1 by hand.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::time::Duration;

use palisade_server::{AppState, ServerLimits, run};
use palisade_store::{Store, StoreConfig};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

pub(crate) struct Running {
    pub(crate) addr: std::net::SocketAddr,
    pub(crate) base: String,
    stop: oneshot::Sender<()>,
    server: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

pub(crate) async fn start(limits: ServerLimits) -> Running {
    start_with(|state| state.with_limits(limits)).await
}

/// A server whose state `configure` finishes (tokens, limits...).
pub(crate) async fn start_with(configure: impl FnOnce(AppState) -> AppState) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let state = configure(AppState::new(store));
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
    pub(crate) async fn shut_down(self) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(30), self.server)
            .await
            .expect("the server shuts down")
            .unwrap();
    }
}

pub(crate) fn excl(lock: &str, generation: u64) -> String {
    format!("v1;lock={lock};mode=exclusive;gen={generation}")
}

/// `PUT` of `v` to key `k` of `lock` with `token` and an exclusive
/// sequencer of `generation`; the answer's status.
pub(crate) async fn put(
    http: &reqwest::Client,
    base: &str,
    lock: &str,
    generation: u64,
    token: &str,
) -> u16 {
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

pub(crate) async fn metric(http: &reqwest::Client, base: &str, series: &str) -> u64 {
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
pub(crate) async fn read_until_closed(
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

/// Sends `request` on a fresh connection and returns what comes back
/// before the server closes.
pub(crate) async fn exchange(addr: std::net::SocketAddr, request: Vec<u8>) -> String {
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

/// An answer read off the wire: its head, and its body (by
/// `content-length`).
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    pub(crate) fn says_close(&self) -> bool {
        self.header("connection")
            .is_some_and(|value| value.eq_ignore_ascii_case("close"))
    }
}

/// Reads one answer from `stream`, leaving the connection open.
pub(crate) async fn read_answer(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> Answer {
    let mut received = Vec::new();
    let head_end = loop {
        if let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let mut buffer = [0u8; 4096];
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
            .await
            .expect("an answer in time")
            .unwrap();
        assert!(
            read > 0,
            "closed before a whole answer: {:?}",
            String::from_utf8_lossy(&received)
        );
        received.extend_from_slice(&buffer[..read]);
    };
    let head = String::from_utf8(received[..head_end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap()[9..12].parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|line| {
            let (name, value) = line.split_once(':').unwrap();
            (name.trim().to_owned(), value.trim().to_owned())
        })
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, value)| value.parse().unwrap());
    let mut body = received[head_end + 4..].to_vec();
    while body.len() < length {
        let mut buffer = vec![0u8; length - body.len()];
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
            .await
            .expect("the body in time")
            .unwrap();
        assert!(read > 0, "closed mid-body");
        body.extend_from_slice(&buffer[..read]);
    }
    Answer {
        status,
        headers,
        body,
    }
}

/// A keep-alive connection written by hand: exactly one connection,
/// unlike a pooling client that may open another at any moment.
pub(crate) struct KeepAlive {
    stream: TcpStream,
}

impl KeepAlive {
    pub(crate) async fn open(addr: std::net::SocketAddr) -> KeepAlive {
        KeepAlive {
            stream: TcpStream::connect(addr).await.unwrap(),
        }
    }

    /// Sends a request (`head` without its final blank line) and reads
    /// the answer.
    pub(crate) async fn send(&mut self, head: &str, body: &[u8]) -> Answer {
        let request = format!(
            "{head}\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        self.stream.write_all(request.as_bytes()).await.unwrap();
        self.stream.write_all(body).await.unwrap();
        read_answer(&mut self.stream).await
    }

    /// The value of the metric series `series` (name and labels).
    pub(crate) async fn metric(&mut self, series: &str) -> u64 {
        let answer = self.send("GET /metrics HTTP/1.1", b"").await;
        let text = String::from_utf8(answer.body).unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no series {series}"))
            .parse()
            .unwrap()
    }
}
