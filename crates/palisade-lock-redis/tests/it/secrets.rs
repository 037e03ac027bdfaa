//! No password in any output (#25): every connection and error path fed a
//! URL with a marker password, against a real Redis that requires one and a
//! port nobody listens on. The marker must show in no error (Display,
//! Debug, sources) and no log line. Run on a current-thread runtime, so the
//! clients' background tasks log where the check captures.

use std::time::Duration;

use palisade_core::{Lock, LockName, Mode, SessionOptions};
use palisade_lock_redis::{RedisConfig, RedisLockClient, RedlockClient, RedlockConfig};
use palisade_testkit::lock_suite::secrets::{MARKER, assert_hidden, assert_kept};
use palisade_testkit::process::ClosedPort;
use palisade_testkit::redis::{RedisOptions, RedisServer};

fn config(url: String) -> RedisConfig {
    RedisConfig::new(url)
        .with_connect_timeout(Duration::from_millis(500))
        .with_response_timeout(Duration::from_millis(500))
}

#[tokio::test]
async fn a_redis_password_shows_in_no_error_or_log_line() {
    let server = RedisServer::spawn(RedisOptions::default().with_password("the-right-one"));
    let port = server.port().expect("a spawned server");
    let closed_port = ClosedPort::new();
    let closed = closed_port.port();
    let attempts = [
        (
            "unreachable port",
            format!("redis://:{MARKER}@127.0.0.1:{closed}"),
        ),
        (
            "wrong password",
            format!("redis://:{MARKER}@127.0.0.1:{port}"),
        ),
        (
            "wrong user",
            format!("redis://nobody:{MARKER}@127.0.0.1:{port}"),
        ),
        (
            "bad database number",
            format!("redis://:{MARKER}@127.0.0.1:{port}/99999"),
        ),
        (
            "password in a query parameter",
            format!("redis://127.0.0.1:{port}/?password={MARKER}&db=0"),
        ),
        ("bad port", format!("redis://:{MARKER}@127.0.0.1:notaport")),
        (
            "TLS without verification, unreachable",
            format!("rediss://:{MARKER}@127.0.0.1:{closed}/#insecure"),
        ),
    ];
    for (what, url) in attempts {
        assert_hidden(what, MARKER, &config(url.clone()));
        let error = assert_kept(what, MARKER, RedisLockClient::connect(config(url))).await;
        drop(error);
    }
    // A misconfiguration echoes the URL it refuses.
    assert_kept(
        "invalid configuration",
        MARKER,
        RedisLockClient::connect(
            config(format!("redis://:{MARKER}@127.0.0.1:{port}")).with_key_prefix("bad\nprefix"),
        ),
    )
    .await;
}

/// A client that connected with the marker as its password, whose server
/// then dies: the errors of lock operations keep it out too.
#[tokio::test]
async fn a_redis_password_shows_in_no_error_of_a_lost_server() {
    let mut server = RedisServer::spawn(RedisOptions::default().with_password(MARKER));
    assert!(server.url().contains(MARKER));
    let client = RedisLockClient::connect(config(server.url()))
        .await
        .expect("the right password connects");
    assert_hidden("a connected client", MARKER, &client);
    let session = client
        .session(SessionOptions::default())
        .expect("valid options");
    let name = LockName::new("secrets/lost-server").unwrap();
    server.kill().expect("kill the test's own redis-server");
    assert_kept(
        "lock service gone",
        MARKER,
        session.acquire_timeout(&name, Mode::Exclusive, Duration::from_secs(3)),
    )
    .await;
}

#[tokio::test]
async fn a_redlock_password_shows_in_no_error_or_log_line() {
    let closed: Vec<ClosedPort> = (0..3).map(|_| ClosedPort::new()).collect();
    let urls: Vec<String> = closed
        .iter()
        .map(|port| {
            format!(
                "redis://user:{MARKER}@127.0.0.1:{}/?password={MARKER}",
                port.port()
            )
        })
        .collect();
    let config = RedlockConfig::new(urls.clone());
    assert_hidden("a Redlock configuration", MARKER, &config);
    let error = assert_kept(
        "every master unreachable",
        MARKER,
        RedlockClient::connect(config),
    )
    .await;
    drop(error);
    assert_kept(
        "a bad master URL",
        MARKER,
        RedlockClient::connect(RedlockConfig::new([
            format!("redis://:{MARKER}@127.0.0.1:notaport"),
            urls[0].clone(),
            urls[1].clone(),
        ])),
    )
    .await;
}
