//! The fence on one Redis server: the paused holder's late write, every
//! write kind under the rule, all-or-nothing batches, shared readers,
//! signatures, and concurrent holders never writing out of order.

use std::sync::Arc;
use std::time::Duration;

use palisade_core::{
    Lock, LockGuard, Mode, OpResult, Refused, SessionOptions, Signer, SigningKey, Verifier,
};
use palisade_fence_redis::{Batch, FenceOptions, RedisFence, RedisFenceError, Reply};
use palisade_lock_redis::{RedisConfig, RedisLockClient};
use palisade_testkit::redis::RedisServer;

use crate::common::{
    Via, accepted, exclusive, marks, shared, single, single_via, stale, unique_lock,
};

const TTL: Duration = Duration::from_millis(800);
/// The bound on a wait for a lease to end: many TTLs, for a loaded box.
const LEASE_WAIT: Duration = Duration::from_secs(30);

fn options() -> SessionOptions {
    SessionOptions::default()
        .with_ttl(TTL)
        .with_keepalive_interval(TTL / 4)
        .with_safety_margin(TTL / 5)
}

/// A holds the lock (Redis lock backend, configured by `locks`) with no
/// watchdog and sets the stock; its lease runs out while it "pauses"; B is
/// granted (the grant itself waits for A's key to expire), and `newer`
/// does B's part; then A's late sale. Returns A's answer and the stock key.
pub(crate) async fn late_write_after(
    locks: &RedisConfig,
    fence: &RedisFence,
    name: &str,
    newer: impl AsyncFnOnce(&RedisFence, &palisade_lock_redis::RedisGuard, &str),
) -> (
    palisade_fence_redis::Outcome<palisade_fence_redis::Written<i64>>,
    String,
) {
    let lock = unique_lock(name);
    let stock = fence.data_key(&lock, "stock");
    let client = RedisLockClient::connect(locks.clone()).await.unwrap();
    let locks_a = client.session(options()).unwrap().without_watchdog();
    let guard_a = locks_a.acquire(&lock, Mode::Exclusive).await.unwrap();
    accepted(
        fence.set(&guard_a, stock.clone(), "10").await,
        "A sets the stock",
    );
    let sequencer_a = guard_a.sequencer().unwrap();

    let locks_b = client.session(options()).unwrap();
    let guard_b = locks_b
        .acquire_timeout(&lock, Mode::Exclusive, LEASE_WAIT)
        .await
        .unwrap();
    assert!(guard_b.generation() > sequencer_a.generation());
    newer(fence, &guard_b, &stock).await;
    // A wakes up and sells one, with the sequencer it held.
    let late = fence
        .decr_by_keeping(&sequencer_a, stock.clone(), 1, 0)
        .await;
    guard_b.release().await.unwrap();
    (late, stock)
}

/// B sells one, then A's late sale is refused. The stock key (B's sale
/// alone counted: 9).
pub(crate) async fn late_sale_after_a_sale(
    locks: &RedisConfig,
    fence: &RedisFence,
    name: &str,
) -> String {
    let (late, stock) = late_write_after(locks, fence, name, async |fence, guard, stock| {
        accepted(
            fence.decr_by_keeping(guard, stock.to_owned(), 1, 0).await,
            "B sells one",
        );
    })
    .await;
    stale(late, "A's late sale");
    stock
}

