//! Scenario 41: the flash sale with its stock on a Redis Cluster with a
//! replica per master, fenced inside Redis by `palisade-fence-redis`, and
//! the master of the sale's slot killed (SIGKILL) under it; its replica is
//! promoted.
//!
//! Buyers (`src/bin/redis-buyer.rs`, one process each, locks and fence on
//! the cluster) take the lock, read the stock with a fenced read, and sell
//! one with one fenced batch. Buyer `a` reads and is stopped (SIGSTOP)
//! holding its sale; its lease lapses and a newer buyer sells, raising the
//! lock's mark. The other buyers stop, the master dies, the replica is
//! elected in its place (and, with `WAIT`, given a replica: another
//! master's, re-attached), and `a` resumes and sends its late sale: the
//! first sale the new master judges. Then everyone sells until the stock
//! is gone. The history's writes are the sales (each its own key); the
//! final state is read from the new master.
//!
//! With `WAIT 1` after every sale (`FenceOptions::with_replicas`), the
//! newer buyer's sale and mark were on the replica before they were
//! acknowledged: `a` is refused, nothing is oversold, no acknowledged sale
//! is lost (I-MONO, I-STALE, I-DUR, I-ONCE, I-LIVE). The mutation row
//! drops `WAIT` and has the replica fall behind (stopped, its link cut,
//! before the newer sale): the promoted replica lacks that sale and its
//! mark, and the checker reports `a`'s stale sale accepted (I-STALE) and
//! the acknowledged sale lost (I-DUR), the failover case
//! docs/redis-data.md documents.

use std::time::Duration;

use palisade::LockName;
use palisade_testkit::redis::RedisCluster;
use palisade_tests::fault::{ClientLine, ClientProcess, FaultRun};

use crate::sale::{Row, Sale, finish};
use crate::{STEP, live_within};

/// The stock at the start.
const STOCK: u64 = 40;
/// The buyers' lease: short, so `a`'s lapses soon after it is stopped.
const TTL: Duration = Duration::from_millis(1000);
/// How long the cluster may take to promote the replica on a loaded
/// machine (2 s node timeout, then the election).
const PROMOTION: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_failover_under_the_fenced_flash_sale_with_wait() -> anyhow::Result<()> {
    let sale = flash_sale_with_a_failover("s41", true).await?;
    sale.assert_sold_out_safely();
    Ok(())
}

/// The mutation: no `WAIT`, and a replica behind when its master dies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_failover_without_wait_under_the_fenced_flash_sale_is_caught_by_the_checker()
-> anyhow::Result<()> {
    let sale = flash_sale_with_a_failover("m41", false).await?;
    sale.assert_caught(
        "with the newer mark lost in the failover",
        "the acknowledged sale the failover lost",
    );
    Ok(())
}

