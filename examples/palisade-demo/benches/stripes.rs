//! Lock striping for a hot item: the fenced flash sale with 32 buyers over
//! 1, 2, 4, 8 and 16 stripes, on a local Redis and on the embedded lock
//! service, in one run.
//!
//! Run with: `cargo bench -p palisade-demo --features redis --bench stripes` (starts a
//! `redis-server` on a free port). `PALISADE_BENCH_ITEMS` (960) units per
//! sale, `PALISADE_BENCH_ROUNDS` (3) interleaved rounds, the median round
//! reported; `PALISADE_BENCH_HOLD_MS` (5) milliseconds each purchase holds
//! its lock between read and write; `PALISADE_BENCH_BACKENDS`
//! (`redis,embedded`); `PALISADE_BENCH_SVG` (`docs/stripes.svg`) is where
//! the chart goes.
//!
//! Every sale is `flash_sale::measure`: buyer tasks in this process, each
//! purchase a lock acquisition, a fenced read, the hold (the order the lock
//! protects: a payment call, an order row), a fenced write through
//! Palisade's resource server, and a release; nobody pauses. Per stripe
//! count it prints purchases per second (and the ratio to one stripe,
//! measured in the same round), the p99 of the wait for a segment's lock,
//! and the end-of-sale cost: acquisitions spent on segments already sold
//! out, the time the buyers spent on them, and the tail from the first
//! segment sold out to the last unit sold.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use palisade_demo::{BackendArgs, FlashSaleArgs, LockSpec, SaleRun, flash_sale};
use palisade_testkit::bench::env_number;
use palisade_testkit::redis::RedisServer;

const STRIPES: [u32; 5] = [1, 2, 4, 8, 16];
const BUYERS: u32 = 32;

/// One backend's figures per stripe count (the median round of each).
struct Series {
    backend: &'static str,
    runs: Vec<SaleRun>,
}

fn purchases_per_second(run: &SaleRun) -> f64 {
    run.sold as f64 / run.elapsed.as_secs_f64()
}

fn millis(duration: Option<Duration>) -> f64 {
    duration.map_or(0.0, |duration| duration.as_secs_f64() * 1000.0)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run());
}

async fn run() {
    let items = env_number("PALISADE_BENCH_ITEMS", 960);
    let hold = Duration::from_millis(env_number("PALISADE_BENCH_HOLD_MS", 5));
    let rounds = env_number("PALISADE_BENCH_ROUNDS", 3).max(1);
    let backends =
        std::env::var("PALISADE_BENCH_BACKENDS").unwrap_or_else(|_| "redis,embedded".to_owned());
    let redis = backends.contains("redis").then(RedisServer::start);
    let mut chosen: Vec<(&'static str, BackendArgs)> = Vec::new();
    if let Some(redis) = &redis {
        chosen.push(("Redis", LockSpec::redis(redis.url()).into()));
    }
    if backends.contains("embedded") {
        chosen.push(("embedded", BackendArgs::default()));
    }

    let mut series = Vec::new();
    for (name, backend) in chosen {
        // rounds × stripes, interleaved so that a burst of load from
        // elsewhere lands on every stripe count alike.
        let mut samples: Vec<Vec<SaleRun>> = vec![Vec::new(); STRIPES.len()];
        for round in 0..rounds {
            for (index, stripes) in STRIPES.into_iter().enumerate() {
                let args = FlashSaleArgs {
                    items,
                    buyers: BUYERS,
                    stripes,
                    pause_percent: 0,
                    ..FlashSaleArgs::new(backend.clone())
                };
                let run = flash_sale::measure(&args, hold)
                    .await
                    .expect("a fenced sale");
                assert!(run.is_safe(), "the fenced sale must be safe: {run:?}");
                assert_eq!(run.sold, items, "every unit sold: {run:?}");
                eprintln!(
                    "{name} round {round} stripes {stripes}: {:.0} purchases/s",
                    purchases_per_second(&run)
                );
                samples[index].push(run);
            }
        }
        let runs = samples
            .into_iter()
            .map(|mut runs| {
                runs.sort_by(|a, b| purchases_per_second(a).total_cmp(&purchases_per_second(b)));
                runs.swap_remove(runs.len() / 2)
            })
            .collect();
        series.push(Series {
            backend: name,
            runs,
        });
    }

    println!(
        "\n{items} units, {BUYERS} buyers, fenced, no pauses, each purchase holding its lock {} ms; median of {rounds} rounds\n",
        hold.as_millis()
    );
    println!(
        "| backend | stripes | purchases/s | × 1 stripe | lock-wait p99 | acquisitions | on sold-out segments (extra) | time on them | tail: 1st sold out → last sale |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for Series { backend, runs } in &series {
        let base = purchases_per_second(&runs[0]);
        for run in runs {
            println!(
                "| {backend} | {} | {:.0} | {:.2} | {:.1} ms | {} | {} ({}) | {:.0} ms | {:.0} ms |",
                run.stripes,
                purchases_per_second(run),
                purchases_per_second(run) / base,
                millis(run.lock_wait_p99),
                run.lock_acquisitions,
                run.sold_out_visits,
                run.sold_out_visits.saturating_sub(u64::from(BUYERS)),
                run.sold_out_time.as_secs_f64() * 1000.0,
                millis(run.tail),
            );
        }
    }

    let path = std::env::var_os("PALISADE_BENCH_SVG")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/stripes.svg")
        });
    let svg = chart(&series, items, hold);
    std::fs::write(&path, svg).expect("the chart written");
    println!("\nchart: {}", path.display());
}

