//! Holders' single puts of concurrent requests, batched across locks into
//! one statement (`schema::FAST_PUTS`): each request keeps the guarantees
//! it has alone. Per lock, the accepted writes in commit order never go
//! down in generation while other writers raise the mark; and a put
//! PostgreSQL refuses for its own data fails alone, its batch-mates
//! applied and answered.

use std::sync::Arc;
use std::time::Duration;

use palisade_store::{Engine, Op, StoreError, WriteRequest};
use palisade_store_postgres::{PostgresConfig, PostgresEngine};
use palisade_testkit::sql::SqlServer;

use crate::fast_path::{Seen, check_history, exclusive};

/// The bound on one write, for a loaded machine.
const CALL_BOUND: Duration = Duration::from_secs(60);

async fn open(server: &SqlServer) -> PostgresEngine {
    PostgresEngine::open(PostgresConfig::new(server.url()).with_max_connections(16))
        .await
        .expect("opening the engine")
}

/// Eight locks, four writers each, all stepping together so their puts
/// meet in batches; on each lock one writer raises the mark every step
/// while the others write at the previous step's generation (at the mark:
/// the batch's case). Without the batch statement's row lock, a put read
/// at the old mark commits after a raise and this test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_puts_commit_in_generation_order_on_every_lock() {
    const LOCKS: u64 = 8;
    const WRITERS: u64 = 4;
    const STEPS: u64 = 30;
    let server = SqlServer::postgres();
    let postgres = open(&server).await;
    let before = postgres.batched_puts();
    let engine: Arc<dyn Engine> = Arc::new(postgres.clone());
    let barrier = Arc::new(tokio::sync::Barrier::new((LOCKS * WRITERS) as usize));
    let mut tasks = Vec::new();
    for lock in 0..LOCKS {
        for writer in 0..WRITERS {
            let (engine, barrier) = (Arc::clone(&engine), Arc::clone(&barrier));
            tasks.push(tokio::spawn(async move {
                let name = format!("batch/contended/{lock}");
                let mut seen = Vec::new();
                for step in 0..STEPS {
                    barrier.wait().await;
                    let generation = if writer == 0 { step + 2 } else { step + 1 };
                    let tag = format!("{writer}-{step}");
                    let request = WriteRequest::new(
                        exclusive(&name, generation),
                        vec![Op::put(&b"k"[..], tag.clone().into_bytes())],
                        None,
                    );
                    // Recorded, not asserted here: a writer that stopped
                    // would leave the others at the barrier.
                    let outcome =
                        match tokio::time::timeout(CALL_BOUND, engine.write(request)).await {
                            Ok(Ok(outcome)) => Ok(outcome),
                            Ok(Err(error)) => Err(error.to_string()),
                            Err(_) => Err(format!("no answer within {CALL_BOUND:?}")),
                        };
                    seen.push((tag, generation, outcome));
                }
                (name, seen)
            }));
        }
    }
    let mut by_lock: std::collections::BTreeMap<String, Vec<Seen>> = Default::default();
    for task in tasks {
        let (name, seen) = task.await.expect("a writer task");
        let history = by_lock.entry(name.clone()).or_default();
        for (tag, generation, outcome) in seen {
            let outcome = outcome.unwrap_or_else(|error| panic!("{name}: write {tag}: {error}"));
            history.push((tag, generation, outcome));
        }
    }
    let after = postgres.batched_puts();
    assert!(
        after.puts - before.puts > after.statements - before.statements,
        "the puts were not batched: {before:?} before, {after:?} after"
    );
    for (name, seen) in by_lock {
        check_history(engine.as_ref(), &name, seen, STEPS).await;
    }
}

/// A put whose key PostgreSQL cannot index (larger than a B-tree row may
/// be, and incompressible) among 31 good ones, five rounds: every good
/// put is applied and answered, and the bad one fails with PostgreSQL's
/// reason, not as "outcome unknown". Without telling a statement
/// PostgreSQL rolled back from one whose outcome is unknown, the bad put's
/// batch-mates would be answered "unknown".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_postgresql_refuses_fails_alone_in_its_batch() {
    const GOOD: u64 = 31;
    let server = SqlServer::postgres();
    let engine = open(&server).await;
    let before = engine.batched_puts();
    let locks: Vec<String> = (0..=GOOD).map(|i| format!("batch/mixed/{i}")).collect();
    // First writes of each hold (the write function), so the rounds'
    // puts are at the mark: the batch's case.
    for lock in &locks {
        engine
            .write(WriteRequest::new(
                exclusive(lock, 1),
                vec![Op::put(&b"k"[..], &b"first"[..])],
                None,
            ))
            .await
            .expect("no storage failure")
            .expect("the first write is admitted");
    }
    let mut bits = 0x9e37_79b9_7f4a_7c15_u64;
    let huge_key: Vec<u8> = (0..6000)
        .map(|_| {
            bits ^= bits << 13;
            bits ^= bits >> 7;
            bits ^= bits << 17;
            bits as u8
        })
        .collect();
    for round in 0..5 {
        let writes = locks.iter().enumerate().map(|(i, lock)| {
            let key = if i as u64 == GOOD {
                huge_key.clone()
            } else {
                format!("k{round}").into_bytes()
            };
            let request = WriteRequest::new(
                exclusive(lock, 1),
                vec![Op::put(key, format!("v{round}").into_bytes())],
                None,
            );
            let engine = engine.clone();
            async move {
                tokio::time::timeout(CALL_BOUND, engine.write(request))
                    .await
                    .expect("a write answered within the bound")
            }
        });
        let outcomes = futures::future::join_all(writes).await;
        for (i, outcome) in outcomes.into_iter().enumerate() {
            if i as u64 == GOOD {
                match outcome {
                    Err(StoreError::Storage { message, .. }) => assert!(
                        !message.contains("unknown") && message.contains("index row"),
                        "round {round}: the bad put's error: {message}"
                    ),
                    other => panic!("round {round}: the bad put: {other:?}"),
                }
            } else {
                let applied = outcome
                    .unwrap_or_else(|error| panic!("round {round}, put {i}: {error}"))
                    .unwrap_or_else(|refused| panic!("round {round}, put {i}: {refused:?}"));
                assert_eq!(applied.marks.exclusive, 1);
            }
        }
    }
    let after = engine.batched_puts();
    assert!(
        after.puts - before.puts > after.statements - before.statements,
        "the puts were not batched: {before:?} before, {after:?} after"
    );
}
