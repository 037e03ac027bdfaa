//! `palisade lock` fences on acquire: with a resource server known, it
//! raises the lock's marks to its new generation before the command
//! starts, so a holder paused past its lease is refused even when the new
//! holder has not written anything yet.

use crate::fixtures::{
    Backend, Finished, PausedHolder, code, finish, palisade, scratch, serve, serve_with,
    unique_name,
};

/// A takes the lock and is stopped (SIGSTOP) with a write in hand; its
/// lease runs out; B takes the lock and does nothing but start a command
/// that exits at once; then A's write goes out. Returns B's run and the
/// exit code of A's `palisade put`.
async fn paused_holder_writes_after_a_new_grant(
    backend: &Backend,
    test: &str,
    b_flags: &[&str],
) -> (
    Finished,
    i32,
    crate::fixtures::Served,
    palisade_core::LockName,
) {
    let served = serve().await;
    let name = unique_name(backend.name(), test);
    // A: fences on acquire too (it knows the server), then stops with its
    // write in hand: no more renewals; the lock service ends its lease.
    let a = PausedHolder::start(backend, &served, &name, "2s").await;

    // B waits for A's lease to run out, then its command exits at once:
    // B writes nothing.
    let mut b = palisade(["lock", "--wait", "30s", "--server", &served.url]);
    b.args(b_flags)
        .args(backend.flags())
        .args([name.as_str(), "--", "true"]);
    let b = finish(b).await;

    // A's write goes out now; A's own `palisade lock` is still stopped.
    let put_code = a.write_late().await;
    (b, put_code, served, name)
}

async fn late_write_is_refused_after_a_fenced_grant(backend: Backend) {
    let (b, put_code, served, name) =
        paused_holder_writes_after_a_new_grant(&backend, "fenced", &[]).await;
    b.assert_code(code::OK);
    let b_sequencer = crate::fixtures::printed_sequencer(&b.stderr);
    let generation = b_sequencer.generation();
    assert!(
        b.stderr.contains(&format!(
            "palisade: fenced lock `{name}` at {} (marks: exclusive {generation}, shared 0): older holders are refused from now on",
            served.url
        )),
        "{}",
        b.stderr
    );
    assert_eq!(put_code, code::STALE, "A's late write is refused as stale");
    let read = served.get(&name, "k").await;
    read.one_line_error(code::NOT_FOUND);
}

