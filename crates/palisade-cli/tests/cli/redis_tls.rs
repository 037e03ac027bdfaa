//! `palisade lock --backend redis` over `rediss://` to a server whose
//! certificate a private CA signed: trusted with `--redis-ca-cert`, refused
//! without it (the command never runs), and a missing CA file is one line.

use palisade_testkit::redis::{RedisOptions, RedisServer, RedisTls};
use palisade_testkit::tls::Authority;

use crate::fixtures::{code, finish, palisade, path_in, scratch, unique_name};

#[tokio::test]
async fn lock_over_tls_trusts_the_ca_given_with_redis_ca_cert() {
    let authority = Authority::new("Palisade CLI test CA");
    let certificate = authority.server();
    let tls = RedisTls::new(
        certificate.cert_pem,
        certificate.key_pem,
        authority.cert_pem.clone(),
    );
    let redis = RedisServer::spawn(RedisOptions::default().with_tls(tls));
    let url = redis.url();
    assert!(url.starts_with("rediss://"), "{url}");
    let files = scratch();
    let ca = path_in(files.path(), "ca.pem");
    std::fs::write(&ca, &authority.cert_pem).expect("write the CA");
    let name = unique_name("redis", "tls");
    let ran = path_in(files.path(), "ran");

    // Trusting the private CA: the lock is taken over TLS (the server has
    // no plaintext port) and the command runs.
    let mut command = palisade(["lock", "--backend", "redis", "--redis-url", &url]);
    command
        .arg("--redis-ca-cert")
        .arg(&ca)
        .arg(name.as_str())
        .args(["--", "touch"])
        .arg(&ran);
    finish(command).await.assert_code(code::OK);
    assert!(ran.exists(), "the command ran under the lock");
    std::fs::remove_file(&ran).expect("reset");

    // The system's roots do not know the CA: refused, and nothing runs.
    let mut command = palisade(["lock", "--backend", "redis", "--redis-url", &url]);
    command.arg(name.as_str()).args(["--", "touch"]).arg(&ran);
    let line = finish(command).await.one_line_error(code::ERROR);
    assert!(line.contains("cannot connect to Redis"), "{line}");
    assert!(!ran.exists(), "the command must not run without the lock");

    // A CA file that is not there: one line naming the flag.
    let mut command = palisade(["lock", "--backend", "redis", "--redis-url", &url]);
    command
        .arg("--redis-ca-cert")
        .arg(path_in(files.path(), "missing.pem"))
        .arg(name.as_str())
        .args(["--", "touch"])
        .arg(&ran);
    let line = finish(command).await.one_line_error(code::ERROR);
    assert!(line.contains("--redis-ca-cert"), "{line}");
    assert!(!ran.exists());
}
