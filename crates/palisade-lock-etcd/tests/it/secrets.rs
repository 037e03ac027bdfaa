//! No password in any output (#25): an etcd with authentication on, and
//! every connection and error path fed the marker password (a wrong
//! password and user, an unreachable port, credentials in the endpoint, a
//! server lost under a connected session). The marker must show in no
//! error (Display, Debug, sources) and no log line. Current-thread runtime,
//! so the client's background tasks log where the check captures.

use std::time::Duration;

use palisade_core::{Lock, Mode};
use palisade_lock_etcd::{EtcdConfig, EtcdLockClient};
use palisade_testkit::etcd::EtcdServer;
use palisade_testkit::lock_suite::secrets::{MARKER, assert_hidden, assert_kept};
use palisade_testkit::process::ClosedPort;

use crate::fixtures::*;

#[tokio::test]
async fn an_etcd_password_shows_in_no_error_or_log_line() {
    let mut etcd = EtcdServer::spawn();
    let prefix = unique_prefix("secrets");
    let mut admin = raw(&etcd.endpoints()).await;
    admin.user_add("root", MARKER, None).await.unwrap();
    admin.user_grant_role("root", "root").await.unwrap();
    admin.auth_enable().await.unwrap();
    let endpoint = etcd.endpoint().to_owned();
    let closed_port = ClosedPort::new();
    let closed = format!("127.0.0.1:{}", closed_port.port());

    let attempts = [
        (
            "wrong password",
            vec![endpoint.clone()],
            "root",
            format!("{MARKER}-wrong"),
        ),
        (
            "wrong user",
            vec![endpoint.clone()],
            "nobody",
            MARKER.to_owned(),
        ),
        ("unreachable port", vec![closed], "root", MARKER.to_owned()),
    ];
    for (what, endpoints, user, password) in attempts {
        let config = config_with(&endpoints, &prefix, |connection| {
            connection
                .with_connect_timeout(Duration::from_secs(1))
                .with_user(user, password)
        });
        assert_hidden(what, MARKER, &config);
        assert_kept(what, MARKER, EtcdLockClient::connect(config)).await;
    }
    assert_kept(
        "credentials in the endpoint",
        MARKER,
        std::future::ready(EtcdConfig::new([format!(
            "http://root:{MARKER}@{}",
            endpoint.trim_start_matches("http://")
        )])),
    )
    .await;

    // Connected with the right password, then the server goes away.
    let client = EtcdLockClient::connect(config_with(&etcd.endpoints(), &prefix, |connection| {
        connection.with_user("root", MARKER)
    }))
    .await
    .expect("the right password connects");
    assert_hidden("a connected client", MARKER, &client);
    let locks = session(&client, options(5)).await;
    etcd.kill().expect("kill the test's own etcd");
    assert_kept(
        "lock service gone",
        MARKER,
        locks.acquire_timeout(&name("secrets"), Mode::Exclusive, Duration::from_secs(3)),
    )
    .await;
}
