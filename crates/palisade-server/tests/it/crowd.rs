//! A crowd of slow connections larger than `--max-connections` against
//! honest writers, over real TCP on loopback. Its own test binary: it
//! loads the machine, and must not share it with timing-sensitive tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use palisade_server::ServerLimits;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use crate::tcp;
use tcp::{excl, metric, start};

/// Raises this process's soft limit on open files to at least `needed`
/// (within the hard limit); fails with a hint if the hard limit is lower.
fn raise_open_file_limit(needed: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft >= needed {
        return;
    }
    assert!(
        hard >= needed,
        "this test needs {needed} open files; the hard limit is {hard} (raise it: `ulimit -Hn {needed}` as root, or LimitNOFILE= in the CI unit)"
    );
    setrlimit(Resource::RLIMIT_NOFILE, needed, hard).unwrap();
}

/// What the slow crowd did.
#[derive(Debug, Default)]
struct CrowdReport {
    connects: u64,
    closed_by_server: u64,
}

/// `size` connections that each send a request line and then one header
/// byte per `round`, all from one task, round robin. A connection the
/// server closes is opened again in the next round, so the crowd stays
/// over the bound for as long as it runs. `connected` is told once
/// `signal_at` connections have been opened.
async fn slow_crowd(
    addr: std::net::SocketAddr,
    size: usize,
    round: Duration,
    stop: Arc<AtomicBool>,
    (signal_at, connected): (usize, oneshot::Sender<()>),
) -> CrowdReport {
    const HEAD: &[u8] = b"PUT /v1/locks/victim/keys/k HTTP/1.1\r\nhost: x\r\nx-slow: ";
    let mut report = CrowdReport::default();
    let mut crowd: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
    let mut connected = Some(connected);
    let mut ticks = tokio::time::interval(round);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::SeqCst) {
        ticks.tick().await;
        for slot in &mut crowd {
            if let Some(stream) = slot {
                let mut byte = [0u8; 64];
                let closed = match stream.try_read(&mut byte) {
                    Ok(_) => true, // EOF, or an answer: either way, done.
                    Err(error) => error.kind() != std::io::ErrorKind::WouldBlock,
                };
                if closed || stream.try_write(b"a").is_err() {
                    report.closed_by_server += 1;
                    *slot = None;
                }
                continue;
            }
            // Over the bound an unpatched server leaves connections in
            // the accept queue: the connect succeeds there anyway.
            let Ok(Ok(stream)) =
                tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(addr)).await
            else {
                continue;
            };
            if stream.try_write(HEAD).is_ok() {
                report.connects += 1;
                *slot = Some(stream);
            }
            if report.connects >= signal_at as u64 {
                if let Some(connected) = connected.take() {
                    let _ = connected.send(());
                }
            }
        }
    }
    report
}

/// One honest writer: a keep-alive client writing `lock` for `length`,
/// generation after generation. Each write's latency, or the failure.
async fn honest_writer(
    base: String,
    lock: String,
    length: Duration,
) -> Vec<Result<Duration, String>> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let started = Instant::now();
    let mut outcomes = Vec::new();
    let mut generation = 0u64;
    while started.elapsed() < length {
        generation += 1;
        let sent = Instant::now();
        let outcome = match http
            .put(format!("{base}/v1/locks/{lock}/keys/k"))
            .header("palisade-sequencer", excl(&lock, generation))
            .body(format!("value {generation}"))
            .send()
            .await
        {
            Ok(response) if response.status() == 200 => Ok(sent.elapsed()),
            Ok(response) => Err(format!("status {}", response.status())),
            Err(error) => Err(format!("{error:?}")),
        };
        outcomes.push(outcome);
    }
    outcomes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_crowd_over_the_connection_bound_does_not_starve_honest_writers() {
    const CROWD: usize = 1500;
    const WRITERS: usize = 8;
    const LENGTH: Duration = Duration::from_secs(20);
    /// Generous for a loaded 2-core machine; without shedding, honest
    /// connections wait in the accept queue for whole header time limits.
    const P99_BOUND: Duration = Duration::from_secs(1);
    // The crowd, the server's side of it, and some room.
    raise_open_file_limit(4096);
    let limits = ServerLimits::default();
    assert_eq!(limits.max_connections, 1024);
    let running = start(limits).await;

    let stop = Arc::new(AtomicBool::new(false));
    let (over_the_bound, crowd_over_the_bound) = oneshot::channel();
    let crowd = tokio::spawn(slow_crowd(
        running.addr,
        CROWD,
        Duration::from_secs(1),
        Arc::clone(&stop),
        (limits.max_connections + 64, over_the_bound),
    ));
    crowd_over_the_bound.await.expect("the crowd connects");

    let writers: Vec<_> = (0..WRITERS)
        .map(|index| {
            tokio::spawn(honest_writer(
                running.base.clone(),
                format!("honest{index}"),
                LENGTH,
            ))
        })
        .collect();
    let mut latencies = Vec::new();
    let mut failures = Vec::new();
    for writer in writers {
        for outcome in writer.await.unwrap() {
            match outcome {
                Ok(latency) => latencies.push(latency),
                Err(failure) => failures.push(failure),
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    let report = crowd.await.unwrap();

    latencies.sort();
    let p99 = latencies
        .get((latencies.len() * 99).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or(Duration::MAX);
    let http = reqwest::Client::new();
    let shed = metric(
        &http,
        &running.base,
        "palisade_connections_closed_total{reason=\"shed\"}",
    )
    .await;
    eprintln!(
        "slow crowd of {CROWD}: {} connects, {} closed by the server ({shed} shed); \
         {WRITERS} honest writers: {} writes, {} failed, p50 {:?}, p99 {p99:?}, max {:?}",
        report.connects,
        report.closed_by_server,
        latencies.len(),
        failures.len(),
        latencies.get(latencies.len() / 2),
        latencies.last(),
    );
    assert!(failures.is_empty(), "honest writes failed: {failures:?}");
    assert!(
        p99 < P99_BOUND,
        "honest p99 {p99:?} over {} writes",
        latencies.len()
    );
    // The crowd really was over the bound the whole time.
    assert!(
        shed >= (CROWD - 1024) as u64,
        "only {shed} connections were shed"
    );
    running.shut_down().await;
}
