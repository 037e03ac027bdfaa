//! Lock-side metrics for any Palisade lock backend, through the Prometheus
//! project's Rust client (`prometheus-client`).
//!
//! Wrap a backend's session in [`Metered`] and it publishes, into a
//! [`LockMetrics`] that a service registers in its own
//! [`Registry`](prometheus_client::registry::Registry):
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `palisade_lock_acquire_duration_seconds` | histogram | `mode`, `outcome` | time from asking to being granted (or refused) |
//! | `palisade_lock_acquires_total` | counter | `mode`, `outcome` | acquires, by outcome: `acquired` or the error's kind |
//! | `palisade_lock_waiting` | gauge | | acquires waiting for the lock now |
//! | `palisade_lock_waits_total` | counter | `mode` | acquires that could not be granted at once and queued |
//! | `palisade_lock_handoffs_total` | counter | `mode` | queued acquires later granted: the lock passed from a holder to a waiter |
//! | `palisade_lock_lease_losses_total` | counter | `reason` | holds whose lease was lost (`expired`, `keepalive_failed`, `revoked`, `key_deleted`, `session_closed`) |
//! | `palisade_lock_regressions_refused_total` | counter | | grants refused because the service's generation went below the known floor |
//! | `palisade_lock_busy_refusals_total` | counter | | acquires refused at once: too many waiters in this process |
//!
//! ```
//! use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
//! use palisade_lock_embedded::EmbeddedLockClient;
//! use palisade_metrics::{LockMetrics, Metered};
//! use prometheus_client::registry::Registry;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let metrics = LockMetrics::default();
//! let mut registry = Registry::default();
//! metrics.register(&mut registry);
//!
//! let service = EmbeddedLockClient::new();
//! let locks = Metered::new(service.session(SessionOptions::default())?, metrics.clone());
//! let guard = locks.acquire(&LockName::new("orders/42")?, Mode::Exclusive).await?;
//! guard.release().await?;
//!
//! let mut text = String::new();
//! prometheus_client::encoding::text::encode(&mut text, &registry)?;
//! assert!(text.contains(r#"palisade_lock_acquires_total{mode="exclusive",outcome="acquired"} 1"#));
//! # Ok(())
//! # }
//! ```
//!
//! Waits and hand-offs are seen from outside the backend: [`Metered`]
//! first asks for the lock without queueing ([`Lock::try_acquire`](palisade_core::Lock::try_acquire), which
//! never jumps the queue), and only when that fails queues with
//! [`Lock::acquire`](palisade_core::Lock::acquire), counting a wait, then a hand-off when it is granted.

mod metered;
mod metrics;

pub use metered::{Metered, MeteredGuard};
pub use metrics::LockMetrics;
