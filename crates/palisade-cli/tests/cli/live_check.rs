//! `palisade serve --live-check etcd|redis|postgres` against real lock services: a
//! holder whose lease ended is refused (409 `not_held`) before any newer
//! generation has written, a lock service that cannot answer makes the
//! server refuse (503), never accept, and a stale holder that still holds
//! is named a generation regression.

use std::process::Stdio;
use std::time::Duration;

use palisade_client::{Client, ClientError, Refused};
use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
use palisade_lock_etcd::{EtcdConfig, EtcdLock};
use palisade_lock_redis::RedisLock;
use palisade_lock_sql::{SqlConfig, SqlLockClient};
use palisade_testkit::etcd::EtcdServer;
use palisade_testkit::redis::{RedisOptions, RedisServer};
use palisade_testkit::sql::SqlServer;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A `palisade serve` child process, killed on drop.
struct Served {
    _child: Child,
    _data_dir: tempfile::TempDir,
    client: Client,
}

async fn serve(live_check: &[&str]) -> Served {
    let data_dir = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .arg("serve")
        .arg("--data-dir")
        .arg(data_dir.path())
        .args(["--listen", "127.0.0.1:0"])
        .args(live_check)
        .stdout(Stdio::piped())
        // Its log is the server's, not this test's: kept out of the output.
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("palisade binary");
    let stdout = child.stdout.take().expect("stdout");
    let line = tokio::time::timeout(Duration::from_secs(30), async {
        BufReader::new(stdout).lines().next_line().await
    })
    .await
    .expect("palisade serve starts within 30 s")
    .expect("read stdout")
    .expect("a line");
    let address = line
        .strip_prefix("palisade-server listening on ")
        .unwrap_or_else(|| panic!("unexpected first line `{line}`"))
        .to_owned();
    Served {
        _child: child,
        _data_dir: data_dir,
        client: Client::new(&format!("http://{address}")).expect("url"),
    }
}

fn options() -> SessionOptions {
    SessionOptions::default()
        .with_ttl(Duration::from_secs(2))
        .with_keepalive_interval(Duration::from_millis(500))
        .with_safety_margin(Duration::from_millis(500))
}

/// The writes every backend must see refused or accepted, in order.
async fn check_live_check<G: LockGuard>(
    served: &Served,
    guard: &G,
    end_lease: impl std::future::Future<Output = ()>,
) -> palisade_core::Sequencer {
    let sequencer = guard.sequencer().expect("fresh guard");
    let lock = sequencer.lock().clone();
    served
        .client
        .put(&sequencer, b"k", "while-held", None)
        .await
        .expect("server answers")
        .expect("a live holder is accepted");

    end_lease.await;

    let refused = served
        .client
        .put(&sequencer, b"k", "after-lease-end", None)
        .await
        .expect("server answers")
        .expect_err("the lock service says the holder is gone");
    assert!(matches!(refused, Refused::NotHeld { .. }), "{refused:?}");
    // Refused before anyone newer wrote: the mark is still the holder's.
    let marks = served.client.marks(&lock).await.expect("marks");
    assert_eq!(marks.exclusive, sequencer.generation().get());
    let read = served
        .client
        .get(&lock, b"k", None)
        .await
        .expect("read")
        .expect("plain read");
    assert_eq!(read.value.as_deref(), Some(&b"while-held"[..]));
    sequencer
}

