//! Signed sequencers from `palisade lock` (`--sign-key-file`,
//! `--sign-key-id`, `--issuer` and their environment variables), and
//! `palisade keygen`.

use std::path::Path;

use palisade_core::{KeyRing, Sequencer, SignatureError, Verifier};
use tokio::process::Command;

use crate::fixtures::{Backend, code, finish, palisade, printed_sequencer, scratch, unique_name};

/// The signing variables, removed so the machine's environment cannot
/// change what a test means (the shared fixtures predate them).
const SIGNING_ENV: [&str; 3] = [
    "PALISADE_SIGN_KEY_FILE",
    "PALISADE_SIGN_KEY_ID",
    "PALISADE_ISSUER",
];

fn command<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut command = palisade(args);
    for name in SIGNING_ENV {
        command.env_remove(name);
    }
    command
}

/// A fresh ring line from `palisade keygen`.
async fn keygen(key_id: &str) -> String {
    let generated = finish(command(["keygen", "--key-id", key_id])).await;
    generated.assert_code(code::OK);
    assert!(generated.stderr.is_empty(), "{}", generated.stderr);
    let line = generated.stdout_text();
    line.trim_end().to_owned()
}

/// Writes `lines` as a key ring file in `dir`; returns the ring and path.
fn write_ring(dir: &Path, file: &str, lines: &[&str]) -> (KeyRing, std::path::PathBuf) {
    let path = dir.join(file);
    let text = format!("# signing keys of the test\n{}\n", lines.join("\n"));
    std::fs::write(&path, &text).expect("write the ring");
    (text.parse().expect("a valid ring"), path)
}

