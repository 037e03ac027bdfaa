//! The flash sale of the background articles, with its stock in Redis:
//! buyers take a Redis lock, read the stock, some pause past their lease,
//! and write the stock minus one with the order. Fenced, it never
//! oversells; with the mark check removed from the function, it does.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use palisade_core::{Lock, LockGuard, LockName, Mode, Refused, SessionOptions};
use palisade_fence_redis::{Batch, LIBRARY_SOURCE, MARK_CHECK_LINE, RedisFence};
use palisade_lock_redis::{RedisConfig, RedisLockClient};
use palisade_testkit::redis::{RedisOptions, RedisServer};
use tokio::sync::watch;

use crate::common::unique_lock;

const TTL: Duration = Duration::from_millis(600);
/// The bound on any one wait (a grant, a pause's end): many TTLs.
const WAIT: Duration = Duration::from_secs(30);
const STOCK: i64 = 12;
const BUYERS: u64 = 4;

/// What a sale ended with.
#[derive(Debug)]
struct Sale {
    /// Orders recorded.
    sold: i64,
    /// The stock left.
    left: i64,
    /// Late writes refused as stale.
    refused: u64,
}

async fn flash_sale(redis: &RedisServer, fence: &RedisFence, lock: &LockName) -> Sale {
    let stock = fence.data_key(lock, "stock");
    let orders = fence.data_key(lock, "orders");
    redis.command(&["SET", &stock, &STOCK.to_string()]).unwrap();
    let client = RedisLockClient::connect(RedisConfig::new(redis.url()))
        .await
        .unwrap();
    let refused = Arc::new(AtomicU64::new(0));
    // The newest generation that sold: what a paused buyer waits to see
    // pass it before it writes (no sleep, an event).
    let (sold_by, _) = watch::channel(0u64);
    let sold_by = Arc::new(sold_by);
    let mut buyers = Vec::new();
    for buyer in 0..BUYERS {
        let options = SessionOptions::default()
            .with_ttl(TTL)
            .with_keepalive_interval(TTL / 4)
            .with_safety_margin(TTL / 5);
        let mut session = client.session(options).unwrap();
        let pauses = buyer < 2;
        if pauses {
            session = session.without_watchdog();
        }
        let (fence, lock, stock, orders) =
            (fence.clone(), lock.clone(), stock.clone(), orders.clone());
        let (refused, sold_by) = (refused.clone(), sold_by.clone());
        buyers.push(tokio::spawn(async move {
            for hold in 0.. {
                let guard = session
                    .acquire_timeout(&lock, Mode::Exclusive, WAIT)
                    .await
                    .unwrap();
                let sequencer = guard.sequencer().unwrap();
                // A fenced read: also fences older holders out.
                let Ok(read) = fence.get(&guard, stock.clone()).await.unwrap() else {
                    continue;
                };
                let current: i64 = read
                    .value
                    .map_or(0, |bytes| String::from_utf8_lossy(&bytes).parse().unwrap());
                if current <= 0 {
                    let _ = guard.release().await;
                    return;
                }
                if pauses && hold == 0 {
                    // A GC pause: past the lease, and until a newer holder sold.
                    tokio::time::timeout(WAIT, guard.lease().lost())
                        .await
                        .unwrap();
                    let mut newer = sold_by.subscribe();
                    let mine = sequencer.generation().get();
                    let _ = tokio::time::timeout(WAIT, newer.wait_for(|sold| *sold > mine)).await;
                }
                let order = format!("buyer{buyer}-{hold}");
                let sale = Batch::new()
                    .set(stock.clone(), (current - 1).to_string())
                    .hset(
                        orders.clone(),
                        order,
                        sequencer.generation().get().to_string(),
                    );
                match fence.batch(&sequencer, &sale).await.unwrap() {
                    Ok(_) => {
                        sold_by
                            .send_modify(|sold| *sold = (*sold).max(sequencer.generation().get()));
                    }
                    Err(Refused::Stale { .. }) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(other) => panic!("{other:?}"),
                }
                let _ = guard.release().await;
            }
        }));
    }
    for buyer in buyers {
        tokio::time::timeout(WAIT * 4, buyer)
            .await
            .unwrap()
            .unwrap();
    }
    Sale {
        sold: redis.command(&["HLEN", &orders]).unwrap().parse().unwrap(),
        left: redis.command(&["GET", &stock]).unwrap().parse().unwrap(),
        refused: refused.load(Ordering::Relaxed),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_flash_sale_never_oversells() {
    let redis = RedisServer::start();
    let fence = RedisFence::connect(&redis.url()).await.unwrap();
    let sale = flash_sale(&redis, &fence, &unique_lock("flash-sale")).await;
    assert_eq!((sale.sold, sale.left), (STOCK, 0), "{sale:?}");
    assert!(
        sale.refused >= 2,
        "both paused buyers were refused: {sale:?}"
    );
}

/// The mutation check: the same sale with the mark check removed from the
/// function (loaded over the real one behind the fence's back) oversells.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_mark_check_the_flash_sale_oversells() {
    let redis = RedisServer::spawn(RedisOptions::default());
    let fence = RedisFence::connect(&redis.url()).await.unwrap();
    let mutated = LIBRARY_SOURCE.replace(MARK_CHECK_LINE, "local admitted = true");
    redis
        .command(&["FUNCTION", "LOAD", "REPLACE", &mutated])
        .unwrap();
    let sale = flash_sale(&redis, &fence, &unique_lock("flash-sale-mutated")).await;
    assert_eq!(sale.refused, 0, "{sale:?}");
    assert!(
        sale.sold > STOCK,
        "the paused buyers' late sales oversell: {sale:?}"
    );
}
