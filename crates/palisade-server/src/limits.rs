//! The limits that keep one slow, huge or greedy client from starving the
//! others: time limits on headers and bodies, bounds on connections and on
//! requests in flight, and bounds on header size.

use std::time::Duration;

/// Connection and request limits. The body size limit is separate
/// ([`AppState::with_max_body_bytes`](crate::AppState::with_max_body_bytes)),
/// as it was before these limits existed.
///
/// Each limit answers one way a client can hold a resource others need:
///
/// | client | resource held | bounded by |
/// |---|---|---|
/// | sends its headers a byte at a time (slowloris) | a connection | `header_read_timeout` |
/// | opens many connections | connections, file descriptors | `max_connections` (and shedding) |
/// | sends its body a byte at a time | a request slot | `body_read_timeout` |
/// | sends many requests at once | request slots, the store's queue | `max_in_flight` |
/// | sends huge or countless headers | memory | `max_header_bytes`, `max_headers` |
/// | (a stalled store or lock service) | a request slot, a connection | `request_timeout` |
///
/// ```
/// use std::time::Duration;
/// use palisade_server::ServerLimits;
///
/// let mut limits = ServerLimits::default();
/// limits.header_read_timeout = Duration::from_secs(2);
/// assert_eq!(limits.max_connections, 1024);
/// assert!(limits.validate().is_ok());
/// limits.max_in_flight = 0;
/// assert!(limits.validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerLimits {
    /// How long a client may take to send a request's line and headers,
    /// counted from the moment the server starts waiting for them. A
    /// connection that has not sent a whole header by then is closed
    /// without an answer. An idle keep-alive connection waits for its next
    /// request's headers, so it is closed after this long too: this is
    /// also the keep-alive idle timeout. The TLS handshake gets the same
    /// time limit.
    pub header_read_timeout: Duration,
    /// How long a request's body may take to arrive, counted from the
    /// moment the handler starts reading it (after the headers, the token
    /// and the sequencer were checked). Past it the request is answered
    /// `408 body_timeout` and the connection closed.
    pub body_read_timeout: Duration,
    /// How long the server waits on its own dependencies (the store, the
    /// lock service's live check) for one request, counted from the
    /// moment the request, its body included, is in hand. Past it the
    /// request is answered `503 deadline_exceeded`, naming what did not
    /// answer. A write already handed to the store may still be applied
    /// after that answer (the client retries with its idempotency key),
    /// so it is an answer, not a cancellation.
    pub request_timeout: Duration,
    /// The most connections served at once. At the bound a new
    /// connection is still accepted, in the place of the connection that
    /// has been outside a request the longest: first those that never
    /// completed a request (a slowloris), oldest first, then idle
    /// keep-alive ones, least recently used first. That connection is
    /// closed ("shed"). A connection inside a request is never shed; if
    /// every one is, the new connection waits up to `header_read_timeout`
    /// for a place and is then closed unanswered.
    pub max_connections: usize,
    /// The most `/v1/locks/...` requests being handled at once. One more
    /// is refused at once with `503 overloaded` (and `retry-after: 1`):
    /// it does not wait in a queue that could grow without bound.
    /// `/healthz` and `/metrics` are not counted, so a probe still gets
    /// through an overload.
    pub max_in_flight: usize,
    /// The largest request line plus headers, in bytes. Larger gets `431`
    /// and the connection is closed.
    pub max_header_bytes: usize,
    /// The most header fields in one request. More gets `431`.
    pub max_headers: usize,
}

impl ServerLimits {
    /// The smallest accepted `max_header_bytes`: a sequencer alone can be
    /// 4 KiB.
    pub const MIN_HEADER_BYTES: usize = 8 * 1024;

    /// The default request deadline: long enough for a fsync under load
    /// and a live check's own 5 s bound, short enough that a client's own
    /// timeout (the client library's is 30 s) meets an answer, not a
    /// silence.
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

    /// Checks that every limit can be met by an honest client.
    pub fn validate(&self) -> Result<(), crate::ServerError> {
        let fail = |message: &str| Err(crate::ServerError::Config(message.to_owned()));
        if self.header_read_timeout.is_zero() {
            return fail("--header-read-timeout-ms must be positive");
        }
        if self.body_read_timeout.is_zero() {
            return fail("--body-read-timeout-ms must be positive");
        }
        if self.request_timeout.is_zero() {
            return fail("--request-timeout must be positive");
        }
        if self.max_connections == 0 {
            return fail("--max-connections must be positive");
        }
        if self.max_in_flight == 0 {
            return fail("--max-in-flight must be positive");
        }
        if self.max_headers == 0 {
            return fail("--max-headers must be positive");
        }
        if self.max_header_bytes < Self::MIN_HEADER_BYTES {
            return fail("--max-header-bytes must be at least 8192");
        }
        Ok(())
    }

    /// hyper's read buffer: room for the largest header plus some body.
    /// hyper answers `431` when a header does not fit, so this is also a
    /// bound on the memory one connection that never finishes its header
    /// can hold.
    pub(crate) fn read_buffer_bytes(&self) -> usize {
        self.max_header_bytes.saturating_add(8 * 1024)
    }
}

impl Default for ServerLimits {
    /// Header timeout 10 s, body timeout 30 s, request deadline 10 s, 1024
    /// connections, 256 requests in flight, 16 KiB of headers, 100 header
    /// fields.
    fn default() -> Self {
        ServerLimits {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            request_timeout: ServerLimits::DEFAULT_REQUEST_TIMEOUT,
            max_connections: 1024,
            max_in_flight: 256,
            max_header_bytes: 16 * 1024,
            max_headers: 100,
        }
    }
}
