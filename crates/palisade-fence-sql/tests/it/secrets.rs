//! No password reaches any output of the fence (#25): the application's
//! pool is made from a URL carrying marker passwords (userinfo and the
//! `password` query parameter), and the fence's failure paths (nothing
//! listening, a database that does not exist) are taken on PostgreSQL and
//! MariaDB; neither the errors' `Display` and `Debug` nor any log line
//! written meanwhile (every level, the driver's own included) may hold a
//! marker.

use std::time::Duration;

use palisade_fence_sql::FenceDatabase;
use palisade_testkit::logs::Logs;
use palisade_testkit::sql::SqlServer;
use sqlx::pool::PoolOptions;
use sqlx::{MySql, Postgres};

use crate::common::excl;

const MARKER: &str = "MARKER";

/// Runs the fence on a lazy pool for each URL, expecting a failure whose
/// every rendering, and every log line meanwhile, is clean.
async fn fence_fails_cleanly<D: FenceDatabase>(urls: &[String], logs: &Logs) {
    for url in urls {
        let pool = PoolOptions::<D>::new()
            .acquire_timeout(Duration::from_secs(2))
            .connect_lazy(url)
            .expect("a URL the driver parses");
        let outcome = palisade_fence_sql::begin_fenced(&pool, &excl("secret", 1)).await;
        let error = match outcome {
            Ok(_) => panic!(
                "fenced through `{}`",
                palisade_core::redact::redact_url(url)
            ),
            Err(error) => error,
        };
        for shown in [error.to_string(), format!("{error:?}")] {
            assert!(
                !shown.contains(MARKER),
                "an error shows a password: {shown}"
            );
        }
    }
    let logs = logs.text();
    assert!(
        !logs.contains(MARKER),
        "a log line shows a password:\n{logs}"
    );
}

#[tokio::test]
async fn no_password_in_any_error_or_log_line_of_the_fence() {
    let logs = Logs::capture();
    let closed_port = palisade_testkit::process::ClosedPort::new();
    let closed = closed_port.port();

    let postgres = SqlServer::postgres();
    let urls = [
        format!("postgres://postgres:{MARKER}1@127.0.0.1:{closed}/postgres?password={MARKER}2"),
        format!(
            "postgres://postgres:{MARKER}1@127.0.0.1:{}/no_such_db?password={MARKER}2",
            postgres.port()
        ),
    ];
    fence_fails_cleanly::<Postgres>(&urls, &logs).await;

    let mariadb = SqlServer::mariadb();
    let urls = [
        format!("mysql://root:{MARKER}1@127.0.0.1:{closed}/test?password={MARKER}2"),
        format!(
            "mysql://root:{MARKER}1@127.0.0.1:{}/no_such_db?password={MARKER}2",
            mariadb.port()
        ),
    ];
    fence_fails_cleanly::<MySql>(&urls, &logs).await;
    assert!(
        !logs.text().is_empty(),
        "nothing was logged: the capture is broken"
    );
}
