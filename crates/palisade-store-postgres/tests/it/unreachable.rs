//! PostgreSQL gone: a write and `/healthz` answer 503 within 2 s, saying
//! whether the database refused the connection or gave no answer (#25).
//! Before, the pool waited its 10 s acquire timeout and said only "pool
//! timed out".

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use palisade_core::Sequencer;
use palisade_server::{AppState, app};
use palisade_store::{Engine, ReadRequest, Store, StoreConfig};
use palisade_store_postgres::{OpenError, PostgresConfig, PostgresEngine, Unreachable};
use palisade_testkit::sql::SqlServer;
use tower::ServiceExt as _;

/// What #25 asks of a failure answer.
const ANSWER_BOUND: Duration = Duration::from_secs(2);

/// A router over the engine, and its answers' status, message and time.
struct Server {
    router: axum::Router,
}

impl Server {
    fn over(engine: PostgresEngine) -> Server {
        let store = Store::with_engine(Arc::new(engine), StoreConfig::default());
        Server {
            router: app(AppState::new(store)),
        }
    }

    async fn send(&self, request: Request<Body>) -> (StatusCode, String, Duration) {
        let started = Instant::now();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            String::from_utf8_lossy(&body).into_owned(),
            started.elapsed(),
        )
    }

    async fn put(&self, generation: u64) -> (StatusCode, String, Duration) {
        let sequencer: Sequencer = format!("v1;lock=L;mode=exclusive;gen={generation}")
            .parse()
            .unwrap();
        self.send(
            Request::put("/v1/locks/L/keys/k")
                .header(Sequencer::HTTP_HEADER, sequencer.to_string())
                .body(Body::from("v"))
                .unwrap(),
        )
        .await
    }

    async fn health(&self) -> (StatusCode, String, Duration) {
        self.send(Request::get("/healthz").body(Body::empty()).unwrap())
            .await
    }

    /// Both a write and `/healthz` are 503 within the bound, with `words`
    /// in the message.
    async fn assert_unavailable_saying(&self, words: &str) {
        for (what, (status, body, took)) in [
            ("a write", self.put(2).await),
            ("/healthz", self.health().await),
        ] {
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{what}: {body}");
            assert!(body.contains(words), "{what}: `{words}` not in {body}");
            assert!(
                !body.contains("pool timed out"),
                "{what} says only that the pool timed out: {body}"
            );
            assert!(
                took < ANSWER_BOUND,
                "{what} took {took:?} to answer 503 (bound {ANSWER_BOUND:?})"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_postgres_gone_a_write_and_healthz_answer_503_within_2_s_saying_why() {
    let mut postgres = SqlServer::postgres();
    let port = postgres.port();
    let engine = PostgresEngine::open(PostgresConfig::new(postgres.url()))
        .await
        .unwrap();
    let server = Server::over(engine);
    let (status, body, _) = server.put(1).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Killed: nothing listens on the port.
    postgres.kill().unwrap();
    server
        .assert_unavailable_saying("refused the connection")
        .await;

    // Something listens and never answers (a stopped server, a black hole).
    let _silent = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    server.assert_unavailable_saying("no answer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_on_a_closed_or_silent_port_fails_within_2_s_saying_why() {
    let port = palisade_testkit::process::free_port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let started = Instant::now();
    match PostgresEngine::open(PostgresConfig::new(&url)).await {
        Err(OpenError::Unavailable(Unreachable::Refused { location })) => {
            assert_eq!(location, format!("127.0.0.1:{port}/postgres"));
        }
        other => panic!("expected a refused connection, got {other:?}"),
    }
    assert!(started.elapsed() < ANSWER_BOUND, "{:?}", started.elapsed());

    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let started = Instant::now();
    match PostgresEngine::open(PostgresConfig::new(&url)).await {
        Err(error @ OpenError::Unavailable(Unreachable::NoAnswer { .. })) => {
            assert!(
                error
                    .to_string()
                    .starts_with("no answer from PostgreSQL at 127.0.0.1:")
            );
        }
        other => panic!("expected no answer, got {other:?}"),
    }
    assert!(started.elapsed() < ANSWER_BOUND, "{:?}", started.elapsed());
}

/// A busy pool is not a dead database, and a lock's row held elsewhere
/// costs a request at most `lock_timeout`: both answers say which.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_pool_and_a_row_held_elsewhere_are_told_apart() {
    let postgres = Arc::new(SqlServer::postgres());
    let mut config = PostgresConfig::new(postgres.url()).with_max_connections(1);
    config.lock_timeout = Duration::from_secs(2);
    config.acquire_timeout = Duration::from_millis(300);
    let engine = PostgresEngine::open(config).await.unwrap();
    let server = Server::over(engine.clone());
    assert_eq!(server.put(1).await.0, StatusCode::OK);

    // Another session holds lock L's row for a while.
    let holder = {
        let postgres = Arc::clone(&postgres);
        tokio::task::spawn_blocking(move || {
            postgres.query(
                "SELECT 1 FROM palisade_store_marks WHERE lock_name = 'L' FOR UPDATE; \
                 SELECT pg_sleep(6)",
            )
        })
    };
    wait_until(&postgres, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(6)%' AND wait_event = 'PgSleep'").await;

    // The engine's one connection waits for that row...
    let write = {
        let server_router = server.router.clone();
        tokio::spawn(async move {
            Server {
                router: server_router,
            }
            .put(2)
            .await
        })
    };
    wait_until(&postgres, "SELECT count(*) FROM pg_locks WHERE NOT granted").await;
    // ... so another request finds the pool busy, and says so.
    let (status, body, took) = server.health().await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("all 1 connections"), "{body}");
    assert!(took < ANSWER_BOUND, "{took:?}");
    // The waiting write gives up at lock_timeout, nothing applied.
    let (status, body, took) = write.await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("past lock_timeout"), "{body}");
    assert!(took < Duration::from_secs(2) + ANSWER_BOUND, "{took:?}");
    holder.await.unwrap().unwrap();
    let read = engine
        .read(ReadRequest::new(
            &palisade_core::LockName::new("L").unwrap(),
            b"k",
            None,
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.marks.exclusive, 1, "the refused write changed nothing");
}

/// Polls `sql` (a count) until it is positive: there is no event to wait
/// on from outside PostgreSQL. Bounded generously for a loaded machine.
async fn wait_until(postgres: &SqlServer, sql: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while postgres.query(sql).unwrap() == "0" {
        assert!(Instant::now() < deadline, "never true: {sql}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
