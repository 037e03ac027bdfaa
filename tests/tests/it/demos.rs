//! The demos as checks: the GC-pause story and the flash sale of
//! `palisade-demo`, on the embedded backend, real etcd, Redis (one server
//! and a cluster with replicas), PostgreSQL and ZooKeeper, with
//! both pause variants where they apply; the flash sale with its stock
//! in a real PostgreSQL table, fenced by `palisade_fence_sql`, and in a real
//! Redis, fenced by `palisade_fence_redis`; and the flash sale
//! with lock striping (`--stripes 4`), where every segment is fenced on its
//! own.
//!
//! Every test asserts both halves of a demo's verdict:
//!
//! - **fenced**: no stale write accepted, nothing oversold, every deposit
//!   and sale counted exactly once, and the stale write really reached the
//!   resource server and was refused (otherwise fencing was not exercised);
//! - **unfenced**: the anomaly (lost update, oversold stock) was reproduced.
//!   The pauses are injected so that it always should be; when it is not,
//!   the test fails and says so rather than passing quietly.
//!
//! Client processes (client A stopped with SIGSTOP, flash-sale buyers on
//! etcd and Redis) are this crate's `demo-child` binary. Each test prints
//! the demo's own output, which libtest shows when the test fails.

use std::collections::BTreeMap;

use palisade_demo::timeline::EventKind;
use palisade_demo::{
    BackendArgs, ChildLauncher, FlashSaleArgs, FlashSaleReport, GcPauseArgs, GcPauseReport,
    LockSpec, PauseVariant, flash_sale, gc_pause,
};
use palisade_testkit::etcd::EtcdServer;
use palisade_testkit::redis::{RedisCluster, RedisServer};
use palisade_testkit::sql::SqlServer;
use palisade_testkit::zookeeper::ZooKeeperServer;

/// Items on sale in the tests' flash sales: fewer than the demo's default,
/// to keep the suite short; the injected pauses do not depend on it.
const ITEMS: u64 = 10;
/// Client A's pause on etcd and Redis, whose leases are 2 s: long enough
/// for the lease to expire, and the story waits for B's write anyway.
const SERVER_PAUSE_MS: u64 = 3000;

fn launcher() -> ChildLauncher {
    ChildLauncher::new(env!("CARGO_BIN_EXE_demo-child"), Vec::<String>::new())
}

/// Runs the GC-pause demo with `args`, writing its picture in a temporary
/// directory, and checks its verdicts and its picture.
async fn gc_pause_checked(mut args: GcPauseArgs) -> anyhow::Result<()> {
    let picture_dir = tempfile::tempdir()?;
    args.svg = Some(picture_dir.path().join("gc-pause.svg"));
    let report = gc_pause::run(&args, &launcher()).await?;

    let fenced = &report.fenced;
    assert!(
        !fenced.stale_write_accepted,
        "the fenced run ACCEPTED A's stale write: {}",
        fenced.verdict()
    );
    assert!(
        fenced.stale_write_refused,
        "A's stale write never reached the resource server as a refusal, so fencing was not exercised: {}",
        fenced.verdict()
    );
    assert_eq!(
        fenced.final_balance,
        fenced.expected_balance,
        "the fenced run lost a deposit: {}",
        fenced.verdict()
    );
    assert!(
        fenced.generation_b > fenced.generation_a,
        "B's generation {} must exceed A's {}",
        fenced.generation_b,
        fenced.generation_a
    );
    assert!(
        fenced.lease_lost_signalled,
        "A's guard did not report its lease lost after the pause"
    );
    assert!(report.fenced_safe());
    assert_eq!(report.exit_code(), 0);

    let unfenced = &report.unfenced;
    assert!(
        report.anomaly_reproduced(),
        "the unfenced run did NOT reproduce the lost update, so this run shows nothing fencing prevents: {}",
        unfenced.verdict()
    );
    assert!(unfenced.generation_b > unfenced.generation_a);
    assert_eq!(
        unfenced.final_balance,
        unfenced.expected_balance - 50,
        "B's deposit of 50 is the one lost"
    );

    check_picture(&report)
}

