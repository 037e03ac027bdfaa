//! The fence on a Redis Cluster with a replica per master: the library on
//! every primary, the rule table, the paused holder, concurrent holders,
//! a master killed and its replica promoted (marks and library carried
//! over, the older holder still refused), and keys outside the lock's
//! slot refused.

use palisade_fence_redis::{RedisFence, RedisFenceError, slot};
use palisade_lock_redis::RedisConfig;
use palisade_testkit::redis::RedisCluster;

use std::time::Duration;

use crate::common::{accepted, exclusive, stale, unique_lock};
use crate::rule_table::{rule_table_mismatches, without_memory};
use crate::single::{concurrent_writers, late_sale_after_a_fence, late_sale_after_a_sale};

async fn cluster_fence(cluster: &RedisCluster) -> RedisFence {
    let client = redis::cluster::ClusterClient::new(cluster.urls().to_vec()).unwrap();
    let connection = client.get_async_connection().await.unwrap();
    RedisFence::new(connection)
        .await
        .expect("the fence on the cluster")
}

/// `GET key` on the master serving it.
fn get(cluster: &RedisCluster, key: &str) -> String {
    let master = cluster.master_of_slot(cluster.keyslot(key));
    cluster
        .command(master, &["GET", key])
        .unwrap_or_else(|error| panic!("GET {key}: {error}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_holds_on_a_cluster_with_replicas_and_after_a_failover() {
    let mut cluster = RedisCluster::start_with_replicas();
    let fence = cluster_fence(&cluster).await;
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3);
    for node in masters {
        let list = cluster
            .command(node, &["FUNCTION", "LIST", "LIBRARYNAME", "palisade_fence"])
            .unwrap();
        assert!(list.contains("palisade_fence_apply"), "node {node}: {list}");
    }

    // The table, on locks spread over every primary.
    let mismatches = rule_table_mismatches(&without_memory(&fence).await, "cluster").await;
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));

    let locks = RedisConfig::cluster(cluster.urls().to_vec());
    let stock = late_sale_after_a_sale(&locks, &fence, "cluster-late-after-write").await;
    assert_eq!(get(&cluster, &stock), "9");
    let stock = late_sale_after_a_fence(&locks, &fence, "cluster-late-after-fence").await;
    assert_eq!(get(&cluster, &stock), "10");

    concurrent_writers(&fence, &unique_lock("cluster-concurrent"), |key| {
        get(&cluster, key)
    })
    .await;

    failover_keeps_the_marks_that_reached_the_replica(&mut cluster).await;
}

/// Holder 5 writes and its mark reaches the replica (`WAIT 1`); the master
/// is killed and the replica promoted. On the new master the library is
/// there, holder 4 is refused as stale, holder 6 is accepted.
async fn failover_keeps_the_marks_that_reached_the_replica(cluster: &mut RedisCluster) {
    let fence = cluster_fence(cluster).await;
    let lock = unique_lock("cluster-failover");
    let keys = fence.keys(&lock);
    let stock = keys.data_key("stock");
    accepted(
        fence.set(&exclusive(&lock, 5), stock.clone(), "5").await,
        "holder 5",
    );
    let master = cluster.master_of_slot(keys.slot());
    let replica = cluster.replica_of(master);
    let copies = cluster.command(master, &["WAIT", "1", "5000"]).unwrap();
    assert_eq!(copies, "1", "the replica acknowledged the mark");
    cluster.kill(master).unwrap();
    let took = cluster.wait_for_promotion(replica, Duration::from_secs(60));
    println!("replica promoted {took:?} after the master died");
    let list = cluster
        .command(
            replica,
            &["FUNCTION", "LIST", "LIBRARYNAME", "palisade_fence"],
        )
        .unwrap();
    assert!(list.contains("palisade_fence_apply"), "{list}");

    // A fresh connection learns the new topology.
    let fence = cluster_fence(cluster).await;
    let marks = stale(
        fence.set(&exclusive(&lock, 4), stock.clone(), "4").await,
        "holder 4 after the failover",
    );
    assert_eq!(marks.exclusive, 5, "{marks:?}");
    accepted(
        fence.set(&exclusive(&lock, 6), stock.clone(), "6").await,
        "holder 6",
    );
    assert_eq!(get(cluster, &stock), "6");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_outside_the_locks_slot_is_refused_and_not_written() {
    let cluster = RedisCluster::start();
    let fence = cluster_fence(&cluster).await;
    let lock = unique_lock("slots");
    let holder = exclusive(&lock, 3);
    let keys = fence.keys(&lock);
    // A key of another slot, and one of the same name without the tag.
    let mut outside = "stock".to_owned();
    while slot(outside.as_bytes()) == keys.slot() {
        outside.push('x');
    }
    let error = fence.set(&holder, outside.clone(), "1").await.unwrap_err();
    match &error {
        RedisFenceError::WrongSlot {
            key,
            key_slot,
            lock_slot,
            tag,
            ..
        } => {
            assert_eq!(
                (key.as_str(), *key_slot, *lock_slot),
                (outside.as_str(), slot(outside.as_bytes()), keys.slot())
            );
            assert_eq!(tag, keys.tag());
        }
        other => panic!("{other:?}"),
    }
    assert!(error.to_string().contains(keys.tag()), "{error}");
    let batch = palisade_fence_redis::Batch::new()
        .set(keys.data_key("ok"), "1")
        .set(outside.clone(), "1");
    assert!(matches!(
        fence.batch(&holder, &batch).await,
        Err(RedisFenceError::WrongSlot { .. })
    ));
    assert_eq!(get(&cluster, &outside), "");
    assert_eq!(get(&cluster, &keys.data_key("ok")), "");
    // Behind the API's back, Redis Cluster itself refuses the mixed call.
    let client = redis::cluster::ClusterClient::new(cluster.urls().to_vec()).unwrap();
    let mut raw = client.get_async_connection().await.unwrap();
    let refused: redis::RedisResult<redis::Value> = redis::cmd("FCALL")
        .arg("palisade_fence_apply")
        .arg(2)
        .arg(keys.marks())
        .arg(&outside)
        .arg(
            &[
                "2", "1", "9", "0", "1", "x", "3", "0", "0", "1", "set", "2", "1",
            ][..],
        )
        .query_async(&mut raw)
        .await;
    let refused = refused.unwrap_err().to_string();
    assert!(refused.to_lowercase().contains("crossslot"), "{refused}");
    assert_eq!(get(&cluster, &outside), "");
    // The lock's own keys work.
    accepted(
        fence.set(&holder, keys.data_key("ok"), "1").await,
        "a key with the tag",
    );
}
