//! The flash sale: a stock of N items, many buyers, random pauses in lock
//! holders, and three runs side by side.
//!
//! Each buyer loops: take the lock, read the stock, (maybe pause), write
//! the stock minus one and count a sale, release; until the stock is 0.
//! The pauses come from a seeded generator (`--seed`): some are short, some
//! outlast the lease, and buyer 0's first purchase always does, so every
//! run has at least one holder that wakes up after someone else has sold.
//!
//! 1. **no lock**, plain store: buyers read and write freely; oversold.
//! 2. **lock, no fencing**, plain store: a paused holder's lease expires,
//!    another buyer sells, the paused one wakes and writes its stale stock
//!    back: still oversold.
//! 3. **lock + fencing**, Palisade's resource server: the stale write is
//!    refused (409); the buyer takes the lock again and re-reads. Never
//!    oversold.
//!
//! With `--store postgres://...` the stock is a row of a table in that
//! PostgreSQL (`palisade_demo_stock`) instead: runs 1 and 2 read and write
//! it with plain statements, run 3 in `palisade_fence_sql` fenced transactions,
//! which refuse the stale buyer inside the database. Each run then uses a
//! lock name of its own (`flash-sale/sku-42/<run>`), because the marks
//! `palisade_fence_sql` keeps in the database outlive a run while a fresh lock
//! service may count generations from 1 again.
//!
//! With `--store redis://...` the stock is a counter per segment in that
//! Redis (`{<lock>}:stock`), and a sale decrements it where it is rather
//! than writing back what was read: a plain `DECRBY` in runs 1 and 2, the
//! fence's "decrement only if at least 0 stay" in run 3. A late `DECRBY`
//! only oversells once the stock is gone, so buyer 0's forced pause lasts
//! until the others have sold its segment out. Run names as with
//! PostgreSQL: the fence's marks outlive the run in Redis.
//!
//! On the embedded backend the buyers are tasks of this process (its lock
//! service lives in one process); on etcd and Redis each buyer is a
//! separate process.
//!
//! With `--stripes N` (lock striping, the segmented lock of a hot item) the
//! stock is split into N segments, each its own lock name
//! (`<lock>/segment-<i>`) and its own fenced key: a buyer takes a random
//! segment's lock, moves to another segment when that one is sold out,
//! and goes home when it has seen every segment sold out. Each segment is
//! fenced on its own (its lock's marks), so the total never oversells.
//! The cost is the end of the sale: buyers spend lock acquisitions on
//! segments that turn out to be empty, and the last units sit in a few
//! segments while most buyers hunt for them ([`SaleRun::sold_out_visits`],
//! [`SaleRun::tail`]). [`measure`] runs one fenced sale without pauses for
//! the `stripes` benchmark.

use std::time::Duration;

use clap::Args;
use palisade_core::LockName;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::DemoError;
use crate::backend::{
    BackendTarget, Locks, Renewal, invocation_tag, kind_of, session_options, target,
};
use crate::child::{ChildCommand, ChildLauncher, ChildMessage, ChildSpec};
use crate::client::LocalClient;
use crate::plain_store::PlainStore;
use crate::rng::DemoRng;
use crate::sql_stock;
use crate::storage::{ResourceServer, Storage, StorageTarget, WriteOutcome};
use palisade_lock_any::{BackendArgs, BackendKind};
use palisade_recipes::{Hunt, Striped};

/// The lock every buyer takes; with stripes, the prefix of the segments'
/// lock names.
const LOCK: &str = "flash-sale/sku-42";
/// The seeded stream of a buyer's segment choices is this plus the buyer
/// number: apart from the pause streams, so that a seed gives the same
/// pauses whatever the number of stripes.
const SEGMENT_STREAM: u64 = 1 << 32;
/// The key the stock is kept under.
const STOCK_KEY: &str = "stock";
/// How long a buyer waits for the lock before giving up (it queues behind
/// every other buyer, each of which may pause).
const ACQUIRE_WAIT: Duration = Duration::from_secs(120);
/// How long the driver waits for a buyer process to say anything.
const PROCESS_ANSWER_WAIT: Duration = Duration::from_secs(180);

/// The flash-sale demo's flags.
#[derive(Debug, Clone, Args)]
pub struct FlashSaleArgs {
    /// The lock service.
    #[command(flatten)]
    pub backend: BackendArgs,

    /// Items in stock when the sale opens.
    #[arg(long, default_value_t = 20)]
    pub items: u64,

    /// Buyers: tasks of this process on the embedded backend, separate
    /// processes on etcd and Redis.
    #[arg(long, default_value_t = 4)]
    pub buyers: u32,

    /// Lease TTL of every buyer, in milliseconds [default: 500 on the
    /// embedded backend, 2000 on etcd and Redis].
    #[arg(long)]
    pub ttl_ms: Option<u64>,

    /// Percentage of purchases in which the buyer pauses between reading
    /// the stock and writing it back; half of those pauses outlast the
    /// lease.
    #[arg(long, default_value_t = 30)]
    pub pause_percent: u64,

    /// Seed of the pauses: the same seed gives the same pauses.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,

    /// Keep the stock in a table of this PostgreSQL (postgres://...)
    /// instead of the demo's own stores: plain statements without fencing,
    /// `palisade_fence_sql` fenced transactions with it. Or as a counter in
    /// this Redis (redis://...): plain `DECRBY` without fencing,
    /// `palisade_fence_redis`'s fenced decrement with it. Works with
    /// --stripes (one row or counter, and one fence, per segment).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,

