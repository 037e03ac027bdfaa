//! Several engines (as several resource servers would hold) over one etcd
//! prefix: requests on one lock through different engines are still one
//! isolated step each, because every commit compares the `mod_revision`
//! of what it read and starts again when another engine committed first.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::{connect, lock, write};
use palisade_core::Mode;
use palisade_store::{Engine, Op, ReadRequest, Refused};
use palisade_store_etcd::EtcdEngine;
use palisade_testkit::etcd::EtcdServer;

const ENGINES: usize = 3;

async fn engines(etcd: &EtcdServer, test: &str) -> Vec<Arc<EtcdEngine>> {
    let config = common::config(etcd.endpoints(), test).with_max_attempts(1000);
    let mut engines = Vec::new();
    for _ in 0..ENGINES {
        engines.push(Arc::new(connect(config.clone()).await));
    }
    engines
}

/// A counter incremented by compare-and-swap through three engines at once:
/// a lost update (two increments committed on the same reading) would
/// leave the counter below the number of increments acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compare_and_swap_through_three_engines_loses_no_update() {
    const TASKS: usize = 6;
    const INCREMENTS: u64 = 15;
    let etcd = EtcdServer::start();
    let engines = engines(&etcd, "replicas-cas").await;
    let acknowledged = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let engine = engines[task % ENGINES].clone();
        let acknowledged = acknowledged.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while done < INCREMENTS {
                let read = engine
                    .read(ReadRequest::new(&lock("counter"), b"n", None))
                    .await
                    .expect("etcd answers")
                    .expect("a plain read is never refused");
                let current: u64 = read
                    .value
                    .as_deref()
                    .map_or(0, |v| std::str::from_utf8(v).unwrap().parse().unwrap());
                let op = Op::cas(
                    "n",
                    read.value.clone(),
                    Some((current + 1).to_string().into_bytes().into()),
                );
                match engine.write(write("counter", 1, vec![op], None)).await {
                    Ok(Ok(_)) => {
                        done += 1;
                        acknowledged.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(Err(Refused::CasMismatch { .. })) => {}
                    other => panic!("unexpected outcome: {other:?}"),
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("a counter task");
    }
    let read = engines[0]
        .read(ReadRequest::new(&lock("counter"), b"n", None))
        .await
        .unwrap()
        .unwrap();
    let total = acknowledged.load(Ordering::SeqCst);
    assert_eq!(total, TASKS as u64 * INCREMENTS);
    assert_eq!(
        read.value.as_deref(),
        Some(total.to_string().as_bytes()),
        "every acknowledged increment is in the counter"
    );
}

/// Writers with rising generations and readers with shared sequencers on
/// one lock, spread over three engines: in commit order the accepted
/// generations never go down, and no write below a generation some engine
/// had already acknowledged is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fencing_holds_across_engines() {
    const WRITERS: u64 = 6;
    const WRITES: u64 = 12;
    let etcd = EtcdServer::start();
    let engines = engines(&etcd, "replicas-fence").await;
    // The highest generation acknowledged so far, by any engine.
    let acknowledged = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let engine = engines[writer as usize % ENGINES].clone();
        let acknowledged = acknowledged.clone();
        tasks.push(tokio::spawn(async move {
            let mut accepted = Vec::new();
            for i in 0..WRITES {
                // Generations interleave across writers: some are stale by
                // the time they arrive.
                let generation = 1 + i * WRITERS + (writer * 7) % WRITERS;
                let floor = acknowledged.load(Ordering::SeqCst);
                let value = format!("{generation}");
                let request = write(
                    "fenced",
                    generation,
                    vec![Op::put("v", value.into_bytes())],
                    None,
                );
                match engine.write(request).await.expect("etcd answers") {
                    Ok(applied) => {
                        assert!(
                            generation >= floor,
                            "generation {generation} accepted after {floor} was acknowledged"
                        );
                        acknowledged.fetch_max(generation, Ordering::SeqCst);
                        accepted.push((applied.commit_seq, generation));
                    }
                    Err(Refused::Stale { marks, .. }) => {
                        assert!(marks.required(Mode::Exclusive) > generation);
                    }
                    Err(other) => panic!("unexpected refusal: {other}"),
                }
                let shared = common::seq("fenced", Mode::Shared, generation);
                match engine
                    .read(ReadRequest::new(&lock("fenced"), b"v", Some(&shared)))
                    .await
                {
                    Ok(Ok(_)) | Ok(Err(Refused::Stale { .. })) => {}
                    other => panic!("unexpected read outcome: {other:?}"),
                }
            }
            accepted
        }));
    }
    let mut accepted = Vec::new();
    for task in tasks {
        accepted.extend(task.await.expect("a writer task"));
    }
    accepted.sort();
    assert!(!accepted.is_empty());
    for pair in accepted.windows(2) {
        assert!(pair[0].0 < pair[1].0, "commit_seq unique: {pair:?}");
        assert!(
            pair[0].1 <= pair[1].1,
            "generation went down in commit order: {pair:?}"
        );
    }
    let last = accepted.last().unwrap().1;
    let read = engines[1]
        .read(ReadRequest::new(&lock("fenced"), b"v", None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.value.as_deref(), Some(last.to_string().as_bytes()));
}
