//! What the guard costs per request, in process (no HTTP): a trivial
//! handler behind `GuardLayer`, driven with `tower::ServiceExt::oneshot`.
//!
//! Run with: `cargo bench -p palisade-guard --bench admissions`
//!
//! Rows: no guard (the router alone), `MemoryMarks`, `SledMarks` over a
//! store in `flushed` mode (an fsync per admission group) and in
//! `buffered` mode. Columns: 1, 8 and 32 concurrent clients, each with a
//! lock of its own or all on one lock (serialised: one writer at a time).
//! Each client writes with one exclusive generation, as a holder does
//! while it holds the lock.
//!
//! `PALISADE_BENCH_SECS` sets the seconds per cell (default 2).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use axum::routing::put;
use palisade_guard::{Guard, MemoryMarks, SledMarks};
use palisade_store::{Durability, StoreConfig};
use tower::ServiceExt as _;

const CLIENT_COUNTS: [usize; 3] = [1, 8, 32];

fn request(lock: &str) -> Request<Body> {
    Request::put(format!("/v1/{}/items/k", lock.replace('/', "%2F")))
        .header(
            "palisade-sequencer",
            format!("v1;lock={lock};mode=exclusive;gen=7"),
        )
        .body(Body::empty())
        .expect("a valid request")
}

/// Runs `clients` loops for `duration`; returns requests per second, p50
/// and p99 latency in µs.
async fn cell(app: &Router, clients: usize, one_lock: bool, duration: Duration) -> (f64, u64, u64) {
    let deadline = Instant::now() + duration;
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let app = app.clone();
            let lock = if one_lock {
                "bench/all".to_owned()
            } else {
                format!("bench/c{client}")
            };
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while Instant::now() < deadline {
                    let started = Instant::now();
                    let response = app
                        .clone()
                        .oneshot(request(&lock))
                        .await
                        .expect("infallible");
                    assert!(response.status().is_success(), "{}", response.status());
                    latencies.push(started.elapsed().as_micros() as u64);
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("a client task"));
    }
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    (
        latencies.len() as f64 / duration.as_secs_f64(),
        at(0.5),
        at(0.99),
    )
}

fn router() -> Router {
    Router::new().route("/v1/{lock}/items/{key}", put(|| async { "ok" }))
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let seconds: f64 = std::env::var("PALISADE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let duration = Duration::from_secs_f64(seconds);
    let dir = tempfile::tempdir().expect("a temporary directory");

    let flushed =
        SledMarks::open(dir.path().join("flushed"), StoreConfig::default()).expect("a store");
    let buffered = SledMarks::open(
        dir.path().join("buffered"),
        StoreConfig {
            durability: Durability::Buffered {
                flush_every: Duration::from_millis(500),
            },
            ..StoreConfig::default()
        },
    )
    .expect("a store");
    let rows: Vec<(&str, Router)> = vec![
        ("no guard", router()),
        (
            "MemoryMarks",
            router().route_layer(Guard::builder(MemoryMarks::new()).build().layer()),
        ),
        (
            "SledMarks flushed",
            router().route_layer(Guard::builder(flushed).build().layer()),
        ),
        (
            "SledMarks buffered",
            router().route_layer(Guard::builder(buffered).build().layer()),
        ),
    ];
    let rows = Arc::new(rows);

    println!(
        "guard admissions, {seconds} s per cell, {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("| marks | layout | clients | requests/s | p50 µs | p99 µs |");
    println!("|---|---|---|---|---|---|");
    for (name, app) in rows.iter() {
        for one_lock in [false, true] {
            for clients in CLIENT_COUNTS {
                let (per_second, p50, p99) = cell(app, clients, one_lock, duration).await;
                let layout = if one_lock {
                    "one lock"
                } else {
                    "lock per client"
                };
                println!("| {name} | {layout} | {clients} | {per_second:.0} | {p50} | {p99} |");
            }
        }
    }
}
