//! The crash test: the `palisade-server` binary, in its default durable
//! mode, is killed with SIGKILL in the middle of a stream of acknowledged
//! writes and restarted on the same data directory. Every write that got a
//! 2xx must be there, the marks must not have gone backwards, and a stale
//! write must still be refused.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use palisade_core::Sequencer;
use palisade_testkit::process::ChildProcess;
use tokio::sync::Notify;

/// Starts the server binary on a free port; returns it and its base URL.
fn spawn_server(data_dir: &Path, log: &Path) -> (ChildProcess, String) {
    let log_file = std::fs::File::create(log).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_palisade-server"));
    command
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--listen", "127.0.0.1:0", "--durability", "flushed"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file);
    let mut child = ChildProcess::spawn("palisade-server", &mut command, Some(log)).unwrap();
    let stdout = child.child_mut().stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("palisade-server listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}\n{}", child.log_tail(4000)))
        .to_owned();
    (child, format!("http://{addr}"))
}

/// One acknowledged write.
#[derive(Debug, Clone)]
struct Acked {
    lock: String,
    key: String,
    value: String,
    generation: u64,
}

const N_OWN_LOCK_WRITERS: usize = 3;
const N_SHARED_LOCK_WRITERS: usize = 3;
/// Kill once this many writes have been acknowledged (the writers keep
/// going until the kill lands).
const KILL_AFTER: u64 = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_and_marks_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let (mut child, base) = spawn_server(&data_dir, &dir.path().join("server-1.log"));

    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let acked = Arc::new(Mutex::new(Vec::<Acked>::new()));
    let n_acked = Arc::new(AtomicU64::new(0));
    let enough = Arc::new(Notify::new());
    let shared_generation = Arc::new(AtomicU64::new(0));

    let mut writers = Vec::new();
    for writer in 0..N_OWN_LOCK_WRITERS + N_SHARED_LOCK_WRITERS {
        let (http, base, acked, n_acked, enough, shared_generation) = (
            http.clone(),
            base.clone(),
            Arc::clone(&acked),
            Arc::clone(&n_acked),
            Arc::clone(&enough),
            Arc::clone(&shared_generation),
        );
        writers.push(tokio::spawn(async move {
            let own_lock = writer < N_OWN_LOCK_WRITERS;
            let lock = if own_lock {
                format!("crash/own-{writer}")
            } else {
                "crash/shared".to_owned()
            };
            let mut own_generation = 0;
            let mut n_refused = 0u64;
            loop {
                let generation = if own_lock {
                    own_generation += 1;
                    own_generation
                } else {
                    shared_generation.fetch_add(1, Ordering::SeqCst) + 1
                };
                let key = format!("w{writer}-g{generation}");
                let value = format!("writer {writer} generation {generation}");
                let sequencer = format!("v1;lock={lock};mode=exclusive;gen={generation}");
                let lock_segment = lock.replace('/', "%2F");
                let result = http
                    .put(format!("{base}/v1/locks/{lock_segment}/keys/{key}"))
                    .header(Sequencer::HTTP_HEADER, sequencer)
                    .body(value.clone())
                    .send()
                    .await;
                match result {
                    Ok(response) if response.status().is_success() => {
                        acked.lock().unwrap().push(Acked {
                            lock: lock.clone(),
                            key,
                            value,
                            generation,
                        });
                        if n_acked.fetch_add(1, Ordering::SeqCst) + 1 == KILL_AFTER {
                            enough.notify_one();
                        }
                    }
                    // Writers on the shared lock race: a higher generation
                    // may land first, and the lower one is refused.
                    Ok(response) if response.status() == 409 && !own_lock => n_refused += 1,
                    Ok(response) => panic!(
                        "unexpected answer {}: {}",
                        response.status(),
                        response.text().await.unwrap_or_default()
                    ),
                    // The server was killed: the stream ends here. This
                    // write's outcome is unknown, and it is not counted.
                    Err(_) => return n_refused,
                }
            }
        }));
    }

    enough.notified().await;
    child.kill().unwrap();
    let mut total_refused = 0;
    for writer in writers {
        total_refused += writer.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() as u64 >= KILL_AFTER);
    eprintln!(
        "killed after {} acknowledged writes ({} refused as stale on the shared lock)",
        acked.len(),
        total_refused
    );

    let mut highest: HashMap<String, u64> = HashMap::new();
    for write in &acked {
        let entry = highest.entry(write.lock.clone()).or_default();
        *entry = (*entry).max(write.generation);
    }

    // Restart on the same directory.
    let (_child, base) = spawn_server(&data_dir, &dir.path().join("server-2.log"));
    for write in &acked {
        let lock_segment = write.lock.replace('/', "%2F");
        let response = http
            .get(format!("{base}/v1/locks/{lock_segment}/keys/{}", write.key))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "acknowledged write lost: {write:?}");
        assert_eq!(response.text().await.unwrap(), write.value);
    }
    for (lock, highest_acked) in &highest {
        let lock_segment = lock.replace('/', "%2F");
        let marks: serde_json::Value = http
            .get(format!("{base}/v1/locks/{lock_segment}/marks"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let exclusive = marks["marks"]["exclusive"].as_u64().unwrap();
        assert!(
            exclusive >= *highest_acked,
            "{lock}: mark {exclusive} went below the highest acknowledged generation {highest_acked}"
        );
        // A holder older than the mark is still refused after the restart.
        if exclusive > 1 {
            let response = http
                .put(format!("{base}/v1/locks/{lock_segment}/keys/stale"))
                .header(
                    Sequencer::HTTP_HEADER,
                    format!("v1;lock={lock};mode=exclusive;gen={}", exclusive - 1),
                )
                .body("stale")
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 409);
            let body: serde_json::Value = response.json().await.unwrap();
            assert_eq!(body["code"], "stale");
            assert_eq!(body["marks"]["exclusive"], exclusive);
        }
    }
    assert_eq!(highest.len(), N_OWN_LOCK_WRITERS + 1);
}