    /// Lock striping: split the stock into N segments, each with its own
    /// lock and its own fenced key. A buyer takes a random segment's lock
    /// and moves to another segment when that one is sold out. 1 is one
    /// lock for the whole stock. At least 1 and at most --items (every
    /// segment opens with at least one item).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub stripes: u32,
}

impl FlashSaleArgs {
    /// The defaults on `backend`.
    pub fn new(backend: BackendArgs) -> Self {
        FlashSaleArgs {
            backend,
            items: 20,
            buyers: 4,
            ttl_ms: None,
            pause_percent: 30,
            seed: 42,
            store: None,
            stripes: 1,
        }
    }

    /// The lease TTL in force.
    pub fn ttl(&self) -> Duration {
        match self.ttl_ms {
            Some(ms) => Duration::from_millis(ms),
            None => match kind_of(&self.backend) {
                BackendKind::Embedded => Duration::from_millis(500),
                _ => Duration::from_millis(2000),
            },
        }
    }
}

/// Which of the three runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SaleKind {
    /// No lock; the plain store.
    NoLock,
    /// A lock, but the plain store trusts it: no fencing.
    LockWithoutFencing,
    /// A lock and Palisade's resource server.
    LockWithFencing,
}

impl SaleKind {
    /// The three, in the order they run.
    pub const ALL: [SaleKind; 3] = [
        SaleKind::NoLock,
        SaleKind::LockWithoutFencing,
        SaleKind::LockWithFencing,
    ];

    /// The column title.
    pub fn title(self) -> &'static str {
        match self {
            SaleKind::NoLock => "no lock",
            SaleKind::LockWithoutFencing => "lock, no fencing",
            SaleKind::LockWithFencing => "lock + fencing",
        }
    }

    fn locked(self) -> bool {
        self != SaleKind::NoLock
    }

    fn fenced(self) -> bool {
        self == SaleKind::LockWithFencing
    }
}

/// What one run ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaleRun {
    /// Which run.
    pub kind: SaleKind,
    /// Items in stock at the start.
    pub items: u64,
    /// Sales the buyers made (each handed an item to a customer).
    pub sold: u64,
    /// The stock left in storage at the end.
    pub stock_left: i64,
    /// Writes applied although a newer generation had already written:
    /// counted by the plain store in the unfenced lock run, and by the
    /// buyers (a write whose mark came back higher than its generation) in
    /// the fenced run. `None` without a lock.
    pub stale_writes_accepted: Option<u64>,
    /// Writes the resource server refused as stale (fenced run only).
    pub stale_writes_refused: Option<u64>,
    /// Pauses injected between a read and its write.
    pub pauses: u64,
    /// Of those, the ones longer than the lease TTL.
    pub pauses_past_ttl: u64,
    /// From the opening bell to the last buyer going home.
    pub elapsed: Duration,
    /// Segments the stock was split into (`--stripes`).
    pub stripes: u32,
    /// Lock acquisitions the buyers made (0 without a lock).
    pub lock_acquisitions: u64,
    /// The 99th percentile of a buyer's wait from asking for a segment's
    /// lock (opening its session included) to holding it; `None` without a
    /// lock.
    pub lock_wait_p99: Option<Duration>,
    /// Visits to a segment that turned out to be sold out (a lock
    /// acquisition wasted on it, or a read without a lock). Every buyer
    /// needs one per segment to learn that the sale is over, so this is
    /// between `buyers` (one stripe) and `buyers × stripes`.
    pub sold_out_visits: u64,
    /// The buyers' time spent on those visits, summed: waiting for a sold-out
    /// segment's lock, reading its 0, releasing it.
    pub sold_out_time: Duration,
    /// The end-of-sale tail: from the first segment sold out to the last
    /// unit sold, as the driver saw the sales. Zero with one stripe; `None`
    /// when no segment was ever sold out.
    pub tail: Option<Duration>,
}

impl SaleRun {
    /// Sales beyond the stock.
    pub fn oversold(&self) -> u64 {
        self.sold.saturating_sub(self.items)
    }

    /// No stale write accepted, nothing oversold, and the books balance
    /// (every sale took exactly one item out of the stock).
    pub fn is_safe(&self) -> bool {
        self.stale_writes_accepted.unwrap_or(0) == 0
            && self.oversold() == 0
            && i128::from(self.sold) + i128::from(self.stock_left) == i128::from(self.items)
    }

    /// The verdict line.
    pub fn verdict(&self) -> String {
        let sold = format!("sold {} of {}", self.sold, self.items);
        match self.kind {
            SaleKind::LockWithFencing if self.is_safe() => format!(
                "SAFE: {sold}, {} stale writes refused and retried, none accepted",
                self.stale_writes_refused.unwrap_or(0)
            ),
            SaleKind::LockWithFencing => format!(
                "FENCING FAILED: {sold} ({} oversold), {} stale writes accepted, {} left in stock",
                self.oversold(),
                self.stale_writes_accepted.unwrap_or(0),
                self.stock_left
            ),
            _ if self.oversold() > 0 => format!(
                "OVERSOLD: {sold}, {} too many{}",
                self.oversold(),
                match self.stale_writes_accepted {
                    Some(stale) => format!(
                        "; {stale} stale writes from holders whose lease had expired were applied"
                    ),
                    None => "; nothing kept the buyers apart".to_owned(),
                }
            ),
            SaleKind::NoLock => format!(
                "anomaly NOT reproduced this time: {sold}; try more --buyers or another --seed"
            ),
            SaleKind::LockWithoutFencing => format!(
                "anomaly NOT reproduced this time: {sold}, {} stale writes applied; try another --seed or a higher --pause-percent",
                self.stale_writes_accepted.unwrap_or(0)
            ),
        }
    }
}

