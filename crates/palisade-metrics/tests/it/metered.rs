//! [`Metered`] over the in-process lock backend: each metric moves when
//! its event happens, and only then.

use std::time::{Duration, Instant};

use palisade_core::{Lock, LockError, LockGuard, LockName, Mode, SessionOptions};
use palisade_lock_embedded::EmbeddedLockClient;
use palisade_metrics::{LockMetrics, Metered};
use prometheus_client::registry::Registry;

/// Generous: the events take milliseconds.
const WAIT: Duration = Duration::from_secs(10);

struct Scrape {
    registry: Registry,
}

impl Scrape {
    fn of(metrics: &LockMetrics) -> Scrape {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        Scrape { registry }
    }

    /// The value of one series (`name{labels}`), 0 when absent.
    fn value(&self, series: &str) -> f64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |value| value.parse().unwrap())
    }

    /// Waits (bounded) until `series` reaches `at_least`: the metric is
    /// updated by another task, and has no event of its own to wait on.
    async fn wait_for(&self, series: &str, at_least: f64) {
        let deadline = Instant::now() + WAIT;
        while self.value(series) < at_least {
            assert!(
                Instant::now() < deadline,
                "{series} stayed at {} (wanted {at_least})",
                self.value(series)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn name(text: &str) -> LockName {
    LockName::new(text).unwrap()
}

#[tokio::test]
async fn an_uncontended_acquire_counts_no_wait() {
    let metrics = LockMetrics::default();
    let scrape = Scrape::of(&metrics);
    let service = EmbeddedLockClient::new();
    let locks = Metered::new(service.session(SessionOptions::default()).unwrap(), metrics);
    let guard = locks.acquire(&name("a"), Mode::Exclusive).await.unwrap();
    assert!(guard.sequencer().is_ok());
    guard.release().await.unwrap();
    assert_eq!(
        scrape.value(r#"palisade_lock_acquires_total{mode="exclusive",outcome="acquired"}"#),
        1.0
    );
    assert_eq!(
        scrape.value(
            r#"palisade_lock_acquire_duration_seconds_count{mode="exclusive",outcome="acquired"}"#
        ),
        1.0
    );
    assert_eq!(
        scrape.value(r#"palisade_lock_waits_total{mode="exclusive"}"#),
        0.0
    );
    assert_eq!(
        scrape.value(r#"palisade_lock_handoffs_total{mode="exclusive"}"#),
        0.0
    );
    assert_eq!(scrape.value("palisade_lock_waiting"), 0.0);
}

#[tokio::test]
async fn a_queued_acquire_counts_a_wait_then_a_handoff() {
    let metrics = LockMetrics::default();
    let scrape = Scrape::of(&metrics);
    let service = EmbeddedLockClient::new();
    let alice = Metered::new(
        service.session(SessionOptions::default()).unwrap(),
        metrics.clone(),
    );
    let bob = Metered::new(service.session(SessionOptions::default()).unwrap(), metrics);
    let held = alice.acquire(&name("a"), Mode::Exclusive).await.unwrap();
    let waiter = tokio::spawn(async move { bob.acquire(&name("a"), Mode::Exclusive).await });
    scrape
        .wait_for(r#"palisade_lock_waits_total{mode="exclusive"}"#, 1.0)
        .await;
    assert_eq!(scrape.value("palisade_lock_waiting"), 1.0);
    assert_eq!(
        scrape.value(r#"palisade_lock_handoffs_total{mode="exclusive"}"#),
        0.0
    );
    held.release().await.unwrap();
    let granted = tokio::time::timeout(WAIT, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        scrape.value(r#"palisade_lock_handoffs_total{mode="exclusive"}"#),
        1.0
    );
    assert_eq!(scrape.value("palisade_lock_waiting"), 0.0);
    assert_eq!(
        scrape.value(r#"palisade_lock_acquires_total{mode="exclusive",outcome="acquired"}"#),
        2.0
    );
    granted.release().await.unwrap();
}

#[tokio::test]
async fn a_lost_lease_is_counted_with_its_reason() {
    let metrics = LockMetrics::default();
    let scrape = Scrape::of(&metrics);
    let service = EmbeddedLockClient::new();
    let session = service.session(SessionOptions::default()).unwrap();
    let locks = Metered::new(session, metrics);
    let guard = locks.acquire(&name("a"), Mode::Exclusive).await.unwrap();
    assert_eq!(
        scrape.value(r#"palisade_lock_lease_losses_total{reason="revoked"}"#),
        0.0
    );
    locks.inner().kill_lease();
    scrape
        .wait_for(r#"palisade_lock_lease_losses_total{reason="revoked"}"#, 1.0)
        .await;
    assert!(matches!(
        guard.sequencer(),
        Err(LockError::LeaseLost { .. })
    ));
    drop(guard);

    // A release is not a loss.
    let released = Metered::new(
        service.session(SessionOptions::default()).unwrap(),
        locks.metrics().clone(),
    );
    let guard = released.acquire(&name("b"), Mode::Exclusive).await.unwrap();
    guard.release().await.unwrap();
    let total: f64 = [
        "expired",
        "keepalive_failed",
        "revoked",
        "key_deleted",
        "session_closed",
    ]
    .iter()
    .map(|reason| {
        scrape.value(&format!(
            r#"palisade_lock_lease_losses_total{{reason="{reason}"}}"#
        ))
    })
    .sum();
    assert_eq!(total, 1.0);
}

#[tokio::test]
async fn a_busy_refusal_is_counted() {
    let metrics = LockMetrics::default();
    let scrape = Scrape::of(&metrics);
    let service = EmbeddedLockClient::new();
    let holder = Metered::new(
        service.session(SessionOptions::default()).unwrap(),
        metrics.clone(),
    );
    let waiters = Metered::new(
        service
            .session(SessionOptions::default().with_max_waiters(1))
            .unwrap(),
        metrics,
    );
    let held = holder.acquire(&name("a"), Mode::Exclusive).await.unwrap();
    let first = {
        let waiters = waiters.clone();
        tokio::spawn(async move { waiters.acquire(&name("a"), Mode::Exclusive).await })
    };
    scrape
        .wait_for(r#"palisade_lock_waits_total{mode="exclusive"}"#, 1.0)
        .await;
    let second = waiters.acquire(&name("a"), Mode::Exclusive).await;
    assert!(matches!(second, Err(LockError::Busy { .. })), "{second:?}");
    assert_eq!(scrape.value("palisade_lock_busy_refusals_total"), 1.0);
    assert_eq!(
        scrape.value(r#"palisade_lock_acquires_total{mode="exclusive",outcome="busy"}"#),
        1.0
    );
    held.release().await.unwrap();
    let granted = tokio::time::timeout(WAIT, first)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    granted.release().await.unwrap();
}

#[test]
fn the_exported_names_are_the_documented_ones() {
    let names = LockMetrics::exported_names();
    for name in [
        "palisade_lock_acquire_duration_seconds",
        "palisade_lock_acquires_total",
        "palisade_lock_waiting",
        "palisade_lock_waits_total",
        "palisade_lock_handoffs_total",
        "palisade_lock_lease_losses_total",
        "palisade_lock_regressions_refused_total",
        "palisade_lock_busy_refusals_total",
    ] {
        assert!(names.contains(&name.to_owned()), "{name} in {names:?}");
    }
    assert_eq!(names.len(), 8);
}
