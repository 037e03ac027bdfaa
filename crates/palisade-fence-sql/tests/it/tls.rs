//! TLS to the application's database (#25): the fence needs nothing of
//! its own for it, but the crate builds the driver with TLS (rustls on
//! `ring`), so the application's pool connects with the strictest
//! verification each database offers and a CA file, to a server that
//! accepts TLS connections only, and a fenced transaction commits; a
//! server whose certificate another CA signed is refused.

use palisade_fence_sql::FenceDatabase;
use palisade_testkit::sql::SqlServer;
use palisade_testkit::tls::Authority;
use sqlx::{MySql, Pool, Postgres};

use crate::common::excl;

async fn fences_over_tls_and_refuses_a_wrong_ca<D: FenceDatabase>(
    start: fn(&palisade_testkit::tls::Issued) -> SqlServer,
) {
    let authority = Authority::new("palisade test CA");
    let server = start(&authority.server());
    let dir = tempfile::tempdir().unwrap();
    let (right, wrong) = (dir.path().join("ca.pem"), dir.path().join("other.pem"));
    std::fs::write(&right, &authority.cert_pem).unwrap();
    std::fs::write(&wrong, &Authority::new("another CA").cert_pem).unwrap();

    let pool = Pool::<D>::connect(&server.verified_url(&right))
        .await
        .expect("the strictest verification, with the server's CA");
    palisade_fence_sql::migrate(&pool).await.unwrap();
    let tx = palisade_fence_sql::begin_fenced(&pool, &excl("tls", 1))
        .await
        .unwrap();
    assert_eq!(tx.commit().await.unwrap().exclusive, 1);

    let refused = Pool::<D>::connect(&server.verified_url(&wrong)).await;
    let error = refused.expect_err("a server signed by another CA was accepted");
    assert!(error.to_string().contains("ertificate"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pool_over_tls_with_verify_full_fences_and_a_wrong_ca_is_refused() {
    fences_over_tls_and_refuses_a_wrong_ca::<Postgres>(SqlServer::postgres_with_tls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_pool_over_tls_with_verify_identity_fences_and_a_wrong_ca_is_refused() {
    fences_over_tls_and_refuses_a_wrong_ca::<MySql>(SqlServer::mariadb_with_tls).await;
}
