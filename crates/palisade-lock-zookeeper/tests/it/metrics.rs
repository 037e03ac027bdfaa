//! `palisade_metrics::Metered` over a ZooKeeper session: an uncontended
//! acquisition counts no wait, a queued one counts a wait and then a
//! hand-off when the holder's release deletes the node it watches.

use std::time::{Duration, Instant};

use palisade_core::{Lock, LockGuard, LockName, Mode};
use palisade_metrics::{LockMetrics, Metered};
use prometheus_client::registry::Registry;

use crate::fixtures::{options, session, started};

/// Generous for a loaded machine: the events take milliseconds.
const WAIT: Duration = Duration::from_secs(20);

/// The value of one series (`name{labels}`) in `registry`, 0 when absent.
fn value(registry: &Registry, series: &str) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |value| value.parse().unwrap())
}

const ACQUIRED: &str = r#"palisade_lock_acquires_total{mode="exclusive",outcome="acquired"}"#;
const WAITS: &str = r#"palisade_lock_waits_total{mode="exclusive"}"#;
const HANDOFFS: &str = r#"palisade_lock_handoffs_total{mode="exclusive"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metered_sessions_count_acquisitions_waits_and_handoffs() {
    let (_zookeeper, zk) = started("metrics").await;
    let metrics = LockMetrics::default();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let ttl = Duration::from_secs(5);
    let alice = Metered::new(session(&zk, options(ttl)).await, metrics.clone());
    let bob = Metered::new(session(&zk, options(ttl)).await, metrics);
    let lock = LockName::new("metered").unwrap();

    // Uncontended: acquired, no wait, no hand-off.
    let held = alice.acquire(&lock, Mode::Exclusive).await.unwrap();
    assert_eq!(value(&registry, ACQUIRED), 1.0);
    assert_eq!(value(&registry, WAITS), 0.0);
    assert_eq!(value(&registry, HANDOFFS), 0.0);

    // Bob queues behind Alice's node.
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { bob.acquire(&lock, Mode::Exclusive).await }
    });
    // The wait is counted inside Bob's task, which says nothing outside:
    // a bounded look at the metric.
    let deadline = Instant::now() + WAIT;
    while value(&registry, WAITS) < 1.0 {
        assert!(Instant::now() < deadline, "no wait counted within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(value(&registry, "palisade_lock_waiting"), 1.0);
    assert_eq!(value(&registry, HANDOFFS), 0.0);

    // Alice's release deletes her node; Bob's watch fires: a hand-off.
    held.release().await.unwrap();
    let granted = tokio::time::timeout(WAIT, waiter)
        .await
        .expect("bob is granted the lock")
        .unwrap()
        .unwrap();
    assert_eq!(value(&registry, HANDOFFS), 1.0);
    assert_eq!(value(&registry, ACQUIRED), 2.0);
    assert_eq!(value(&registry, "palisade_lock_waiting"), 0.0);
    granted.release().await.unwrap();
}
