//! No password in any output (#25): the connection and error paths fed a
//! URL with a marker password (an unreachable port, a wrong user, a bad
//! database name, a password in a query parameter, a scheme no driver
//! speaks), against real servers. The marker must show in no error
//! (Display, Debug, sources) and no log line. Current-thread runtime, so
//! the pool's background work logs where the check captures.

use std::time::Duration;

use palisade_lock_sql::{SqlConfig, SqlLockClient};
use palisade_testkit::lock_suite::secrets::{MARKER, assert_hidden, assert_kept};
use palisade_testkit::process::ClosedPort;
use palisade_testkit::sql::SqlServer;

/// Tries each URL, which must fail to connect, keeping `MARKER` out of
/// every output.
async fn refused_without_showing_the_password(attempts: Vec<(&str, String)>) {
    for (what, url) in attempts {
        let config = SqlConfig::new(url).with_operation_timeout(Duration::from_secs(2));
        assert_hidden(what, MARKER, &config);
        assert_kept(what, MARKER, SqlLockClient::connect(config)).await;
    }
}

#[tokio::test]
async fn a_postgres_password_shows_in_no_error_or_log_line() {
    let server = SqlServer::postgres();
    let closed_port = ClosedPort::new();
    let (port, closed) = (server.port(), closed_port.port());
    refused_without_showing_the_password(vec![
        (
            "unreachable port",
            format!("postgres://postgres:{MARKER}@127.0.0.1:{closed}/postgres"),
        ),
        (
            "password in a query parameter, unreachable",
            format!("postgres://postgres@127.0.0.1:{closed}/postgres?password={MARKER}"),
        ),
        (
            "wrong user",
            format!("postgres://nobody:{MARKER}@127.0.0.1:{port}/postgres"),
        ),
        (
            "bad database name",
            format!("postgres://postgres:{MARKER}@127.0.0.1:{port}/no_such_db"),
        ),
        (
            "bad database name, password in a query parameter",
            format!(
                "postgres://postgres@127.0.0.1:{port}/no_such_db?sslmode=disable&password={MARKER}"
            ),
        ),
        (
            "bad port",
            format!("postgres://postgres:{MARKER}@127.0.0.1:notaport/postgres"),
        ),
        (
            "a scheme no driver speaks",
            format!("oracle://postgres:{MARKER}@127.0.0.1:{port}/x?password={MARKER}"),
        ),
    ])
    .await;
}

#[tokio::test]
async fn a_mariadb_password_shows_in_no_error_or_log_line() {
    let server = SqlServer::mariadb();
    let closed_port = ClosedPort::new();
    let (port, closed) = (server.port(), closed_port.port());
    refused_without_showing_the_password(vec![
        (
            "unreachable port",
            format!("mysql://root:{MARKER}@127.0.0.1:{closed}/test"),
        ),
        (
            "password in a query parameter, unreachable",
            format!("mysql://root@127.0.0.1:{closed}/test?password={MARKER}"),
        ),
        (
            "bad database name",
            format!("mysql://root:{MARKER}@127.0.0.1:{port}/no_such_db"),
        ),
        (
            "bad database name, password in a query parameter",
            format!("mysql://root@127.0.0.1:{port}/no_such_db?password={MARKER}"),
        ),
    ])
    .await;
}
