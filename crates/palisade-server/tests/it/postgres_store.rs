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