/// The SVG is well-formed XML with the promised structure: two panels of
/// four lanes, one marker per event, the refusal and the stale write
/// marked where they happened.
fn check_picture(report: &GcPauseReport) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&report.svg_path)?;
    let document = roxmltree::Document::parse(&text)?;
    let svg = document.root_element();
    assert_eq!(svg.tag_name().name(), "svg");
    assert_eq!(
        svg.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    let panels = with_class(svg, "panel");
    assert_eq!(panels.len(), 2, "one panel per run");
    for (panel, run) in panels.iter().zip([&report.unfenced, &report.fenced]) {
        let lanes: Vec<&str> = with_class(*panel, "lane")
            .iter()
            .filter_map(|lane| lane.attribute("data-lane"))
            .collect();
        assert_eq!(
            lanes,
            ["client-a", "client-b", "lock-service", "resource-server"]
        );
        let mut drawn: BTreeMap<String, usize> = BTreeMap::new();
        for event in with_class(*panel, "event") {
            let kind = event.attribute("data-kind").unwrap_or("?").to_owned();
            assert!(
                event.children().any(|child| child.has_tag_name("title")),
                "every marker has its sentence as a tooltip"
            );
            *drawn.entry(kind).or_default() += 1;
        }
        let mut recorded: BTreeMap<String, usize> = BTreeMap::new();
        for event in &run.events {
            *recorded.entry(event.kind.id().to_owned()).or_default() += 1;
        }
        assert_eq!(drawn, recorded, "one marker per recorded event");
    }
    let count = |run: &palisade_demo::GcRunReport, kind: EventKind| {
        run.events.iter().filter(|event| event.kind == kind).count()
    };
    assert_eq!(count(&report.unfenced, EventKind::StaleWriteAccepted), 1);
    assert_eq!(count(&report.unfenced, EventKind::WriteRefused), 0);
    assert_eq!(count(&report.fenced, EventKind::WriteRefused), 1);
    assert_eq!(count(&report.fenced, EventKind::StaleWriteAccepted), 0);
    let refused_title = svg
        .descendants()
        .find(|node| node.attribute("data-kind") == Some("write-refused"))
        .and_then(|node| node.children().find(|child| child.has_tag_name("title")))
        .and_then(|title| title.text())
        .unwrap_or_default();
    assert!(
        refused_title.contains("409 stale, generation"),
        "the refusal's tooltip reads `{refused_title}`"
    );
    Ok(())
}

/// The `<g>` elements of `class` under `node`.
fn with_class<'a, 'input>(
    node: roxmltree::Node<'a, 'input>,
    class: &str,
) -> Vec<roxmltree::Node<'a, 'input>> {
    node.descendants()
        .filter(|child| child.has_tag_name("g") && child.attribute("class") == Some(class))
        .collect()
}

/// Runs the flash sale with `args` and checks the three verdicts.
async fn flash_sale_checked(args: FlashSaleArgs) -> anyhow::Result<FlashSaleReport> {
    let report: FlashSaleReport = flash_sale::run(&args, &launcher()).await?;

    let fenced = &report.lock_with_fencing;
    assert_eq!(
        fenced.stale_writes_accepted,
        Some(0),
        "the fenced run ACCEPTED stale writes: {}",
        fenced.verdict()
    );
    assert_eq!(
        fenced.oversold(),
        0,
        "the fenced run OVERSOLD: {}",
        fenced.verdict()
    );
    assert_eq!(fenced.sold, args.items, "{}", fenced.verdict());
    assert_eq!(fenced.stock_left, 0, "{}", fenced.verdict());
    assert!(
        fenced.stale_writes_refused.unwrap_or(0) >= 1,
        "no stale write was refused: the injected pauses never let a stale write reach the resource server, so fencing was not exercised ({})",
        fenced.verdict()
    );
    assert!(fenced.pauses_past_ttl >= 1);
    assert!(report.fenced_safe());
    assert_eq!(report.exit_code(), 0);

    let no_lock = &report.no_lock;
    assert!(
        no_lock.oversold() > 0,
        "the no-lock run did NOT reproduce overselling: {}",
        no_lock.verdict()
    );
    let unfenced = &report.lock_without_fencing;
    assert!(
        unfenced.oversold() > 0,
        "the lock-without-fencing run did NOT reproduce overselling: {}",
        unfenced.verdict()
    );
    assert!(
        unfenced.stale_writes_accepted.unwrap_or(0) > 0,
        "the lock-without-fencing run applied no stale write: {}",
        unfenced.verdict()
    );
    Ok(report)
}

/// Stripes in the tests' striped sales.
const STRIPES: u32 = 4;

