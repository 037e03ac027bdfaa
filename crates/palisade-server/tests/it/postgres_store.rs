//! `--store postgres://...`: the server over the PostgreSQL engine, against
//! a real PostgreSQL; two servers over one database share the fence.

use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_server::{ServerConfig, ServerError, run};
use palisade_testkit::sql::SqlServer;
use tokio::sync::oneshot;

#[derive(clap::Parser)]
struct StoreCli {
    #[command(flatten)]
    server: ServerConfig,
}

fn config(store: &str) -> ServerConfig {
    use clap::Parser;
    StoreCli::try_parse_from([
        "palisade-server",
        "--store",
        store,
        "--listen",
        "127.0.0.1:0",
    ])
    .unwrap()
    .server
}

/// A server over `store`, stopped when the sender is dropped or fired.
async fn start(store: &str) -> (String, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let config = config(store);
    let state = config.open_state(None).unwrap();
    let listener = config.bind().await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        run(listener, state, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    (base, stop, task)
}

async fn put(http: &reqwest::Client, base: &str, generation: u64, value: &str) -> u16 {
    http.put(format!("{base}/v1/locks/orders%2F7/keys/stock"))
        .header(
            Sequencer::HTTP_HEADER,
            Sequencer::new(
                LockName::new("orders/7").unwrap(),
                Mode::Exclusive,
                Generation::new(generation).unwrap(),
            )
            .to_string(),
        )
        .body(value.to_owned())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_over_one_postgres_share_the_fence() {
    let postgres = SqlServer::postgres();
    let (first, stop_first, first_task) = start(&postgres.url()).await;
    let (second, stop_second, second_task) = start(&postgres.url()).await;
    let http = reqwest::Client::new();

    let health: serde_json::Value = http
        .get(format!("{first}/healthz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["engine"]["name"], "postgres");
    assert!(
        health["engine"]["durability"]
            .as_str()
            .unwrap()
            .contains("synchronous_commit on"),
        "{health}"
    );

    // Generation 5 writes through the first server; the holder of 4, late,
    // tries the second: refused, because the mark lives in the database.
    assert_eq!(put(&http, &first, 5, "five").await, 200);
    assert_eq!(put(&http, &second, 4, "four, late").await, 409);
    let read = http
        .get(format!("{second}/v1/locks/orders%2F7/keys/stock"))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    assert_eq!(read.text().await.unwrap(), "five");

    stop_first.send(()).unwrap();
    stop_second.send(()).unwrap();
    first_task.await.unwrap();
    second_task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_postgres_is_a_clear_error_without_the_password() {
    let port = palisade_testkit::process::free_port();
    let store = format!("postgres://app:s3cret@127.0.0.1:{port}/palisade?connect_timeout=2");
    match config(&store).open_state(None) {
        Err(error @ ServerError::OpenEngine { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains("cannot open --store postgres://app:***@"),
                "{message}"
            );
            assert!(!message.contains("s3cret"), "{message}");
        }
        Err(other) => panic!("expected OpenEngine, got {other}"),
        Ok(_) => panic!("nothing listens on port {port}"),
    }
}
