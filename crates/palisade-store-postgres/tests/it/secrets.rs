//! No password reaches any output (#25): the engine is opened, and used,
//! with a URL carrying marker passwords in every form the driver honours
//! (userinfo and the `password` query parameter), on every failure path
//! `palisade serve --store` can meet; neither the errors' `Display` and
//! `Debug`, nor any log line written meanwhile (every level, the
//! driver's own included) may hold a marker.

use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_store::{Engine, Op, ReadRequest, WriteRequest};
use palisade_store_postgres::{PostgresConfig, PostgresEngine};
use palisade_testkit::logs::Logs;
use palisade_testkit::sql::SqlServer;

const MARKER: &str = "MARKER";

/// Asserts that nothing shown of `error` holds the marker.
fn assert_clean(what: &str, error: &(impl std::fmt::Display + std::fmt::Debug)) {
    for shown in [error.to_string(), format!("{error:?}")] {
        assert!(!shown.contains(MARKER), "{what} shows a password: {shown}");
    }
}

#[tokio::test]
async fn no_password_in_any_error_or_log_line_of_the_engine() {
    let logs = Logs::capture();
    let postgres = SqlServer::postgres();
    let port = postgres.port();
    let closed = palisade_testkit::process::free_port();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = silent.local_addr().unwrap().port();
    let url = |port: u16, database: &str, extra: &str| {
        format!(
            "postgres://postgres:{MARKER}1@127.0.0.1:{port}/{database}?password={MARKER}2{extra}"
        )
    };
    let failing = [
        ("nothing listening", url(closed, "postgres", "")),
        ("no answer", url(silent, "postgres", "")),
        ("no such database", url(port, "no_such_db", "")),
        (
            "a parameter nobody honours",
            url(port, "postgres", "&passfile=MARKER3"),
        ),
        ("a bad setting", url(port, "postgres", "&lock_timeout=0s")),
        (
            "a URL that does not parse",
            format!("postgres://u:{MARKER}1@127.0.0.1:port/db?password={MARKER}2"),
        ),
        (
            "TLS the server does not offer",
            url(port, "postgres", "&sslmode=require"),
        ),
    ];
    for (what, url) in failing {
        let config = PostgresConfig::new(&url);
        assert_clean("the config", &format!("{config:?}"));
        match PostgresEngine::open(config).await {
            Ok(_) => panic!("{what}: opened"),
            Err(error) => assert_clean(what, &error),
        }
    }

    // Opened (trust authentication ignores the password), then the
    // database goes: the request paths' errors.
    let mut postgres = postgres;
    let engine = PostgresEngine::open(PostgresConfig::new(url(port, "postgres", "")))
        .await
        .unwrap();
    assert_clean("the engine", &format!("{engine:?}"));
    postgres.kill().unwrap();
    let sequencer = Sequencer::new(
        LockName::new("L").unwrap(),
        Mode::Exclusive,
        Generation::new(1).unwrap(),
    );
    let write = engine
        .write(WriteRequest::new(
            sequencer.clone(),
            vec![Op::put(&b"k"[..], &b"v"[..])],
            None,
        ))
        .await;
    assert_clean("a write", &write.expect_err("the database is gone"));
    let read = engine
        .read(ReadRequest::new(sequencer.lock(), b"k", Some(&sequencer)))
        .await;
    assert_clean("a fenced read", &read.expect_err("the database is gone"));
    assert_clean("health", &engine.health().await.expect_err("gone"));

    let logs = logs.text();
    assert!(
        !logs.is_empty(),
        "nothing was logged: the capture is broken"
    );
    assert!(
        !logs.contains(MARKER),
        "a log line shows a password:\n{logs}"
    );
}
