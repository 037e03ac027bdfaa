//! Interoperability with kazoo (Python): a Palisade holder and a kazoo
//! holder on the same lock path exclude each other, in both orders, and
//! kazoo's read/write lock agrees with Palisade's modes. kazoo runs as
//! Debian's `python3-kazoo` under `/usr/bin/python3`, steered by lines
//! (`kazoo_holder.py` beside this file).

use std::process::Stdio;
use std::time::Duration;

use palisade_core::{Lock, LockGuard, LockName, Mode};
use palisade_lock_zookeeper::lock_path;
use palisade_testkit::zookeeper::ZooKeeperServer;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::fixtures::{client, config, options, session, unique_prefix};

/// How long a kazoo answer may take (a Python start, a ZooKeeper session).
const ANSWER: Duration = Duration::from_secs(30);

/// A kazoo lock in a Python process.
struct Kazoo {
    _child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Kazoo {
    async fn start(hosts: &str, path: &str, kind: &str) -> Kazoo {
        let python = "/usr/bin/python3";
        assert!(
            std::path::Path::new(python).is_file()
                && std::process::Command::new(python)
                    .args(["-c", "import kazoo"])
                    .status()
                    .is_ok_and(|status| status.success()),
            "{}",
            palisade_testkit::process::install_hint(
                "kazoo for /usr/bin/python3",
                "--no-install-recommends python3-kazoo"
            )
        );
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/kazoo_holder.py");
        let mut child = Command::new(python)
            .args([script, hosts, path, kind])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("starting the kazoo holder");
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped")).lines();
        let mut kazoo = Kazoo {
            _child: child,
            stdin,
            stdout,
        };
        assert_eq!(kazoo.answer().await, "READY");
        kazoo
    }

    async fn say(&mut self, line: &str) {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("writing to kazoo");
    }

    async fn answer(&mut self) -> String {
        tokio::time::timeout(ANSWER, self.stdout.next_line())
            .await
            .expect("kazoo answers in time")
            .expect("reading kazoo")
            .expect("kazoo is still running")
    }

    async fn acquire(&mut self, timeout: Duration) -> String {
        self.say(&format!("ACQUIRE {}", timeout.as_secs_f64()))
            .await;
        self.answer().await
    }

    async fn release(&mut self) {
        self.say("RELEASE").await;
        assert_eq!(self.answer().await, "RELEASED");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn palisade_and_kazoo_exclude_each_other_in_both_orders() {
    let server = ZooKeeperServer::start();
    let config = config(&server.connect_string(), &unique_prefix("kazoo"));
    let client = client(config.clone()).await;
    let locks = session(&client, options(Duration::from_secs(4))).await;
    let name = LockName::new("orders/42").unwrap();
    let path = lock_path(&config.root(), &name);
    let mut kazoo = Kazoo::start(&server.connect_string(), &path, "lock").await;

    // kazoo first: Palisade is refused, then granted once kazoo releases.
    assert_eq!(kazoo.acquire(Duration::from_secs(10)).await, "HELD");
    assert!(
        locks
            .try_acquire(&name, Mode::Exclusive)
            .await
            .unwrap()
            .is_none(),
        "Palisade was granted a lock kazoo holds"
    );
    let waiting = tokio::spawn({
        let (locks, name) = (locks.clone(), name.clone());
        async move { locks.acquire(&name, Mode::Exclusive).await }
    });
    // The waiter is queued behind kazoo's node (an event-driven wait: the
    // release below wakes it).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "Palisade did not wait for kazoo");
    kazoo.release().await;
    let guard = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("granted after kazoo released")
        .unwrap()
        .unwrap();

    // Palisade first: kazoo times out, then gets it once Palisade releases.
    assert_eq!(kazoo.acquire(Duration::from_secs(1)).await, "TIMEOUT");
    guard.release().await.unwrap();
    assert_eq!(kazoo.acquire(Duration::from_secs(10)).await, "HELD");
    kazoo.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_read_and_write_locks_agree_with_palisade_modes() {
    let server = ZooKeeperServer::start();
    let config = config(&server.connect_string(), &unique_prefix("kazoo-rw"));
    let client = client(config.clone()).await;
    let locks = session(&client, options(Duration::from_secs(4))).await;
    let name = LockName::new("catalog").unwrap();
    let path = lock_path(&config.root(), &name);
    let mut reader = Kazoo::start(&server.connect_string(), &path, "read").await;
    let mut writer = Kazoo::start(&server.connect_string(), &path, "write").await;

    // A Palisade reader and a kazoo reader share it; a kazoo writer waits.
    let shared = locks.acquire(&name, Mode::Shared).await.unwrap();
    assert_eq!(reader.acquire(Duration::from_secs(10)).await, "HELD");
    assert_eq!(writer.acquire(Duration::from_secs(1)).await, "TIMEOUT");
    reader.release().await;
    shared.release().await.unwrap();

    // A kazoo writer excludes a Palisade reader.
    assert_eq!(writer.acquire(Duration::from_secs(10)).await, "HELD");
    let other = session(&client, options(Duration::from_secs(4))).await;
    assert!(
        other
            .try_acquire(&name, Mode::Shared)
            .await
            .unwrap()
            .is_none(),
        "a Palisade reader was granted while a kazoo writer holds"
    );
    writer.release().await;
    let granted = other.try_acquire(&name, Mode::Shared).await.unwrap();
    assert!(
        granted.is_some(),
        "free again after kazoo's writer released"
    );
    assert!(granted.unwrap().is_valid());
}
