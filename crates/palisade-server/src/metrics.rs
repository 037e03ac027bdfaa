//! Prometheus metrics through the Prometheus project's own client,
//! `prometheus-client`: one registry per server, rendered as OpenMetrics
//! text on `/metrics`.
//!
//! Every label value is known in advance (the ops, the error codes, the
//! ways a connection ends), and every series is created at start-up, so a
//! scrape shows a zero rather than nothing: an alert on `increase(...)`
//! fires on the first refusal, not only on the second.

use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use palisade_store::FlushStats;
use palisade_wire::{ErrorBody, Operation};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric as _};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge as PromGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Every error `code` the server answers with (the wire crate's
/// [`ErrorBody::examples`], one per code), then `other` for a code this
/// list does not know, so the label set stays bounded.
pub(crate) static CODES: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    ErrorBody::examples()
        .iter()
        .map(ErrorBody::code)
        .chain(["other"])
        .collect()
});

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// The content type of [`Metrics::render`]'s text.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

fn latency_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}
/// How a connection ended, for `palisade_connections_closed_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnectionEnd {
    /// The client or the server closed it between requests (or on
    /// shutdown), or the client vanished mid-request.
    Closed,
    /// The header time limit (slowloris, or an idle keep-alive).
    HeaderTimeout,
    /// A request line or header too large or too many headers (431).
    HeaderTooLarge,
    /// Not HTTP/1.1 (400 from hyper).
    BadRequest,
    /// The TLS handshake failed or timed out (a plain-HTTP client on the
    /// TLS port, a client that does not trust the certificate).
    TlsHandshakeFailed,
    /// Any other I/O error.
    IoError,
    /// Shed at the connection bound to admit a new connection: it was
    /// outside a request and had been so the longest.
    Shed,
}

impl ConnectionEnd {
    const ALL: [ConnectionEnd; 7] = [
        ConnectionEnd::Closed,
        ConnectionEnd::HeaderTimeout,
        ConnectionEnd::HeaderTooLarge,
        ConnectionEnd::BadRequest,
        ConnectionEnd::TlsHandshakeFailed,
        ConnectionEnd::IoError,
        ConnectionEnd::Shed,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ConnectionEnd::Closed => "closed",
            ConnectionEnd::HeaderTimeout => "header_timeout",
            ConnectionEnd::HeaderTooLarge => "header_too_large",
            ConnectionEnd::BadRequest => "bad_request",
            ConnectionEnd::TlsHandshakeFailed => "tls_handshake_failed",
            ConnectionEnd::IoError => "io_error",
            ConnectionEnd::Shed => "shed",
        }
    }
}

/// A gauge that goes up when something opens and down when its
/// [`OpenGauge`] guard drops, so no early return can leak a count.
#[derive(Debug, Default, Clone)]
pub(crate) struct Gauge(PromGauge);

/// Holds one unit of a [`Gauge`] until dropped.
#[derive(Debug)]
pub(crate) struct OpenGauge(PromGauge);

impl Gauge {
    pub(crate) fn open(&self) -> OpenGauge {
        self.0.inc();
        OpenGauge(self.0.clone())
    }
}

impl Drop for OpenGauge {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The store's flush counters, read from the store at each scrape (they
/// live in the store's committer, not here) and handed to the registry as
/// constant counters.
#[derive(Debug, Default)]
struct FlushCollector(Mutex<FlushStats>);

impl Collector for FlushCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let stats = *self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for (name, help, value) in [
            (
                "palisade_store_flushes",
                "Group-commit flushes completed",
                stats.flushes,
            ),
            (
                "palisade_store_flush_tickets",
                "Responses that waited for a flush",
                stats.tickets,
            ),
            (
                "palisade_store_background_syncs",
                "Interval syncs completed (buffered mode)",
                stats.background_syncs,
            ),
            (
                "palisade_store_checkpoints",
                "Checkpoints completed (flushed mode: the store's files synced, a group log segment removed)",
                stats.checkpoints,
            ),
        ] {
            let counter = ConstCounter::new(value);
            let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric)?;
        }
        Ok(())
    }
}

/// The server's metrics and the registry that renders them.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    accepted: Family<OpLabels, Counter>,
    rejected: Family<ReasonLabels, Counter>,
    latency: Family<OpLabels, Histogram, fn() -> Histogram>,
    /// Each op's series of `accepted` and `latency`, by `op as usize`:
    /// counted without a lookup in the families on every request.
    by_op: Vec<(Counter, Histogram)>,
    /// Connections being served (accepted and not yet closed).
    pub(crate) open_connections: Gauge,
    /// `/v1/locks/...` requests being handled.
    pub(crate) in_flight: Gauge,
    connections_closed: Family<ReasonLabels, Counter>,
    flush: Arc<FlushCollector>,
}