/// The three runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlashSaleReport {
    /// Which lock service.
    pub backend: BackendKind,
    /// Run 1.
    pub no_lock: SaleRun,
    /// Run 2.
    pub lock_without_fencing: SaleRun,
    /// Run 3.
    pub lock_with_fencing: SaleRun,
}

impl FlashSaleReport {
    /// The fenced run accepted no stale write and did not oversell.
    pub fn fenced_safe(&self) -> bool {
        self.lock_with_fencing.is_safe()
    }

    /// 0 when the fenced run was safe, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        if self.fenced_safe() { 0 } else { 1 }
    }
}

/// One buyer's instructions; sent to buyer processes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BuyerPlan {
    pub(crate) buyer: u32,
    pub(crate) seed: u64,
    pub(crate) ttl_ms: u64,
    pub(crate) pause_percent: u64,
    /// Take the lock around each purchase.
    pub(crate) locked: bool,
    pub(crate) storage: StorageTarget,
    /// The segments' lock names; one without striping.
    pub(crate) segments: Vec<String>,
    /// Buyer 0's first purchase pauses past the lease (the demo does, so
    /// every run has a stale writer; the benchmark does not).
    pub(crate) forced_pause: bool,
    /// Time a buyer spends between reading a segment's stock and writing
    /// it, besides pauses: the order the lock protects, for the benchmark
    /// (0 in the demo).
    pub(crate) hold_micros: u64,
}

/// Something a buyer did that the driver reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum BuyerEvent {
    /// Paused between reading `stock_seen` and writing it back.
    Paused {
        buyer: u32,
        segment: usize,
        millis: u64,
        past_ttl: bool,
        generation: Option<u64>,
        stock_seen: i64,
    },
    /// Sold one item of `segment`: wrote `stock_seen - 1`.
    Sold {
        buyer: u32,
        segment: usize,
        generation: Option<u64>,
        stock_seen: i64,
    },
    /// Got `segment`'s lock after waiting `waited_micros`.
    Acquired {
        buyer: u32,
        segment: usize,
        waited_micros: u64,
    },
    /// The resource server refused a stale sequencer; the buyer retries.
    Refused {
        buyer: u32,
        segment: usize,
        presented: u64,
        mark: u64,
    },
    /// The resource server accepted a write but its mark came back higher
    /// than the write's generation: a stale write got through.
    StaleAccepted {
        buyer: u32,
        segment: usize,
        presented: u64,
        mark: u64,
    },
}

/// One buyer's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Tally {
    pub(crate) sold: u64,
    pub(crate) refused: u64,
    pub(crate) stale_accepted: u64,
    pub(crate) pauses: u64,
    pub(crate) pauses_past_ttl: u64,
    pub(crate) acquisitions: u64,
    pub(crate) sold_out_visits: u64,
    pub(crate) sold_out_micros: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.sold += other.sold;
        self.refused += other.refused;
        self.stale_accepted += other.stale_accepted;
        self.pauses += other.pauses;
        self.pauses_past_ttl += other.pauses_past_ttl;
        self.acquisitions += other.acquisitions;
        self.sold_out_visits += other.sold_out_visits;
        self.sold_out_micros += other.sold_out_micros;
    }
}

/// The pause before the `attempt`-th write of a buyer, if any: short ones
/// (a tenth to a half of the TTL) and long ones (1.5 to 2 TTLs), and a
/// first one of 2.5 TTLs for buyer 0. Every call draws the same numbers
/// whatever the outcome, so a seed always gives the same schedule.
fn next_pause(rng: &mut DemoRng, plan: &BuyerPlan, attempt: u64) -> Option<Duration> {
    let ttl = plan.ttl_ms;
    let roll = rng.below(100);
    let long = rng.below(2) == 0;
    let short_ms = rng.between(ttl / 10, ttl / 2);
    let long_ms = rng.between(ttl * 3 / 2, ttl * 2);
    if !plan.locked {
        // Without a lock there is no lease to outlast: short pauses are
        // enough for buyers to trip over each other.
        return (roll < plan.pause_percent).then(|| Duration::from_millis(short_ms));
    }
    if plan.forced_pause && plan.buyer == 0 && attempt == 0 {
        // Always at least one pause past the lease, early, while other
        // buyers are queued for the lock.
        return Some(Duration::from_millis(ttl * 5 / 2));
    }
    if roll >= plan.pause_percent {
        None
    } else if long {
        Some(Duration::from_millis(long_ms))
    } else {
        Some(Duration::from_millis(short_ms))
    }
}

