//! The flash-sale demo: a stock of N items, many buyers, random pauses in
//! the lock holders, and three runs side by side.
//!
//! Run with: `cargo run -p example-flash-sale`
//!
//! Each buyer loops: take the lock, read the stock, maybe pause (a seeded
//! schedule; some pauses outlast the lease), write the stock minus one and
//! count a sale, release; until the stock is gone.
//!
//! 1. no lock, plain store: oversold;
//! 2. a lock, but the plain store trusts it: a paused holder wakes after
//!    its lease expired and writes its stale stock back: still oversold;
//! 3. a lock and Palisade's resource server: the stale write is refused
//!    (409) and the buyer retries; never oversold.
//!
//! With no flags it runs on the in-process lock backend (buyers are tasks
//! of this process). On etcd or Redis every buyer is a process of its own:
//!
//! ```text
//! cargo run -p example-flash-sale --features etcd -- --backend etcd --etcd-endpoints 127.0.0.1:2379
//! cargo run -p example-flash-sale --features redis -- --backend redis --redis-url redis://127.0.0.1:6379 --buyers 6
//! cargo run -p example-flash-sale --features sql -- --backend mariadb --database-url mysql://root@127.0.0.1:3306/test
//! cargo run -p example-flash-sale -- --help
//! ```
//!
//! `--store postgres://...` (with `--features sql`) keeps the stock in a table of that PostgreSQL
//! instead; the fenced run then reads and writes it in `palisade_fence_sql`
//! fenced transactions, which refuse the stale buyer in the database.
//! `--store redis://...` (with `--features redis`) keeps it as a counter in
//! that Redis: the unfenced runs sell with a plain `DECRBY` under the lock,
//! the fenced run with `palisade_fence_redis`'s fenced decrement ("only if
//! at least 0 stay"), which refuses the stale buyer inside Redis:
//!
//! ```text
//! cargo run -p example-flash-sale --features redis -- --store redis://127.0.0.1:6379
//! ```
//!
//! `--stripes N` splits the stock into N segments, each its own lock and
//! fenced key (lock striping for a hot item): a buyer takes a random
//! segment's lock and moves on when it is sold out. Each segment is fenced
//! on its own, so the fenced run still never oversells. The price is the
//! end of the sale: each buyer spends one acquisition per segment to find
//! it empty, and the last units are hunted across segments (the `tail`
//! row; figures in docs/benchmarks.md, "Lock striping"):
//!
//! ```text
//! cargo run -p example-flash-sale -- --stripes 4 --items 12
//! ```
//!
//! Prints sold, oversold and refused counts and the elapsed time of each
//! run, and exits 1 if the fenced run ever accepts a stale write or
//! oversells (2 if it could not run).

use std::process::ExitCode;

use clap::Parser;
use palisade_demo::{FlashSaleArgs, flash_sale};

/// The flash-sale demo: oversold without fencing, never with it.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    demo: FlashSaleArgs,

    /// Internal: run as one of the demo's client processes.
    #[arg(long, hide = true)]
    demo_child: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    palisade_demo::host_main("flash-sale", cli.demo_child, |launcher| async move {
        flash_sale::run(&cli.demo, &launcher)
            .await
            .map(|report| report.exit_code())
    })
    .await
}