/// The flash sale with `--stripes 4`: the three verdicts (the fenced run
/// sells every unit, refuses at least one stale write and accepts none),
/// and the striping's own bookkeeping: every buyer went home only after
/// finding every segment sold out, once each.
async fn striped_flash_sale_checked(args: FlashSaleArgs) -> anyhow::Result<FlashSaleReport> {
    let args = FlashSaleArgs {
        stripes: STRIPES,
        items: 12,
        ..args
    };
    let buyers = u64::from(args.buyers);
    let report = flash_sale_checked(args).await?;
    for run in [
        &report.no_lock,
        &report.lock_without_fencing,
        &report.lock_with_fencing,
    ] {
        assert_eq!(run.stripes, STRIPES);
        assert_eq!(
            run.sold_out_visits,
            buyers * u64::from(STRIPES),
            "each buyer finds each segment sold out exactly once: {}",
            run.verdict()
        );
        assert!(run.tail.is_some(), "a segment was sold out");
    }
    let fenced = &report.lock_with_fencing;
    assert!(
        fenced.lock_acquisitions >= fenced.sold + fenced.sold_out_visits,
        "one acquisition per sale and per sold-out visit at least: {fenced:?}"
    );
    assert!(fenced.lock_wait_p99.is_some());
    Ok(report)
}

/// The demos' flags naming a lock service by its URL.
fn on_etcd(endpoints: String) -> BackendArgs {
    LockSpec::etcd(endpoints).into()
}

fn on_redis(url: String) -> BackendArgs {
    LockSpec::redis(url).into()
}

fn on_zookeeper(connect: String) -> BackendArgs {
    LockSpec::zookeeper(connect).into()
}

fn on_sql(url: String) -> BackendArgs {
    LockSpec::sql(url).expect("a PostgreSQL URL").into()
}

fn flash_sale_args(backend: BackendArgs) -> FlashSaleArgs {
    FlashSaleArgs {
        items: ITEMS,
        ..FlashSaleArgs::new(backend)
    }
}

fn server_pause(backend: BackendArgs, pause: PauseVariant) -> GcPauseArgs {
    GcPauseArgs {
        pause,
        pause_ms: Some(SERVER_PAUSE_MS),
        ..GcPauseArgs::new(backend)
    }
}

#[tokio::test]
async fn gc_pause_on_embedded_in_process() -> anyhow::Result<()> {
    gc_pause_checked(GcPauseArgs::new(BackendArgs::default())).await
}

#[tokio::test]
async fn gc_pause_sigstop_on_embedded_is_a_usage_error() -> anyhow::Result<()> {
    let picture_dir = tempfile::tempdir()?;
    let args = GcPauseArgs {
        pause: PauseVariant::Sigstop,
        svg: Some(picture_dir.path().join("never.svg")),
        ..GcPauseArgs::new(BackendArgs::default())
    };
    let error = gc_pause::run(&args, &launcher())
        .await
        .expect_err("SIGSTOP needs a lock service shared across processes");
    assert!(error.is_usage(), "{error}");
    assert!(error.to_string().contains("--backend etcd"), "{error}");
    assert!(!picture_dir.path().join("never.svg").exists());
    Ok(())
}

#[tokio::test]
async fn gc_pause_on_etcd_in_process() -> anyhow::Result<()> {
    let etcd = EtcdServer::start();
    let backend = on_etcd(etcd.endpoints().join(","));
    gc_pause_checked(server_pause(backend, PauseVariant::InProcess)).await
}

#[tokio::test]
async fn gc_pause_on_etcd_with_sigstop() -> anyhow::Result<()> {
    let etcd = EtcdServer::start();
    let backend = on_etcd(etcd.endpoints().join(","));
    gc_pause_checked(server_pause(backend, PauseVariant::Sigstop)).await
}

#[tokio::test]
async fn gc_pause_on_redis_in_process() -> anyhow::Result<()> {
    let redis = RedisServer::start();
    let backend = on_redis(redis.url());
    gc_pause_checked(server_pause(backend, PauseVariant::InProcess)).await
}

#[tokio::test]
async fn gc_pause_on_redis_with_sigstop() -> anyhow::Result<()> {
    let redis = RedisServer::start();
    let backend = on_redis(redis.url());
    gc_pause_checked(server_pause(backend, PauseVariant::Sigstop)).await
}

