//! `--store postgres://...`: the server over the PostgreSQL engine, against
//! a real PostgreSQL; two servers over one database share the fence.

use palisade_server::ServerError;
use palisade_testkit::sql::SqlServer;

use crate::serve::{parse_store_flags, two_servers_share_the_fence};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_over_one_postgres_share_the_fence() {
    let postgres = SqlServer::postgres();
    two_servers_share_the_fence(&postgres.url(), "postgres", "synchronous_commit on").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_postgres_is_a_clear_error_without_the_password() {
    let port = palisade_testkit::process::free_port();
    let store = format!("postgres://app:s3cret@127.0.0.1:{port}/palisade?connect_timeout=2");
    let config = parse_store_flags(&["--store", &store]).unwrap();
    match config.open_state(None) {
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

/// `--store-connections` sizes the engine's pool: 32 concurrent requests
/// share 2 sessions. `--store-statement-timeout` reaches the engine's
/// settings: 1s is refused there, being shorter than its 2s lock_timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_and_statement_timeout_flags_reach_the_engine() {
    let postgres = SqlServer::postgres();
    let url = postgres.url();
    let config = parse_store_flags(&["--store", &url, "--store-connections", "2"]).unwrap();
    let state = config.open_state(None).unwrap();
    let reads = (0..32).map(|i| {
        let lock = palisade_core::LockName::new(format!("pool/{i}")).unwrap();
        state.store().submit_marks(&lock).unwrap()
    });
    for marks in futures::future::join_all(reads).await {
        marks.unwrap();
    }
    let sessions: usize = postgres
        .query(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
        )
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&sessions), "{sessions} sessions");

    let config = parse_store_flags(&["--store", &url, "--store-statement-timeout", "1s"]).unwrap();
    let Err(error) = config.open_state(None) else {
        panic!("a statement timeout below the lock timeout was taken");
    };
    let message = error.to_string();
    assert!(message.contains("statement_timeout (1 s)"), "{message}");
}
