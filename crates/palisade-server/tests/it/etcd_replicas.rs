//! Three `palisade-server --store etcd://...` processes over one 3-member
//! etcd cluster are replicas of one store: writers spread their writes
//! over all three, an older holder's late write goes to any of them, one
//! replica is killed with `kill -9` and then the etcd leader, mid-stream.
//! Every acknowledged write is there at the end, and no late write of an
//! older holder is ever accepted.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use palisade_core::Sequencer;
use palisade_testkit::etcd::EtcdCluster;
use palisade_testkit::process::{self, ChildProcess};
use tokio::sync::Notify;
use tokio::time::Instant;

const REPLICAS: usize = 3;
const LOCKS: usize = 3;
const WRITES: u64 = 30;
const WRITES_PER_HOLDER: u64 = 6;
/// One write, retries over the replicas included: an etcd election on a
/// loaded 2-core machine takes seconds, not a minute.
const WRITE_BOUND: Duration = Duration::from_secs(60);

fn start_replica(spec: &str, dir: &Path, index: usize) -> (ChildProcess, String) {
    let port = process::free_port();
    let log = dir.join(format!("replica-{index}.log"));
    let mut command = Command::new(env!("CARGO_BIN_EXE_palisade-server"));
    command
        .args(["--store", spec, "--listen", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("a log file"));
    let child = ChildProcess::spawn(&format!("replica {index}"), &mut command, Some(&log))
        .expect("starting palisade-server");
    process::wait_for_tcp(
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(30),
    )
    .unwrap_or_else(|error| panic!("replica {index}: {error}\n{}", child.log_tail(4000)));
    (child, format!("http://127.0.0.1:{port}"))
}

fn header(lock: &str, generation: u64) -> String {
    format!("v1;lock={lock};mode=exclusive;gen={generation}")
}

/// Sends write `index` of `lock` until a replica acknowledges it, starting
/// at replica `index % 3` and moving on after any failure, with the same
/// idempotency key: a write in doubt is settled by its retry.
async fn write_until_acknowledged(
    http: &reqwest::Client,
    bases: &[String],
    lock: &str,
    index: u64,
) -> u64 {
    let generation = 1 + index / WRITES_PER_HOLDER;
    let started = Instant::now();
    let mut replica = index as usize;
    loop {
        let base = &bases[replica % REPLICAS];
        let response = http
            .put(format!("{base}/v1/locks/{lock}/keys/k{index}"))
            .header(Sequencer::HTTP_HEADER, header(lock, generation))
            .header("idempotency-key", format!("{lock}-{index}"))
            .body(format!("v{index}"))
            .timeout(Duration::from_secs(15))
            .send()
            .await;
        match response {
            Ok(response) if response.status() == 200 => return generation,
            Ok(response) if response.status().is_server_error() => {}
            Ok(response) => panic!(
                "{lock} write {index}: {} {}",
                response.status(),
                response.text().await.unwrap_or_default()
            ),
            Err(_) => {}
        }
        assert!(
            started.elapsed() < WRITE_BOUND,
            "{lock} write {index} not acknowledged within {WRITE_BOUND:?}"
        );
        replica += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_over_etcd_lose_nothing_and_accept_no_stale_write() {
    let mut cluster = tokio::task::spawn_blocking(EtcdCluster::start)
        .await
        .expect("starting a 3-member etcd cluster");
    let hosts: Vec<String> = cluster
        .endpoints()
        .iter()
        .map(|endpoint| endpoint.trim_start_matches("http://").to_owned())
        .collect();
    let spec = format!(
        "etcd://{}/palisade-test/replicas-{}",
        hosts.join(","),
        std::process::id()
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut replicas = Vec::new();
    let mut bases = Vec::new();
    for index in 0..REPLICAS {
        let (child, base) = start_replica(&spec, dir.path(), index);
        replicas.push(child);
        bases.push(base);
    }
    let bases = Arc::new(bases);
    let http = reqwest::Client::new();

    let acknowledged = Arc::new(AtomicUsize::new(0));
    let total = LOCKS * WRITES as usize;
    let kill_replica = Arc::new(Notify::new());
    let kill_leader = Arc::new(Notify::new());
    let late_accepted = Arc::new(AtomicUsize::new(0));
    let mut writers = Vec::new();
    for l in 0..LOCKS {
        let (http, bases, acknowledged) = (http.clone(), bases.clone(), acknowledged.clone());
        let (kill_replica, kill_leader, late_accepted) = (
            kill_replica.clone(),
            kill_leader.clone(),
            late_accepted.clone(),
        );
        writers.push(tokio::spawn(async move {
            let lock = format!("replicated-{l}");
            for index in 0..WRITES {
                let generation = write_until_acknowledged(&http, &bases, &lock, index).await;
                // An older holder's late write, to any replica: never 2xx.
                if generation > 1 {
                    let late = http
                        .put(format!(
                            "{}/v1/locks/{lock}/keys/late",
                            bases[(index as usize + 1) % REPLICAS]
                        ))
                        .header(Sequencer::HTTP_HEADER, header(&lock, generation - 1))
                        .body("late")
                        .timeout(Duration::from_secs(15))
                        .send()
                        .await;
                    if let Ok(response) = late {
                        if response.status().is_success() {
                            late_accepted.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                let done = acknowledged.fetch_add(1, Ordering::SeqCst) + 1;
                if done == total / 3 {
                    kill_replica.notify_one();
                }
                if done == 2 * total / 3 {
                    kill_leader.notify_one();
                }
            }
            lock
        }));
    }

    kill_replica.notified().await;
    replicas[0].kill().expect("kill -9 of replica 0");
    kill_leader.notified().await;
    let cluster = tokio::task::spawn_blocking(move || {
        let leader = cluster
            .wait_for_leader(Duration::from_secs(30))
            .expect("a leader before the kill");
        cluster.kill(leader).expect("kill -9 of the etcd leader");
        cluster
    })
    .await
    .expect("the leader kill");

    let mut locks = Vec::new();
    for writer in writers {
        locks.push(writer.await.expect("a writer"));
    }
    assert_eq!(
        late_accepted.load(Ordering::SeqCst),
        0,
        "a late write of an older holder was accepted"
    );
    for lock in &locks {
        for index in 0..WRITES {
            let read = http
                .get(format!("{}/v1/locks/{lock}/keys/k{index}", bases[1]))
                .send()
                .await
                .expect("replica 1 answers");
            assert_eq!(
                read.status(),
                200,
                "{lock}: acknowledged write {index} lost"
            );
            assert_eq!(read.text().await.unwrap(), format!("v{index}"));
        }
        let late = http
            .get(format!("{}/v1/locks/{lock}/keys/late", bases[2]))
            .send()
            .await
            .expect("replica 2 answers");
        assert_eq!(late.status(), 404, "{lock}: a late write was applied");
    }
    drop(replicas);
    tokio::task::spawn_blocking(move || drop(cluster))
        .await
        .expect("stopping the cluster");
}
