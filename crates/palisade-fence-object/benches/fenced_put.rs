//! A fenced PUT against an unconditional PUT of the same object size,
//! through the same client, against moto's S3 on loopback, in one run.
//!
//! Run with: `cargo bench -p palisade-fence-object --bench fenced_put`
//! (starts its own moto on a free port). Three ways to write, in
//! interleaved rounds of `PALISADE_BENCH_SECS` (2) seconds,
//! `PALISADE_BENCH_ROUNDS` (3) rounds, per object size in
//! `PALISADE_BENCH_SIZES` (bytes, comma-separated; `1024,65536,1048576`),
//! `CLIENTS` (4) concurrent writers each on its own object:
//!
//! - `plain`: `ObjectStore::put`, unconditional (what a writer without a
//!   fence sends): one request;
//! - `fenced put`: [`ObjectFence::put`] by a steady holder, each client
//!   holding its own lock (the write with `If-Match` on the version it
//!   wrote last, and a read of the lock's fence object once its last read
//!   is [`palisade_fence_object::MARKS_REUSE`] old): one request, plus
//!   one per 250 ms;
//! - `log append`: [`FencedLog::append`] by a steady holder (the write
//!   with `If-None-Match: *` at its next slot): one request.
//!
//! Prints writes/s per way and the ratios to `plain`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::ObjectStoreExt as _;
use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_fence_object::{FencedLog, ObjectFence, Path, S3Config};
use palisade_testkit::bench::env_number;
use palisade_testkit::s3::S3Server;
use tokio::time::Instant;

const CLIENTS: usize = 4;

#[derive(Clone, Copy, Debug)]
enum Way {
    Plain,
    FencedPut,
    LogAppend,
}

async fn round(
    way: Way,
    fence: &Arc<ObjectFence>,
    logs: &[Arc<FencedLog>],
    body: &Bytes,
    secs: u64,
) -> f64 {
    let end = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (fence, log, body) = (Arc::clone(fence), Arc::clone(&logs[client]), body.clone());
            tokio::spawn(async move {
                let holder = Sequencer::new(
                    LockName::new(format!("bench/{client}")).expect("a valid lock name"),
                    Mode::Exclusive,
                    Generation::new(1).expect("1 is a generation"),
                );
                let path = Path::from(format!("bench/{client}/object"));
                let mut done = 0u64;
                while Instant::now() < end {
                    match way {
                        Way::Plain => {
                            fence
                                .store()
                                .put(&path, body.clone().into())
                                .await
                                .expect("a plain put");
                        }
                        Way::FencedPut => {
                            fence
                                .put(&holder, &path, body.clone())
                                .await
                                .expect("no store failure")
                                .expect("a steady holder is never refused");
                        }
                        Way::LogAppend => {
                            log.append(&holder, body.clone())
                                .await
                                .expect("no store failure")
                                .expect("a steady holder is never refused");
                        }
                    }
                    done += 1;
                }
                done
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("a bench client panicked");
    }
    total as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let secs = env_number("PALISADE_BENCH_SECS", 2);
    let rounds = env_number("PALISADE_BENCH_ROUNDS", 3);
    let sizes: Vec<usize> = std::env::var("PALISADE_BENCH_SIZES")
        .unwrap_or_else(|_| "1024,65536,1048576".into())
        .split(',')
        .filter_map(|size| size.trim().parse().ok())
        .collect();
    let moto = S3Server::start();
    moto.create_bucket("bench").expect("create the bucket");
    let fence = Arc::new(
        S3Config::parse("s3://bench/run")
            .expect("a valid location")
            .with_endpoint(moto.endpoint())
            .with_credentials("bench", "bench-secret")
            .open()
            .await
            .expect("moto enforces conditional writes"),
    );
    let ways = [Way::Plain, Way::FencedPut, Way::LogAppend];
    println!(
        "moto {} on loopback, {CLIENTS} clients, {rounds} interleaved rounds of {secs} s",
        palisade_testkit::s3::MOTO_VERSION
    );
    println!(
        "| object size | plain PUT/s | fenced put/s | log append/s | fenced put / plain | log append / plain |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for size in sizes {
        let body = Bytes::from(vec![b'x'; size]);
        let logs: Vec<Arc<FencedLog>> = (0..CLIENTS)
            .map(|client| {
                Arc::new(
                    fence
                        .log(Path::from(format!("bench/{size}/log-{client}")))
                        .expect("a valid prefix"),
                )
            })
            .collect();
        let mut rates = [0.0f64; 3];
        for _ in 0..rounds {
            for (index, way) in ways.iter().enumerate() {
                rates[index] += round(*way, &fence, &logs, &body, secs).await / rounds as f64;
            }
        }
        println!(
            "| {size} B | {:.0} | {:.0} | {:.0} | {:.2} x | {:.2} x |",
            rates[0],
            rates[1],
            rates[2],
            rates[1] / rates[0],
            rates[2] / rates[0]
        );
    }
}
