//! The workload of `scripts/bench-sled-trait.sh`: durable fenced writes to
//! the sled store, through `Store::apply` in-process or through the HTTP
//! server, for a few seconds; prints `<writes per second> <p50 µs> <CPU µs
//! per write> <context switches per write>` (the last two for the whole
//! process, every thread of it, from `getrusage`).
//!
//! It uses only what the store and the server offered both before and
//! after the engine trait (`Store::open`, `Store::apply`, `Op::put`,
//! `AppState::new`, `run`), so the same file compiles against either tree.
//!
//! Usage: `sled-trait-bench <store|http> <clients> <seconds>`

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_server::{AppState, run};
use palisade_store::{Op, Store, StoreConfig};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

const VALUE_BYTES: usize = 100;
const KEYS_PER_CLIENT: usize = 4096;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (path, clients, seconds) = match args.as_slice() {
        [_, path, clients, seconds] => (
            path.clone(),
            clients.parse::<usize>().expect("clients: a number"),
            seconds.parse::<f64>().expect("seconds: a number"),
        ),
        _ => panic!("usage: sled-trait-bench <store|http> <clients> <seconds>"),
    };
    let duration = Duration::from_secs_f64(seconds);
    let usage_before = usage();
    let dir = std::env::temp_dir().join(format!("sled-trait-bench-{}", std::process::id()));
    // The default configuration: durability `Flushed` (group commit).
    let store = Store::open(&dir, StoreConfig::default()).expect("opening the store");
    let mut latencies = match path.as_str() {
        "store" => in_process(&store, clients, duration),
        "http" => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(through_http(store.clone(), clients, duration)),
        other => panic!("unknown path `{other}`: store or http"),
    };
    let (cpu, switches) = usage();
    let writes = latencies.len().max(1) as f64;
    latencies.sort_unstable();
    let p50 = latencies.get(latencies.len() / 2).copied().unwrap_or(0);
    println!(
        "{:.1} {p50} {:.1} {:.2}",
        latencies.len() as f64 / duration.as_secs_f64(),
        (cpu - usage_before.0).as_secs_f64() * 1e6 / writes,
        (switches - usage_before.1) as f64 / writes,
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// CPU time and context switches (voluntary and not) of the whole
/// process so far, every thread included.
fn usage() -> (Duration, i64) {
    // SAFETY: `getrusage` only writes the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    (
        time(usage.ru_utime) + time(usage.ru_stime),
        usage.ru_nvcsw + usage.ru_nivcsw,
    )
}

fn sequencer(client: usize) -> Sequencer {
    Sequencer::new(
        LockName::new(format!("bench/c{client}")).expect("a lock name"),
        Mode::Exclusive,
        Generation::new(1).expect("non-zero"),
    )
}

fn value() -> Vec<u8> {
    (0..VALUE_BYTES).map(|i| b'a' + (i % 26) as u8).collect()
}

/// `clients` threads calling `Store::apply`; the latencies (µs) of the
/// writes acknowledged within `duration`.
fn in_process(store: &Store, clients: usize, duration: Duration) -> Vec<u32> {
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + duration;
    let threads: Vec<_> = (0..clients)
        .map(|client| {
            let (store, stop) = (store.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let (sequencer, value) = (sequencer(client), value());
                let mut latencies = Vec::new();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("k{client}-{}", i % KEYS_PER_CLIENT);
                    i += 1;
                    let started = Instant::now();
                    store
                        .apply(&sequencer, &[Op::put(key.into_bytes(), value.clone())], None)
                        .expect("the store answers")
                        .expect("admitted");
                    if Instant::now() <= deadline {
                        latencies.push(started.elapsed().as_micros() as u32);
                    }
                }
                latencies
            })
        })
        .collect();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    threads
        .into_iter()
        .flat_map(|thread| thread.join().expect("a client thread"))
        .collect()
}

/// The server on 127.0.0.1 and `clients` keep-alive HTTP/1.1 connections
/// sending single `PUT`s.
async fn through_http(store: Store, clients: usize, duration: Duration) -> Vec<u32> {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let addr = listener.local_addr().expect("an address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        run(listener, AppState::new(store), async {
            let _ = stopped.await;
        })
        .await
        .expect("the server runs");
    });
    let deadline = Instant::now() + duration;
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            tokio::spawn(async move {
                let sequencer = sequencer(client);
                let segment = sequencer.lock().as_str().replace('/', "%2F");
                let value = value();
                let mut stream = TcpStream::connect(addr).await.expect("connecting");
                stream.set_nodelay(true).expect("nodelay");
                let mut buffer = Vec::with_capacity(4096);
                let mut latencies = Vec::new();
                let mut i = 0;
                while Instant::now() < deadline {
                    let mut request = format!(
                        "PUT /v1/locks/{segment}/keys/k{client}-{} HTTP/1.1\r\nhost: bench\r\n\
                         palisade-sequencer: {sequencer}\r\ncontent-length: {}\r\n\r\n",
                        i % KEYS_PER_CLIENT,
                        value.len()
                    )
                    .into_bytes();
                    i += 1;
                    request.extend_from_slice(&value);
                    let started = Instant::now();
                    stream.write_all(&request).await.expect("sending");
                    let status = response(&mut stream, &mut buffer).await;
                    assert_eq!(status, 200, "a write was not admitted");
                    if Instant::now() <= deadline {
                        latencies.push(started.elapsed().as_micros() as u32);
                    }
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("a client task"));
    }
    let _ = stop.send(());
    server.await.expect("the server stops");
    latencies
}

/// Reads one response off `stream` (leaving any bytes after it in
/// `buffer`) and returns its status.
async fn response(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> u16 {
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
            let status = head[9..12].parse().expect("a status");
            let length: usize = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().expect("a length"))
                })
                .unwrap_or(0);
            while buffer.len() < end + 4 + length {
                fill(stream, buffer).await;
            }
            buffer.drain(..end + 4 + length);
            return status;
        }
        fill(stream, buffer).await;
    }
}

async fn fill(stream: &mut TcpStream, buffer: &mut Vec<u8>) {
    let mut chunk = [0u8; 4096];
    let n = stream.read(&mut chunk).await.expect("reading");
    assert!(n > 0, "the server closed the connection");
    buffer.extend_from_slice(&chunk[..n]);
}