/// `palisade lock <backend> <extra> <name> -- sh -c 'echo "$PALISADE_SEQUENCER"'`:
/// the sequencer the command saw, and the one printed on standard error.
async fn sequencer_under_lock(
    backend: &Backend,
    test: &str,
    extra: &[&str],
) -> (Sequencer, Sequencer) {
    let name = unique_name(backend.name(), test);
    let mut locked = command(["lock"]);
    locked
        .args(backend.flags())
        .args(extra)
        .arg(name.as_str())
        .args(["--", "sh", "-c", r#"echo "$PALISADE_SEQUENCER""#]);
    let finished = finish(locked).await;
    finished.assert_code(code::OK);
    let seen: Sequencer = finished
        .stdout_text()
        .trim()
        .parse()
        .expect("PALISADE_SEQUENCER parses");
    assert_eq!(seen.lock(), &name);
    (seen, printed_sequencer(&finished.stderr))
}

/// With a key file and an issuer, the command's sequencer is signed: it
/// verifies under the ring and the issuer, and under no other key.
async fn signs_with_the_key_file(backend: &Backend) {
    let files = scratch();
    let line = keygen("k1").await;
    let (ring, ring_file) = write_ring(files.path(), "ring", &[&line]);
    let ring_arg = ring_file.to_str().expect("UTF-8 temp path");
    let (seen, printed) = sequencer_under_lock(
        backend,
        "signed",
        &["--sign-key-file", ring_arg, "--issuer", "cli-signing-test"],
    )
    .await;
    assert_eq!(seen, printed, "the printed sequencer is the exported one");
    assert_eq!(seen.issuer(), Some("cli-signing-test"));
    assert_eq!(seen.signature().map(|s| s.key_id()), Some("k1"));
    let verifier = Verifier::from_keys(ring)
        .with_issuer("cli-signing-test")
        .unwrap();
    assert_eq!(verifier.verify(&seen), Ok(()), "{seen}");

    // Another secret under the same id does not verify it.
    let other = keygen("k1").await;
    assert_ne!(other, line, "keygen draws a fresh secret every time");
    let (other_ring, _) = write_ring(files.path(), "other", &[&other]);
    assert_eq!(
        Verifier::from_keys(other_ring).verify(&seen),
        Err(SignatureError::BadSignature {
            key_id: "k1".into()
        })
    );
}

/// From the environment, during a rotation: a ring with two keys, the
/// signing one named by `PALISADE_SIGN_KEY_ID`, no issuer given: the
/// sequencer is signed as the lock service itself.
async fn signs_from_the_environment_as_the_lock_service(backend: &Backend) {
    let files = scratch();
    let old = keygen("k1").await;
    let new = keygen("k2").await;
    let (ring, ring_file) = write_ring(files.path(), "ring", &[&old, &new]);
    let mut with_env = command(["lock"]);
    let name = unique_name(backend.name(), "signed-env");
    with_env
        .args(backend.flags())
        .arg(name.as_str())
        .args(["--", "sh", "-c", r#"echo "$PALISADE_SEQUENCER""#])
        .env("PALISADE_SIGN_KEY_FILE", &ring_file)
        .env("PALISADE_SIGN_KEY_ID", "k2");
    let finished = finish(with_env).await;
    finished.assert_code(code::OK);
    let seen: Sequencer = finished.stdout_text().trim().parse().expect("parses");
    assert_eq!(seen.signature().map(|s| s.key_id()), Some("k2"));
    let own_issuer = match backend {
        Backend::Etcd(_) => "etcd-",
        Backend::Redis(_) | Backend::RedisCluster(_) => "redis@",
        Backend::Redlock(_) => "redlock@",
        Backend::Sql(_) => "postgres@127.0.0.1:",
        Backend::ZooKeeper(_) => "zookeeper-",
    };
    let issuer = seen.issuer().expect("an issuer");
    assert!(issuer.starts_with(own_issuer), "{issuer}");
    assert_eq!(Verifier::from_keys(ring).verify(&seen), Ok(()), "{seen}");
}

/// Without any signing flag nothing changes: the sequencer is unsigned.
async fn unsigned_without_a_key(backend: &Backend) {
    let (seen, _) = sequencer_under_lock(backend, "unsigned", &[]).await;
    assert_eq!(seen.signature(), None);
    assert!(!seen.to_string().contains(";sig="));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_signs_with_the_key_file() {
    let backend = Backend::etcd();
    signs_with_the_key_file(&backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_signs_with_the_key_file() {
    let backend = Backend::redis();
    signs_with_the_key_file(&backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_signs_from_the_environment_as_the_cluster() {
    let backend = Backend::etcd();
    signs_from_the_environment_as_the_lock_service(&backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_signs_from_the_environment_as_the_deployment() {
    let backend = Backend::redis();
    signs_from_the_environment_as_the_lock_service(&backend).await;
    let backend = Backend::redis();
    unsigned_without_a_key(&backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_signs_with_the_key_file_and_as_the_database() {
    let backend = Backend::postgres();
    signs_with_the_key_file(&backend).await;
    signs_from_the_environment_as_the_lock_service(&backend).await;
    unsigned_without_a_key(&backend).await;
}

/// A bad key file is one line and exit code 1, before the lock service is
/// even contacted (the Redis URL here points at a closed port), and the
/// command never runs.
#[tokio::test]
async fn a_bad_key_file_is_one_clear_line() {
    let files = scratch();
    let secret_hex = "00112233445566778899aabbccddeeff";
    let (_, two_keys) = write_ring(
        files.path(),
        "two",
        &[
            &format!("k1 {secret_hex}{secret_hex}"),
            &format!("k2 {secret_hex}"),
        ],
    );
    let malformed = files.path().join("malformed");
    std::fs::write(&malformed, format!("k1 {secret_hex} trailing\n")).unwrap();
    let short = files.path().join("short");
    std::fs::write(&short, "k1 0011\n").unwrap();
    let empty = files.path().join("empty");
    std::fs::write(&empty, "# nothing yet\n").unwrap();
    let missing = files.path().join("missing");
    let marker = files.path().join("ran");

    let cases: [(&Path, Option<&str>, &str); 6] = [
        (&missing, None, "cannot read the signing key ring"),
        (
            &malformed,
            None,
            "key ring line 1: expected `<key id> <hex secret>`",
        ),
        (&short, None, "the secret must be at least 16 bytes"),
        (&empty, None, "has no keys"),
        (&two_keys, None, "has 2 keys (k1, k2)"),
        (&two_keys, Some("k3"), "has no key `k3` (it has: k1, k2)"),
    ];
    for (file, key_id, expected) in cases {
        let mut locked = command([
            "lock",
            "--backend",
            "redis",
            "--redis-url",
            "redis://127.0.0.1:1",
        ]);
        locked.arg("--sign-key-file").arg(file);
        if let Some(key_id) = key_id {
            locked.args(["--sign-key-id", key_id]);
        }
        locked.args(["orders/42", "--", "touch"]).arg(&marker);
        let finished = finish(locked).await;
        let line = finished.one_line_error(code::ERROR);
        assert!(line.contains(expected), "{file:?}: {line}");
        assert!(
            line.contains(&file.display().to_string()),
            "the file is named: {line}"
        );
        assert!(!line.contains(secret_hex), "the secret leaked: {line}");
        assert!(!marker.exists(), "the command ran despite {file:?}");
    }

    // An invalid issuer is refused the same way.
    let (_, one_key) = write_ring(files.path(), "one", &[&format!("k1 {secret_hex}")]);
    let mut bad_issuer = command([
        "lock",
        "--backend",
        "redis",
        "--redis-url",
        "redis://127.0.0.1:1",
        "--issuer",
        "",
    ]);
    bad_issuer
        .arg("--sign-key-file")
        .arg(&one_key)
        .args(["orders/42", "--", "true"]);
    let line = finish(bad_issuer).await.one_line_error(code::ERROR);
    assert!(line.contains("issuer"), "{line}");

    // `--sign-key-id` without a ring is a usage error.
    let usage = finish(command([
        "lock",
        "--sign-key-id",
        "k1",
        "orders/42",
        "--",
        "true",
    ]))
    .await;
    usage.assert_code(code::USAGE);
    assert!(usage.stderr.contains("--sign-key-file"), "{}", usage.stderr);
}

#[tokio::test]
async fn keygen_prints_a_fresh_ring_line() {
    let first = keygen("k1").await;
    let second = keygen("k1").await;
    for line in [&first, &second] {
        let (key_id, hex) = line.split_once(' ').expect("`<id> <hex>`");
        assert_eq!(key_id, "k1");
        assert_eq!(hex.len(), 64, "{line}");
        assert!(
            hex.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
    }
    assert_ne!(first, second);
    let ring: KeyRing = format!("{first}\n{}\n", keygen("k2").await)
        .parse()
        .expect("keygen lines form a ring");
    assert_eq!(ring.key_ids().collect::<Vec<_>>(), ["k1", "k2"]);

    let default_id = finish(command(["keygen"])).await;
    default_id.assert_code(code::OK);
    assert!(default_id.stdout_text().starts_with("k1 "));

    let line = finish(command(["keygen", "--key-id", "has space"]))
        .await
        .one_line_error(code::ERROR);
    assert!(line.contains("--key-id"), "{line}");
}

/// Signed on PostgreSQL, checked live: the server's live check derives the
/// same issuer from its `--database-url` as the lock side, so a signed
/// holder's write is accepted (another issuer would be `not_held`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_signed_sequencers_pass_the_live_check() {
    let backend = Backend::postgres();
    let Backend::Sql(postgres) = &backend else {
        unreachable!("a SQL backend")
    };
    let files = scratch();
    let (_, ring_file) = write_ring(files.path(), "ring", &[&keygen("k1").await]);
    let served = crate::fixtures::serve_with(&[
        "--verify-keys-file".as_ref(),
        ring_file.as_os_str(),
        "--live-check".as_ref(),
        "postgres".as_ref(),
        "--database-url".as_ref(),
        std::ffi::OsStr::new(&postgres.url()),
    ])
    .await;
    let name = unique_name(backend.name(), "signed-live");
    let mut locked = command(["lock"]);
    locked
        .args(backend.flags())
        .arg("--sign-key-file")
        .arg(&ring_file)
        .args([name.as_str(), "--", crate::fixtures::PALISADE])
        .args(["put", name.as_str(), "k", "signed"])
        .env("PALISADE_SERVER", &served.url);
    let locked = finish(locked).await;
    locked.assert_code(code::OK);
    let read = finish({
        let mut get = command(["get", "--server", &served.url, name.as_str(), "k"]);
        get.env_remove("PALISADE_SEQUENCER");
        get
    })
    .await;
    assert_eq!(read.assert_code(code::OK).stdout, b"signed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_signs_from_the_environment_as_the_deployment() {
    let backend = Backend::redlock();
    signs_from_the_environment_as_the_lock_service(&backend).await;
    unsigned_without_a_key(&backend).await;
}