/// The same without the fence: A's late write is accepted, which is the
/// window the fence closes.
async fn late_write_lands_without_the_fence(backend: Backend) {
    let (b, put_code, served, name) =
        paused_holder_writes_after_a_new_grant(&backend, "unfenced", &["--no-fence"]).await;
    b.assert_code(code::OK);
    assert!(!b.stderr.contains("fenced lock"), "{}", b.stderr);
    assert_eq!(put_code, code::OK, "without the fence A's late write lands");
    let read = served.get(&name, "k").await;
    assert_eq!(read.assert_code(code::OK).stdout, b"from-a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_late_write_is_refused_after_a_fenced_grant() {
    late_write_is_refused_after_a_fenced_grant(Backend::etcd()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_late_write_is_refused_after_a_fenced_grant() {
    late_write_is_refused_after_a_fenced_grant(Backend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_late_write_is_refused_after_a_fenced_grant() {
    late_write_is_refused_after_a_fenced_grant(Backend::postgres()).await;
}

/// ZooKeeper: A's `palisade lock`, stopped, sends no pings; the ensemble
/// expires its session after the 2 s timeout and deletes its node; B is
/// granted with a later creation zxid, fences, and A's late write is
/// refused (#26's cross-process case, CLI half).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_late_write_is_refused_after_a_fenced_grant() {
    late_write_is_refused_after_a_fenced_grant(Backend::zookeeper()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_late_write_lands_without_the_fence() {
    late_write_lands_without_the_fence(Backend::zookeeper()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_late_write_lands_without_the_fence() {
    late_write_lands_without_the_fence(Backend::etcd()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_late_write_lands_without_the_fence() {
    late_write_lands_without_the_fence(Backend::redis()).await;
}

/// A server that cannot be reached: the command does not run, and the
/// message points at `--no-fence`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_stops_the_command() {
    let backend = Backend::redis();
    let name = unique_name(backend.name(), "unreachable");
    let files = scratch();
    let marker = files.path().join("ran");
    let port = palisade_testkit::process::free_port();
    let mut locked = palisade(["lock", "--quiet"]);
    locked
        .args(backend.flags())
        .args(["--server", &format!("http://127.0.0.1:{port}")])
        .args([name.as_str(), "--", "touch"])
        .arg(&marker);
    let locked = finish(locked).await;
    let line = locked.one_line_error(code::ERROR);
    assert!(
        line.contains(&format!("cannot fence lock `{name}`")),
        "{line}"
    );
    assert!(
        line.contains("cannot connect to the resource server"),
        "{line}"
    );
    assert!(
        line.contains("the command did not run (--no-fence"),
        "{line}"
    );
    assert!(!marker.exists(), "the command ran");
}

/// A fence refused as stale right after a grant: the lock service's
/// generations are behind the server's marks. The command does not run;
/// exit code 4 and the recovery command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_fence_names_the_regression_and_its_recovery() {
    let backend = Backend::etcd();
    let served = serve().await;
    let name = unique_name(backend.name(), "behind");
    // Marks far above anything this fresh etcd will hand out, as after a
    // restore of an old etcd backup.
    let ahead = format!("v1;lock={name};mode=exclusive;gen=1000000000");
    finish(palisade([
        "put",
        "--server",
        &served.url,
        "--sequencer",
        &ahead,
        name.as_str(),
        "k",
        "v",
    ]))
    .await
    .assert_code(code::OK);
    let files = scratch();
    let marker = files.path().join("ran");
    let mut locked = palisade(["lock", "--quiet", "--server", &served.url]);
    locked
        .args(backend.flags())
        .args([name.as_str(), "--", "touch"])
        .arg(&marker);
    let locked = finish(locked).await;
    let line = locked.one_line_error(code::STALE);
    assert!(line.contains("went backwards"), "{line}");
    assert!(
        line.contains(&format!(
            "`palisade raise-floor {name} --server {}`",
            served.url
        )),
        "{line}"
    );
    assert!(!marker.exists(), "the command ran");
}

/// Signed sequencers and bearer tokens: the fence sends the signed
/// sequencer with the token, as `palisade put` does, and a server that
/// requires both accepts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_carries_the_signature_and_the_token() {
    let backend = Backend::redis();
    let files = scratch();
    let ring = files.path().join("ring");
    let tokens = files.path().join("tokens");
    std::fs::write(
        &ring,
        "k1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n",
    )
    .expect("ring");
    let token = "fenceTokenAbcdefghijklmnop";
    std::fs::write(&tokens, format!("{token} cli/\n")).expect("tokens");
    let served = serve_with(&[
        "--verify-keys-file".as_ref(),
        ring.as_os_str(),
        "--tokens-file".as_ref(),
        tokens.as_os_str(),
    ])
    .await;
    let name = unique_name(backend.name(), "signed");

    let mut locked = palisade(["lock", "--server", &served.url]);
    locked
        .args(backend.flags())
        .arg("--sign-key-file")
        .arg(&ring)
        .args([name.as_str(), "--", "sh", "-c"])
        .arg(r#""$PALISADE_BIN" put "$PALISADE_LOCK" k signed"#)
        .env("PALISADE_TOKEN", token);
    let locked = finish(locked).await;
    locked.assert_code(code::OK);
    assert!(
        locked.stderr.contains("palisade: fenced lock"),
        "{}",
        locked.stderr
    );

    // Without the token the fence is refused by the server, and the
    // command does not run.
    let marker = files.path().join("ran");
    let mut untokened = palisade(["lock", "--quiet", "--server", &served.url]);
    untokened
        .args(backend.flags())
        .arg("--sign-key-file")
        .arg(&ring)
        .args([name.as_str(), "--", "touch"])
        .arg(&marker);
    let line = finish(untokened).await.one_line_error(code::ERROR);
    assert!(line.contains("cannot fence lock"), "{line}");
    assert!(!marker.exists(), "the command ran");
}
