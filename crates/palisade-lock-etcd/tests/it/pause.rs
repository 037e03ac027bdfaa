//! A real pause: a child process holds the lock and is frozen with SIGSTOP
//! past its TTL. Another client takes the lock with a higher generation;
//! after SIGCONT the child's guard reports the lease lost and refuses to
//! hand out its sequencer, and the live check calls that sequencer dead.
//!
//! (The resource server refusing the child's late write with 409 is the
//! server's half of this story, tested with the server.)
//!
//! The child is this same test binary, run with `--exact` on this test and
//! an environment variable that gives it the child's role.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use palisade_core::{LeaseState, LiveCheck, Liveness, Lock, LockGuard, Mode, Sequencer};
use palisade_testkit::process::ChildProcess;

use crate::fixtures::*;

const TEST_NAME: &str = "pause::a_paused_holder_loses_its_lease_to_a_newer_generation";
const ROLE: &str = "PALISADE_ETCD_PAUSE_CHILD";
const TTL_SECS: u64 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_loses_its_lease_to_a_newer_generation() {
    if let Ok(setup) = std::env::var(ROLE) {
        return child(&setup).await;
    }
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("pause");
    let lock = name("pause");
    let mut child = ChildProcess::spawn(
        "paused holder",
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(ROLE, format!("{}|{prefix}", etcd.endpoints().join(",")))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
        None,
    )
    .unwrap();
    let mut to_child = child.child_mut().stdin.take().unwrap();
    let lines = child_lines(&mut child);
    let held: Sequencer = expect_line(&lines, "HELD ").parse().unwrap();
    let check = connect(&etcd.endpoints(), &prefix).await.live_check();
    assert_eq!(check.check(&held).await.unwrap(), Liveness::Held);

    // Freeze the child: its keep-alive stops with everything else.
    child.pause().unwrap();
    let successor = session(
        &connect(&etcd.endpoints(), &prefix).await,
        options(TTL_SECS),
    )
    .await;
    let guard = successor
        .acquire_timeout(&lock, Mode::Exclusive, Duration::from_secs(30))
        .await
        .expect("the lock passes on once the frozen child's lease expires");
    assert!(guard.generation() > held.generation());
    assert_eq!(check.check(&held).await.unwrap(), Liveness::NotHeld);
    assert_eq!(
        check.check(&guard.sequencer().unwrap()).await.unwrap(),
        Liveness::Held
    );

    // Thaw it and ask what its guard says.
    child.resume().unwrap();
    writeln!(to_child, "CHECK").unwrap();
    let state = expect_line(&lines, "STATE ");
    assert!(
        state.starts_with("lost:"),
        "the resumed child thinks it holds the lock: {state}"
    );
    let sequencer = expect_line(&lines, "SEQUENCER ");
    assert_eq!(sequencer, "lease_lost");
    let status = child.child_mut().wait().unwrap();
    assert!(status.success(), "the child failed: {status}");
    guard.release().await.unwrap();
}

/// The child's side: take the lock, say so, wait, report.
async fn child(setup: &str) {
    let (endpoints, prefix) = setup.split_once('|').expect("endpoints|prefix");
    let endpoints: Vec<String> = endpoints.split(',').map(str::to_owned).collect();
    let locks =
        palisade_lock_etcd::EtcdLock::connect(config(&endpoints, prefix), options(TTL_SECS))
            .await
            .expect("child connects");
    let guard = locks
        .acquire(&name("pause"), Mode::Exclusive)
        .await
        .expect("child acquires");
    println!("PALISADE HELD {}", guard.sequencer().unwrap());
    let mut line = String::new();
    tokio::task::block_in_place(|| std::io::stdin().read_line(&mut line)).unwrap();
    let state = match guard.lease().state() {
        LeaseState::Held { .. } => "held".to_owned(),
        LeaseState::Lost(reason) => format!("lost:{}", reason.as_str()),
        LeaseState::Released => "released".to_owned(),
    };
    println!("PALISADE STATE {state}");
    let sequencer = match guard.sequencer() {
        Ok(sequencer) => format!("ok:{sequencer}"),
        Err(error) => error.kind().to_owned(),
    };
    println!("PALISADE SEQUENCER {sequencer}");
}

/// What the child's stdout says after `PALISADE `, line by line, from a
/// reader thread. libtest prints its own text too, and the first of our
/// lines shares a line with libtest's `test <name> ... `.
fn child_lines(child: &mut ChildProcess) -> mpsc::Receiver<String> {
    let stdout = child.child_mut().stdout.take().unwrap();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Some(start) = line.find("PALISADE ") {
                let ours = &line[start + "PALISADE ".len()..];
                if sender.send(ours.to_owned()).is_err() {
                    return;
                }
            }
        }
    });
    receiver
}

fn expect_line(lines: &mpsc::Receiver<String>, prefix: &str) -> String {
    let line = tokio::task::block_in_place(|| lines.recv_timeout(Duration::from_secs(30)))
        .unwrap_or_else(|e| panic!("no `{prefix}` line from the child: {e}"));
    line.strip_prefix(prefix)
        .unwrap_or_else(|| panic!("expected `{prefix}...`, got `{line}`"))
        .to_owned()
}
