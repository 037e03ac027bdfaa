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
