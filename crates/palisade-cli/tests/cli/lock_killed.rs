//! `palisade lock` itself killed with SIGKILL (OOM killer, operator,
//! container runtime) while its command runs: nothing renews the lease any
//! more, so nothing of the command may go on. The command and what it
//! started in its process group are gone within a second or so.

use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::fixtures::{Backend, is_gone, next_line, palisade, unique_name};

const STARTUP_LIMIT: Duration = Duration::from_secs(30);
/// The kernel acts at once (parent-death signal; the watchdog's SIGKILL as
/// soon as it reads end-of-file); 3 s leaves room for a loaded machine.
const GONE_LIMIT: Duration = Duration::from_secs(3);

/// Kills whatever of `pids` is still there when a test ends early, so a
/// failed run leaves no `sleep 600` behind.
struct Leftovers(Vec<i32>);

impl Drop for Leftovers {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if !is_gone(pid) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

/// Starts `palisade lock <flags> -- sh -c <script>` where the script prints
/// pids, one per line; SIGKILLs `palisade lock`; returns how long until
/// every printed pid was gone (or panics after [`GONE_LIMIT`]).
async fn kill_the_lock_and_time_the_command(
    backend: &Backend,
    test: &str,
    flags: &[&str],
    script: &str,
    pids: usize,
) -> Duration {
    let name = unique_name(backend.name(), test);
    let mut command = palisade(["lock", "--quiet"]);
    command
        .args(flags)
        .args(backend.flags())
        .args([name.as_str(), "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut lock = command.spawn().expect("palisade lock starts");
    let mut lines = BufReader::new(lock.stdout.take().expect("stdout")).lines();
    let mut printed = Vec::new();
    for _ in 0..pids {
        let line = next_line(&mut lines, STARTUP_LIMIT).await;
        printed.push(line.trim().parse::<i32>().expect("a pid"));
    }
    let leftovers = Leftovers(printed.clone());
    for &pid in &printed {
        assert!(!is_gone(pid), "{pid} runs before the kill");
    }

    let lock_pid = Pid::from_raw(i32::try_from(lock.id().expect("running")).expect("pid"));
    kill(lock_pid, Signal::SIGKILL).expect("SIGKILL palisade lock");
    let killed = Instant::now();
    lock.wait().await.expect("reap palisade lock");
    // Bounded wait on /proc: there is no event for another process's
    // death that this test could wait on.
    while printed.iter().any(|&pid| !is_gone(pid)) && killed.elapsed() < GONE_LIMIT {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = killed.elapsed();
    let alive: Vec<i32> = printed
        .iter()
        .copied()
        .filter(|&pid| !is_gone(pid))
        .collect();
    assert!(
        alive.is_empty(),
        "still running {took:?} after palisade lock was killed: {alive:?}"
    );
    drop(leftovers);
    eprintln!(
        "{test} on {}: all gone {took:?} after SIGKILL",
        backend.name()
    );
    took
}

/// The shell, a background job and the job it waits on: the shell dies by
/// its parent-death signal, the others by the watchdog's SIGKILL to the
/// group.
const SHELL_AND_JOBS: &str = r#"sleep 600 &
echo $!
sh -c 'echo $$; exec sleep 600' &
sleep 0.1
echo $$
wait"#;

async fn command_and_its_group_die_with_the_lock(backend: Backend) {
    kill_the_lock_and_time_the_command(&backend, "killed", &[], SHELL_AND_JOBS, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_command_and_its_group_die_with_palisade_lock() {
    command_and_its_group_die_with_the_lock(Backend::etcd()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_command_and_its_group_die_with_palisade_lock() {
    command_and_its_group_die_with_the_lock(Backend::redis()).await;
}

/// Without a process group of its own the command still dies (its
/// parent-death signal); what it started is out of reach by design.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_group_the_command_itself_dies_with_palisade_lock() {
    let backend = Backend::redis();
    kill_the_lock_and_time_the_command(
        &backend,
        "killed-no-group",
        &["--no-process-group"],
        "echo $$; exec sleep 600",
        1,
    )
    .await;
}
