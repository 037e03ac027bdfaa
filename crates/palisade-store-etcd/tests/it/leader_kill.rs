//! The etcd leader killed with `kill -9` in the middle of a stream of
//! writes through the engine, over a real 3-member cluster: every
//! acknowledged write is there afterwards, no write from an older holder
//! is ever accepted, and the stream recovers once a new leader is elected.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{connect, lock, write};
use palisade_store::{Engine, Op, ReadRequest, Refused};
use palisade_store_etcd::{EtcdConnection, EtcdEngine, EtcdEngineConfig};
use palisade_testkit::etcd::EtcdCluster;
use tokio::sync::Notify;
use tokio::time::Instant;

const LOCKS: usize = 4;
const WRITES: u64 = 40;
/// A new holder every this many writes.
const WRITES_PER_HOLDER: u64 = 8;
/// How long one write may take to be acknowledged, retries included: an
/// election on a loaded 2-core machine takes seconds, not a minute.
const WRITE_BOUND: Duration = Duration::from_secs(60);

/// One acknowledged write.
#[derive(Debug, Clone, Copy)]
struct Ack {
    index: u64,
    commit_seq: u64,
    at: Instant,
    first_sent: Instant,
}

/// Sends `index`-th write of `lock_name` until it is acknowledged, with the
/// same request id each time: an attempt in doubt (the leader died with it)
/// is settled by the retry, applied once.
async fn write_until_acknowledged(engine: &EtcdEngine, lock_name: &str, index: u64) -> Ack {
    let generation = 1 + index / WRITES_PER_HOLDER;
    let id = format!("{lock_name}-{index}");
    let first_sent = Instant::now();
    loop {
        let request = write(
            lock_name,
            generation,
            vec![
                Op::put(
                    format!("k{index}").into_bytes(),
                    format!("v{index}").into_bytes(),
                ),
                Op::put("last", index.to_string().into_bytes()),
            ],
            Some(&id),
        );
        match engine.write(request).await {
            Ok(Ok(applied)) => {
                return Ack {
                    index,
                    commit_seq: applied.commit_seq,
                    at: Instant::now(),
                    first_sent,
                };
            }
            Ok(Err(refused)) => panic!("{lock_name} write {index} refused: {refused}"),
            Err(error) => {
                assert!(
                    error.is_storage_failure(),
                    "{lock_name} write {index}: {error}"
                );
                assert!(
                    first_sent.elapsed() < WRITE_BOUND,
                    "{lock_name} write {index} not acknowledged within {WRITE_BOUND:?}: {error}"
                );
            }
        }
    }
}

/// A holder one generation older tries to write: it must never be
/// accepted. Failures of the cluster are fine (nothing acknowledged); the
/// end of the test checks that none of them was applied either.
async fn stale_attempt(engine: &EtcdEngine, lock_name: &str, newest: u64) {
    if newest < 2 {
        return;
    }
    let request = write(
        lock_name,
        newest - 1,
        vec![Op::put("stale", b"accepted".to_vec())],
        None,
    );
    match engine.write(request).await {
        Ok(Ok(applied)) => panic!(
            "{lock_name}: a write of generation {} was accepted after {newest} was acknowledged ({applied:?})",
            newest - 1
        ),
        Ok(Err(Refused::Stale { .. })) | Err(_) => {}
        Ok(Err(other)) => panic!("{lock_name}: unexpected refusal {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_killed_mid_stream_loses_nothing_acknowledged() {
    let mut cluster = tokio::task::spawn_blocking(EtcdCluster::start)
        .await
        .expect("starting a 3-member etcd cluster");
    let connection = EtcdConnection::new(cluster.endpoints())
        .expect("valid endpoints")
        .with_request_timeout(Duration::from_secs(5));
    let config = EtcdEngineConfig::with_connection(connection)
        .expect("a positive timeout")
        .with_prefix(common::unique_prefix("leader-kill"))
        .expect("valid prefix");
    let engine = Arc::new(connect(config).await);

    let acknowledged = Arc::new(AtomicUsize::new(0));
    let kill_now = Arc::new(Notify::new());
    let mut writers = Vec::new();
    for l in 0..LOCKS {
        let (engine, acknowledged, kill_now) =
            (engine.clone(), acknowledged.clone(), kill_now.clone());
        writers.push(tokio::spawn(async move {
            let lock_name = format!("stream-{l}");
            let mut acks = Vec::new();
            for index in 0..WRITES {
                let ack = write_until_acknowledged(&engine, &lock_name, index).await;
                acks.push(ack);
                stale_attempt(&engine, &lock_name, 1 + index / WRITES_PER_HOLDER).await;
                // A third of the way through the stream, the leader dies.
                if acknowledged.fetch_add(1, Ordering::SeqCst) + 1 == LOCKS * WRITES as usize / 3 {
                    kill_now.notify_one();
                }
            }
            (lock_name, acks)
        }));
    }

    kill_now.notified().await;
    let (mut cluster, leader, killed_at) = tokio::task::spawn_blocking(move || {
        let leader = cluster
            .wait_for_leader(Duration::from_secs(30))
            .expect("a leader before the kill");
        cluster.kill(leader).expect("kill -9 of the leader");
        (cluster, leader, Instant::now())
    })
    .await
    .expect("the kill task");

    let mut all = Vec::new();
    for writer in writers {
        all.push(writer.await.expect("a writer task"));
    }

    // Recovery: from the kill to the first acknowledgement of a write first
    // sent after it.
    let recovered_at = all
        .iter()
        .flat_map(|(_, acks)| acks.iter())
        .filter(|ack| ack.first_sent >= killed_at)
        .map(|ack| ack.at)
        .min()
        .expect("writes were sent after the kill");
    println!(
        "leader (member {leader}) killed; first write sent after the kill acknowledged {:?} later",
        recovered_at - killed_at
    );

    for (lock_name, acks) in &all {
        assert_eq!(acks.len() as u64, WRITES);
        for pair in acks.windows(2) {
            assert!(
                pair[0].commit_seq < pair[1].commit_seq,
                "{lock_name}: commit_seq must rise with the stream: {pair:?}"
            );
        }
        for ack in acks {
            let read = engine
                .read(ReadRequest::new(
                    &lock(lock_name),
                    format!("k{}", ack.index).as_bytes(),
                    None,
                ))
                .await
                .expect("the cluster answers after the election")
                .unwrap();
            assert_eq!(
                read.value.as_deref(),
                Some(format!("v{}", ack.index).as_bytes()),
                "{lock_name}: acknowledged write {} lost",
                ack.index
            );
        }
        let stale = engine
            .read(ReadRequest::new(&lock(lock_name), b"stale", None))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stale.value, None, "{lock_name}: a stale write was applied");
        let marks = engine.marks(&lock(lock_name)).await.unwrap();
        assert_eq!(marks.exclusive, 1 + (WRITES - 1) / WRITES_PER_HOLDER);
    }
    tokio::task::spawn_blocking(move || {
        cluster.restart(leader).expect("the killed member rejoins");
    })
    .await
    .expect("the restart task");
}