/// A Redis Cluster with a replica per master, named as on the command line
/// (`--backend redis+cluster://HOST:PORT,...`), client A stopped with
/// SIGSTOP in a process of its own.
#[tokio::test]
async fn gc_pause_on_a_redis_cluster_with_sigstop() -> anyhow::Result<()> {
    let cluster = RedisCluster::start_with_replicas();
    let nodes: Vec<&str> = cluster
        .urls()
        .iter()
        .map(|url| url.trim_start_matches("redis://"))
        .collect();
    let spec: LockSpec = format!("redis+cluster://{}", nodes.join(",")).parse()?;
    gc_pause_checked(server_pause(spec.into(), PauseVariant::Sigstop)).await
}

/// ZooKeeper with client A paused in-process: its keep-alive stops and its
/// session is ended one TTL into the pause, as the ensemble expires a
/// stopped process's session.
#[tokio::test]
async fn gc_pause_on_zookeeper_in_process() -> anyhow::Result<()> {
    let zookeeper = ZooKeeperServer::start();
    let backend = on_zookeeper(zookeeper.connect_string());
    gc_pause_checked(server_pause(backend, PauseVariant::InProcess)).await
}

/// ZooKeeper with client A stopped (SIGSTOP): no pings, and the ensemble
/// expires its session after the 2 s timeout.
#[tokio::test]
async fn gc_pause_on_zookeeper_with_sigstop() -> anyhow::Result<()> {
    let zookeeper = ZooKeeperServer::start();
    let backend = on_zookeeper(zookeeper.connect_string());
    gc_pause_checked(server_pause(backend, PauseVariant::Sigstop)).await
}

#[tokio::test]
async fn flash_sale_on_zookeeper_with_buyer_processes() -> anyhow::Result<()> {
    let zookeeper = ZooKeeperServer::start();
    flash_sale_checked(flash_sale_args(on_zookeeper(zookeeper.connect_string()))).await?;
    Ok(())
}

/// PostgreSQL with client A paused in-process: its session row expires
/// one TTL into the pause, by the database's clock.
#[tokio::test]
async fn gc_pause_on_postgres_in_process() -> anyhow::Result<()> {
    let postgres = SqlServer::postgres();
    let backend = on_sql(postgres.url());
    gc_pause_checked(server_pause(backend, PauseVariant::InProcess)).await
}

/// PostgreSQL with client A stopped by SIGSTOP: a real lease that only
/// the database's clock ends.
#[tokio::test]
async fn gc_pause_on_postgres_with_sigstop() -> anyhow::Result<()> {
    let postgres = SqlServer::postgres();
    let backend = on_sql(postgres.url());
    gc_pause_checked(server_pause(backend, PauseVariant::Sigstop)).await
}

#[tokio::test]
async fn flash_sale_on_embedded_with_buyer_tasks() -> anyhow::Result<()> {
    flash_sale_checked(flash_sale_args(BackendArgs::default())).await?;
    Ok(())
}

#[tokio::test]
async fn flash_sale_on_etcd_with_buyer_processes() -> anyhow::Result<()> {
    let etcd = EtcdServer::start();
    flash_sale_checked(flash_sale_args(on_etcd(etcd.endpoints().join(",")))).await?;
    Ok(())
}

#[tokio::test]
async fn flash_sale_on_redis_with_buyer_processes() -> anyhow::Result<()> {
    let redis = RedisServer::start();
    flash_sale_checked(flash_sale_args(on_redis(redis.url()))).await?;
    Ok(())
}

/// The stock in the user's own PostgreSQL (`--store`): buyers with
/// `--backend` locks, the stock row read and written with plain statements
/// in runs 1 and 2, with `palisade_fence_sql` fenced transactions in run 3.
/// Besides the verdicts, the database itself shows the fenced run: its
/// lock's marks row was raised, and its stock row ends at 0.
async fn flash_sale_with_stock_in_postgres(
    postgres: &SqlServer,
    backend: BackendArgs,
) -> anyhow::Result<()> {
    let args = FlashSaleArgs {
        store: Some(postgres.url()),
        ..flash_sale_args(backend)
    };
    flash_sale_checked(args).await?;
    let fenced_locks = postgres.query(
        "SELECT count(*) FROM palisade_marks \
         WHERE lock_name LIKE 'flash-sale/sku-42/%-3' AND h_excl > 0",
    )?;
    assert_eq!(
        fenced_locks, "1",
        "the fenced run's lock must have raised marks in palisade_marks"
    );
    let stock = postgres.query(
        "SELECT stock FROM palisade_demo_stock WHERE item LIKE 'flash-sale/sku-42/%-3/stock'",
    )?;
    assert_eq!(stock, "0", "the fenced run's stock row");
    Ok(())
}

