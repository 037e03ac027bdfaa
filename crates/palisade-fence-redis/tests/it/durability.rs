//! What survives what: `kill -9` with `appendfsync always`; a restart
//! without persistence (the library's absence says so, the marks this
//! process saw are put back); `WAIT` for a replica; a failover to a
//! replica that missed a mark raise, repaired with the floor-raise form.

use std::time::Duration;

use palisade_fence_redis::{Batch, FenceOptions, RedisFenceError};
use palisade_testkit::redis::{Persistence, RedisOptions, RedisServer};

use crate::common::{
    Via, accepted, connect_with, exclusive, marks, stale, unique_lock, with_module,
};

fn memoryless() -> FenceOptions {
    FenceOptions::default().with_remembered_marks(false)
}

/// Calls until Redis answers again after a restart (the connection
/// manager reconnects in the background), within a bound.
async fn after_restart<T>(mut call: impl AsyncFnMut() -> Result<T, RedisFenceError>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match call().await {
            Ok(value) => return value,
            Err(error) if error.is_unknown_outcome() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(error) => panic!("{error}"),
        }
    }
}

/// With `appendfsync always`, a kill -9 loses nothing the fence
/// acknowledged. Through the module the AOF holds the module's calls
/// themselves, replayed on restart (the module is loaded first).
async fn aof_always_keeps_marks_and_data_through_kill_9(via: Via) {
    let options = RedisOptions::persistence(Persistence::AofAlways);
    let mut redis = RedisServer::spawn(match via {
        Via::Module => with_module(options),
        Via::Function => options,
    });
    let fence = connect_with(&redis, memoryless().with_module(via == Via::Module)).await;
    assert_eq!(fence.uses_module(), via == Via::Module);
    let lock = unique_lock("aof");
    let stock = fence.data_key(&lock, "stock");
    accepted(
        fence.set(&exclusive(&lock, 5), stock.clone(), "7").await,
        "gen 5",
    );
    accepted(
        fence.decr_by(&exclusive(&lock, 5), stock.clone(), 2).await,
        "gen 5 sells two",
    );
    redis.kill().unwrap();
    redis.restart().unwrap();
    let (kept, seq) = after_restart(async || fence.marks(&lock).await).await;
    assert_eq!((kept, seq), (marks(5, 0), 2), "{via:?}");
    stale(
        fence.decr_by(&exclusive(&lock, 4), stock.clone(), 1).await,
        "gen 4 after the restart",
    );
    assert_eq!(redis.command(&["GET", &stock]).unwrap(), "5", "{via:?}");
    assert_eq!(
        fence.stats().library_reloads,
        0,
        "the library was in the AOF"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_aof_always_marks_and_data_survive_kill_9() {
    aof_always_keeps_marks_and_data_through_kill_9(Via::Function).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_aof_always_the_modules_calls_survive_kill_9() {
    aof_always_keeps_marks_and_data_through_kill_9(Via::Module).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_persistence_a_restart_is_detected_and_seen_marks_are_put_back() {
    let mut redis = RedisServer::spawn(RedisOptions::persistence(Persistence::None));
    let remembering = connect_with(&redis, FenceOptions::default()).await;
    let forgetting = connect_with(&redis, memoryless()).await;
    let (seen, unseen, floored) = (
        unique_lock("seen"),
        unique_lock("unseen"),
        unique_lock("floored"),
    );
    for lock in [&seen, &unseen, &floored] {
        let fence = if lock == &seen {
            &remembering
        } else {
            &forgetting
        };
        accepted(
            fence
                .set(&exclusive(lock, 5), fence.data_key(lock, "k"), "v5")
                .await,
            "gen 5",
        );
    }
    redis.kill().unwrap();
    redis.restart().unwrap();

    // The regression, shown: Redis forgot everything, the library included;
    // the next call loads it again (and says so), and an older holder
    // passes where nobody remembers the mark.
    let late = after_restart(async || {
        forgetting
            .set(
                &exclusive(&unseen, 4),
                forgetting.data_key(&unseen, "k"),
                "v4",
            )
            .await
    })
    .await;
    assert!(
        late.is_ok(),
        "documented: marks lost with the data readmit an older holder: {late:?}"
    );
    assert_eq!(forgetting.stats().library_reloads, 1);

    // A process that saw the mark puts it back and refuses the older holder.
    let late = after_restart(async || {
        remembering
            .set(&exclusive(&seen, 4), remembering.data_key(&seen, "k"), "v4")
            .await
    })
    .await;
    assert_eq!(
        stale(Ok(late), "gen 4 where the mark was seen"),
        marks(5, 0)
    );
    assert_eq!(remembering.stats().marks_restored, 1);
    assert_eq!(
        forgetting.marks(&seen).await.unwrap().0,
        marks(5, 0),
        "written back to Redis"
    );

    // The floor-raise form: an operator (or the lock side) raises the mark
    // to the newest generation granted before the loss.
    assert_eq!(
        forgetting.raise_floor(&floored, 5).await.unwrap(),
        marks(5, 0)
    );
    stale(
        forgetting
            .set(
                &exclusive(&floored, 4),
                forgetting.data_key(&floored, "k"),
                "v4",
            )
            .await,
        "after raise_floor",
    );
    accepted(
        forgetting
            .set(
                &exclusive(&floored, 5),
                forgetting.data_key(&floored, "k"),
                "v5",
            )
            .await,
        "the newest holder",
    );
    assert_eq!(
        forgetting.raise_floor(&floored, 3).await.unwrap(),
        marks(5, 0),
        "a floor never lowers"
    );
}

fn replica_of(primary: &RedisServer) -> RedisServer {
    replica_with(primary, RedisOptions::default())
}

fn replica_with(primary: &RedisServer, mut options: RedisOptions) -> RedisServer {
    let port = primary.port().unwrap().to_string();
    options
        .extra_args
        .extend(["--replicaof".into(), "127.0.0.1".into(), port]);
    RedisServer::spawn(options)
}

/// Until the replica's link is up in its own view and `primary` counts it
/// online (only then does `WAIT` count it).
async fn wait_in_sync(primary: &RedisServer, replica: &RedisServer) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let info = |server: &RedisServer| server.command(&["INFO", "replication"]).unwrap();
    while !(info(replica).contains("master_link_status:up")
        && info(primary).contains("state=online"))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replica never synced"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_confirms_a_replica_or_says_the_write_is_not_replicated() {
    let primary = RedisServer::spawn(RedisOptions::default());
    let replica = replica_of(&primary);
    wait_in_sync(&primary, &replica).await;
    // The replica's acknowledgement is a round trip on a loaded machine:
    // 300 ms once was not enough; the refusal below waits the same time.
    let options = FenceOptions::default()
        .with_replicas(1, Duration::from_secs(2))
        .with_call_timeout(Duration::from_secs(5));
    let fence = connect_with(&primary, options).await;
    let lock = unique_lock("wait");
    let key = fence.data_key(&lock, "k");
    accepted(
        fence
            .set(&exclusive(&lock, 3), key.clone(), "on both")
            .await,
        "replicated",
    );
    assert_eq!(
        replica.command(&["GET", &key]).unwrap(),
        "on both",
        "the replica has it when the call returns"
    );
    replica.pause().unwrap();
    let error = fence
        .set(&exclusive(&lock, 4), key.clone(), "primary only")
        .await
        .unwrap_err();
    replica.resume().unwrap();
    match &error {
        RedisFenceError::NotReplicated {
            acknowledged: 0,
            wanted: 1,
            ..
        } => assert!(error.is_unknown_outcome()),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        primary.command(&["GET", &key]).unwrap(),
        "primary only",
        "applied on the primary"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_replica_that_missed_a_raise_is_repaired_with_raise_floor() {
    let mut primary = RedisServer::spawn(RedisOptions::default());
    let replica = replica_of(&primary);
    wait_in_sync(&primary, &replica).await;
    let fence = connect_with(&primary, memoryless()).await;
    let lock = unique_lock("failover");
    let key = fence.data_key(&lock, "k");
    accepted(
        fence.set(&exclusive(&lock, 5), key.clone(), "v5").await,
        "gen 5, replicated",
    );
    while replica.command(&["GET", &key]).unwrap() != "v5" {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The replica is promoted (say a partition made the failover) and the
    // old primary still takes generation 7's fence before it dies: the
    // promoted replica never gets that raise.
    replica.command(&["REPLICAOF", "NO", "ONE"]).unwrap();
    fence.admit(&exclusive(&lock, 7)).await.unwrap().unwrap();
    primary.kill().unwrap();

    let promoted = connect_with(&replica, memoryless()).await;
    let (went_back, _) = promoted.marks(&lock).await.unwrap();
    assert_eq!(
        went_back,
        marks(5, 0),
        "the mark went back with the failover"
    );
    // Repair: raise the floor to the newest generation the lock side
    // granted; holder 6 (granted before 7, paused) is refused again.
    promoted.raise_floor(&lock, 7).await.unwrap();
    stale(
        promoted.set(&exclusive(&lock, 6), key.clone(), "v6").await,
        "holder 6 after the repair",
    );
    accepted(
        promoted.set(&exclusive(&lock, 7), key, "v7").await,
        "holder 7",
    );
}

/// A call of the module that writes reaches a replica as itself; the
/// replica, which loads the module too, runs it on the same data and
/// holds the same data and marks, and a fence over it refuses what the
/// primary refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_modules_calls_replicate_to_a_replica_that_loads_it() {
    let primary = RedisServer::spawn(with_module(RedisOptions::default()));
    let replica = replica_with(&primary, with_module(RedisOptions::default()));
    wait_in_sync(&primary, &replica).await;
    let options = FenceOptions::default().with_replicas(1, Duration::from_secs(2));
    let fence = connect_with(&primary, options).await;
    assert!(fence.uses_module());
    let lock = unique_lock("module-replica");
    let stock = fence.data_key(&lock, "stock");
    let orders = fence.data_key(&lock, "orders");
    accepted(
        fence.set(&exclusive(&lock, 4), stock.clone(), "10").await,
        "seed",
    );
    let batch =
        Batch::new()
            .decr_by_keeping(stock.clone(), 3, 0)
            .hset(orders.clone(), "o1", "alice");
    let sold = accepted(fence.batch(&exclusive(&lock, 5), &batch).await, "a sale");
    assert_eq!(sold.seq, 2);
    stale(
        fence.decr_by(&exclusive(&lock, 4), stock.clone(), 1).await,
        "the superseded holder on the primary",
    );
    let on_replica = |args: &[&str]| replica.command(args).unwrap();
    assert_eq!(on_replica(&["GET", &stock]), "7");
    assert_eq!(on_replica(&["HGET", &orders, "o1"]), "alice");
    let marks_key = fence.keys(&lock).marks().to_owned();
    assert_eq!(on_replica(&["GET", &marks_key]), "5 0 2");
    // Promoted, the replica's marks refuse the superseded holder.
    on_replica(&["REPLICAOF", "NO", "ONE"]);
    let promoted = connect_with(&replica, FenceOptions::default()).await;
    assert!(promoted.uses_module());
    stale(
        promoted
            .decr_by(&exclusive(&lock, 4), stock.clone(), 1)
            .await,
        "the superseded holder on the promoted replica",
    );
    assert_eq!(on_replica(&["GET", &stock]), "7");
}
