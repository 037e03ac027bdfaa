//! Waiting for a held lock (`--wait`, progress lines), `--wait 0s`, signals
//! forwarded to the command, and the release that follows.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::fixtures::{Backend, code, finish, next_line, palisade, read, scratch, unique_name};

/// `palisade: waiting for lock `<name>` (<n> s)`: the first line is due
/// after one second, but a loaded machine may print it a little late.
fn is_progress(line: &str, name: &palisade_core::LockName) -> bool {
    line.strip_prefix(&format!("palisade: waiting for lock `{name}` ("))
        .and_then(|rest| rest.strip_suffix(" s)"))
        .is_some_and(|seconds| seconds.parse::<u64>().is_ok_and(|seconds| seconds >= 1))
}

async fn waiting_and_signals(backend: Backend) {
    let name = unique_name(backend.name(), "waiting");
    let files = scratch();

    // Holder A: traps SIGTERM, exits 3 when it comes.
    let mut holder = palisade(["lock", "--quiet"]);
    holder
        .args(backend.flags())
        .args([name.as_str(), "--", "sh", "-c"])
        .arg(
            r#"trap 'echo forwarded > "$DIR/a"; exit 3' TERM
echo ready
while :; do sleep 30; done"#,
        )
        .env("DIR", files.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut holder = holder.spawn().expect("palisade lock starts");
    let mut holder_stdout = BufReader::new(holder.stdout.take().expect("stdout")).lines();
    assert_eq!(
        next_line(&mut holder_stdout, Duration::from_secs(30)).await,
        "ready"
    );

    // B waits 1.5 s, saying so, and gives up with 6; its command never runs.
    let mut waiter = palisade(["lock", "--wait", "1500ms"]);
    waiter
        .args(backend.flags())
        .args([name.as_str(), "--", "sh", "-c", r#"echo ran > "$DIR/b""#])
        .env("DIR", files.path());
    let waiter = finish(waiter).await;
    waiter.assert_code(code::LOCK_NOT_ACQUIRED);
    let lines: Vec<&str> = waiter.stderr.lines().collect();
    assert!(
        lines.first().is_some_and(|line| is_progress(line, &name)),
        "{}",
        waiter.stderr
    );
    assert_eq!(
        lines.last().copied(),
        Some(
            format!(
                "palisade: lock `{name}` was not granted within 1.5 s; the command did not run"
            )
            .as_str()
        ),
        "{}",
        waiter.stderr
    );
    assert_eq!(read(files.path(), "b"), None);

    // D waits without a limit until SIGINT: it gives up with 130 and gives
    // its place in the queue back (checked by the last step: a queue entry
    // left behind would make `--wait 0s` find the lock taken).
    let mut interrupted = palisade(["lock"]);
    interrupted
        .args(backend.flags())
        .args([name.as_str(), "--", "sh", "-c", r#"echo ran > "$DIR/d""#])
        .env("DIR", files.path())
        .stderr(Stdio::piped());
    let mut interrupted = interrupted.spawn().expect("palisade lock starts");
    let mut interrupted_stderr = BufReader::new(interrupted.stderr.take().expect("stderr")).lines();
    let progress = next_line(&mut interrupted_stderr, Duration::from_secs(30)).await;
    assert!(is_progress(&progress, &name), "{progress}");
    let interrupted_pid = i32::try_from(interrupted.id().expect("running")).expect("pid");
    kill(Pid::from_raw(interrupted_pid), Signal::SIGINT).expect("signal palisade lock");
    let status = tokio::time::timeout(Duration::from_secs(20), interrupted.wait())
        .await
        .expect("an interrupted wait ends")
        .expect("wait");
    assert_eq!(status.code(), Some(130));
    assert_eq!(
        next_line(&mut interrupted_stderr, Duration::from_secs(5)).await,
        format!(
            "palisade: interrupted by SIGINT while waiting for lock `{name}`; the command did not run"
        )
    );
    assert_eq!(read(files.path(), "d"), None);

    // C does not wait at all.
    let mut busy = palisade(["lock", "--wait", "0s"]);
    busy.args(backend.flags())
        .args([name.as_str(), "--", "true"]);
    let line = finish(busy).await.one_line_error(code::LOCK_NOT_ACQUIRED);
    assert!(line.contains("is taken"), "{line}");

    // SIGTERM to `palisade lock` reaches the command, whose exit code
    // becomes palisade's; the lock is then released.
    let holder_pid = i32::try_from(holder.id().expect("running")).expect("pid");
    kill(Pid::from_raw(holder_pid), Signal::SIGTERM).expect("signal palisade lock");
    let status = tokio::time::timeout(Duration::from_secs(20), holder.wait())
        .await
        .expect("the command exits on the forwarded signal")
        .expect("wait");
    assert_eq!(status.code(), Some(3));
    assert_eq!(read(files.path(), "a").as_deref(), Some("forwarded\n"));

    let mut next = palisade(["lock", "--wait", "0s"]);
    next.args(backend.flags())
        .args([name.as_str(), "--", "true"]);
    finish(next).await.assert_code(code::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_and_signals_on_etcd() {
    let backend = Backend::etcd();
    waiting_and_signals(backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_and_signals_on_redis() {
    let backend = Backend::redis();
    waiting_and_signals(backend).await;
}