/// Buyers in processes of their own on the PostgreSQL lock backend, the
/// stock in the same database.
#[tokio::test]
async fn flash_sale_with_stock_in_postgres_and_postgres_locks() -> anyhow::Result<()> {
    let postgres = SqlServer::postgres();
    flash_sale_with_stock_in_postgres(&postgres, on_sql(postgres.url())).await
}

/// Buyer tasks on the in-process lock backend: the fence in the database
/// works with any lock backend's sequencers.
#[tokio::test]
async fn flash_sale_with_stock_in_postgres_and_embedded_locks() -> anyhow::Result<()> {
    let postgres = SqlServer::postgres();
    flash_sale_with_stock_in_postgres(&postgres, BackendArgs::default()).await
}

/// The stock in the user's own Redis (`--store redis://`): plain `GET` and
/// `DECRBY` in runs 1 and 2, where the paused holder's late decrement
/// lands after the sale and oversells; `palisade_fence_redis`'s fenced
/// read and decrement in run 3. Besides the verdicts, Redis itself shows
/// the fenced run: each of its stock counters ends at 0 (not below) and
/// its lock's marks record was raised. Returns the fenced counters.
async fn flash_sale_with_stock_in_redis(
    redis: &RedisServer,
    args: FlashSaleArgs,
) -> anyhow::Result<Vec<String>> {
    let args = FlashSaleArgs {
        store: Some(redis.url()),
        ..args
    };
    flash_sale_checked(args).await?;
    // The fenced run's lock name ends in `-3`.
    let counters = redis.command(&["KEYS", "{flash-sale%2Fsku-42%2F*-3}:stock"])?;
    let counters: Vec<String> = counters.lines().map(str::to_owned).collect();
    anyhow::ensure!(!counters.is_empty(), "no stock counter of the fenced run");
    for counter in &counters {
        assert_eq!(redis.command(&["GET", counter])?, "0", "{counter}");
        let marks = format!("palisade:{}", counter.replace(":stock", ":marks"));
        let record = redis.command(&["GET", &marks])?;
        let raised: u64 = record.split(' ').next().unwrap_or_default().parse()?;
        assert!(raised > 0, "{marks} was never raised");
    }
    Ok(counters)
}

/// Buyers in processes of their own on the Redis lock backend, the stock
/// in the same Redis.
#[tokio::test]
async fn flash_sale_with_stock_in_redis_and_redis_locks() -> anyhow::Result<()> {
    let redis = RedisServer::start();
    let counters =
        flash_sale_with_stock_in_redis(&redis, flash_sale_args(on_redis(redis.url()))).await?;
    assert_eq!(counters.len(), 1, "{counters:?}");
    Ok(())
}

/// Buyer tasks on the in-process lock backend: the fence in Redis works
/// with any lock backend's sequencers.
#[tokio::test]
async fn flash_sale_with_stock_in_redis_and_embedded_locks() -> anyhow::Result<()> {
    let redis = RedisServer::start();
    flash_sale_with_stock_in_redis(&redis, flash_sale_args(BackendArgs::default())).await?;
    Ok(())
}

/// Striping with the stock in Redis: one counter and one marks record per
/// segment, every counter sold out exactly.
#[tokio::test]
async fn flash_sale_striped_with_stock_in_redis() -> anyhow::Result<()> {
    let redis = RedisServer::start();
    let args = FlashSaleArgs {
        store: Some(redis.url()),
        ..FlashSaleArgs::new(BackendArgs::default())
    };
    striped_flash_sale_checked(args).await?;
    let counters = redis.command(&["KEYS", "{flash-sale%2Fsku-42%2F*-3%2Fsegment-*}:stock"])?;
    assert_eq!(counters.lines().count(), STRIPES as usize, "{counters}");
    for counter in counters.lines() {
        assert_eq!(redis.command(&["GET", counter])?, "0", "{counter}");
    }
    Ok(())
}

/// `--store` takes PostgreSQL and Redis URLs only: anything else is a
/// usage error before any buyer starts.
#[tokio::test]
async fn flash_sale_refuses_a_store_that_is_not_postgres() -> anyhow::Result<()> {
    let args = FlashSaleArgs {
        store: Some("mysql://root@127.0.0.1:1/test".into()),
        ..FlashSaleArgs::new(BackendArgs::default())
    };
    let error = flash_sale::run(&args, &launcher())
        .await
        .expect_err("only PostgreSQL");
    assert!(error.is_usage(), "{error}");
    assert!(error.to_string().contains("--store"), "{error}");
    Ok(())
}

