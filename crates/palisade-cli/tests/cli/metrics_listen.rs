//! `palisade lock --metrics-listen`: the lock side's metrics, scraped over
//! HTTP from two real `palisade lock` processes on Redis: the holder's
//! uncontended grant, then the waiter's wait and hand-off.

use std::process::Stdio;
use std::time::{Duration, Instant};

use palisade_testkit::process::free_port;
use tokio::io::{AsyncBufReadExt, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;

use crate::fixtures::{Backend, next_line, palisade, unique_name};

/// Generous, for a loaded machine.
const WAIT: Duration = Duration::from_secs(30);

/// `GET /metrics` on `port`, or `None` while nothing listens there yet.
async fn scrape(port: u16) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.ok()?;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    Some(answer)
}

fn value(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|value| value.parse().unwrap())
}

/// Scrapes until `series` has `expected` (bounded): the processes update
/// their metrics on their own schedule.
async fn wait_for(port: u16, series: &str, expected: f64) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let page = scrape(port).await;
        if let Some(page) = &page
            && value(page, series) == Some(expected)
        {
            return page.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{series} never reached {expected}: {page:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_lock_side_metrics_are_served_while_the_command_runs() {
    let backend = Backend::redis();
    let name = unique_name(backend.name(), "metrics");
    let holder_port = free_port();
    let waiter_port = free_port();
    let granted = r#"palisade_lock_acquires_total{mode="exclusive",outcome="acquired"}"#;
    let waits = r#"palisade_lock_waits_total{mode="exclusive"}"#;
    let handoffs = r#"palisade_lock_handoffs_total{mode="exclusive"}"#;

    // Each command says it runs, then holds the lock until its stdin closes.
    let spawn = |port: u16| {
        let mut command = palisade(["lock", "--quiet", "--wait", "60s", "--metrics-listen"]);
        command
            .arg(format!("127.0.0.1:{port}"))
            .args(backend.flags())
            .args([
                name.as_str(),
                "--",
                "sh",
                "-c",
                "echo running; cat >/dev/null",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        command.spawn().expect("palisade lock starts")
    };

    let mut holder = spawn(holder_port);
    let mut holder_out = BufReader::new(holder.stdout.take().unwrap()).lines();
    assert_eq!(next_line(&mut holder_out, WAIT).await, "running");
    let page = wait_for(holder_port, granted, 1.0).await;
    assert_eq!(value(&page, waits), Some(0.0), "granted at once: {page}");
    assert_eq!(value(&page, "palisade_lock_waiting"), Some(0.0));

    let mut waiter = spawn(waiter_port);
    let page = wait_for(waiter_port, "palisade_lock_waiting", 1.0).await;
    assert_eq!(value(&page, waits), Some(1.0), "{page}");
    assert_eq!(value(&page, handoffs), Some(0.0));

    // The holder's command ends; the lock passes to the waiter.
    drop(holder.stdin.take());
    assert!(holder.wait().await.unwrap().success());
    let mut waiter_out = BufReader::new(waiter.stdout.take().unwrap()).lines();
    assert_eq!(next_line(&mut waiter_out, WAIT).await, "running");
    let page = wait_for(waiter_port, handoffs, 1.0).await;
    assert_eq!(value(&page, granted), Some(1.0));
    assert_eq!(value(&page, "palisade_lock_waiting"), Some(0.0));
    drop(waiter.stdin.take());
    assert!(waiter.wait().await.unwrap().success());
}