/// A buyer's whole shopping trip: buys from random segments until it has
/// seen every segment sold out, and returns its counts. `report` hears
/// about grants, pauses, sales and refusals.
pub(crate) async fn buy_until_sold_out(
    plan: &BuyerPlan,
    locks: Locks,
    storage: Storage,
    report: &(dyn Fn(BuyerEvent) + Send + Sync),
) -> Result<Tally, DemoError> {
    let ttl = Duration::from_millis(plan.ttl_ms);
    let fenced = storage.is_fenced();
    let mut clients = Vec::with_capacity(plan.segments.len());
    for segment in &plan.segments {
        clients.push(LocalClient::new(
            locks.clone(),
            session_options(ttl),
            storage.clone(),
            LockName::new(segment.as_str())?,
            STOCK_KEY,
        ));
    }
    let mut rng = DemoRng::new(plan.seed, u64::from(plan.buyer));
    let mut picker = DemoRng::new(plan.seed, SEGMENT_STREAM + u64::from(plan.buyer));
    // The segments this buyer has not yet found sold out.
    let mut hunt = Hunt::new(clients.len());
    let mut tally = Tally::default();
    let buyer = plan.buyer;
    for attempt in 0.. {
        let Some(segment) = hunt.next(|n| picker.below(n)) else {
            break;
        };
        let client = &mut clients[segment];
        let pause = next_pause(&mut rng, plan, attempt);
        let visit = Instant::now();
        let generation = if plan.locked {
            client.set_renewal(match pause {
                Some(_) => Renewal::Pausable,
                None => Renewal::KeepAlive,
            });
            let generation = client.acquire(ACQUIRE_WAIT).await?.generation().get();
            tally.acquisitions += 1;
            report(BuyerEvent::Acquired {
                buyer,
                segment,
                waited_micros: micros(visit.elapsed()),
            });
            Some(generation)
        } else {
            None
        };
        let stock = match client.read().await? {
            Ok(Some(stock)) => stock,
            Ok(None) => return Err(DemoError::story("the stock was never written")),
            Err(stale) => {
                tally.refused += 1;
                report(BuyerEvent::Refused {
                    buyer,
                    segment,
                    presented: stale.presented,
                    mark: stale.mark,
                });
                let _ = client.release().await;
                continue;
            }
        };
        if stock <= 0 {
            // Sold out: with one stripe the sale is over; with more, this
            // acquisition was the price of looking, and the buyer moves on.
            tally.sold_out_visits += 1;
            tracing::debug!(buyer, segment, "segment sold out");
            let _ = client.release().await;
            tally.sold_out_micros += micros(visit.elapsed());
            hunt.empty(segment);
            continue;
        }
        if let Some(pause) = pause {
            client.stop_renewal();
            tally.pauses += 1;
            let past_ttl = plan.locked && pause > ttl;
            if past_ttl {
                tally.pauses_past_ttl += 1;
            }
            report(BuyerEvent::Paused {
                buyer,
                segment,
                millis: u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                past_ttl,
                generation,
                stock_seen: stock,
            });
            tokio::time::sleep(pause).await;
            if plan.forced_pause && buyer == 0 && attempt == 0 {
                wait_until_another_buyer_sold(client, stock, ttl).await?;
            }
        }
        if plan.hold_micros > 0 {
            tokio::time::sleep(Duration::from_micros(plan.hold_micros)).await;
        }
        match client.sell(stock).await? {
            WriteOutcome::Accepted { mark } => {
                tally.sold += 1;
                if let (true, Some(mark), Some(presented)) = (fenced, mark, generation)
                    && mark != presented
                {
                    tally.stale_accepted += 1;
                    report(BuyerEvent::StaleAccepted {
                        buyer,
                        segment,
                        presented,
                        mark,
                    });
                }
                report(BuyerEvent::Sold {
                    buyer,
                    segment,
                    generation,
                    stock_seen: stock,
                });
            }
            WriteOutcome::Refused { presented, mark } => {
                tally.refused += 1;
                report(BuyerEvent::Refused {
                    buyer,
                    segment,
                    presented,
                    mark,
                });
            }
        }
        // After a pause the lease is gone and the release is refused:
        // that is the point, not an error.
        let _ = client.release().await;
    }
    Ok(tally)
}

/// The demo's forced pause ends only once another buyer has sold from
/// the segment (the stock moved from `stock_seen`), so the paused holder's
/// late write always meets a newer one: on a loaded machine the next
/// holder may take longer than the pause to be granted and write. A store
/// that decrements in place (Redis's `DECRBY`) takes a late decrement in
/// its stride until the stock is gone, so there the pause lasts until the
/// others have sold the segment out: the late sale is then always one too
/// many. Bounded: after 20 TTLs the buyer writes anyway.
async fn wait_until_another_buyer_sold(
    client: &LocalClient,
    stock_seen: i64,
    ttl: Duration,
) -> Result<(), DemoError> {
    let deadline = Instant::now() + ttl * 20;
    let in_place = client.decrements_in_place();
    let waiting = |now: Option<i64>| match in_place {
        true => now.is_some_and(|stock| stock > 0),
        false => now == Some(stock_seen),
    };
    while Instant::now() < deadline && waiting(client.peek().await?) {
        tokio::time::sleep(ttl / 10).await;
    }
    Ok(())
}

fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

/// Checks the flags that do not depend on the backend.
fn validate(args: &FlashSaleArgs) -> Result<Duration, DemoError> {
    if args.items == 0 {
        return Err(DemoError::usage("--items must be at least 1"));
    }
    if args.stripes == 0 {
        return Err(DemoError::usage(
            "--stripes must be at least 1 (1 is one lock for the whole stock)",
        ));
    }
    if u64::from(args.stripes) > args.items {
        return Err(DemoError::usage(format!(
            "--stripes {} is more than --items {}: every segment must open with at least one item",
            args.stripes, args.items
        )));
    }
    if args.pause_percent > 100 {
        return Err(DemoError::usage(
            "--pause-percent is a percentage (0 to 100)",
        ));
    }
    let ttl = args.ttl();
    if ttl < Duration::from_millis(50) {
        return Err(DemoError::usage("--ttl-ms must be at least 50"));
    }
    if let Some(store) = &args.store {
        match Store::of(store) {
            None => {
                return Err(DemoError::usage(
                    "--store takes a PostgreSQL URL (postgres://user@host:port/database) or a Redis URL (redis://host:port)",
                ));
            }
            #[cfg(not(feature = "redis"))]
            Some(Store::Redis) => {
                return Err(DemoError::usage(crate::storage::REDIS_NOT_BUILT));
            }
            Some(_) => {}
        }
    }
    Ok(ttl)
}