#[tokio::test]
async fn flash_sale_refuses_a_single_buyer() -> anyhow::Result<()> {
    let args = FlashSaleArgs {
        buyers: 1,
        ..FlashSaleArgs::new(BackendArgs::default())
    };
    let error = flash_sale::run(&args, &launcher())
        .await
        .expect_err("one buyer cannot oversell");
    assert!(error.is_usage(), "{error}");
    Ok(())
}

#[tokio::test]
async fn flash_sale_striped_on_embedded_with_buyer_tasks() -> anyhow::Result<()> {
    striped_flash_sale_checked(FlashSaleArgs::new(BackendArgs::default())).await?;
    Ok(())
}

#[tokio::test]
async fn flash_sale_striped_on_redis_with_buyer_processes() -> anyhow::Result<()> {
    let redis = RedisServer::start();
    striped_flash_sale_checked(FlashSaleArgs::new(on_redis(redis.url()))).await?;
    Ok(())
}

#[tokio::test]
async fn flash_sale_striped_on_etcd_with_buyer_processes() -> anyhow::Result<()> {
    let etcd = EtcdServer::start();
    let backend = on_etcd(etcd.endpoints().join(","));
    striped_flash_sale_checked(FlashSaleArgs::new(backend)).await?;
    Ok(())
}

/// The SQL lock backend: buyer processes, each segment's lock a row of the
/// database's lock table.
#[tokio::test]
async fn flash_sale_striped_on_postgres_locks_with_buyer_processes() -> anyhow::Result<()> {
    let postgres = SqlServer::postgres();
    let backend = on_sql(postgres.url());
    striped_flash_sale_checked(FlashSaleArgs::new(backend)).await?;
    Ok(())
}

/// Striping with the stock in PostgreSQL: one stock row and one fence
/// (a `palisade_marks` row) per segment, each raised by its own lock, and
/// every segment's row ends at 0.
#[tokio::test]
async fn flash_sale_striped_with_stock_in_postgres() -> anyhow::Result<()> {
    let postgres = SqlServer::postgres();
    let args = FlashSaleArgs {
        store: Some(postgres.url()),
        ..FlashSaleArgs::new(BackendArgs::default())
    };
    striped_flash_sale_checked(args).await?;
    let fenced_segments = postgres.query(
        "SELECT count(*) FROM palisade_marks \
         WHERE lock_name LIKE 'flash-sale/sku-42/%-3/segment-%' AND h_excl > 0",
    )?;
    assert_eq!(
        fenced_segments,
        STRIPES.to_string(),
        "one fence per segment"
    );
    let rows = postgres.query(
        "SELECT count(*) || ' rows, ' || sum(stock) || ' left' FROM palisade_demo_stock \
         WHERE item LIKE 'flash-sale/sku-42/%-3/segment-%/stock'",
    )?;
    assert_eq!(rows, format!("{STRIPES} rows, 0 left"));
    Ok(())
}

/// `--stripes 0` and more stripes than items are usage errors that name
/// the flag, before any store or buyer starts.
#[tokio::test]
async fn flash_sale_refuses_zero_stripes_and_more_stripes_than_items() -> anyhow::Result<()> {
    for (stripes, items, says) in [(0, 20, "at least 1"), (21, 20, "more than --items 20")] {
        let args = FlashSaleArgs {
            stripes,
            items,
            ..FlashSaleArgs::new(BackendArgs::default())
        };
        let error = flash_sale::run(&args, &launcher())
            .await
            .expect_err("bad --stripes");
        assert!(error.is_usage(), "{error}");
        let message = error.to_string();
        assert!(
            message.contains("--stripes") && message.contains(says),
            "{message}"
        );
        let measured = flash_sale::measure(&args, std::time::Duration::ZERO)
            .await
            .expect_err("bad --stripes");
        assert!(measured.is_usage(), "{measured}");
    }
    // As many stripes as items is fine: one item per segment.
    let args = FlashSaleArgs {
        stripes: 6,
        items: 6,
        buyers: 3,
        pause_percent: 0,
        ..FlashSaleArgs::new(BackendArgs::default())
    };
    let run = flash_sale::measure(&args, std::time::Duration::ZERO).await?;
    assert_eq!((run.sold, run.stock_left, run.oversold()), (6, 0, 0));
    Ok(())
}