async fn flash_sale_with_a_failover(tag: &str, wait: bool) -> anyhow::Result<Sale> {
    let binaries = palisade_tests::fault_binaries!();
    let mut cluster = tokio::task::block_in_place(RedisCluster::start_with_replicas);
    let mut run = FaultRun::new(tag)?;
    let lock = LockName::new(format!("faults/{tag}/flash-sale"))?;
    let tag_key = |name: &str| format!("{{{}}}:{name}", lock.key_segment());
    let master = cluster.master_of_slot(cluster.keyslot(&tag_key("stock")));
    let replica = cluster.replica_of(master);
    cluster.command(master, &["SET", &tag_key("stock"), &STOCK.to_string()])?;
    anyhow::ensure!(
        cluster.command(master, &["WAIT", "1", "10000"])? == "1",
        "the replica has the stock"
    );
    let args = |gate: bool| {
        let mut args = vec![
            "--cluster".to_owned(),
            "--redis".to_owned(),
            cluster.urls().join(","),
            "--lock".to_owned(),
            lock.to_string(),
            "--ttl-ms".to_owned(),
            TTL.as_millis().to_string(),
        ];
        if wait {
            args.extend(["--replicas".to_owned(), "1".to_owned()]);
        }
        if gate {
            args.push("--gate".to_owned());
        }
        args
    };
    let mut a = run.spawn_buyer(&binaries, "a", &args(true))?;
    let held = a.wait_holding(STEP).await?;
    // The other buyers connect while every node answers, then queue
    // behind `a`, whose lease its watchdog keeps alive until `a` stops.
    let mut others: Vec<ClientProcess> = Vec::new();
    for index in 0..3 {
        others.push(run.spawn_buyer(&binaries, &format!("b{index}"), &args(false))?);
    }
    let mut ready = 0;
    run.wait_any(STEP, |client, line| {
        ready += usize::from(client != "a" && matches!(line, ClientLine::Ready));
        (ready == others.len()).then_some(())
    })
    .await?;
    let fault = if wait {
        format!(
            "SIGSTOP buyer a (generation {held}) holding its sale; SIGKILL the master, replica promoted"
        )
    } else {
        format!(
            "SIGSTOP buyer a (generation {held}) holding its sale; SIGSTOP the replica, cut its link; SIGKILL the master; SIGCONT the replica, promoted"
        )
    };
    run.inject(&fault)?;
    if !wait {
        // What the master acknowledges from here exists on the master only.
        cluster.pause(replica)?;
        cluster.command(master, &["CLIENT", "KILL", "TYPE", "replica"])?;
    }
    a.pause()?;
    // a's lease lapses; a newer buyer sells.
    run.wait_any(STEP, |client, line| match line {
        ClientLine::Wrote { generation, .. } if client != "a" && *generation > held => Some(()),
        _ => None,
    })
    .await?;
    // The others stop too, so the first sale the new master judges is a's.
    for other in &others {
        other.pause()?;
    }
    cluster.kill(master)?;
    if !wait {
        cluster.resume(replica)?;
    }
    let took = tokio::task::block_in_place(|| cluster.wait_for_promotion(replica, PROMOTION));
    eprintln!("[{tag}] replica promoted {took:?} after the master died");
    if wait {
        // The new master has no replica, and `WAIT 1` would refuse every
        // sale: an operator gives it one (another master's replica).
        tokio::task::block_in_place(|| give_a_replica(&cluster, replica))?;
    }
    let (name, backend, options) = if wait {
        (
            "41 Redis Cluster master killed under the fenced flash sale (stock in Redis)",
            "redis fence on a cluster, WAIT 1",
            live_within(TTL + PROMOTION),
        )
    } else {
        (
            "regression: 41 without WAIT, the replica behind",
            "redis fence on a cluster, no WAIT",
            Default::default(),
        )
    };
    let row = Row {
        name,
        backend,
        options,
        stock: STOCK,
    };
    let get = |key: &str| cluster.command(replica, &["GET", &tag_key(key)]);
    finish(&mut run, a, others, held, &fault, get, row).await
}

/// Re-attaches another master's replica to `master` (`CLUSTER
/// REPLICATE`) and waits until it is online there.
fn give_a_replica(cluster: &RedisCluster, master: usize) -> anyhow::Result<()> {
    let topology = cluster.topology()?;
    let id = topology
        .iter()
        .find(|(index, _)| *index == master)
        .map(|(_, node)| node.id.clone())
        .ok_or_else(|| anyhow::anyhow!("node {master} is not in the topology"))?;
    let other = cluster
        .masters()
        .into_iter()
        .find(|&other| other != master)
        .ok_or_else(|| anyhow::anyhow!("no other master"))?;
    let spare = cluster.replica_of(other);
    cluster.command(spare, &["CLUSTER", "REPLICATE", &id])?;
    let deadline = std::time::Instant::now() + STEP;
    loop {
        let info = cluster.command(master, &["INFO", "replication"])?;
        if info.contains("state=online") {
            return Ok(());
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "node {spare} never came online as a replica of node {master}: {info}"
        );
        // The sync runs on the nodes' own schedule; no event to wait on.
        std::thread::sleep(Duration::from_millis(50));
    }
}