/// One panel of the chart: a title, a value per run.
struct Panel {
    title: &'static str,
    value: fn(&SaleRun) -> f64,
}

const COLOURS: [&str; 3] = ["#c0392b", "#2471a3", "#7d3c98"];

/// Three line panels side by side (purchases per second, lock-wait p99,
/// end-of-sale tail), one line per backend, the stripe counts on the x
/// axis. Hand-written SVG: a few polylines need no plotting crate.
fn chart(series: &[Series], items: u64, hold: Duration) -> String {
    let panels = [
        Panel {
            title: "purchases per second",
            value: purchases_per_second,
        },
        Panel {
            title: "lock-wait p99 (ms)",
            value: |run| millis(run.lock_wait_p99),
        },
        Panel {
            title: "tail: first segment sold out → last sale (ms)",
            value: |run| millis(run.tail),
        },
    ];
    let (panel_width, panel_height, left, top, bottom) = (300.0, 220.0, 60.0, 40.0, 50.0);
    let width = panels.len() as f64 * (panel_width + left) + 20.0;
    let height = top + panel_height + bottom + 30.0 + 18.0 * series.len() as f64;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r#"<title>Lock striping: the fenced flash sale, {items} units, {BUYERS} buyers, {} ms held per purchase, over 1 to 16 stripes</title>"#,
        hold.as_millis()
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (index, panel) in panels.iter().enumerate() {
        let x0 = left + index as f64 * (panel_width + left);
        let y0 = top;
        let maximum = series
            .iter()
            .flat_map(|series| series.runs.iter().map(panel.value))
            .fold(0.0_f64, f64::max)
            .max(1e-9)
            * 1.1;
        let _ = writeln!(
            svg,
            r#"<g class="panel"><text x="{}" y="{}" text-anchor="middle" font-weight="bold">{}</text>"#,
            x0 + panel_width / 2.0,
            y0 - 14.0,
            panel.title
        );
        let _ = writeln!(
            svg,
            r##"<rect x="{x0}" y="{y0}" width="{panel_width}" height="{panel_height}" fill="none" stroke="#888"/>"##
        );
        for tick in 0..=4 {
            let value = maximum * f64::from(tick) / 4.0;
            let y = y0 + panel_height - panel_height * f64::from(tick) / 4.0;
            let _ = writeln!(
                svg,
                r##"<line x1="{x0}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{value:.0}</text>"##,
                x0 + panel_width,
                x0 - 4.0,
                y + 4.0
            );
        }
        let x_at =
            |position: usize| x0 + panel_width * (position as f64 + 0.5) / STRIPES.len() as f64;
        for (position, stripes) in STRIPES.iter().enumerate() {
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{stripes}</text>"#,
                x_at(position),
                y0 + panel_height + 16.0
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">stripes</text>"#,
            x0 + panel_width / 2.0,
            y0 + panel_height + 34.0
        );
        for (line, one) in series.iter().enumerate() {
            let colour = COLOURS[line % COLOURS.len()];
            let points: Vec<(f64, f64)> = one
                .runs
                .iter()
                .enumerate()
                .map(|(position, run)| {
                    let value = (panel.value)(run);
                    (
                        x_at(position),
                        y0 + panel_height - panel_height * value / maximum,
                    )
                })
                .collect();
            let path: Vec<String> = points
                .iter()
                .map(|(x, y)| format!("{x:.1},{y:.1}"))
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
                path.join(" ")
            );
            for ((x, y), run) in points.iter().zip(&one.runs) {
                let _ = writeln!(
                    svg,
                    r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{colour}"><title>{}, {} stripes: {:.1}</title></circle>"#,
                    one.backend,
                    run.stripes,
                    (panel.value)(run)
                );
            }
        }
        let _ = writeln!(svg, "</g>");
    }
    for (line, one) in series.iter().enumerate() {
        let y = top + panel_height + bottom + 18.0 * line as f64 + 10.0;
        let colour = COLOURS[line % COLOURS.len()];
        let _ = writeln!(
            svg,
            r#"<line x1="{left}" y1="{y}" x2="{}" y2="{y}" stroke="{colour}" stroke-width="3"/><text x="{}" y="{}">{} lock service, resource server fencing every segment</text>"#,
            left + 24.0,
            left + 30.0,
            y + 4.0,
            one.backend
        );
    }
    svg.push_str("</svg>\n");
    svg
}
