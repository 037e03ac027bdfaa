//! `GET /v1/events` (the recent fencing decisions, then each new one, as
//! server-sent events) and `GET /ui` (the page that shows them).
//!
//! The page is a static, self-contained file: no data, no external assets.
//! Everything it shows comes from `/v1/events`, which needs the same bearer
//! token as the lock routes and shows only the locks that token may use.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use palisade_wire::{Decision, Snapshot};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{OwnedSemaphorePermit, broadcast, watch};

use crate::decisions::MAX_WATCHERS;
use crate::error::ApiError;
use crate::state::AppState;
use crate::tokens::Grant;

/// The dashboard page, compiled into the binary.
const UI_PAGE: &str = include_str!("ui.html");

/// Inline script and style only, data only from this server, no framing:
/// the page needs nothing else.
const UI_CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// How often an idle event stream sends a comment, so proxies keep it open
/// and a dead client is noticed.
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// `GET /ui`.
#[cfg_attr(feature = "openapi", utoipa::path(
    get,
    path = "/ui",
    tag = "operations",
    responses(
        (status = 200, description = "The live dashboard: a self-contained HTML page that reads `/v1/events` with the token given in the page (or as `#token=...` in its address).", content_type = "text/html", body = String),
        crate::openapi::CommonErrors,
    ),
))]
pub(crate) async fn ui() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, UI_CSP),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        UI_PAGE,
    )
        .into_response()
}

/// `GET /v1/events`.
#[cfg_attr(feature = "openapi", utoipa::path(
    get,
    path = "/v1/events",
    tag = "operations",
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "Server-sent events: first one `snapshot` (a `Snapshot`: the recent decisions and each lock's latest marks), then one `decision` (a `Decision`) per request accepted or refused (`reason` = the refusal's code, or `regression`), and `lagged` (a number) when this stream fell behind and skipped some. Only the locks the token may use.", content_type = "text/event-stream", body = String),
        crate::openapi::EventsErrors,
    ),
))]
pub(crate) async fn events(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let grant = match &state.shared.tokens {
        None => None,
        Some(tokens) => match tokens.authenticate(&headers) {
            Ok(grant) => Some(grant.clone()),
            Err(error) => return error.counted(&state.shared.metrics),
        },
    };
    let Some(permit) = state.shared.decisions.admit_watcher() else {
        return ApiError::overloaded(MAX_WATCHERS).counted(&state.shared.metrics);
    };
    let visible = Visible(grant);
    // Subscribe first: a decision made between the snapshot and the
    // subscription would otherwise be lost.
    let live = state.shared.decisions.subscribe();
    let snapshot = state.shared.decisions.snapshot(|lock| visible.allows(lock));
    let watch = Watch {
        last_seq: snapshot.decisions.last().map_or(0, |d| d.seq),
        snapshot: Some(snapshot),
        live,
        closing: state.shared.decisions.closing(),
        visible,
        _permit: permit,
    };
    let mut response = Sse::new(watch.into_stream())
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    // Tell buffering proxies (nginx) to pass events through at once.
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The locks a watcher may see: all without authentication, else its
/// token's prefixes.
struct Visible(Option<Grant>);

impl Visible {
    fn allows(&self, lock: &str) -> bool {
        self.0.as_ref().is_none_or(|grant| grant.allows_name(lock))
    }
}

/// One open event stream.
struct Watch {
    snapshot: Option<Snapshot>,
    /// The newest decision already sent (in the snapshot or live).
    last_seq: u64,
    live: broadcast::Receiver<Arc<Decision>>,
    closing: watch::Receiver<bool>,
    visible: Visible,
    /// Held while the stream is open: the bound on watchers.
    _permit: OwnedSemaphorePermit,
}

impl Watch {
    fn into_stream(self) -> impl Stream<Item = Result<Event, axum::Error>> + Send {
        futures::stream::unfold(self, |mut watch| async move {
            if let Some(snapshot) = watch.snapshot.take() {
                let event = Event::default().event("snapshot").json_data(&snapshot);
                return Some((event, watch));
            }
            let event = watch.next_event().await?;
            Some((Ok(event), watch))
        })
    }

    /// The next event to send, or `None` when the server shuts down.
    async fn next_event(&mut self) -> Option<Event> {
        loop {
            let received = tokio::select! {
                biased;
                _ = self.closing.wait_for(|closed| *closed) => return None,
                received = self.live.recv() => received,
            };
            match received {
                Ok(decision) => {
                    if decision.seq <= self.last_seq || !self.visible.allows(&decision.lock) {
                        continue;
                    }
                    self.last_seq = decision.seq;
                    match Event::default().event("decision").json_data(&*decision) {
                        Ok(event) => return Some(event),
                        Err(error) => {
                            tracing::error!(%error, "encoding a decision failed");
                            continue;
                        }
                    }
                }
                Err(RecvError::Lagged(skipped)) => {
                    return Some(Event::default().event("lagged").data(skipped.to_string()));
                }
                Err(RecvError::Closed) => return None,
            }
        }
    }
}
