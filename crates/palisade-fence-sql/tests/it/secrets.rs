//! No password reaches any output of the fence (#25): the application's
//! pool is made from a URL carrying marker passwords (userinfo and the
//! `password` query parameter), and the fence's failure paths (nothing
//! listening, a database that does not exist) are taken on PostgreSQL and
//! MariaDB; neither the errors' `Display` and `Debug` nor any log line
//! written meanwhile (every level, the driver's own included) may hold a
//! marker.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use palisade_fence_sql::FenceDatabase;
use palisade_testkit::sql::SqlServer;
use sqlx::pool::PoolOptions;
use sqlx::{MySql, Postgres};

use crate::common::excl;

const MARKER: &str = "MARKER";

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs the fence on a lazy pool for each URL, expecting a failure whose
/// every rendering, and every log line meanwhile, is clean.
async fn fence_fails_cleanly<D: FenceDatabase>(urls: &[String], lines: &Mutex<Vec<u8>>) {
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
    let logs = String::from_utf8_lossy(&lines.lock().unwrap()).into_owned();
    assert!(
        !logs.contains(MARKER),
        "a log line shows a password:\n{logs}"
    );
}

#[tokio::test]
async fn no_password_in_any_error_or_log_line_of_the_fence() {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&lines);
    let _logs = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Sink(Arc::clone(&sink)))
            .finish(),
    );
    let closed = palisade_testkit::process::free_port();

    let postgres = SqlServer::postgres();
    let urls = [
        format!("postgres://postgres:{MARKER}1@127.0.0.1:{closed}/postgres?password={MARKER}2"),
        format!(
            "postgres://postgres:{MARKER}1@127.0.0.1:{}/no_such_db?password={MARKER}2",
            postgres.port()
        ),
    ];
    fence_fails_cleanly::<Postgres>(&urls, &lines).await;

    let mariadb = SqlServer::mariadb();
    let urls = [
        format!("mysql://root:{MARKER}1@127.0.0.1:{closed}/test?password={MARKER}2"),
        format!(
            "mysql://root:{MARKER}1@127.0.0.1:{}/no_such_db?password={MARKER}2",
            mariadb.port()
        ),
    ];
    fence_fails_cleanly::<MySql>(&urls, &lines).await;
    assert!(
        !lines.lock().unwrap().is_empty(),
        "nothing was logged: the capture is broken"
    );
}
