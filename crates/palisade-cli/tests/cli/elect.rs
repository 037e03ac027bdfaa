//! `palisade elect` as a hot standby, and `palisade leader`: two
//! instances campaign; the leader's `palisade elect` is SIGKILLed; its
//! command dies with it, the standby is elected within the lease plus one
//! hand-off, fences its term on election, and its first write is accepted
//! while a write with the old term is refused.

use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

use crate::fixtures::{Backend, code, is_gone, next_line, palisade, run, serve, unique_name};

/// A campaign can wait for a server's first grant on a loaded machine.
const STARTUP_LIMIT: Duration = Duration::from_secs(30);
/// The lease every instance takes.
const TTL: Duration = Duration::from_secs(2);
/// A hand-off on a loaded 2-core machine (the lock suite's bound is half a
/// TTL), plus the new leader's fence and first write, each one process.
const HANDOFF: Duration = Duration::from_secs(4);

/// The instance's command: prints its pid, its term's sequencer, and the
/// exit code of its first write; then stays.
const COMMAND: &str = r#"echo $$
echo "$PALISADE_SEQUENCER"
"$PALISADE_BIN" put "$PALISADE_LOCK" k "$PALISADE_LEADER_VALUE" > /dev/null 2>&1
echo "$?"
exec sleep 600"#;

struct Instance {
    child: Child,
    out: Lines<BufReader<ChildStdout>>,
}

fn start(backend: &Backend, server: &str, name: &str, value: &str) -> Instance {
    let ttl = format!("{}s", TTL.as_secs());
    let mut command = palisade(["elect", "--quiet", "--ttl", &ttl, "--value", value]);
    command
        .args(backend.flags())
        .args(["--server", server, name, "--", "sh", "-c", COMMAND])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = command.spawn().expect("palisade elect starts");
    let out = BufReader::new(child.stdout.take().expect("stdout")).lines();
    Instance { child, out }
}

/// The command's pid, sequencer and first write's exit code.
async fn elected(instance: &mut Instance, limit: Duration) -> (i32, palisade_core::Sequencer, i32) {
    let pid = next_line(&mut instance.out, limit)
        .await
        .parse()
        .expect("a pid");
    let sequencer = next_line(&mut instance.out, limit)
        .await
        .parse()
        .expect("a sequencer");
    let put = next_line(&mut instance.out, limit)
        .await
        .parse()
        .expect("an exit code");
    (pid, sequencer, put)
}

