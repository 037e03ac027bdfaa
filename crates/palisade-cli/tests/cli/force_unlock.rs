//! `palisade locks ls|show` and `palisade unlock --force`: a holder paused
//! (SIGSTOP) with a write in hand is force-unlocked; its late write is
//! refused (409 `stale`, exit code 4) because the unlock fenced the
//! resource server before it returned; a new holder writes. Without the
//! fence the same late write lands: the window the fence closes.

use std::time::Duration;

use palisade_core::LockName;
use serde_json::Value;

use crate::fixtures::{Backend, PausedHolder, code, finish, palisade, serve, unique_name};

/// `palisade locks show NAME --json`, parsed.
async fn show(backend: &Backend, name: &LockName) -> Value {
    let mut command = palisade(["locks", "show", "--json"]);
    command.args(backend.flags()).arg(name.as_str());
    let shown = finish(command).await;
    shown.assert_code(code::OK);
    serde_json::from_slice(&shown.stdout).expect("show --json prints JSON")
}

/// `palisade unlock --force NAME` with `extra` flags.
async fn unlock(backend: &Backend, name: &LockName, extra: &[&str]) -> crate::fixtures::Finished {
    let mut command = palisade(["unlock", "--force"]);
    command.args(backend.flags()).args(extra).arg(name.as_str());
    finish(command).await
}

pub(crate) async fn forced_unlock_fences_the_paused_holder(backend: Backend) {
    let served = serve().await;
    let name = unique_name(backend.name(), "force-unlock");
    let a = PausedHolder::start(&backend, &served, &name, "60s").await;

    // Operators see the stuck holder.
    let before = show(&backend, &name).await;
    let holders = before["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 1, "{before}");
    assert_eq!(holders[0]["mode"], "exclusive", "{before}");
    let evicted = holders[0]["generation"].as_u64().expect("a generation");
    let mut listed = palisade(["locks", "ls"]);
    listed.args(backend.flags()).arg(name.as_str());
    let listed = finish(listed).await;
    listed.assert_code(code::OK);
    let table = listed.stdout_text();
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|row| row.starts_with(name.as_str())
                && row.contains("exclusive")
                && row.contains(&evicted.to_string())),
        "{table}"
    );

    // Without a server to fence, nothing is evicted.
    let refused = unlock(&backend, &name, &[]).await;
    let line = refused.one_line_error(code::USAGE);
    assert!(line.contains("needs --server URL"), "{line}");
    assert_eq!(
        show(&backend, &name).await["holders"][0]["generation"],
        evicted
    );

    // Another generation than the holder's: nothing is evicted.
    let other = (evicted + 1).to_string();
    let missed = unlock(
        &backend,
        &name,
        &["--generation", &other, "--server", &served.url],
    )
    .await;
    let line = missed.one_line_error(code::NOT_FOUND);
    assert!(
        line.contains(&format!("is not held with generation {other}")),
        "{line}"
    );
    assert_eq!(
        show(&backend, &name).await["holders"][0]["generation"],
        evicted
    );

    let forced = unlock(
        &backend,
        &name,
        &[
            "--generation",
            &evicted.to_string(),
            "--server",
            &served.url,
        ],
    )
    .await;
    forced.assert_code(code::OK);
    assert!(
        forced.stderr.contains(&format!(
            "ended the hold of `{name}` with generation {evicted}"
        )),
        "{}",
        forced.stderr
    );
    assert!(
        forced.stderr.contains(&format!(
            "generation {evicted} is refused there from now on"
        )),
        "{}",
        forced.stderr
    );
    let after = show(&backend, &name).await;
    assert_eq!(after["holders"], Value::Array(vec![]), "{after}");

    // A wakes and writes with its old sequencer: refused, nothing changed.
    assert_eq!(
        a.write_late().await,
        code::STALE,
        "A's late write is refused"
    );
    let read = served.get(&name, "k").await;
    read.one_line_error(code::NOT_FOUND);

    // A new holder takes the lock and writes.
    let mut c = palisade(["lock", "--wait", "30s", "--server", &served.url]);
    c.args(backend.flags()).args([
        name.as_str(),
        "--",
        "sh",
        "-c",
        r#""$PALISADE_BIN" put "$PALISADE_LOCK" k from-c"#,
    ]);
    finish(c).await.assert_code(code::OK);
    let read = served.get(&name, "k").await;
    assert_eq!(read.assert_code(code::OK).stdout, b"from-c");

    // Nothing left to unlock.
    let again = unlock(&backend, &name, &["--server", &served.url]).await;
    let line = again.one_line_error(code::NOT_FOUND);
    assert!(line.contains("is not held"), "{line}");
}