/// B only fences (admit), then A's late sale is refused. The stock key
/// (untouched: 10).
pub(crate) async fn late_sale_after_a_fence(
    locks: &RedisConfig,
    fence: &RedisFence,
    name: &str,
) -> String {
    let (late, stock) = late_write_after(locks, fence, name, async |fence, guard, _| {
        let marks = fence.admit(guard).await.unwrap().unwrap();
        assert_eq!(marks.exclusive, guard.generation().get());
    })
    .await;
    stale(late, "A's late sale after B's fence");
    stock
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_write_is_refused_after_a_newer_holder_wrote() {
    let (redis, fence) = single().await;
    let locks = RedisConfig::new(redis.url());
    let stock = late_sale_after_a_sale(&locks, &fence, "late-after-write").await;
    let plain: String = redis.command(&["GET", &stock]).unwrap();
    assert_eq!(plain, "9", "only B's sale counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_write_is_refused_after_a_newer_holder_only_fenced() {
    let (redis, fence) = single().await;
    let locks = RedisConfig::new(redis.url());
    let stock = late_sale_after_a_fence(&locks, &fence, "late-after-fence").await;
    assert_eq!(redis.command(&["GET", &stock]).unwrap(), "10");
}

/// The marks record is one string, `x s n`. A record of the first layout
/// (a hash of `x`, `s` and `n`, written by the library's version 2 or the
/// module's version 1) refuses what it refused, through the module and
/// the function alike, and its next write rewrites it as a string; a
/// record that is neither is refused, not read as zero.
#[tokio::test]
async fn the_marks_record_of_either_layout_is_honoured_and_a_corrupt_one_refused() {
    for via in [Via::Module, Via::Function] {
        let (redis, fence) = single_via(via).await;
        let lock = unique_lock("record-layout");
        let record = fence.keys(&lock).marks().to_owned();
        let stock = fence.data_key(&lock, "stock");
        redis
            .command(&["HSET", &record, "x", "5", "s", "0", "n", "3"])
            .unwrap();
        redis.command(&["SET", &stock, "10"]).unwrap();
        stale(
            fence.decr_by(&exclusive(&lock, 4), stock.clone(), 1).await,
            "gen 4 under a hash record of gen 5",
        );
        assert_eq!(redis.command(&["TYPE", &record]).unwrap(), "hash");
        let sold = accepted(
            fence.decr_by(&exclusive(&lock, 5), stock.clone(), 1).await,
            "gen 5",
        );
        assert_eq!((sold.value, sold.seq), (9, 4), "{via:?}");
        assert_eq!(redis.command(&["GET", &record]).unwrap(), "5 0 4");
        stale(
            fence.decr_by(&exclusive(&lock, 4), stock.clone(), 1).await,
            "gen 4 under the rewritten record",
        );

        for corrupt in ["5 0", "5 0 4 1", "05 0 4", "five 0 4", ""] {
            redis.command(&["SET", &record, corrupt]).unwrap();
            let answer = fence.decr_by(&exclusive(&lock, 6), stock.clone(), 1).await;
            assert!(
                matches!(&answer, Err(RedisFenceError::Protocol(message)) if message.contains("corrupt marks record")),
                "{via:?}, record {corrupt:?}: {answer:?}"
            );
        }
        assert_eq!(redis.command(&["GET", &stock]).unwrap(), "9", "{via:?}");
    }
}

/// A refused request writes nothing, so it touches no `WATCH` of the
/// lock's keys; an accepted one does, as the plain commands would, through
/// the module and the function alike.
#[tokio::test]
async fn a_refusal_leaves_watchers_alone_and_a_write_aborts_their_transaction() {
    use palisade_fence_redis::redis::{self, aio::MultiplexedConnection};
    /// `WATCH` the lock's record and data key on a connection of its own.
    async fn watch(watcher: &mut MultiplexedConnection, keys: [&str; 2]) {
        let _: () = redis::cmd("WATCH")
            .arg(&keys[..])
            .query_async(watcher)
            .await
            .unwrap();
    }
    /// Whether a transaction after the `WATCH` committed.
    async fn commits(watcher: &mut MultiplexedConnection) -> bool {
        let committed: Option<(i64,)> = redis::pipe()
            .atomic()
            .incr("palisade-test-watch", 1)
            .query_async(watcher)
            .await
            .unwrap();
        committed.is_some()
    }
    for via in [Via::Module, Via::Function] {
        let (server, fence) = single_via(via).await;
        let lock = unique_lock("watch");
        let record = fence.keys(&lock).marks().to_owned();
        let stock = fence.data_key(&lock, "stock");
        accepted(
            fence.set(&exclusive(&lock, 5), stock.clone(), "10").await,
            "gen 5",
        );
        let client = redis::Client::open(server.url()).unwrap();
        let mut watcher = client.get_multiplexed_async_connection().await.unwrap();

        watch(&mut watcher, [&record, &stock]).await;
        stale(
            fence.decr_by(&exclusive(&lock, 4), stock.clone(), 1).await,
            "gen 4 under gen 5",
        );
        assert!(
            commits(&mut watcher).await,
            "{via:?}: a refusal aborted a watcher's transaction"
        );

        watch(&mut watcher, [&record, &stock]).await;
        accepted(
            fence.decr_by(&exclusive(&lock, 5), stock.clone(), 1).await,
            "gen 5 sells one",
        );
        assert!(
            !commits(&mut watcher).await,
            "{via:?}: a fenced write left a watcher's transaction to commit"
        );
    }
}

#[tokio::test]
async fn every_write_kind_is_fenced_and_a_refusal_changes_nothing() {
    let (redis, fence) = single().await;
    let lock = unique_lock("kinds");
    let key = |name: &str| fence.data_key(&lock, name);
    let holder = exclusive(&lock, 5);
    let set = accepted(fence.set(&holder, key("s"), "one").await, "set");
    assert_eq!(
        (set.value, set.marks, set.seq),
        (OpResult::Created, marks(5, 0), 1)
    );
    let set = accepted(fence.set(&holder, key("s"), "two").await, "set again");
    assert_eq!((set.value, set.seq), (OpResult::Replaced, 2));
    assert_eq!(
        accepted(fence.incr_by(&holder, key("n"), 7).await, "incr").value,
        7
    );
    assert_eq!(
        accepted(fence.decr_by(&holder, key("n"), 2).await, "decr").value,
        5
    );
    assert_eq!(
        accepted(fence.hset(&holder, key("h"), "f", "v").await, "hset").value,
        OpResult::Created
    );
    assert_eq!(
        accepted(fence.hset(&holder, key("h"), "g", "w").await, "hset").value,
        OpResult::Created
    );
    assert_eq!(
        accepted(fence.hdel(&holder, key("h"), "g").await, "hdel").value,
        OpResult::Deleted
    );
    assert_eq!(
        accepted(fence.hdel(&holder, key("h"), "g").await, "hdel").value,
        OpResult::Absent
    );
    assert_eq!(
        accepted(fence.del(&holder, key("gone")).await, "del").value,
        OpResult::Absent
    );
    let newest = accepted(
        fence.set(&exclusive(&lock, 6), key("s"), "six").await,
        "gen 6",
    );
    assert_eq!(newest.seq, 10, "every accepted write takes the next number");

    let snapshot = || {
        ["s", "n"]
            .iter()
            .map(|name| redis.command(&["GET", &key(name)]).unwrap())
            .chain([redis.command(&["HGETALL", &key("h")]).unwrap()])
            .collect::<Vec<_>>()
    };
    let before = snapshot();
    let old = exclusive(&lock, 5);
    stale(fence.set(&old, key("s"), "late").await, "set");
    stale(fence.del(&old, key("s")).await, "del");
    stale(fence.incr_by(&old, key("n"), 1).await, "incr");
    stale(
        fence.decr_by_keeping(&old, key("n"), 1, 0).await,
        "decr keeping",
    );
    stale(fence.hset(&old, key("h"), "f", "late").await, "hset");
    stale(fence.hdel(&old, key("h"), "f").await, "hdel");
    stale(
        fence
            .batch(&old, &Batch::new().set(key("s"), "x").del(key("n")))
            .await,
        "batch",
    );
    stale(fence.get(&old, key("s")).await, "a fenced read");
    stale(fence.admit(&old).await, "admit");
    assert_eq!(snapshot(), before);
    assert_eq!(fence.marks(&lock).await.unwrap(), (marks(6, 0), 10));
}

#[tokio::test]
async fn a_batch_is_all_or_nothing() {
    let (redis, fence) = single().await;
    let lock = unique_lock("batch");
    let key = |name: &str| fence.data_key(&lock, name);
    let holder = exclusive(&lock, 3);
    accepted(fence.set(&holder, key("stock"), "1").await, "stock 1");
    let sale = |order: &str| {
        Batch::new().decr_by_keeping(key("stock"), 1, 0).hset(
            key("orders"),
            order.to_owned(),
            "alice",
        )
    };
    let sold = accepted(fence.batch(&holder, &sale("o1")).await, "the last item");
    assert_eq!(
        sold.value,
        [Reply::Counter(0), Reply::Done(OpResult::Created)]
    );
    // Sold out: the condition fails, the order is not recorded, no mark moves.
    let later = exclusive(&lock, 4);
    match fence.batch(&later, &sale("o2")).await.unwrap() {
        Err(Refused::CasMismatch {
            op_index: 0,
            current,
        }) => assert_eq!(current.as_deref(), Some(&b"0"[..])),
        other => panic!("sold out: {other:?}"),
    }
    assert_eq!(
        redis.command(&["HGETALL", &key("orders")]).unwrap(),
        "o1\nalice"
    );
    assert_eq!(fence.marks(&lock).await.unwrap(), (marks(3, 0), 2));
    // A key of the wrong kind, last in the batch: nothing before it lands.
    let batch = Batch::new()
        .set(key("first"), "x")
        .incr_by(key("orders"), 1);
    assert!(matches!(
        fence.batch(&later, &batch).await,
        Err(RedisFenceError::WrongType { op_index: 1 })
    ));
    let batch = Batch::new()
        .set(key("first"), "x")
        .set(key("text"), "abc")
        .incr_by(key("text"), 1);
    assert!(matches!(
        fence.batch(&later, &batch).await,
        Err(RedisFenceError::NotInteger { op_index: 2 })
    ));
    assert_eq!(redis.command(&["EXISTS", &key("first")]).unwrap(), "0");
    assert_eq!(fence.marks(&lock).await.unwrap(), (marks(3, 0), 2));
    // Ops see what the ops before them left.
    let batch = Batch::new()
        .set(key("c"), "5")
        .decr_by_keeping(key("c"), 3, 0)
        .decr_by_keeping(key("c"), 3, 0);
    assert!(matches!(
        fence.batch(&later, &batch).await.unwrap(),
        Err(Refused::CasMismatch { op_index: 2, .. })
    ));
    assert!(matches!(
        fence.batch(&later, &Batch::new()).await,
        Err(RedisFenceError::Invalid { .. })
    ));
}

#[tokio::test]
async fn shared_holders_read_and_fence_older_writers() {
    let (_redis, fence) = single().await;
    let lock = unique_lock("shared");
    let key = fence.data_key(&lock, "report");
    accepted(
        fence.set(&exclusive(&lock, 5), key.clone(), "v5").await,
        "writer 5",
    );
    let read = fence
        .get(&shared(&lock, 7), key.clone())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (read.value.as_deref(), read.marks),
        (Some(&b"v5"[..]), marks(5, 7))
    );
    // A writer granted before that reader must not change what it read.
    stale(
        fence.set(&exclusive(&lock, 6), key.clone(), "v6").await,
        "writer 6",
    );
    assert!(matches!(
        fence
            .set(&shared(&lock, 8), key.clone(), "x")
            .await
            .unwrap(),
        Err(Refused::SharedOnWrite { .. })
    ));
    // An older reader still reads; a reader older than the writer does not.
    assert_eq!(
        fence
            .get(&shared(&lock, 6), key.clone())
            .await
            .unwrap()
            .unwrap()
            .marks,
        marks(5, 7)
    );
    stale(fence.get(&shared(&lock, 4), key.clone()).await, "reader 4");
    let read = fence
        .hget(&shared(&lock, 7), fence.data_key(&lock, "h"), "f")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.value, None);
    accepted(fence.set(&exclusive(&lock, 7), key, "v7").await, "writer 7");
}