/// Runs the three sales and prints them side by side.
pub async fn run(
    args: &FlashSaleArgs,
    launcher: &ChildLauncher,
) -> Result<FlashSaleReport, DemoError> {
    let ttl = validate(args)?;
    if args.buyers < 2 {
        return Err(DemoError::usage(
            "--buyers must be at least 2: one buyer alone can never oversell",
        ));
    }
    let tag = invocation_tag();
    let kind = args.backend.kind(palisade_lock_any::Defaults::Local)?;
    println!(
        "Flash sale: {} items, {} buyers ({}), lock service {}",
        args.items,
        args.buyers,
        match kind {
            BackendKind::Embedded =>
                "tasks of this process: the embedded lock service lives in one process",
            _ => "each in its own process",
        },
        target(&args.backend, &tag)?.describe()
    );
    println!(
        "Lease TTL {} ms. Each buyer loops: lock, read the stock, maybe pause, write stock - 1, release.",
        ttl.as_millis()
    );
    if args.stripes > 1 {
        println!(
            "Lock striping: the stock is split into {} segments, each its own lock and fenced key; a buyer picks a random segment and moves on when it is sold out.",
            args.stripes
        );
    }
    println!(
        "Pauses (seed {}): {}% of purchases; with a lock, half of them outlast the lease, and buyer 0's first purchase always does.",
        args.seed, args.pause_percent
    );
    match args.store.as_deref().and_then(Store::of) {
        Some(Store::Postgres) => println!(
            "The stock is a row of the table {} in your PostgreSQL (--store).",
            sql_stock::TABLE
        ),
        Some(Store::Redis) => {
            println!("The stock is a counter in your Redis (--store): a buyer sells with DECRBY.")
        }
        None => {}
    }

    let mut runs = Vec::new();
    for (index, sale) in SaleKind::ALL.into_iter().enumerate() {
        println!(
            "\nRun {}: {}",
            index + 1,
            describe_run(sale, args.store.as_deref().and_then(Store::of))
        );
        let run_tag = format!("{tag}-{}", index + 1);
        let target = target(&args.backend, &run_tag)?;
        let run = run_sale(sale, args, ttl, &target, &run_tag, Staging::Demo(launcher)).await?;
        println!("  verdict: {}", run.verdict());
        runs.push(run);
    }
    let mut runs = runs.into_iter();
    let (Some(no_lock), Some(lock_without_fencing), Some(lock_with_fencing)) =
        (runs.next(), runs.next(), runs.next())
    else {
        return Err(DemoError::story("three runs expected"));
    };
    let report = FlashSaleReport {
        backend: kind,
        no_lock,
        lock_without_fencing,
        lock_with_fencing,
    };
    print_table(&report);
    Ok(report)
}

/// One fenced sale, quietly, for the `stripes` benchmark: the buyers are
/// tasks of this process whatever the backend, and nobody pauses unless
/// `--pause-percent` says so (buyer 0's forced pause is the demo's, not
/// the benchmark's). Each purchase holds its segment's lock for `hold`
/// between the read and the write, as a real order (a payment call, an
/// order row) would.
pub async fn measure(args: &FlashSaleArgs, hold: Duration) -> Result<SaleRun, DemoError> {
    let ttl = validate(args)?;
    if args.buyers == 0 {
        return Err(DemoError::usage("--buyers must be at least 1"));
    }
    let tag = invocation_tag();
    let target = target(&args.backend, &tag)?;
    let hold_micros = micros(hold);
    let staging = Staging::Measure { hold_micros };
    run_sale(SaleKind::LockWithFencing, args, ttl, &target, &tag, staging).await
}

/// The stock's segments: `base` itself with one stripe (the sale without
/// striping), `base/segment-<i>` with more.
fn striped(base: &str, stripes: u32) -> Result<Striped, DemoError> {
    Striped::new(LockName::new(base)?, stripes).map_err(|error| DemoError::usage(error.to_string()))
}

/// The `quantile` (0..=1) of `samples`, sorted in place.
fn quantile(samples: &mut [Duration], quantile: f64) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let rank = (quantile * samples.len() as f64).ceil() as usize;
    Some(samples[rank.clamp(1, samples.len()) - 1])
}

fn describe_run(sale: SaleKind, store: Option<Store>) -> &'static str {
    match (sale, store) {
        (SaleKind::NoLock, None) => "no lock; a plain store that applies whatever it is sent",
        (SaleKind::NoLock, Some(Store::Postgres)) => {
            "no lock; plain statements read and write the stock row"
        }
        (SaleKind::NoLock, Some(Store::Redis)) => "no lock; plain GET and DECRBY on the stock",
        (SaleKind::LockWithoutFencing, None) => {
            "a lock around every purchase; the plain store trusts the lock (no fencing)"
        }
        (SaleKind::LockWithoutFencing, Some(Store::Postgres)) => {
            "a lock around every purchase; plain statements on the stock row trust the lock (no fencing)"
        }
        (SaleKind::LockWithoutFencing, Some(Store::Redis)) => {
            "a lock around every purchase; plain GET and DECRBY on the stock trust the lock (no fencing)"
        }
        (SaleKind::LockWithFencing, None) => {
            "a lock around every purchase; Palisade's resource server checks every sequencer"
        }
        (SaleKind::LockWithFencing, Some(Store::Postgres)) => {
            "a lock around every purchase; every read and write is a palisade_fence_sql fenced transaction"
        }
        (SaleKind::LockWithFencing, Some(Store::Redis)) => {
            "a lock around every purchase; fenced GET and palisade_fence_redis's fenced decrement (only if at least 0 stay)"
        }
    }
}

/// The user's own store of `--store`, by its URL's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    Postgres,
    Redis,
}