fn assert_live_check_unavailable(error: &ClientError) {
    assert_eq!(error.code(), Some("live_check_unavailable"), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_live_check_refuses_a_lapsed_holder() {
    let mut etcd = EtcdServer::spawn();
    let endpoints = etcd.endpoints().join(",");
    let served = serve(&["--live-check", "etcd", "--etcd-endpoints", &endpoints]).await;
    let locks = EtcdLock::connect(EtcdConfig::new(etcd.endpoints()).unwrap(), options())
        .await
        .unwrap();
    let guard = locks
        .acquire(&LockName::new("live/etcd").unwrap(), Mode::Exclusive)
        .await
        .unwrap();
    let sequencer = check_live_check(&served, &guard, async {
        locks.simulate_crash().await.expect("revoke the lease");
    })
    .await;

    // etcd gone: the server cannot ask, so it refuses.
    etcd.kill().unwrap();
    let error = served
        .client
        .put(&sequencer, b"k", "etcd-down", None)
        .await
        .expect_err("503 when the live check cannot answer");
    assert_live_check_unavailable(&error);
}

/// PostgreSQL: the holder's session row is expired by the database's
/// clock (as a crash past the TTL would); the server refuses it at once,
/// and with the database gone it cannot ask, so it refuses too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_live_check_refuses_a_lapsed_holder() {
    let mut postgres = SqlServer::postgres();
    let url = postgres.url();
    let served = serve(&["--live-check", "postgres", "--database-url", &url]).await;
    let client = SqlLockClient::connect(SqlConfig::new(url.clone()))
        .await
        .expect("connect to PostgreSQL");
    let locks = client.session(options()).await.expect("a session");
    let guard = locks
        .acquire(&LockName::new("live/postgres").unwrap(), Mode::Exclusive)
        .await
        .unwrap();
    let sequencer = check_live_check(&served, &guard, async {
        locks
            .expire_session()
            .await
            .expect("expire the session row");
    })
    .await;

    postgres.kill().unwrap();
    let error = served
        .client
        .put(&sequencer, b"k", "database-down", None)
        .await
        .expect_err("503 when the live check cannot answer");
    assert_live_check_unavailable(&error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_live_check_refuses_a_lapsed_holder() {
    let mut redis = RedisServer::spawn(RedisOptions::default());
    let url = redis.url();
    let served = serve(&["--live-check", "redis", "--redis-url", &url]).await;
    let locks = RedisLock::connect(&url, options()).await.unwrap();
    let guard = locks
        .acquire(&LockName::new("live/redis").unwrap(), Mode::Exclusive)
        .await
        .unwrap();
    let sequencer = check_live_check(&served, &guard, async {
        locks.expire_session().await.expect("expire the hold");
    })
    .await;

    redis.kill().unwrap();
    let error = served
        .client
        .put(&sequencer, b"k", "redis-down", None)
        .await
        .expect_err("503 when the live check cannot answer");
    assert_live_check_unavailable(&error);
}

#[tokio::test]
async fn live_check_without_its_endpoint_is_a_clear_error() {
    let data_dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .arg("serve")
        .arg("--data-dir")
        .arg(data_dir.path())
        .args(["--listen", "127.0.0.1:0", "--live-check", "etcd"])
        .env_remove("PALISADE_ETCD_ENDPOINTS")
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--live-check etcd needs --etcd-endpoints"),
        "{stderr}"
    );
}

/// A signing lock side with its own prefix and issuer: `serve` verifies the
/// signatures, and its live check (told the prefix, and taking the issuer
/// from the one trusted `--issuer`) still recognises the holder, then
/// refuses it once its hold has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_live_check_follows_the_lock_sides_prefix_and_issuer() {
    use palisade_core::{Signer, SigningKey};
    use palisade_lock_redis::{RedisConfig, RedisLockClient};

    let redis = RedisServer::spawn(RedisOptions::default());
    let url = redis.url();
    let secret = [7u8; 32];
    let keys = tempfile::NamedTempFile::new().expect("temp file");
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(keys.path(), format!("k1 {hex}\n")).expect("write keys");
    let keys_path = keys.path().to_str().expect("UTF-8 path");
    let served = serve(&[
        "--live-check",
        "redis",
        "--redis-url",
        &url,
        "--prefix",
        "shop:",
        "--verify-keys-file",
        keys_path,
        "--issuer",
        "redis-shop",
    ])
    .await;
    let signer = Signer::new("redis-shop", SigningKey::new("k1", secret).unwrap()).unwrap();
    let client = RedisLockClient::connect(
        RedisConfig::new(&url)
            .with_key_prefix("shop:")
            .with_signer(signer),
    )
    .await
    .unwrap();
    let locks = client.session(options()).unwrap();
    let guard = locks
        .acquire(&LockName::new("live/signed").unwrap(), Mode::Exclusive)
        .await
        .unwrap();
    assert!(guard.issued().signature().is_some());
    check_live_check(&served, &guard, async {
        locks.expire_session().await.expect("expire the hold");
    })
    .await;
}

/// A Redis that lost its counter hands out generations below the marks.
/// With a live check the server names that a regression (the refused
/// holder still holds, so nobody newer can exist); without one, or once
/// the refused holder has let go and a newer one wrote, it never does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_refused_holder_that_still_holds_is_a_regression() {
    use palisade_lock_redis::{GenerationScheme, RedisConfig, RedisLockClient};

    let redis = RedisServer::spawn(RedisOptions::default());
    let url = redis.url();
    let checked = serve(&["--live-check", "redis", "--redis-url", &url]).await;
    let unchecked = serve(&[]).await;
    let config = RedisConfig::new(&url).with_generation_scheme(GenerationScheme::Counter);
    let lock = LockName::new("live/regression").unwrap();
    let put_both = |sequencer: palisade_core::Sequencer, value: &'static str| {
        let (checked, unchecked) = (&checked.client, &unchecked.client);
        async move {
            let first = checked.put(&sequencer, b"k", value, None).await.unwrap();
            let second = unchecked.put(&sequencer, b"k", value, None).await.unwrap();
            (first, second)
        }
    };

    let before = RedisLockClient::connect(config.clone()).await.unwrap();
    let session = before.session(options()).unwrap();
    for value in ["one", "two", "three"] {
        let guard = session.acquire(&lock, Mode::Exclusive).await.unwrap();
        let (first, second) = put_both(guard.sequencer().unwrap(), value).await;
        first.expect("accepted");
        second.expect("accepted");
        guard.release().await.unwrap();
    }
    let mark = checked.client.marks(&lock).await.unwrap().exclusive;
    assert_eq!(mark, 3);

    // Redis loses everything; a client with no memory of it is granted 1.
    assert_eq!(redis.command(&["FLUSHALL"]).unwrap().trim(), "OK");
    let after = RedisLockClient::connect(config).await.unwrap();
    let session = after.session(options()).unwrap();
    let low = session.acquire(&lock, Mode::Exclusive).await.unwrap();
    let low_sequencer = low.sequencer().unwrap();
    assert_eq!(low_sequencer.generation().get(), 1);
    let (first, second) = put_both(low_sequencer.clone(), "low").await;
    match first {
        Err(
            ref refused @ Refused::Stale {
                regression: true,
                presented,
                marks,
                ..
            },
        ) => {
            assert_eq!((presented.get(), marks.exclusive), (1, mark));
            let message = refused.to_string();
            assert!(message.contains("generation regression"), "{message}");
        }
        other => panic!("expected a stale regression, got {other:?}"),
    }
    // Without a live check the server cannot tell: stale, not a regression.
    assert!(
        matches!(
            second,
            Err(Refused::Stale {
                regression: false,
                ..
            })
        ),
        "{second:?}"
    );

    // The floor raised, a newer holder writes; the low holder has let go.
    low.release().await.unwrap();
    after.raise_floor(&lock, mark).await.unwrap();
    let newer = session.acquire(&lock, Mode::Exclusive).await.unwrap();
    let (first, second) = put_both(newer.sequencer().unwrap(), "newer").await;
    first.expect("accepted above the mark");
    second.expect("accepted above the mark");
    let (first, second) = put_both(low_sequencer, "late").await;
    assert!(
        matches!(first, Err(Refused::NotHeld { .. })),
        "a holder that let go is not a regression: {first:?}"
    );
    assert!(
        matches!(
            second,
            Err(Refused::Stale {
                regression: false,
                ..
            })
        ),
        "{second:?}"
    );
    newer.release().await.unwrap();
    let read = checked
        .client
        .get(&lock, b"k", None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.value.as_deref(), Some(&b"newer"[..]));
}
