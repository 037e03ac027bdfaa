//! TLS to the application's database (#25): the fence needs nothing of
//! its own for it, but the crate builds the driver with TLS (rustls on
//! `ring`), so the application's pool connects with the strictest
//! verification each database offers and a CA file, to a server that
//! accepts TLS connections only, and a fenced transaction commits; a
//! server whose certificate another CA signed is refused.

use palisade_testkit::sql::{Dialect, SqlServer};
use palisade_testkit::tls::Authority;
use sqlx::{MySql, Pool, Postgres};

use crate::common::excl;

/// The server's URL with TLS verified against the CA in `ca`.
fn verified(server: &SqlServer, ca: &std::path::Path) -> String {
    match server.dialect() {
        Dialect::Postgres => format!(
            "{}?sslmode=verify-full&sslrootcert={}",
            server.url(),
            ca.display()
        ),
        Dialect::MariaDb => format!(
            "{}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
            server.url(),
            ca.display()
        ),
    }
}

/// The test's CA, with its certificate and another CA's in files.
struct Cas {
    authority: Authority,
    right: std::path::PathBuf,
    wrong: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn cas() -> Cas {
    let authority = Authority::new("palisade test CA");
    let dir = tempfile::tempdir().unwrap();
    let right = dir.path().join("ca.pem");
    std::fs::write(&right, &authority.cert_pem).unwrap();
    let wrong = dir.path().join("other.pem");
    std::fs::write(&wrong, &Authority::new("another CA").cert_pem).unwrap();
    Cas {
        authority,
        right,
        wrong,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pool_over_tls_with_verify_full_fences_and_a_wrong_ca_is_refused() {
    let cas = cas();
    let server = SqlServer::postgres_with_tls(&cas.authority.server());
    let pool = Pool::<Postgres>::connect(&verified(&server, &cas.right))
        .await
        .expect("verify-full with the server's CA");
    palisade_fence_sql::migrate(&pool).await.unwrap();
    let tx = palisade_fence_sql::begin_fenced(&pool, &excl("tls", 1))
        .await
        .unwrap();
    assert_eq!(tx.commit().await.unwrap().exclusive, 1);
    let refused = Pool::<Postgres>::connect(&verified(&server, &cas.wrong)).await;
    let error = refused.expect_err("a server signed by another CA was accepted");
    assert!(error.to_string().contains("ertificate"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_pool_over_tls_with_verify_identity_fences_and_a_wrong_ca_is_refused() {
    let cas = cas();
    let server = SqlServer::mariadb_with_tls(&cas.authority.server());
    let pool = Pool::<MySql>::connect(&verified(&server, &cas.right))
        .await
        .expect("VERIFY_IDENTITY with the server's CA");
    palisade_fence_sql::migrate(&pool).await.unwrap();
    let tx = palisade_fence_sql::begin_fenced(&pool, &excl("tls", 1))
        .await
        .unwrap();
    assert_eq!(tx.commit().await.unwrap().exclusive, 1);
    let refused = Pool::<MySql>::connect(&verified(&server, &cas.wrong)).await;
    let error = refused.expect_err("a server signed by another CA was accepted");
    assert!(error.to_string().contains("ertificate"), "{error}");
}