async fn standby_takes_over(backend: Backend) {
    let served = serve().await;
    let name = unique_name(backend.name(), "elect");
    let mut a = start(&backend, &served.url, name.as_str(), "a");
    let (a_pid, a_term, a_put) = elected(&mut a, STARTUP_LIMIT).await;
    assert_eq!(a_put, code::OK, "the first leader's write");
    let mut b = start(&backend, &served.url, name.as_str(), "b");

    let mut leader = palisade(["leader"]);
    leader.args(backend.flags()).arg(name.as_str());
    let shown = crate::fixtures::finish(leader).await;
    shown.assert_code(code::OK);
    assert_eq!(
        shown.stdout_text().trim(),
        format!("{} a", a_term.generation()),
        "palisade leader shows the first term"
    );

    let a_elect = Pid::from_raw(i32::try_from(a.child.id().expect("A runs")).expect("pid"));
    kill(a_elect, Signal::SIGKILL).expect("SIGKILL A's palisade elect");
    let killed = Instant::now();
    a.child.wait().await.expect("reap A");

    let (b_pid, b_term, b_put) = elected(&mut b, TTL + HANDOFF).await;
    let took = killed.elapsed();
    eprintln!(
        "elect on {}: standby's first fenced write {took:?} after SIGKILL",
        backend.name()
    );
    assert!(
        is_gone(a_pid),
        "the old leader's command outlived its palisade elect"
    );
    assert!(
        b_term.generation() > a_term.generation(),
        "new term {} above the old {}",
        b_term.generation(),
        a_term.generation()
    );
    assert_eq!(b_put, code::OK, "the new leader's first write");
    assert!(took <= TTL + HANDOFF, "took over in {took:?}");

    let late = run([
        "put",
        "--server",
        &served.url,
        "--sequencer",
        &a_term.to_string(),
        name.as_str(),
        "k",
        "late",
    ])
    .await;
    late.one_line_error(code::STALE);
    let read = served.get(&name, "k").await;
    assert_eq!(read.assert_code(code::OK).stdout, b"b");
    let b_elect = Pid::from_raw(i32::try_from(b.child.id().expect("B runs")).expect("pid"));
    let _ = kill(b_elect, Signal::SIGKILL);
    let _ = b.child.wait().await;
    let _ = kill(Pid::from_raw(b_pid), Signal::SIGKILL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_standby_takes_over_and_fences() {
    standby_takes_over(Backend::etcd()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_standby_takes_over_and_fences() {
    standby_takes_over(Backend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_says_none_with_exit_3() {
    let backend = Backend::redis();
    let name = unique_name(backend.name(), "no-leader");
    let mut leader = palisade(["leader"]);
    leader.args(backend.flags()).arg(name.as_str());
    let shown = crate::fixtures::finish(leader).await;
    shown.assert_code(code::NOT_FOUND);
    assert_eq!(shown.stdout_text().trim(), "none");
}

/// A leader stopped with SIGSTOP (its `palisade elect`: no renewals) while
/// its command holds a write; the standby is elected, fences its term and
/// writes; the stopped leader's write then goes out and is refused.
async fn stopped_leader_is_fenced(backend: Backend) {
    let served = serve().await;
    let name = unique_name(backend.name(), "elect-stopped");
    let files = crate::fixtures::scratch();
    let go = files.path().join("go");
    let script = r#"mkfifo "$GO" && echo ready || exit 1
read _ < "$GO"
"$PALISADE_BIN" put "$PALISADE_LOCK" k from-a > /dev/null 2>&1
echo "$?""#;
    let ttl = format!("{}s", TTL.as_secs());
    let mut a = palisade(["elect", "--quiet", "--ttl", &ttl, "--value", "a"]);
    a.args(backend.flags())
        .args([
            "--server",
            &served.url,
            name.as_str(),
            "--",
            "sh",
            "-c",
            script,
        ])
        .env("GO", &go)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut a = a.spawn().expect("palisade elect (A) starts");
    let mut a_out = BufReader::new(a.stdout.take().expect("stdout")).lines();
    assert_eq!(next_line(&mut a_out, STARTUP_LIMIT).await, "ready");
    let a_pid = Pid::from_raw(i32::try_from(a.id().expect("A runs")).expect("pid"));
    kill(a_pid, Signal::SIGSTOP).expect("SIGSTOP A");

    let mut b = palisade(["elect", "--quiet", "--ttl", &ttl, "--value", "b"]);
    b.args(backend.flags()).args([
        "--server",
        &served.url,
        name.as_str(),
        "--",
        "sh",
        "-c",
        r#"exec "$PALISADE_BIN" put "$PALISADE_LOCK" k from-b"#,
    ]);
    crate::fixtures::finish(b).await.assert_code(code::OK);

    let writer = std::thread::spawn(move || {
        use std::io::Write as _;
        let mut fifo = std::fs::OpenOptions::new()
            .write(true)
            .open(&go)
            .expect("open the FIFO");
        fifo.write_all(b"go\n").expect("write the FIFO");
    });
    let late = next_line(&mut a_out, STARTUP_LIMIT).await;
    writer.join().expect("FIFO writer");
    kill(a_pid, Signal::SIGCONT).expect("SIGCONT A");
    let _ = tokio::time::timeout(STARTUP_LIMIT, a.wait()).await;
    assert_eq!(
        late.parse::<i32>().expect("an exit code"),
        code::STALE,
        "the stopped leader's late write is refused"
    );
    let read = served.get(&name, "k").await;
    assert_eq!(read.assert_code(code::OK).stdout, b"from-b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_stopped_leader_is_fenced() {
    stopped_leader_is_fenced(Backend::etcd()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_leader_is_fenced() {
    stopped_leader_is_fenced(Backend::postgres()).await;
}