impl Default for Metrics {
    fn default() -> Self {
        let metrics = Metrics {
            registry: Registry::default(),
            accepted: Family::default(),
            rejected: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            by_op: Vec::new(),
            open_connections: Gauge::default(),
            in_flight: Gauge::default(),
            connections_closed: Family::default(),
            flush: Arc::default(),
        };
        metrics.register()
    }
}

impl Metrics {
    /// Registers every metric and creates every series at zero.
    fn register(mut self) -> Self {
        self.by_op = Operation::ALL
            .iter()
            .map(|op| {
                let labels = OpLabels { op: op.as_str() };
                (
                    self.accepted.get_or_create(&labels).clone(),
                    self.latency.get_or_create(&labels).clone(),
                )
            })
            .collect();
        for &reason in CODES.iter() {
            let _ = self.rejected.get_or_create(&ReasonLabels { reason });
        }
        for end in ConnectionEnd::ALL {
            let _ = self.connections_closed.get_or_create(&ReasonLabels {
                reason: end.as_str(),
            });
        }
        let registry = &mut self.registry;
        registry.register(
            "palisade_requests_accepted",
            "Requests answered with 2xx, by op",
            self.accepted.clone(),
        );
        registry.register(
            "palisade_requests_rejected",
            "Requests answered with an error, by code",
            self.rejected.clone(),
        );
        registry.register(
            "palisade_request_duration_seconds",
            "Time from request to response, by op",
            self.latency.clone(),
        );
        registry.register(
            "palisade_open_connections",
            "Connections being served",
            self.open_connections.0.clone(),
        );
        registry.register(
            "palisade_requests_in_flight",
            "Lock requests being handled (bounded by --max-in-flight)",
            self.in_flight.0.clone(),
        );
        registry.register(
            "palisade_connections_closed",
            "Connections closed, by how they ended",
            self.connections_closed.clone(),
        );
        registry.register_collector(Box::new(Arc::clone(&self.flush)));
        self
    }

    pub(crate) fn connection_closed(&self, end: ConnectionEnd) {
        self.connections_closed
            .get_or_create(&ReasonLabels {
                reason: end.as_str(),
            })
            .inc();
    }

    pub(crate) fn accepted(&self, op: Operation) {
        self.by_op[op as usize].0.inc();
    }

    /// Counts a refusal under its code; a code missing from [`CODES`]
    /// counts as `other`, so the label set stays bounded.
    pub(crate) fn rejected(&self, code: &str) {
        let reason = CODES
            .iter()
            .find(|known| **known == code)
            .copied()
            .unwrap_or("other");
        self.rejected.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub(crate) fn observe(&self, op: Operation, elapsed: Duration) {
        self.by_op[op as usize].1.observe(elapsed.as_secs_f64());
    }

    /// The OpenMetrics text exposition ([`CONTENT_TYPE`]), with the
    /// store's flush counters as of `flush`.
    pub(crate) fn render(&self, flush: FlushStats) -> String {
        *self.flush.0.lock().unwrap_or_else(PoisonError::into_inner) = flush;
        let mut out = String::with_capacity(8 * 1024);
        // Writing into a String cannot fail; an encoder error would be a
        // bug in a label value, and a partial page is still worth serving.
        if let Err(error) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(%error, "encoding the metrics failed");
        }
        out
    }
}

