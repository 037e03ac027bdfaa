//! TLS to PostgreSQL (#25): the engine connects with `sslmode=verify-full`
//! and a CA file to a server that accepts TLS connections only (so a
//! connection that works used TLS), and refuses a server whose
//! certificate another CA signed.

use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_store::{Engine, Op, WriteRequest};
use palisade_store_postgres::{OpenError, PostgresConfig, PostgresEngine};
use palisade_testkit::sql::SqlServer;
use palisade_testkit::tls::Authority;

/// A CA's certificate in a file, as `sslrootcert` wants it.
fn ca_file(dir: &tempfile::TempDir, authority: &Authority, name: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, &authority.cert_pem).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_connects_with_verify_full_and_refuses_a_wrong_ca() {
    let authority = Authority::new("palisade test CA");
    let postgres = SqlServer::postgres_with_tls(&authority.server());
    let dir = tempfile::tempdir().unwrap();
    let ca = ca_file(&dir, &authority, "ca.pem");
    let base = format!("postgres://postgres@127.0.0.1:{}/postgres", postgres.port());

    let engine = PostgresEngine::open(PostgresConfig::new(postgres.verified_url(&ca)))
        .await
        .expect("verify-full with the server's CA");
    let sequencer = Sequencer::new(
        LockName::new("tls").unwrap(),
        Mode::Exclusive,
        Generation::new(1).unwrap(),
    );
    engine
        .write(WriteRequest::new(
            sequencer,
            vec![Op::put(&b"k"[..], &b"v"[..])],
            None,
        ))
        .await
        .unwrap()
        .unwrap();

    // Encryption without verification, as libpq's `require`.
    PostgresEngine::open(PostgresConfig::new(format!("{base}?sslmode=require")))
        .await
        .expect("require");

    // Another CA: refused, and said so.
    let other = ca_file(&dir, &Authority::new("another CA"), "other.pem");
    match PostgresEngine::open(PostgresConfig::new(postgres.verified_url(&other))).await {
        Err(error @ OpenError::Database { .. }) => {
            assert!(error.to_string().contains("certificate"), "{error}");
        }
        other => panic!("a server signed by another CA was accepted: {other:?}"),
    }

    // The server takes no plain connection: the ones above used TLS.
    let plain = PostgresEngine::open(PostgresConfig::new(format!("{base}?sslmode=disable"))).await;
    assert!(plain.is_err(), "a plain connection was accepted");
}
