//! Prometheus metrics, hand-rolled: fixed label sets, lock-free counters.
//!
//! Every label value is known in advance (the ops and the error codes), so
//! each series is one atomic in an array and a scrape renders them as text.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use palisade_store::FlushStats;

/// The request kinds that get their own `op` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    Get,
    Put,
    Delete,
    Cas,
    Batch,
    Marks,
}

impl OpKind {
    const ALL: [OpKind; 6] = [
        OpKind::Get,
        OpKind::Put,
        OpKind::Delete,
        OpKind::Cas,
        OpKind::Batch,
        OpKind::Marks,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            OpKind::Get => "get",
            OpKind::Put => "put",
            OpKind::Delete => "delete",
            OpKind::Cas => "cas",
            OpKind::Batch => "batch",
            OpKind::Marks => "marks",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Every error `code` the server answers with (docs/http-api.md).
pub(crate) const CODES: [&str; 28] = [
    "unauthenticated",
    "forbidden",
    "unsigned",
    "unknown_key",
    "bad_signature",
    "wrong_issuer",
    "raise_too_large",
    "overloaded",
    "body_timeout",
    "missing_sequencer",
    "malformed_sequencer",
    "bad_lock_name",
    "bad_key",
    "bad_request",
    "shared_on_write",
    "not_found",
    "no_route",
    "method_not_allowed",
    "stale",
    "not_held",
    "cas_mismatch",
    "too_large",
    "lock_mismatch",
    "idempotency_key_reused",
    "internal",
    "storage_unavailable",
    "live_check_unavailable",
    "other",
];

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

#[derive(Debug, Default)]
struct Histogram {
    /// Non-cumulative counts per bucket; the last slot is `+Inf`.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
    count: AtomicU64,
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
#[derive(Debug, Default)]
pub(crate) struct Gauge(Arc<AtomicU64>);

/// Holds one unit of a [`Gauge`] until dropped.
#[derive(Debug)]
pub(crate) struct OpenGauge(Arc<AtomicU64>);

impl Gauge {
    pub(crate) fn open(&self) -> OpenGauge {
        self.0.fetch_add(1, Ordering::Relaxed);
        OpenGauge(Arc::clone(&self.0))
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Drop for OpenGauge {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The server's counters.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    accepted: [AtomicU64; OpKind::ALL.len()],
    rejected: [AtomicU64; CODES.len()],
    latency: [Histogram; OpKind::ALL.len()],
    /// Connections being served (accepted and not yet closed).
    pub(crate) open_connections: Gauge,
    /// `/v1/locks/...` requests being handled.
    pub(crate) in_flight: Gauge,
    connections_closed: [AtomicU64; ConnectionEnd::ALL.len()],
}

impl Metrics {
    pub(crate) fn connection_closed(&self, end: ConnectionEnd) {
        self.connections_closed[end as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn accepted(&self, op: OpKind) {
        self.accepted[op.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn rejected(&self, code: &str) {
        let index = CODES
            .iter()
            .position(|c| *c == code)
            .unwrap_or(CODES.len() - 1);
        self.rejected[index].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn observe(&self, op: OpKind, elapsed: Duration) {
        let histogram = &self.latency[op.index()];
        let seconds = elapsed.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BUCKETS.len());
        histogram.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        histogram.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        histogram.count.fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub(crate) fn render(&self, flush: FlushStats) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);

        out.push_str(
            "# HELP palisade_requests_accepted_total Requests answered with 2xx, by op.\n",
        );
        out.push_str("# TYPE palisade_requests_accepted_total counter\n");
        for op in OpKind::ALL {
            let _ = writeln!(
                out,
                "palisade_requests_accepted_total{{op=\"{}\"}} {}",
                op.as_str(),
                load(&self.accepted[op.index()])
            );
        }

        out.push_str(
            "# HELP palisade_requests_rejected_total Requests answered with an error, by code.\n",
        );
        out.push_str("# TYPE palisade_requests_rejected_total counter\n");
        for (index, code) in CODES.iter().enumerate() {
            let _ = writeln!(
                out,
                "palisade_requests_rejected_total{{reason=\"{code}\"}} {}",
                load(&self.rejected[index])
            );
        }

        out.push_str(
            "# HELP palisade_request_duration_seconds Time from request to response, by op.\n",
        );
        out.push_str("# TYPE palisade_request_duration_seconds histogram\n");
        for op in OpKind::ALL {
            let histogram = &self.latency[op.index()];
            let mut cumulative = 0;
            for (index, bound) in BUCKETS.iter().enumerate() {
                cumulative += load(&histogram.buckets[index]);
                let _ = writeln!(
                    out,
                    "palisade_request_duration_seconds_bucket{{op=\"{}\",le=\"{bound}\"}} {cumulative}",
                    op.as_str()
                );
            }
            cumulative += load(&histogram.buckets[BUCKETS.len()]);
            let _ = writeln!(
                out,
                "palisade_request_duration_seconds_bucket{{op=\"{}\",le=\"+Inf\"}} {cumulative}",
                op.as_str()
            );
            let _ = writeln!(
                out,
                "palisade_request_duration_seconds_sum{{op=\"{}\"}} {}",
                op.as_str(),
                load(&histogram.sum_nanos) as f64 / 1e9
            );
            let _ = writeln!(
                out,
                "palisade_request_duration_seconds_count{{op=\"{}\"}} {}",
                op.as_str(),
                load(&histogram.count)
            );
        }

        out.push_str("# HELP palisade_open_connections Connections being served.\n");
        out.push_str("# TYPE palisade_open_connections gauge\n");
        let _ = writeln!(
            out,
            "palisade_open_connections {}",
            self.open_connections.get()
        );
        out.push_str(
            "# HELP palisade_requests_in_flight Lock requests being handled (bounded by --max-in-flight).\n",
        );
        out.push_str("# TYPE palisade_requests_in_flight gauge\n");
        let _ = writeln!(out, "palisade_requests_in_flight {}", self.in_flight.get());
        out.push_str(
            "# HELP palisade_connections_closed_total Connections closed, by how they ended.\n",
        );
        out.push_str("# TYPE palisade_connections_closed_total counter\n");
        for end in ConnectionEnd::ALL {
            let _ = writeln!(
                out,
                "palisade_connections_closed_total{{reason=\"{}\"}} {}",
                end.as_str(),
                load(&self.connections_closed[end as usize])
            );
        }

        out.push_str("# HELP palisade_store_flushes_total Group-commit flushes completed.\n");
        out.push_str("# TYPE palisade_store_flushes_total counter\n");
        let _ = writeln!(out, "palisade_store_flushes_total {}", flush.flushes);
        out.push_str(
            "# HELP palisade_store_flush_tickets_total Responses that waited for a flush.\n",
        );
        out.push_str("# TYPE palisade_store_flush_tickets_total counter\n");
        let _ = writeln!(out, "palisade_store_flush_tickets_total {}", flush.tickets);
        out.push_str(
            "# HELP palisade_store_background_syncs_total Interval syncs completed (buffered mode).
",
        );
        out.push_str(
            "# TYPE palisade_store_background_syncs_total counter
",
        );
        let _ = writeln!(
            out,
            "palisade_store_background_syncs_total {}",
            flush.background_syncs
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_counts_and_buckets() {
        let metrics = Metrics::default();
        metrics.accepted(OpKind::Put);
        metrics.accepted(OpKind::Put);
        metrics.rejected("stale");
        metrics.rejected("no such code");
        metrics.observe(OpKind::Put, Duration::from_micros(300));
        metrics.observe(OpKind::Put, Duration::from_secs(20));
        let text = metrics.render(FlushStats::default());
        assert!(text.contains("palisade_requests_accepted_total{op=\"put\"} 2\n"));
        assert!(text.contains("palisade_requests_rejected_total{reason=\"stale\"} 1\n"));
        assert!(text.contains("palisade_requests_rejected_total{reason=\"other\"} 1\n"));
        assert!(
            text.contains(
                "palisade_request_duration_seconds_bucket{op=\"put\",le=\"0.00025\"} 0\n"
            )
        );
        assert!(
            text.contains("palisade_request_duration_seconds_bucket{op=\"put\",le=\"0.0005\"} 1\n")
        );
        assert!(
            text.contains("palisade_request_duration_seconds_bucket{op=\"put\",le=\"+Inf\"} 2\n")
        );
        assert!(text.contains("palisade_request_duration_seconds_count{op=\"put\"} 2\n"));
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
