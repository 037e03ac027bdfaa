//! Scenario 22: the flash sale keeps its stock in Redis, fenced inside
//! Redis by `palisade-fence-redis`, and that Redis (which also holds the
//! locks) is killed (SIGKILL) and restarted on the same data directory
//! under the sale.
//!
//! Buyers (`src/bin/redis-buyer.rs`, one process each) take the lock, read
//! the stock with a fenced read, and sell one with one fenced batch: the
//! stock minus one and a sale record of their own. Buyer `a` reads and is
//! stopped (SIGSTOP) holding its sale; its lease lapses and a newer buyer
//! sells; the other buyers are stopped too, Redis is killed and restarted,
//! and `a` resumes and sends its late sale, the first sale the restarted
//! Redis judges; then the others go on until the stock is gone. The history's writes are the sales (each its own key), the
//! final state is read from Redis itself.
//!
//! With `appendonly yes, appendfsync always` the marks survive with the
//! data: `a` is refused, nothing is oversold, no acknowledged sale is lost
//! (I-MONO, I-STALE, I-DUR, I-ONCE, I-LIVE). With `appendonly no` Redis
//! forgets the marks, the stock and every sale: the checker reports the
//! regression docs/redis-data.md documents, `a`'s stale sale accepted
//! (I-STALE) and acknowledged sales lost (I-DUR).

use std::time::Duration;

use palisade::LockName;
use palisade_testkit::redis::{Persistence, RedisOptions, RedisServer};
use palisade_tests::fault::{ClientLine, ClientProcess, FaultRun};

use crate::sale::{Row, Sale, finish};
use crate::{STEP, live_within};

/// The stock at the start.
const STOCK: u64 = 40;
/// The buyers' lease: short, so `a`'s lapses soon after it is stopped.
const TTL: Duration = Duration::from_millis(1000);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_kill_9_with_aof_always_under_the_fenced_flash_sale() -> anyhow::Result<()> {
    let sale = flash_sale_with_a_restart("s22", Persistence::AofAlways).await?;
    sale.assert_sold_out_safely();
    Ok(())
}

/// The documented regression: without persistence the restart takes the
/// marks, and the checker must say what that cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_without_persistence_under_the_fenced_flash_sale_is_caught_by_the_checker()
-> anyhow::Result<()> {
    let sale = flash_sale_with_a_restart("r20", Persistence::None).await?;
    sale.assert_caught("with its marks gone", "the sales Redis forgot");
    Ok(())
}

async fn flash_sale_with_a_restart(tag: &str, persistence: Persistence) -> anyhow::Result<Sale> {
    let binaries = palisade_tests::fault_binaries!();
    let mut redis = RedisServer::spawn(RedisOptions::persistence(persistence));
    let mut run = FaultRun::new(tag)?;
    let lock = LockName::new(format!("faults/{tag}/flash-sale"))?;
    let tag_key = |name: &str| format!("{{{}}}:{name}", lock.key_segment());
    redis.command(&["SET", &tag_key("stock"), &STOCK.to_string()])?;
    let args = |gate: bool| {
        let mut args = vec![
            "--redis".to_owned(),
            redis.url(),
            "--lock".to_owned(),
            lock.to_string(),
            "--ttl-ms".to_owned(),
            TTL.as_millis().to_string(),
        ];
        if gate {
            args.push("--gate".to_owned());
        }
        args
    };
    let mut a = run.spawn_buyer(&binaries, "a", &args(true))?;
    let held = a.wait_holding(STEP).await?;
    a.pause()?;
    let mut others: Vec<ClientProcess> = Vec::new();
    for index in 0..3 {
        others.push(run.spawn_buyer(&binaries, &format!("b{index}"), &args(false))?);
    }
    let fault =
        format!("SIGSTOP buyer a (generation {held}) holding its sale; SIGKILL redis, restart it");
    run.inject(&fault)?;
    // a's lease lapses; a newer buyer sells.
    run.wait_any(STEP, |client, line| match line {
        ClientLine::Wrote { generation, .. } if client != "a" && *generation > held => Some(()),
        _ => None,
    })
    .await?;
    // The others stop too, so the first sale the restarted Redis judges is
    // a's: refused only if the newer mark survived.
    for other in &others {
        other.pause()?;
    }
    redis.kill()?;
    redis.restart()?;
    let backend = match persistence {
        Persistence::AofAlways => "redis fence, AOF always",
        Persistence::None => "redis fence, appendonly no",
    };
    let name = match persistence {
        Persistence::AofAlways => "22 Redis kill -9 under the fenced flash sale (stock in Redis)",
        Persistence::None => "regression: 22 without persistence",
    };
    let options = match persistence {
        Persistence::AofAlways => live_within(TTL + Duration::from_secs(20)),
        Persistence::None => Default::default(),
    };
    let row = Row {
        name,
        backend,
        options,
        stock: STOCK,
    };
    let get = |key: &str| redis.command(&["GET", &tag_key(key)]);
    finish(&mut run, a, others, held, &fault, get, row).await
}