/// The name of every sample family `/metrics` exports, as a query names
/// it (`palisade_requests_accepted_total`, `palisade_open_connections`):
/// read from a rendered page, so it cannot drift from what is served.
/// Histograms are named without their `_bucket`/`_sum`/`_count` suffixes.
pub fn exported_metric_names() -> Vec<String> {
    let page = Metrics::default().render(FlushStats::default());
    page.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| {
            let (name, kind) = rest.split_once(' ')?;
            Some(match kind {
                "counter" => format!("{name}_total"),
                _ => name.to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_is_counted_under_its_own_label() {
        let metrics = Metrics::default();
        for (times, op) in Operation::ALL.into_iter().enumerate() {
            for _ in 0..=times {
                metrics.accepted(op);
                metrics.observe(op, Duration::from_millis(1));
            }
        }
        let text = metrics.render(FlushStats::default());
        for (times, op) in Operation::ALL.into_iter().enumerate() {
            let (op, n) = (op.as_str(), times + 1);
            for series in [
                format!("palisade_requests_accepted_total{{op=\"{op}\"}} {n}\n"),
                format!("palisade_request_duration_seconds_count{{op=\"{op}\"}} {n}\n"),
            ] {
                assert!(text.contains(&series), "no {series:?} in:\n{text}");
            }
        }
    }

    #[test]
    fn render_counts_and_buckets() {
        let metrics = Metrics::default();
        metrics.accepted(Operation::Put);
        metrics.accepted(Operation::Put);
        metrics.rejected("stale");
        metrics.rejected("no such code");
        metrics.observe(Operation::Put, Duration::from_micros(300));
        metrics.observe(Operation::Put, Duration::from_secs(20));
        let text = metrics.render(FlushStats::default());
        assert!(text.contains("palisade_requests_accepted_total{op=\"put\"} 2\n"));
        assert!(text.contains("palisade_requests_rejected_total{reason=\"stale\"} 1\n"));
        assert!(text.contains("palisade_requests_rejected_total{reason=\"other\"} 1\n"));
        assert!(
            text.contains(
                "palisade_request_duration_seconds_bucket{le=\"0.00025\",op=\"put\"} 0\n"
            )
        );
        assert!(
            text.contains("palisade_request_duration_seconds_bucket{le=\"0.0005\",op=\"put\"} 1\n")
        );
        assert!(
            text.contains("palisade_request_duration_seconds_bucket{le=\"+Inf\",op=\"put\"} 2\n")
        );
        assert!(text.contains("palisade_request_duration_seconds_count{op=\"put\"} 2\n"));
        assert!(
            text.ends_with("# EOF\n"),
            "OpenMetrics text ends with # EOF"
        );
    }

    #[test]
    fn exported_names_are_those_on_the_page() {
        let names = exported_metric_names();
        assert!(names.contains(&"palisade_requests_accepted_total".to_owned()));
        assert!(names.contains(&"palisade_request_duration_seconds".to_owned()));
        assert!(names.contains(&"palisade_store_background_syncs_total".to_owned()));
        assert!(names.contains(&"palisade_store_checkpoints_total".to_owned()));
        assert_eq!(names.len(), 10, "{names:?}");
    }

    #[test]
    fn store_flush_counters_are_read_at_each_scrape() {
        let metrics = Metrics::default();
        let first = metrics.render(FlushStats {
            flushes: 3,
            tickets: 7,
            background_syncs: 0,
            checkpoints: 1,
        });
        assert!(
            first.contains("palisade_store_flushes_total 3\n"),
            "{first}"
        );
        assert!(first.contains("palisade_store_flush_tickets_total 7\n"));
        assert!(first.contains("palisade_store_background_syncs_total 0\n"));
        assert!(first.contains("palisade_store_checkpoints_total 1\n"));
        let second = metrics.render(FlushStats {
            flushes: 4,
            tickets: 9,
            background_syncs: 2,
            checkpoints: 1,
        });
        assert!(second.contains("palisade_store_flushes_total 4\n"));
        assert!(second.contains("palisade_store_background_syncs_total 2\n"));
    }

    #[test]
    fn gauges_follow_their_guards_and_connection_ends_are_counted() {
        let metrics = Metrics::default();
        let first = metrics.in_flight.open();
        let second = metrics.in_flight.open();
        let connection = metrics.open_connections.open();
        metrics.connection_closed(ConnectionEnd::HeaderTimeout);
        let text = metrics.render(FlushStats::default());
        assert!(text.contains("palisade_requests_in_flight 2\n"), "{text}");
        assert!(text.contains("palisade_open_connections 1\n"));
        assert!(text.contains("palisade_connections_closed_total{reason=\"header_timeout\"} 1\n"));
        assert!(text.contains("palisade_connections_closed_total{reason=\"closed\"} 0\n"));
        drop((first, second, connection));
        let text = metrics.render(FlushStats::default());
        assert!(text.contains("palisade_requests_in_flight 0\n"));
        assert!(text.contains("palisade_open_connections 0\n"));
        for code in [
            "unauthenticated",
            "forbidden",
            "unsigned",
            "raise_too_large",
            "overloaded",
        ] {
            assert!(text.contains(&format!("reason=\"{code}\"}} 0\n")), "{code}");
        }
    }
}