#[tokio::test]
async fn signed_sequencers_are_checked_before_anything_is_sent() {
    let redis = RedisServer::start();
    let key = SigningKey::new("k1", [7u8; 32]).unwrap();
    let signer = Signer::new("redis-orders", key.clone()).unwrap();
    let verifier = Verifier::new()
        .with_key(key)
        .unwrap()
        .with_issuer("redis-orders")
        .unwrap();
    let connection = redis::Client::open(redis.url())
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap();
    let fence =
        RedisFence::with_options(connection, FenceOptions::default().with_verifier(verifier))
            .await
            .unwrap();
    let lock = unique_lock("signed");
    let forged = exclusive(&lock, u64::MAX);
    let error = fence.admit(&forged).await.unwrap_err();
    assert!(
        matches!(error, RedisFenceError::Signature { .. }),
        "{error}"
    );
    let tampered: palisade_core::Sequencer = signer
        .sign(exclusive(&lock, 4))
        .to_string()
        .replace("gen=4", "gen=400")
        .parse()
        .unwrap();
    assert!(matches!(
        fence.admit(&tampered).await,
        Err(RedisFenceError::Signature { .. })
    ));
    assert_eq!(
        redis
            .command(&["EXISTS", fence.keys(&lock).marks()])
            .unwrap(),
        "0",
        "nothing reached Redis"
    );
    let marks_now = fence
        .admit(&signer.sign(exclusive(&lock, 4)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(marks_now, marks(4, 0));
}

/// 16 tasks with random generations on one lock: the accepted writes, in
/// the lock's write sequence, never go down in generation, and the value
/// left is the last accepted one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_holders_of_increasing_generations_never_write_out_of_order() {
    let (redis, fence) = single().await;
    concurrent_writers(&fence, &unique_lock("concurrent"), |key| {
        redis.command(&["GET", key]).unwrap()
    })
    .await;
}

/// The concurrent-writers check, for one server or a cluster.
pub(crate) async fn concurrent_writers(
    fence: &RedisFence,
    lock: &palisade_core::LockName,
    get: impl Fn(&str) -> String,
) {
    let key = fence.data_key(lock, "value");
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for task in 0..16u64 {
        let (fence, lock, key, log) = (fence.clone(), lock.clone(), key.clone(), log.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..20u64 {
                // Generations rise over time, and interleave across tasks.
                let generation = 1 + round * 16 + (task * 7 + round * 3) % 16;
                let holder = exclusive(&lock, generation);
                match fence
                    .set(&holder, key.clone(), generation.to_string())
                    .await
                    .unwrap()
                {
                    Ok(written) => log.lock().unwrap().push((written.seq, generation)),
                    Err(Refused::Stale { marks, .. }) => assert!(marks.exclusive > generation),
                    Err(other) => panic!("{other:?}"),
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut log = log.lock().unwrap().clone();
    log.sort();
    assert!(log.len() >= 20, "{log:?}");
    for pair in log.windows(2) {
        assert!(pair[0].0 < pair[1].0, "one seq per write: {pair:?}");
        assert!(pair[0].1 <= pair[1].1, "out of order: {pair:?}");
    }
    let last = log.last().unwrap().1;
    assert_eq!(get(&key), last.to_string());
    assert_eq!(fence.marks(lock).await.unwrap().0.exclusive, last);
}

/// One counter op takes the function's lean path, where Redis's own
/// `INCRBY` checks the value: a refusal there still changes nothing.
#[tokio::test]
async fn a_single_counter_op_refuses_what_the_batch_path_refuses() {
    let (redis, fence) = single().await;
    let lock = unique_lock("counter");
    let key = |name: &str| fence.data_key(&lock, name);
    let holder = exclusive(&lock, 3);
    accepted(fence.hset(&holder, key("h"), "f", "v").await, "a hash");
    accepted(fence.set(&holder, key("text"), "abc").await, "a text");
    let edge = palisade_fence_redis::COUNTER_LIMIT.to_string();
    accepted(fence.set(&holder, key("edge"), edge.clone()).await, "edge");
    let before = fence.marks(&lock).await.unwrap();
    assert!(matches!(
        fence.decr_by(&holder, key("h"), 1).await,
        Err(RedisFenceError::WrongType { op_index: 0 })
    ));
    assert!(matches!(
        fence.incr_by(&holder, key("text"), 1).await,
        Err(RedisFenceError::NotInteger { op_index: 0 })
    ));
    // Beyond what Lua holds exactly: undone in the same call, refused.
    assert!(matches!(
        fence.incr_by(&holder, key("edge"), 1).await,
        Err(RedisFenceError::NotInteger { op_index: 0 })
    ));
    assert_eq!(redis.command(&["GET", &key("edge")]).unwrap(), edge);
    assert_eq!(redis.command(&["GET", &key("text")]).unwrap(), "abc");
    assert_eq!(
        fence.marks(&lock).await.unwrap(),
        before,
        "no write counted"
    );
    let edge = accepted(fence.decr_by(&holder, key("edge"), 1).await, "down");
    assert_eq!(edge.value, palisade_fence_redis::COUNTER_LIMIT - 1);
    assert_eq!(edge.seq, before.1 + 1);
}

/// Requests sent at once through one fence queue behind the calls in
/// flight and go to Redis as one grouped call; each is still judged on its
/// own, in arrival order: the stale ones, the short one and the one on a
/// hash are refused and change nothing, the others apply in order.
#[tokio::test]
async fn grouped_requests_are_each_judged_alone_in_arrival_order() {
    let (redis, fence) = single().await;
    let fence = RedisFence::with_options(
        fence.connection().clone(),
        FenceOptions::default().with_calls_in_flight(2),
    )
    .await
    .unwrap();
    let lock = unique_lock("grouped");
    let stock = fence.data_key(&lock, "stock");
    let hash = fence.data_key(&lock, "h");
    let (old, current) = (exclusive(&lock, 4), exclusive(&lock, 5));
    accepted(fence.set(&current, stock.clone(), "100").await, "stock");
    accepted(fence.hset(&current, hash.clone(), "f", "v").await, "hash");
    let calls_before = fence.stats().calls;
    let requests = (0..64usize).map(|index| {
        let (fence, stock, hash) = (fence.clone(), stock.clone(), hash.clone());
        let (old, current) = (old.clone(), current.clone());
        async move {
            match index % 4 {
                0 => fence.decr_by(&current, stock, 1).await,
                1 => fence.incr_by(&old, stock, 1000).await,
                2 if index == 2 => fence.decr_by_keeping(&current, stock, 1000, 0).await,
                2 => fence.decr_by(&current, hash, 1).await,
                _ => fence.decr_by_keeping(&current, stock, 1, 0).await,
            }
        }
    });
    // Polled together in one task: the first two go out alone, the other
    // 62 queue behind them and leave as one call.
    let outcomes = futures::future::join_all(requests).await;
    assert_eq!(fence.stats().calls - calls_before, 3, "grouped");
    let mut last_seq = 0;
    let mut left = 100;
    for (index, outcome) in outcomes.into_iter().enumerate() {
        match (index % 4, outcome) {
            (0 | 3, Ok(Ok(written))) => {
                left -= 1;
                assert_eq!(written.value, left, "request {index} in arrival order");
                assert!(written.seq > last_seq, "request {index}: sequence in order");
                last_seq = written.seq;
            }
            (1, Ok(Err(Refused::Stale { .. }))) => {}
            (2, Ok(Err(Refused::CasMismatch { .. }))) if index == 2 => {}
            (2, Err(RedisFenceError::WrongType { op_index: 0 })) => {}
            (_, other) => panic!("request {index}: {other:?}"),
        }
    }
    assert_eq!(redis.command(&["GET", &stock]).unwrap(), left.to_string());
    assert_eq!(left, 100 - 32);
    assert_eq!(redis.command(&["HGET", &hash, "f"]).unwrap(), "v");
    assert_eq!(fence.marks(&lock).await.unwrap(), (marks(5, 0), last_seq));
}