impl Store {
    fn of(url: &str) -> Option<Store> {
        let scheme = url.split_once("://")?.0;
        match scheme {
            "postgres" | "postgresql" => Some(Store::Postgres),
            "redis" | "rediss" => Some(Store::Redis),
            _ => None,
        }
    }
}

/// The Redis key of `lock`'s stock, as the demo names it: in the lock's
/// slot, beside the marks `palisade_fence_redis` keeps.
fn redis_key(lock: &LockName) -> String {
    format!("{{{}}}:{STOCK_KEY}", lock.key_segment())
}

/// How a sale is staged.
#[derive(Clone, Copy)]
enum Staging<'a> {
    /// The demo: printed, buyer 0 forced to pause, and buyer processes
    /// from `launcher` on the backends shared across processes.
    Demo(&'a ChildLauncher),
    /// The benchmark: quiet, buyer tasks in this process whatever the
    /// backend, every purchase holding its lock this many microseconds.
    Measure { hold_micros: u64 },
}

/// One sale, staged as `staging` says.
async fn run_sale(
    sale: SaleKind,
    args: &FlashSaleArgs,
    ttl: Duration,
    target: &BackendTarget,
    run_tag: &str,
    staging: Staging<'_>,
) -> Result<SaleRun, DemoError> {
    let (demo, launcher, hold_micros) = match staging {
        Staging::Demo(launcher) => (true, Some(launcher), 0),
        Staging::Measure { hold_micros } => (false, None, hold_micros),
    };
    let base = match &args.store {
        Some(_) => format!("{LOCK}/{run_tag}"),
        None => LOCK.to_owned(),
    };
    let striped = striped(&base, args.stripes)?;
    let segments = striped.segments().to_vec();
    let (storage_target, plain_store, resource_server) = if let Some(url) = &args.store
        && Store::of(url) == Some(Store::Redis)
    {
        if demo {
            println!(
                "  (stock counter{} `{}` in {}{})",
                if segments.len() > 1 { "s" } else { "" },
                match segments.len() {
                    1 => redis_key(&segments[0]),
                    _ => redis_key(&LockName::new(format!("{base}/segment-*"))?),
                },
                palisade_core::redact::redact_url(url),
                if sale.fenced() {
                    "; fences in the marks beside it"
                } else {
                    ""
                }
            );
        }
        let target = StorageTarget::Redis {
            url: url.clone(),
            fenced: sale.fenced(),
        };
        (target, None, None)
    } else if let Some(url) = &args.store {
        let target = StorageTarget::Postgres {
            url: url.clone(),
            fenced: sale.fenced(),
        };
        if let Storage::Sql(stock) = Storage::connect(&target).await? {
            stock.prepare().await?;
        }
        if demo {
            println!(
                "  (stock row{} `{}` of {}{})",
                if segments.len() > 1 { "s" } else { "" },
                match segments.len() {
                    1 => sql_stock::item(&segments[0], STOCK_KEY),
                    _ => sql_stock::item(&LockName::new(format!("{base}/segment-*"))?, STOCK_KEY),
                },
                sql_stock::TABLE,
                if sale.fenced() {
                    "; fences in palisade_marks"
                } else {
                    ""
                }
            );
        }
        (target, None, None)
    } else if sale.fenced() {
        let server = ResourceServer::start().await?;
        if demo {
            println!(
                "  (resource server on {}, data in {})",
                server.url(),
                server.data_dir().display()
            );
        }
        (
            StorageTarget::Fenced { url: server.url() },
            None,
            Some(server),
        )
    } else {
        let store = PlainStore::start().await?;
        if demo {
            println!("  (plain store on {})", store.url());
        }
        (StorageTarget::Plain { url: store.url() }, Some(store), None)
    };
    let storage = Storage::connect(&storage_target).await?;
    let locks = Locks::connect(target).await?;

    // The opening stock of every segment, written under its lock like
    // every later write.
    let openings = striped
        .split(args.items)
        .map_err(|error| DemoError::usage(error.to_string()))?;
    for (opening, lock) in openings.into_iter().zip(&segments) {
        let mut opener = LocalClient::new(
            locks.clone(),
            session_options(ttl),
            storage.clone(),
            lock.clone(),
            STOCK_KEY,
        );
        let opening =
            i64::try_from(opening).map_err(|_| DemoError::usage("--items is too large"))?;
        if sale.locked() {
            opener.acquire(ACQUIRE_WAIT).await?;
        }
        opener.write(opening).await?;
        opener.release().await?;
    }

    let plans: Vec<BuyerPlan> = (0..args.buyers)
        .map(|buyer| BuyerPlan {
            buyer,
            seed: args.seed,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            pause_percent: args.pause_percent,
            locked: sale.locked(),
            storage: storage_target.clone(),
            segments: segments
                .iter()
                .map(|lock| lock.as_str().to_owned())
                .collect(),
            forced_pause: demo,
            hold_micros,
        })
        .collect();

    let (events, mut received) = mpsc::unbounded_channel::<BuyerEvent>();
    let started;
    let mut buyers = Vec::new();
    match (target.kind().is_shared(), launcher) {
        (false, _) | (_, None) => {
            started = Instant::now();
            for plan in plans {
                let locks = locks.clone();
                let storage = storage.clone();
                let events = events.clone();
                buyers.push(tokio::spawn(async move {
                    let report = move |event: BuyerEvent| {
                        let _ = events.send(event);
                    };
                    buy_until_sold_out(&plan, locks, storage, &report).await
                }));
            }
        }
        (true, Some(launcher)) => {
            let mut processes = Vec::new();
            for plan in plans {
                let role = format!("buyer {}", plan.buyer);
                let spec = ChildSpec::Buyer {
                    backend: target.clone(),
                    plan,
                };
                processes.push(launcher.spawn(&role, &spec).await?);
            }
            for process in &mut processes {
                match process.receive(PROCESS_ANSWER_WAIT).await? {
                    ChildMessage::Ready => {}
                    other => return Err(process.unexpected(&other)),
                }
            }
            started = Instant::now();
            for process in &mut processes {
                process.send(&ChildCommand::Go).await?;
            }
            for mut process in processes {
                let events = events.clone();
                buyers.push(tokio::spawn(async move {
                    loop {
                        match process.receive(PROCESS_ANSWER_WAIT).await? {
                            ChildMessage::Buyer { event } => {
                                let _ = events.send(event);
                            }
                            ChildMessage::Done { tally } => return Ok(tally),
                            other => return Err(process.unexpected(&other)),
                        }
                    }
                }));
            }
        }
    }
    drop(events);
    let mut lock_waits = Vec::new();
    let mut first_segment_sold_out = None;
    let mut last_sale = None;
    while let Some(event) = received.recv().await {
        let at = started.elapsed();
        match &event {
            BuyerEvent::Acquired { waited_micros, .. } => {
                lock_waits.push(Duration::from_micros(*waited_micros));
            }
            BuyerEvent::Sold { stock_seen, .. } => {
                if *stock_seen == 1 {
                    first_segment_sold_out.get_or_insert(at);
                }
                last_sale = Some(at);
            }
            _ => {}
        }
        if demo {
            print_event(at, ttl, args.stripes > 1, &event);
        }
    }
    let mut tally = Tally::default();
    for buyer in buyers {
        let buyer_tally = buyer
            .await
            .map_err(|join| DemoError::story(format!("a buyer task failed: {join}")))??;
        tally.add(buyer_tally);
    }
    let elapsed = started.elapsed();

    let mut stock_left = 0;
    for lock in &segments {
        stock_left += match storage.read(lock, STOCK_KEY, None).await? {
            Ok(Some(stock)) => stock,
            Ok(None) => return Err(DemoError::story("the stock disappeared")),
            Err(stale) => {
                return Err(DemoError::story(format!(
                    "a plain read of the stock was refused (generation {} < {})",
                    stale.presented, stale.mark
                )));
            }
        };
    }
    let stale_writes_accepted = match sale {
        SaleKind::NoLock => None,
        SaleKind::LockWithoutFencing if args.store.is_some() => match &storage {
            Storage::Sql(stock) => {
                let mut stale = 0;
                for lock in &segments {
                    stale += stock
                        .stale_writes(&sql_stock::item(lock, STOCK_KEY))
                        .await?;
                }
                println!(
                    "  the stock rows took {stale} writes older than one they had already applied"
                );
                Some(stale)
            }
            #[cfg(feature = "redis")]
            Storage::Redis(stock) => {
                let mut stale = 0;
                for lock in &segments {
                    stale += stock
                        .stale_writes(&crate::redis_stock::RedisStock::keys(lock))
                        .await?;
                }
                println!(
                    "  the stock took {stale} DECRBYs from a generation older than one that had already sold"
                );
                Some(stale)
            }
            _ => None,
        },
        SaleKind::LockWithoutFencing => {
            let stale = plain_store
                .as_ref()
                .map(PlainStore::stale_writes)
                .unwrap_or_default();
            for write in stale.iter().take(5) {
                println!(
                    "  plain store applied a stale write: stock = {} with generation {} after generation {} had written",
                    write.value, write.presented, write.newest
                );
            }
            if stale.len() > 5 {
                println!("  ... and {} more", stale.len() - 5);
            }
            Some(stale.len() as u64)
        }
        SaleKind::LockWithFencing => Some(tally.stale_accepted),
    };
    if let Some(server) = resource_server {
        server.stop().await?;
    }
    Ok(SaleRun {
        kind: sale,
        items: args.items,
        sold: tally.sold,
        stock_left,
        stale_writes_accepted,
        stale_writes_refused: sale.fenced().then_some(tally.refused),
        pauses: tally.pauses,
        pauses_past_ttl: tally.pauses_past_ttl,
        elapsed,
        stripes: args.stripes,
        lock_acquisitions: tally.acquisitions,
        lock_wait_p99: quantile(&mut lock_waits, 0.99),
        sold_out_visits: tally.sold_out_visits,
        sold_out_time: Duration::from_micros(tally.sold_out_micros),
        tail: first_segment_sold_out.map(|first| last_sale.unwrap_or(first).saturating_sub(first)),
    })
}

