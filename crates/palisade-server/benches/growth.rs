//! The resource server's cost as the number of lock names grows: RSS, bytes
//! on disk and write latency at 1k, 10k, 100k and 1M locks.
//!
//! Run with: `cargo bench -p palisade-server --bench growth`
//!
//! Each step first fills the data directory up to the step's number of
//! locks *in-process*, through `Store::submit` (`flushed`, thousands of
//! requests queued at once so that each group commit carries hundreds):
//! writing a million marks one HTTP request at a time would take most of
//! an hour on two cores. Each lock gets its mark (generation 1) and one
//! 100-byte value. The store is then closed, and the `palisade-server`
//! binary is started on the directory as a child process, so its RSS is
//! the server's alone. `wrk` (8 connections, one thread) then sends fenced
//! `PUT`s, each to a lock drawn at random among all of them, and reports
//! the latency; the server's RSS is read after that load, and the
//! directory's size once the server has stopped.
//!
//! `PALISADE_GROWTH_MAX` caps the number of locks (default 1,000,000);
//! `PALISADE_BENCH_SECS` sets the seconds of each latency run (default 5).

mod support;

use std::time::{Duration, Instant};

use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_store::{Durability, Op, Store, StoreConfig};
use support::{ServerProcess, disk_bytes, load_average, rss_kib, wrk};

const STEPS: [usize; 4] = [1_000, 10_000, 100_000, 1_000_000];
const VALUE_BYTES: usize = 100;
/// Requests queued at once while filling.
const FILL_WINDOW: usize = 8192;

fn lock_name(index: usize) -> String {
    format!("grow-{index}")
}

/// Gives locks `from..to` their mark and one value, in-process.
fn fill(dir: &std::path::Path, from: usize, to: usize) {
    let store = Store::open(
        dir,
        StoreConfig {
            durability: Durability::Flushed,
            ..StoreConfig::default()
        },
    )
    .unwrap();
    let value = vec![b'v'; VALUE_BYTES];
    let mut next = from;
    while next < to {
        let end = (next + FILL_WINDOW).min(to);
        let pending: Vec<_> = (next..end)
            .map(|index| {
                let sequencer = Sequencer::new(
                    LockName::new(lock_name(index)).unwrap(),
                    Mode::Exclusive,
                    Generation::new(1).unwrap(),
                );
                store
                    .submit(&sequencer, &[Op::put("k", value.clone())], None)
                    .unwrap()
            })
            .collect();
        for outcome in pending {
            outcome.wait().unwrap().unwrap();
        }
        next = end;
    }
    store.flush().unwrap();
}

/// A `wrk` script sending each `PUT` to a lock drawn among `locks`.
fn random_lock_script(locks: usize) -> String {
    let value = "v".repeat(VALUE_BYTES);
    format!(
        r#"local threads = 0
function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end
function init(args)
  math.randomseed(7 + tid)
end
function request()
  local n = math.random(0, {last})
  return wrk.format("PUT", "/v1/locks/grow-" .. n .. "/keys/k", {{["palisade-sequencer"] = "v1;lock=grow-" .. n .. ";mode=exclusive;gen=1"}}, "{value}")
end
"#,
        last = locks - 1
    )
}

fn main() {
    let max: usize = std::env::var("PALISADE_GROWTH_MAX")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let secs: f64 = std::env::var("PALISADE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let duration = Duration::from_secs_f64(secs);
    println!(
        "growth: locks up to {max}, {VALUE_BYTES}-byte values, `flushed`, wrk -t1 -c8 for {secs} s per step; load average at the start {}",
        load_average()
    );
    println!(
        "{:>9} {:>9} {:>10} {:>12} {:>11} {:>9} {:>9} {:>9} {:>12}",
        "locks",
        "fill s",
        "RSS idle",
        "RSS loaded",
        "on disk",
        "writes/s",
        "p50 µs",
        "p99 µs",
        "disk/lock"
    );
    let dir = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let mut filled = 0;
    for locks in STEPS.into_iter().filter(|&locks| locks <= max) {
        let started = Instant::now();
        fill(dir.path(), filled, locks);
        filled = locks;
        let fill_secs = started.elapsed().as_secs_f64();

        let script = scripts.path().join(format!("random-{locks}.lua"));
        std::fs::write(&script, random_lock_script(locks)).unwrap();
        let server = ServerProcess::start(dir.path());
        let idle_kib = rss_kib(&server.pid());
        let figures = wrk(
            &format!("http://{}", server.addr),
            Some(&script),
            1,
            8,
            duration,
        );
        let loaded_kib = rss_kib(&server.pid());
        server.stop();
        let on_disk = disk_bytes(dir.path());
        println!(
            "{:>9} {:>9.1} {:>8.1}Mi {:>10.1}Mi {:>9.1}Mi {:>9.0} {:>9.0} {:>9.0} {:>10.0} B",
            locks,
            fill_secs,
            idle_kib as f64 / 1024.0,
            loaded_kib as f64 / 1024.0,
            on_disk as f64 / (1024.0 * 1024.0),
            figures.per_second,
            figures.p50_us,
            figures.p99_us,
            on_disk as f64 / locks as f64
        );
    }
    println!("load average at the end {}", load_average());
}