/// The same eviction without the fence: A's late write lands. This is
/// what the fence step of `unlock --force` prevents.
async fn without_the_fence_the_late_write_lands(backend: Backend) {
    let served = serve().await;
    let name = unique_name(backend.name(), "force-unlock-no-fence");
    let a = PausedHolder::start(&backend, &served, &name, "60s").await;
    let forced = unlock(&backend, &name, &["--no-fence"]).await;
    forced.assert_code(code::OK);
    assert!(
        forced.stderr.contains("WARNING: --no-fence"),
        "{}",
        forced.stderr
    );
    assert_eq!(
        a.write_late().await,
        code::OK,
        "unfenced, A's late write lands"
    );
    let read = served.get(&name, "k").await;
    assert_eq!(read.assert_code(code::OK).stdout, b"from-a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_forced_unlock_fences_the_paused_holder() {
    forced_unlock_fences_the_paused_holder(Backend::etcd()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_forced_unlock_fences_the_paused_holder() {
    forced_unlock_fences_the_paused_holder(Backend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_forced_unlock_fences_the_paused_holder() {
    forced_unlock_fences_the_paused_holder(Backend::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_without_the_fence_the_late_write_lands() {
    without_the_fence_the_late_write_lands(Backend::etcd()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_without_the_fence_the_late_write_lands() {
    without_the_fence_the_late_write_lands(Backend::redis()).await;
}

/// The library call under `unlock --force`: it ends only the hold with the
/// generation given (a stale request never evicts a newer holder), the
/// evicted guard learns of it as a lost lease, and the next waiter is
/// granted with a newer generation.
async fn force_release_compares_the_generation<L, F>(
    locks: &L,
    waiting: &L,
    service: &F,
    test: &str,
) where
    L: palisade_core::Lock,
    F: palisade_core::ForceRelease + palisade_core::Inspect,
{
    use palisade_core::{Generation, LockGuard as _, Mode};
    let name = unique_name("lib", test);
    let guard = locks
        .acquire(&name, Mode::Exclusive)
        .await
        .expect("acquire");
    let generation = guard.generation();
    let newer = Generation::new(generation.get() + 1).expect("a generation");
    assert!(
        !service
            .force_release(&name, newer)
            .await
            .expect("force_release"),
        "a generation nobody holds evicted something"
    );
    let info = service.inspect(&name).await.expect("inspect");
    assert_eq!(info.newest_generation(), Some(generation), "{info:?}");

    let waiter = waiting.acquire_timeout(&name, Mode::Exclusive, Duration::from_secs(30));
    let evict = async {
        // The waiter queues first, so the eviction must hand the lock on.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let info = service.inspect(&name).await.expect("inspect");
            if info
                .waiters
                .as_ref()
                .is_some_and(|waiters| waiters.len() == 1)
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no waiter shown: {info:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            service
                .force_release(&name, generation)
                .await
                .expect("force_release"),
            "the holder was not evicted"
        );
    };
    let (next, ()) = tokio::join!(waiter, evict);
    let next = next.expect("the waiter is granted after the eviction");
    assert!(next.generation() > generation);
    let mut lease = guard.lease();
    tokio::time::timeout(Duration::from_secs(30), lease.lost())
        .await
        .expect("the evicted guard reports its lease lost");
    assert!(
        guard.sequencer().is_err(),
        "an evicted guard hands out its sequencer"
    );
    next.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_force_release_compares_the_generation() {
    use palisade_core::SessionOptions;
    use palisade_lock_etcd::{EtcdConfig, EtcdLockClient};
    let etcd = palisade_testkit::etcd::EtcdServer::start();
    let connection = EtcdLockClient::connect(EtcdConfig::new(etcd.endpoints()).expect("config"))
        .await
        .expect("connect");
    let options = SessionOptions::default();
    let holder = connection.session(options.clone()).await.expect("session");
    let waiter = connection.session(options).await.expect("session");
    force_release_compares_the_generation(&holder, &waiter, &connection, "lib-etcd").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_force_release_compares_the_generation() {
    use palisade_core::SessionOptions;
    use palisade_lock_redis::{RedisConfig, RedisLockClient};
    let redis = palisade_testkit::redis::RedisServer::start();
    let client = RedisLockClient::connect(RedisConfig::new(redis.url()))
        .await
        .expect("connect");
    let options = SessionOptions::default();
    let holder = client.session(options.clone()).expect("session");
    let waiter = client.session(options).expect("session");
    force_release_compares_the_generation(&holder, &waiter, &client, "lib-redis").await;
}