/// One line per event worth telling. With stripes each names its segment:
/// two buyers may hold the same generation number of two different locks.
fn print_event(at: Duration, ttl: Duration, striped: bool, event: &BuyerEvent) {
    let at = at.as_millis();
    let of = |segment: &usize| {
        if striped {
            format!(" of segment {segment}")
        } else {
            String::new()
        }
    };
    match event {
        BuyerEvent::Paused {
            buyer,
            segment,
            millis,
            past_ttl: true,
            generation: Some(generation),
            stock_seen,
        } => println!(
            "  {at:>6} ms  buyer {buyer}: holding generation {generation}{}, read stock {stock_seen}, pauses {millis} ms (past the {} ms TTL)",
            of(segment),
            ttl.as_millis()
        ),
        BuyerEvent::Paused { .. } | BuyerEvent::Sold { .. } | BuyerEvent::Acquired { .. } => {}
        BuyerEvent::Refused {
            buyer,
            segment,
            presented,
            mark,
        } => println!(
            "  {at:>6} ms  buyer {buyer}: write{} refused as stale (generation {presented} < mark {mark}); takes the lock again and re-reads",
            of(segment)
        ),
        BuyerEvent::StaleAccepted {
            buyer,
            segment,
            presented,
            mark,
        } => println!(
            "  {at:>6} ms  buyer {buyer}: STALE WRITE ACCEPTED{}: generation {presented}, mark after it {mark}",
            of(segment)
        ),
    }
}

