//! Resending a request whose connection broke before its answer: a real
//! server behind the testkit's fault proxy, which holds the server's
//! answer and then resets the connection, so the request has been applied
//! and the client sees only a broken connection.

use std::time::Duration;

use palisade_client::{Client, ClientError};
use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_server::{AppState, run};
use palisade_store::{Store, StoreConfig};
use palisade_testkit::proxy::{Direction, FaultProxy};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

struct Server {
    /// The server itself, not through the proxy.
    upstream: std::net::SocketAddr,
    proxy: FaultProxy,
    client: Client,
    _stop: oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

/// A server, the proxy in front of it, and a client of the proxy.
async fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(run(listener, AppState::new(store), async {
        let _ = stopped.await;
    }));
    let proxy = FaultProxy::start("server", upstream).unwrap();
    let client = Client::with_timeout(&proxy.url(), Duration::from_secs(30)).unwrap();
    Server {
        upstream,
        proxy,
        client,
        _stop: stop,
        _dir: dir,
    }
}

impl Server {
    /// How many `op` requests the server has answered with 2xx.
    async fn accepted(&self, op: &str) -> u64 {
        let text = reqwest::get(format!("http://{}/metrics", self.upstream))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let series = format!("palisade_requests_accepted_total{{op=\"{op}\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&series))
            .unwrap_or_else(|| panic!("no series for {op}"))
            .parse()
            .unwrap()
    }

    /// Runs a request while the proxy holds the answer; once the answer
    /// is held (the server has handled the request), resets the
    /// connection and lets traffic through again. Returns what the
    /// request returned and how many times the server handled it (its
    /// `op` requests answered with 2xx meanwhile).
    async fn break_after_answer<T, F>(&self, op: &str, request: impl Fn() -> F) -> (T, u64)
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        loop {
            // A keep-alive connection first, so that the request goes out
            // on it at once and its answer is what the proxy holds.
            self.client.health().await.unwrap();
            let handled_before = self.accepted(op).await;
            let before = self.proxy.stats();
            self.proxy.drop_one_way(Direction::ServerToClient);
            let sent = tokio::spawn(request());
            assert!(
                self.proxy
                    .wait_for_held(before.held_arrivals + 1, Duration::from_secs(30))
                    .await,
                "the request never reached the proxy"
            );
            if self.proxy.stats().connections_accepted != before.connections_accepted {
                // The keep-alive connection was not back in the client's
                // pool yet: the request is waiting on a new connection,
                // not yet at the server. Let it through and start over.
                self.proxy.pass();
                let _ = sent.await;
                continue;
            }
            // Every connection open now is reset, not only the request's:
            // the client may hold a second one in its pool (from a round
            // that started over), and its resend must not meet that one
            // still waiting for its reset.
            let open = self.proxy.stats().connections_open;
            self.proxy.reset_all();
            // Only once every reset is done may traffic flow again: the
            // held answer must not get through first, and the resend must
            // find no connection about to be reset. (The proxy counts
            // resets but has no event for them.)
            let reset = tokio::time::Instant::now();
            while self.proxy.stats().connections_reset < before.connections_reset + open {
                assert!(reset.elapsed() < Duration::from_secs(10), "no reset");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            self.proxy.pass();
            let outcome = tokio::time::timeout(Duration::from_secs(60), sent)
                .await
                .expect("the request ends")
                .unwrap();
            let handled = self.accepted(op).await - handled_before;
            return (outcome, handled);
        }
    }
}

fn excl(name: &str, generation: u64) -> Sequencer {
    Sequencer::new(
        LockName::new(name).unwrap(),
        Mode::Exclusive,
        Generation::new(generation).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_with_an_idempotency_key_is_sent_again_and_replayed() {
    let server = start().await;
    let (outcome, handled) = server
        .break_after_answer("put", || {
            let client = server.client.clone();
            async move {
                client
                    .put(&excl("retry", 1), b"k", "v1", Some("put-k-1"))
                    .await
            }
        })
        .await;
    let written = outcome
        .expect("sent again after the broken connection")
        .expect("accepted");
    assert!(
        written.replayed,
        "the second copy was answered from the first"
    );
    assert_eq!(handled, 2, "the request and its resend");
    let read = server
        .client
        .get(&LockName::new("retry").unwrap(), b"k", None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.value.as_deref(), Some(&b"v1"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_is_sent_again() {
    let server = start().await;
    server
        .client
        .put(&excl("retry", 1), b"k", "v1", None)
        .await
        .unwrap()
        .unwrap();
    let (outcome, handled) = server
        .break_after_answer("get", || {
            let client = server.client.clone();
            async move {
                client
                    .get(&LockName::new("retry").unwrap(), b"k", None)
                    .await
            }
        })
        .await;
    let read = outcome.expect("sent again").expect("read");
    assert_eq!(read.value.as_deref(), Some(&b"v1"[..]));
    assert_eq!(handled, 2, "the read and its resend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_without_an_idempotency_key_is_never_sent_twice() {
    let server = start().await;
    let (outcome, handled) = server
        .break_after_answer("put", || {
            let client = server.client.clone();
            async move { client.put(&excl("retry", 1), b"k", "v1", None).await }
        })
        .await;
    let error = outcome.expect_err("a write that may have been applied is not resent");
    assert!(matches!(error, ClientError::Transport { .. }), "{error:?}");
    assert_eq!(handled, 1, "handled once: never resent");
    // It was applied, once: the caller must find out, not the client.
    let read = server
        .client
        .get(&LockName::new("retry").unwrap(), b"k", None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.value.as_deref(), Some(&b"v1"[..]));
}
