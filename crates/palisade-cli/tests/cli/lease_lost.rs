//! The lease ends from outside while the command runs: the command is told
//! at once (SIGTERM to its process group), killed after the grace period if
//! it ignores that, and `palisade lock` exits 7.

use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use crate::fixtures::{Backend, code, next_line, palisade, read, scratch, unique_name};

/// Generous bounds for a loaded 2-core machine. The lease is 2 s; every
/// backend notices a revoked lease or a deleted key well within a TTL.
const STARTUP_LIMIT: Duration = Duration::from_secs(30);
const NOTICE_LIMIT: Duration = Duration::from_secs(8);

/// A running `palisade lock` whose command has said `ready`.
struct Holding {
    child: tokio::process::Child,
    sequencer: palisade_core::Sequencer,
    /// What the command printed after `ready` (its pid, for some scripts).
    ready_line: String,
    stderr: tokio::task::JoinHandle<String>,
}

/// Starts `palisade lock --ttl 2s --grace <grace> <name> -- sh -c <script>`
/// and waits until the script prints its first line.
async fn hold(
    backend: &Backend,
    name: &str,
    grace: &str,
    script: &str,
    dir: &std::path::Path,
) -> Holding {
    let mut command = palisade(["lock", "--ttl", "2s", "--grace", grace]);
    command
        .args(backend.flags())
        .args([name, "--", "sh", "-c", script])
        .env("DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("palisade lock starts");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let acquired = next_line(&mut stderr, STARTUP_LIMIT).await;
    assert!(
        acquired.starts_with("palisade: acquired lock"),
        "{acquired}"
    );
    let sequencer = crate::fixtures::printed_sequencer(&acquired);
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let ready_line = next_line(&mut stdout, STARTUP_LIMIT).await;
    let stderr = tokio::spawn(async move {
        let mut rest = String::new();
        let _ = stderr.into_inner().read_to_string(&mut rest).await;
        rest
    });
    Holding {
        child,
        sequencer,
        ready_line,
        stderr,
    }
}

/// The command traps SIGTERM and records it; ending the lease gets it the
/// signal long before the grace period, and `palisade lock` exits 7.
async fn command_is_told_at_once(backend: Backend) {
    let name = unique_name(backend.name(), "lease-lost");
    let files = scratch();
    // `sleep` runs in the foreground, so the shell's trap only runs once it
    // ends: the signal must reach the whole process group.
    let script = r#"trap 'echo term > "$DIR/term"; exit 0' TERM
echo ready
while :; do sleep 30; done"#;
    let mut holding = hold(&backend, name.as_str(), "20s", script, files.path()).await;
    assert_eq!(holding.ready_line, "ready");

    backend.end_lease(&holding.sequencer);
    let lease_ended = Instant::now();
    let status = tokio::time::timeout(NOTICE_LIMIT, holding.child.wait())
        .await
        .expect("palisade lock stops the command well within the grace period")
        .expect("wait");
    let took = lease_ended.elapsed();
    let stderr = holding.stderr.await.expect("stderr");

    assert_eq!(status.code(), Some(code::LEASE_LOST), "{stderr}");
    assert_eq!(
        read(files.path(), "term").as_deref(),
        Some("term\n"),
        "the command's SIGTERM trap ran; stderr: {stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "palisade: lease lost on lock `{name}` (generation {})",
            holding.sequencer.generation()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("sent SIGTERM to the command"), "{stderr}");
    assert!(!stderr.contains("sent SIGKILL"), "{stderr}");
    // Well before the 20 s grace would have run out.
    assert!(took < NOTICE_LIMIT, "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lost_on_etcd_stops_the_command() {
    let backend = Backend::etcd();
    command_is_told_at_once(backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lost_on_redis_stops_the_command() {
    let backend = Backend::redis();
    command_is_told_at_once(backend).await;
}

/// A command that ignores SIGTERM is killed once the grace period is
/// over; `palisade lock` still exits 7 and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    let backend = Backend::redis();
    let name = unique_name(backend.name(), "ignores-term");
    let files = scratch();
    let script = r#"trap '' TERM
echo $$
while :; do sleep 0.2; done"#;
    let mut holding = hold(&backend, name.as_str(), "1s", script, files.path()).await;
    let shell_pid: i32 = holding.ready_line.trim().parse().expect("the shell's pid");

    backend.end_lease(&holding.sequencer);
    let status = tokio::time::timeout(NOTICE_LIMIT + Duration::from_secs(1), holding.child.wait())
        .await
        .expect("palisade lock kills the command after the grace period")
        .expect("wait");
    let stderr = holding.stderr.await.expect("stderr");

    assert_eq!(status.code(), Some(code::LEASE_LOST), "{stderr}");
    let lost_at = stderr.find("lease lost on lock").expect("lease lost line");
    let killed_at = stderr
        .find("did not exit within 1 s of SIGTERM; sent SIGKILL")
        .unwrap_or_else(|| panic!("SIGKILL line in {stderr}"));
    assert!(lost_at < killed_at, "{stderr}");
    // `palisade lock` reaped the shell it started: the pid is gone.
    assert_eq!(kill(Pid::from_raw(shell_pid), None), Err(Errno::ESRCH));
}

/// Whether `pid` is gone (or a zombie waiting for init to reap it).
fn is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the command name in parentheses: `pid (comm) S ...`.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// The command exits on SIGTERM but leaves a background job that ignores
/// it: the job is in the command's process group and is killed when the
/// grace period ends, so nothing of the command goes on without the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_jobs_of_the_command_are_killed_after_the_grace() {
    let backend = Backend::redis();
    let name = unique_name(backend.name(), "background-job");
    let files = scratch();
    let script = r#"trap 'exit 0' TERM
sh -c 'trap "" TERM; echo $$; while :; do sleep 0.2; done' &
wait"#;
    let mut holding = hold(&backend, name.as_str(), "1s", script, files.path()).await;
    let job_pid: i32 = holding.ready_line.trim().parse().expect("the job's pid");

    backend.end_lease(&holding.sequencer);
    let status = tokio::time::timeout(NOTICE_LIMIT + Duration::from_secs(1), holding.child.wait())
        .await
        .expect("palisade lock ends after the grace period")
        .expect("wait");
    let stderr = holding.stderr.await.expect("stderr");

    assert_eq!(status.code(), Some(code::LEASE_LOST), "{stderr}");
    assert!(stderr.contains("sent SIGKILL"), "{stderr}");
    // SIGKILL was sent before `palisade lock` exited; the kernel ends the
    // job at once, but init may take a moment to reap it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !is_gone(job_pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(is_gone(job_pid), "background job {job_pid} still running");
}