fn print_table(report: &FlashSaleReport) {
    let runs = [
        &report.no_lock,
        &report.lock_without_fencing,
        &report.lock_with_fencing,
    ];
    let row = |label: &str, cell: &dyn Fn(&SaleRun) -> String| {
        let mut line = format!("  {label:<24}");
        for run in runs {
            line.push_str(&format!("{:>20}", cell(run)));
        }
        println!("{line}");
    };
    println!();
    row("", &|run| run.kind.title().to_owned());
    row("items in stock", &|run| run.items.to_string());
    row("sold", &|run| run.sold.to_string());
    row("oversold", &|run| run.oversold().to_string());
    row("stock left", &|run| run.stock_left.to_string());
    let optional = |value: Option<u64>| value.map_or("-".to_owned(), |value| value.to_string());
    row("stale writes accepted", &|run| {
        optional(run.stale_writes_accepted)
    });
    row("stale writes refused", &|run| {
        optional(run.stale_writes_refused)
    });
    row("pauses (past the TTL)", &|run| {
        format!("{} ({})", run.pauses, run.pauses_past_ttl)
    });
    row("elapsed", &|run| {
        format!("{:.1} s", run.elapsed.as_secs_f64())
    });
    if report.lock_with_fencing.stripes > 1 {
        row("stripes", &|run| run.stripes.to_string());
        row("sold-out visits", &|run| run.sold_out_visits.to_string());
        row("tail (1st empty->last)", &|run| {
            run.tail.map_or("-".to_owned(), |tail| {
                format!("{:.2} s", tail.as_secs_f64())
            })
        });
    }
    println!();
    for run in runs {
        println!("{:<18}{}", format!("{}:", run.kind.title()), run.verdict());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(buyer: u32) -> BuyerPlan {
        BuyerPlan {
            buyer,
            seed: 42,
            ttl_ms: 1000,
            pause_percent: 30,
            locked: true,
            storage: StorageTarget::Plain {
                url: "http://127.0.0.1:1".into(),
            },
            segments: vec![LOCK.into()],
            forced_pause: true,
            hold_micros: 0,
        }
    }

    #[test]
    fn buyer_zero_always_pauses_past_the_ttl_first() {
        let plan = plan(0);
        let mut rng = DemoRng::new(plan.seed, 0);
        let first = next_pause(&mut rng, &plan, 0).expect("a pause");
        assert!(first > Duration::from_millis(plan.ttl_ms), "{first:?}");
    }

    #[test]
    fn schedules_repeat_for_a_seed_and_mix_short_and_long_pauses() {
        let plan = plan(1);
        let schedule = || {
            let mut rng = DemoRng::new(plan.seed, 1);
            (0..400)
                .map(|attempt| next_pause(&mut rng, &plan, attempt))
                .collect::<Vec<_>>()
        };
        let first = schedule();
        assert_eq!(first, schedule());
        let ttl = Duration::from_millis(plan.ttl_ms);
        let long = first.iter().flatten().filter(|pause| **pause > ttl).count();
        let short = first.iter().flatten().filter(|pause| **pause < ttl).count();
        let none = first.iter().filter(|pause| pause.is_none()).count();
        // 30 % pause, half of them long: wide bounds, the point is that all
        // three kinds occur.
        assert!((20..=100).contains(&long), "{long} long pauses");
        assert!((20..=100).contains(&short), "{short} short pauses");
        assert!(
            (200..=360).contains(&none),
            "{none} purchases without a pause"
        );
    }

    #[test]
    fn quantiles_pick_the_nearest_rank() {
        let mut samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        assert_eq!(
            quantile(&mut samples, 0.99),
            Some(Duration::from_millis(99))
        );
        assert_eq!(quantile(&mut samples, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(
            quantile(&mut [Duration::from_millis(3)], 0.99),
            Some(Duration::from_millis(3))
        );
        assert_eq!(quantile(&mut [], 0.99), None);
    }

    #[test]
    fn verdicts_name_the_outcome() {
        let run = SaleRun {
            kind: SaleKind::LockWithFencing,
            items: 20,
            sold: 20,
            stock_left: 0,
            stale_writes_accepted: Some(0),
            stale_writes_refused: Some(3),
            pauses: 5,
            pauses_past_ttl: 2,
            elapsed: Duration::from_secs(1),
            stripes: 1,
            lock_acquisitions: 30,
            lock_wait_p99: Some(Duration::from_millis(400)),
            sold_out_visits: 4,
            sold_out_time: Duration::from_millis(10),
            tail: Some(Duration::ZERO),
        };
        assert!(run.is_safe());
        assert!(run.verdict().starts_with("SAFE"), "{}", run.verdict());
        let oversold = SaleRun {
            sold: 22,
            stale_writes_accepted: Some(2),
            ..run.clone()
        };
        assert!(!oversold.is_safe());
        assert!(oversold.verdict().starts_with("FENCING FAILED"));
        let unfenced = SaleRun {
            kind: SaleKind::LockWithoutFencing,
            ..oversold.clone()
        };
        assert!(
            unfenced.verdict().starts_with("OVERSOLD"),
            "{}",
            unfenced.verdict()
        );
        let quiet = SaleRun {
            kind: SaleKind::NoLock,
            ..run
        };
        assert!(
            quiet.verdict().contains("NOT reproduced"),
            "{}",
            quiet.verdict()
        );
    }
}
