//! TLS to the lock tables (#25): the client connects with the strictest
//! verification each database offers (`sslmode=verify-full`,
//! `ssl-mode=VERIFY_IDENTITY`) and a CA file, to a server that accepts
//! TLS connections only, takes and releases a lock; a server whose
//! certificate another CA signed is refused.

use std::time::Duration;

use palisade_core::{Lock as _, LockGuard as _, LockName, Mode};
use palisade_lock_sql::{SqlConfig, SqlLockClient};
use palisade_testkit::sql::{Dialect, SqlServer};
use palisade_testkit::tls::Authority;

use crate::common::options;

async fn connects_over_tls_and_refuses_a_wrong_ca(dialect: Dialect) {
    let authority = Authority::new("palisade test CA");
    let server = match dialect {
        Dialect::Postgres => SqlServer::postgres_with_tls(&authority.server()),
        Dialect::MariaDb => SqlServer::mariadb_with_tls(&authority.server()),
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &authority.cert_pem).unwrap();
    let other = dir.path().join("other.pem");
    std::fs::write(&other, &Authority::new("another CA").cert_pem).unwrap();
    let client = SqlLockClient::connect(SqlConfig::new(server.verified_url(&ca)))
        .await
        .expect("verify-full with the server's CA");
    let session = client
        .session(options(Duration::from_secs(5)))
        .await
        .unwrap();
    let guard = session
        .acquire(&LockName::new("tls").unwrap(), Mode::Exclusive)
        .await
        .unwrap();
    assert!(guard.sequencer().unwrap().generation().get() >= 1);
    guard.release().await.unwrap();

    let refused = SqlLockClient::connect(SqlConfig::new(server.verified_url(&other))).await;
    let error = refused.expect_err("a server signed by another CA was accepted");
    assert!(
        format!("{error} {error:?}").contains("ertificate"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_tls_with_verify_full() {
    connects_over_tls_and_refuses_a_wrong_ca(Dialect::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_over_tls_with_verify_identity() {
    connects_over_tls_and_refuses_a_wrong_ca(Dialect::MariaDb).await;
}
