//! The router and its handlers. docs/http-api.md is the contract; every
//! route, header, status and `code` there is implemented here.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes, HttpBody as _};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, get, on};
use palisade_core::{Liveness, LockName, Mode, Sequencer, percent_decode};
use palisade_store::{Applied, Marks, Op, Refused, RequestId};
use palisade_wire::{
    BatchRequest, CasRequest, Dependency, EngineBody, ErrorKind, HealthAnswer, HealthStatus,
    MarksAnswer, Operation, WriteAnswer,
};
use tracing::Instrument as _;

use crate::deadline::Deadline;
use crate::decisions::Outcome;
use crate::error::ApiError;
use crate::sequencer_policy::{check_raise, warn_raise_too_large};
use crate::state::AppState;
use crate::tokens::{Grant, forbidden};

/// The header carrying `H_excl` on every 2xx of a lock route.
pub const MARK_EXCLUSIVE_HEADER: &str = "palisade-mark-exclusive";
/// The header carrying `H_shared` on every 2xx of a lock route.
pub const MARK_SHARED_HEADER: &str = "palisade-mark-shared";
/// Present (`true`) on the answer to a replayed idempotent request.
pub const REPLAYED_HEADER: &str = "palisade-replayed";
/// The idempotency key of a write.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// How long the server waits for a live check before refusing with 503.
const LIVE_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// The whole HTTP API as a router, ready for `axum::serve` or for
/// `tower::ServiceExt::oneshot` in tests.
pub fn app(state: AppState) -> Router {
    LockRoute::register(Router::new())
        .route("/healthz", get(health))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi_json))
        .route("/v1/events", get(crate::events::events))
        .route("/ui", get(crate::events::ui))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            refuse_transfer_codings,
        ))
        .with_state(state)
}

/// Answers 501 `unsupported_transfer_coding` (RFC 9112 §6.1: a server
/// that receives a transfer coding it does not understand should answer
/// 501) before any route reads the body, when the body is framed with
/// anything but HTTP/1.1's own plain `chunked`: `gzip, chunked` would
/// otherwise store the still-compressed bytes as the value. hyper has
/// already answered 400 when `chunked` is not the last coding (RFC 9112
/// §6.3), so what reaches here is `chunked` after other codings, or
/// twice.
async fn refuse_transfer_codings(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    match refused_transfer_coding(&state, request.headers()) {
        Some(refused) => refused,
        None => next.run(request).await,
    }
}

/// The 501 of [`refuse_transfer_codings`], when `headers` frame the body
/// with anything but plain `chunked`.
fn refused_transfer_coding(state: &AppState, headers: &HeaderMap) -> Option<Response> {
    let mut values = headers.get_all(header::TRANSFER_ENCODING).iter();
    let first = values.next()?;
    let codings: Vec<String> = std::iter::once(first)
        .chain(values)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        .collect();
    let codings = codings.join(", ");
    let mut listed = codings.split(',').map(str::trim);
    if let (Some(only), None) = (listed.next(), listed.next())
        && only.eq_ignore_ascii_case("chunked")
    {
        return None;
    }
    tracing::info!(
        transfer_encoding = %codings.escape_debug(),
        "refused: a transfer coding other than chunked"
    );
    Some(ApiError::unsupported_transfer_coding(&clip(&codings)).counted(&state.shared.metrics))
}

/// A lock route, matched without the router: the way in of every fenced
/// request. The router's matching, its middleware and its extractors'
/// copies of the URI and headers cost about a tenth of a durable write's
/// CPU (docs/benchmarks.md, "A lean way in"). Only requests the router
/// routes to the same handler are claimed (a method and a path of
/// non-empty segments exactly as [`LockRoute::ALL`] has them, the table
/// the router's lock routes are made from); everything else, `HEAD`
/// included, goes to the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockRoute {
    GetKey,
    PutKey,
    DeleteKey,
    Cas,
    Batch,
    Marks,
}

impl LockRoute {
    /// Every lock route, written once: its method, the path segment after
    /// the lock's (`/v1/locks/{lock}/<kind>`), and whether a key segment
    /// follows. [`LockRoute::register`] gives them to the router and
    /// [`LockRoute::of`] matches them without it.
    const ALL: [(LockRoute, Method, &'static str, bool); 6] = [
        (LockRoute::GetKey, Method::GET, "keys", true),
        (LockRoute::PutKey, Method::PUT, "keys", true),
        (LockRoute::DeleteKey, Method::DELETE, "keys", true),
        (LockRoute::Cas, Method::POST, "cas", true),
        (LockRoute::Batch, Method::POST, "batch", false),
        (LockRoute::Marks, Method::GET, "marks", false),
    ];

    /// The route of a request, if it is a lock route's shape: a method and
    /// a path of non-empty segments exactly as [`LockRoute::ALL`] has them.
    pub(crate) fn of(method: &Method, path: &str) -> Option<LockRoute> {
        let rest = path.strip_prefix("/v1/locks/")?;
        let (lock, rest) = rest.split_once('/')?;
        if lock.is_empty() {
            return None;
        }
        let (kind, keyed) = match rest.split_once('/') {
            Some((kind, key)) if !key.is_empty() && !key.contains('/') => (kind, true),
            Some(_) => return None,
            None => (rest, false),
        };
        Self::ALL
            .iter()
            .find(|(_, m, k, with_key)| m == method && *k == kind && *with_key == keyed)
            .map(|(route, ..)| *route)
    }

    /// Adds every lock route to `router`, each path once with all its
    /// methods, each served by [`LockRoute::serve`]: the router and the
    /// connection's direct way in ([`LockRoute::serve_without_router`])
    /// run the same code.
    fn register(router: Router<AppState>) -> Router<AppState> {
        let mut paths: Vec<(String, MethodRouter<AppState>)> = Vec::new();
        for (route, method, kind, keyed) in Self::ALL {
            let path = format!(
                "/v1/locks/{{lock}}/{kind}{}",
                if keyed { "/{key}" } else { "" }
            );
            let Ok(filter) = MethodFilter::try_from(method) else {
                unreachable!("GET, PUT, DELETE and POST are method filters");
            };
            let serve =
                move |State(state): State<AppState>, request: Request| route.serve(state, request);
            match paths.iter_mut().find(|(known, _)| *known == path) {
                Some((_, methods)) => {
                    *methods = std::mem::take(methods).on(filter, serve);
                }
                None => paths.push((path, on(filter, serve))),
            }
        }
        paths.into_iter().fold(router, |router, (path, methods)| {
            router.route(&path, methods)
        })
    }

    /// Serves `request` without the router, as the router would: the
    /// transfer coding checked (the router's middleware does that for
    /// what it routes), then [`LockRoute::serve`].
    pub(crate) async fn serve_without_router(self, state: AppState, request: Request) -> Response {
        match refused_transfer_coding(&state, request.headers()) {
            Some(refused) => refused,
            None => self.serve(state, request).await,
        }
    }

    /// The route's handler, given the request's own URI and headers.
    async fn serve(self, state: AppState, request: Request) -> Response {
        let (parts, body) = request.into_parts();
        let (uri, headers, state) = (parts.uri, parts.headers, State(state));
        let mut response = match self {
            LockRoute::GetKey => get_key(state, uri, headers).await,
            LockRoute::PutKey => put_key(state, uri, headers, body).await,
            LockRoute::DeleteKey => delete_key(state, uri, headers).await,
            LockRoute::Cas => cas_key(state, uri, headers, body).await,
            LockRoute::Batch => batch(state, uri, headers, body).await,
            LockRoute::Marks => marks(state, uri, headers).await,
        };
        // As the router does: an answer of known length says so, rather
        // than going out chunked.
        let length = response.body().size_hint().exact();
        if let Some(length) = length
            && !response.headers().contains_key(header::CONTENT_LENGTH)
        {
            response
                .headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(length));
        }
        response
    }
}

/// At most 64 characters of client text in an answer.
fn clip(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

/// Runs one request's work in a span, and counts and times it: the
/// common frame of every `/v1/locks/...` route. The request first needs a
/// place among those in flight; without one it is refused at once (503
/// `overloaded`) before anything is parsed. Then its bearer token must
/// allow its lock; `work` runs only for a request that has one (or on a
/// server without tokens), and only such a request's decision is recorded
/// in the decision log (`/ui`, `/v1/events`), under its token: a client
/// without a token, or outside its prefixes, is counted and answered, and
/// touches nobody's view.
async fn handle<Work, Answer>(
    state: &AppState,
    op: Operation,
    uri: &Uri,
    headers: &HeaderMap,
    work: Work,
) -> Response
where
    Work: FnOnce(LockName) -> Answer,
    Answer: Future<Output = Result<Answered, ApiError>>,
{
    let started = Instant::now();
    let Some(_in_flight) = state.admit_request() else {
        tracing::debug!(op = op.as_str(), "refused: overloaded");
        return ApiError::overloaded(state.shared.limits.max_in_flight)
            .counted(&state.shared.metrics);
    };
    // At debug level: at the default level (info) a span per request would
    // cost an allocation and a formatted path on every request.
    let span = tracing::debug_span!("request", op = op.as_str(), path = %uri.path());
    let response = match authorized_lock(state, uri, headers) {
        Err(error) => {
            tracing::debug!(op = op.as_str(), code = error.code(), status = %error.status(), "request refused");
            error.counted(&state.shared.metrics)
        }
        Ok((lock, grant)) => {
            let requester = grant.map(|grant| grant.token_id.as_str());
            match work(lock.clone()).instrument(span).await {
                Ok(Answered { response, accepted }) => {
                    state.shared.metrics.accepted(op);
                    if let Some(accepted) = accepted {
                        record_accepted(state, op, requester, accepted, &response);
                    }
                    response
                }
                Err(error) => {
                    tracing::debug!(op = op.as_str(), code = error.code(), status = %error.status(), "request refused");
                    record_refused(state, op, lock, requester, headers, &error);
                    error.counted(&state.shared.metrics)
                }
            }
        }
    };
    state.shared.metrics.observe(op, started.elapsed());
    response
}

/// The generation of the request's sequencer, if it has one that parses.
fn presented_generation(headers: &HeaderMap) -> Option<u64> {
    let text = headers.get(Sequencer::HTTP_HEADER)?.to_str().ok()?;
    Some(text.parse::<Sequencer>().ok()?.generation().get())
}

/// A handler's answer, with the write it made accepted, if it wrote.
struct Answered {
    response: Response,
    accepted: Option<AcceptedWrite>,
}

impl From<Response> for Answered {
    fn from(response: Response) -> Self {
        Answered {
            response,
            accepted: None,
        }
    }
}

/// An accepted write as the decision log records it, handed to `handle`
/// beside the answer: the lock, the generation and the marks are at hand
/// there, so nothing is parsed back from the path, the sequencer header or
/// the mark headers (that cost twice hyper's parsing of the request), and
/// nothing rides in the response's extensions (a map allocated per
/// request; docs/benchmarks.md).
#[derive(Debug)]
struct AcceptedWrite {
    lock: LockName,
    generation: u64,
    marks: Marks,
}

/// Records an accepted write.
fn record_accepted(
    state: &AppState,
    op: Operation,
    requester: Option<&str>,
    accepted: AcceptedWrite,
    response: &Response,
) {
    state.shared.decisions.record(
        requester,
        Outcome {
            lock: accepted.lock.into(),
            op,
            reason: None,
            status: response.status().as_u16(),
            generation: Some(accepted.generation),
            marks: Some(accepted.marks.into()),
        },
    );
}

/// Records a refused write, or a refused read that was fenced (stale or
/// no longer held), of a request whose token allows its lock.
fn record_refused(
    state: &AppState,
    op: Operation,
    lock: LockName,
    requester: Option<&str>,
    headers: &HeaderMap,
    error: &ApiError,
) {
    let kind = error.kind();
    let fenced_read =
        op == Operation::Get && matches!(kind, ErrorKind::Stale(_) | ErrorKind::NotHeld(_));
    if !op.is_write() && !fenced_read {
        return;
    }
    state.shared.decisions.record(
        requester,
        Outcome {
            lock: lock.into(),
            op,
            reason: Some(if kind.is_regression() {
                "regression"
            } else {
                error.code()
            }),
            status: error.status().as_u16(),
            generation: kind.presented().or_else(|| presented_generation(headers)),
            marks: kind.marks(),
        },
    );
}

/// The raw (still percent-encoded) path segments after `/v1/locks/`:
/// `[lock, "keys", key]`, `[lock, "batch"]`, ... The router has already
/// matched the shape, so the positions are known.
fn raw_segment(uri: &Uri, index: usize) -> &str {
    uri.path().split('/').nth(index).unwrap_or_default()
}

/// The path's lock, once the request's bearer token (when the server
/// requires one) is known and allowed that lock, with that token's grant.
/// The token is checked before the path is even decoded: an
/// unauthenticated client learns nothing, not even whether its lock name
/// is valid.
fn authorized_lock<'a>(
    state: &'a AppState,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<(LockName, Option<&'a Grant>), ApiError> {
    let Some(tokens) = &state.shared.tokens else {
        return Ok((path_lock(uri)?, None));
    };
    let grant = tokens.authenticate(headers).inspect_err(|error| {
        tracing::info!(
            target: "palisade_server::auth",
            reason = error.code(),
            "refused: no valid bearer token"
        );
    })?;
    let lock = path_lock(uri)?;
    if !grant.allows(&lock) {
        return Err(forbidden(grant, &lock));
    }
    Ok((lock, Some(grant)))
}

fn path_lock(uri: &Uri) -> Result<LockName, ApiError> {
    let bad = |message: String| ApiError::new(ErrorKind::BadLockName, message);
    let bytes = percent_decode(raw_segment(uri, 3))
        .ok_or_else(|| bad("the lock name's percent-encoding is broken".into()))?;
    let text = String::from_utf8(bytes).map_err(|_| bad("the lock name is not UTF-8".into()))?;
    LockName::new(text).map_err(|e| bad(e.to_string()))
}

fn path_key(uri: &Uri, state: &AppState) -> Result<Vec<u8>, ApiError> {
    let bad = |message: &str| ApiError::new(ErrorKind::BadKey, message);
    let key = percent_decode(raw_segment(uri, 5))
        .ok_or_else(|| bad("the key's percent-encoding is broken"))?;
    if key.is_empty() {
        return Err(bad("keys must not be empty"));
    }
    let max = state.shared.store.config().limits.max_key_bytes;
    if key.len() > max {
        return Err(ApiError::too_large("key", max, Some(key.len())));
    }
    Ok(key)
}

/// The `palisade-sequencer` header, parsed, checked to be for `lock`, and
/// verified (signature and issuer) when the server has keys.
fn sequencer_header(
    state: &AppState,
    headers: &HeaderMap,
    lock: &LockName,
) -> Result<Option<Sequencer>, ApiError> {
    let mut values = headers.get_all(Sequencer::HTTP_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::malformed_sequencer(
            "the palisade-sequencer header appears more than once",
        ));
    }
    let text = value.to_str().map_err(|_| {
        ApiError::malformed_sequencer("the palisade-sequencer header is not visible ASCII")
    })?;
    let sequencer: Sequencer = text
        .parse()
        .map_err(|e| ApiError::malformed_sequencer(format!("malformed sequencer: {e}")))?;
    if sequencer.lock() != lock {
        return Err(Refused::LockMismatch {
            requested: lock.clone(),
            presented: sequencer.lock().clone(),
        }
        .into());
    }
    state.shared.policy.verify(&sequencer)?;
    Ok(Some(sequencer))
}

/// The headers of a write: its sequencer (present, for `lock`, verified,
/// exclusive), then its idempotency key, if any.
fn write_headers(
    state: &AppState,
    headers: &HeaderMap,
    lock: &LockName,
) -> Result<(Sequencer, Option<RequestId>), ApiError> {
    let sequencer = sequencer_header(state, headers, lock)?.ok_or_else(|| {
        ApiError::new(
            ErrorKind::MissingSequencer,
            "writes need a palisade-sequencer header with an exclusive sequencer",
        )
    })?;
    if sequencer.mode() != Mode::Exclusive {
        tracing::info!(
            target: "palisade_server::fence",
            lock = %lock,
            generation = sequencer.generation().get(),
            reason = "shared_on_write",
            "refused"
        );
        return Err(ApiError::from(Refused::SharedOnWrite {
            lock: lock.clone(),
            presented: sequencer.generation(),
        }));
    }
    Ok((sequencer, request_id(headers)?))
}

fn request_id(headers: &HeaderMap) -> Result<Option<RequestId>, ApiError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::bad_request(
            "the idempotency-key header appears more than once",
        ));
    }
    let text = value
        .to_str()
        .map_err(|_| ApiError::bad_request("invalid idempotency key: not visible ASCII"))?;
    RequestId::new(text)
        .map(Some)
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// Reads the whole body, within the body size limit and the body time
/// limit. A declared `content-length` over the limit is refused before a
/// byte is read.
async fn read_body(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    let max = state.shared.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<usize>().ok());
    if let Some(declared) = declared.filter(|declared| *declared > max) {
        return Err(ApiError::too_large("body", max, Some(declared)));
    }
    let timeout = state.shared.limits.body_read_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut body = body;
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut received = 0usize;
    loop {
        let next = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx));
        let frame = match tokio::time::timeout_at(deadline, next).await {
            Err(_elapsed) => {
                tracing::info!(
                    received,
                    ?timeout,
                    "refused: the body did not arrive in time"
                );
                return Err(ApiError::body_timeout(timeout));
            }
            Ok(None) => break,
            Ok(Some(Err(error))) => {
                return Err(ApiError::bad_request(format!(
                    "reading the request body failed: {error}"
                )));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        received += data.len();
        if received > max {
            return Err(ApiError::too_large("body", max, None));
        }
        chunks.push(data);
    }
    Ok(match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().expect("one chunk"),
        _ => Bytes::from(chunks.concat()),
    })
}

fn json_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// Chubby's CheckSequencer, when configured: at most
/// [`LIVE_CHECK_TIMEOUT`], and never past the request's deadline.
async fn live_check(
    state: &AppState,
    sequencer: &Sequencer,
    deadline: &Deadline,
) -> Result<(), ApiError> {
    let Some(live_check) = &state.shared.live_check else {
        return Ok(());
    };
    let lock = sequencer.lock();
    let generation = sequencer.generation().get();
    let until = deadline.at_most(LIVE_CHECK_TIMEOUT);
    match tokio::time::timeout_at(until, live_check.check_dyn(sequencer)).await {
        Ok(Ok(Liveness::Held)) => Ok(()),
        Ok(Ok(Liveness::NotHeld)) => {
            tracing::info!(
                target: "palisade_server::fence",
                lock = %lock,
                generation,
                reason = "not_held",
                "refused: the lock service says this sequencer's holder no longer holds the lock"
            );
            Err(Refused::NotHeld {
                lock: lock.clone(),
                presented: sequencer.generation(),
            }
            .into())
        }
        Ok(Err(error)) => {
            tracing::warn!(lock = %lock, generation, %error, "live check failed; refusing");
            Err(ApiError::new(
                ErrorKind::LiveCheckUnavailable,
                format!("the live check could not reach the lock service: {error}"),
            ))
        }
        Err(_elapsed) if deadline.passed() => Err(deadline.exceeded(Dependency::LiveCheck)),
        Err(_elapsed) => {
            tracing::warn!(lock = %lock, generation, "live check timed out; refusing");
            Err(ApiError::new(
                ErrorKind::LiveCheckUnavailable,
                format!("the live check did not answer within {LIVE_CHECK_TIMEOUT:?}"),
            ))
        }
    }
}

fn marks_headers(response: &mut Response, marks: Marks, replayed: bool) {
    let headers = response.headers_mut();
    headers.insert(
        HeaderName::from_static(MARK_EXCLUSIVE_HEADER),
        HeaderValue::from(marks.exclusive),
    );
    headers.insert(
        HeaderName::from_static(MARK_SHARED_HEADER),
        HeaderValue::from(marks.shared),
    );
    if replayed {
        headers.insert(
            HeaderName::from_static(REPLAYED_HEADER),
            HeaderValue::from_static("true"),
        );
    }
}

fn write_response(lock: &LockName, sequencer: &Sequencer, applied: &Applied) -> Answered {
    let mut response = axum::Json(WriteAnswer::new(lock, applied)).into_response();
    marks_headers(&mut response, applied.marks, applied.replayed);
    Answered {
        response,
        accepted: Some(AcceptedWrite {
            lock: lock.clone(),
            generation: sequencer.generation().get(),
            marks: applied.marks,
        }),
    }
}

/// The common path of every write: live check, then the store, which
/// checks the raise cap in the write's own step (one engine round trip),
/// all within the request's deadline (which starts here: the body is in).
async fn apply_write(
    state: &AppState,
    lock: &LockName,
    sequencer: &Sequencer,
    request_id: Option<&RequestId>,
    ops: &[Op],
) -> Result<Answered, ApiError> {
    let deadline = state.deadline();
    live_check(state, sequencer, &deadline).await?;
    let cap = state.shared.policy.raise_cap();
    let write = state
        .shared
        .store
        .submit_capped(sequencer, ops, request_id, cap)?;
    let applied = match deadline.wait(Dependency::Store, write).await?? {
        Ok(applied) => applied,
        Err(refused) => return Err(refusal(state, sequencer, refused, &deadline).await),
    };
    Ok(write_response(lock, sequencer, &applied))
}

/// A store refusal as an answer. A stale refusal is marked as a
/// generation regression when the lock service still grants the presented
/// sequencer *after* the mark that refused it was read: a holder that
/// still holds while a newer generation was honoured is impossible unless
/// the lock service's generations went backwards (lost counter, wiped or
/// restored data). The check before the store is not enough: the lease may
/// have lapsed and a newer holder written in between. Past the deadline
/// the refusal stands as plain stale.
async fn refusal(
    state: &AppState,
    sequencer: &Sequencer,
    mut refused: Refused,
    deadline: &Deadline,
) -> ApiError {
    warn_raise_too_large(sequencer, &refused);
    let Refused::Stale { regression, .. } = &mut refused else {
        return refused.into();
    };
    let Some(live_check) = &state.shared.live_check else {
        return refused.into();
    };
    let until = deadline.at_most(LIVE_CHECK_TIMEOUT);
    match tokio::time::timeout_at(until, live_check.check_dyn(sequencer)).await {
        Ok(Ok(Liveness::Held)) => {
            tracing::warn!(
                target: "palisade_server::fence",
                lock = %sequencer.lock(),
                generation = sequencer.generation().get(),
                reason = "regression",
                "refused: the lock service still grants a generation below the mark; its generations went backwards"
            );
            *regression = true;
        }
        Ok(Ok(Liveness::NotHeld)) | Err(_) => {}
        Ok(Err(cause)) => {
            tracing::debug!(lock = %sequencer.lock(), %cause, "regression check failed; plain stale");
        }
    }
    refused.into()
}

/// `GET /v1/locks/{lock}/keys/{key}`: a key's value.
#[cfg_attr(feature = "openapi", utoipa::path(
    get,
    path = "/v1/locks/{lock}/keys/{key}",
    tag = "keys",
    params(
        crate::openapi::KeyPath,
        ("palisade-sequencer" = Option<String>, Header, description = "The caller's sequencer (`v1;lock=NAME;mode=exclusive|shared;gen=N`, optionally signed); a read may carry one, and is then fenced."),
    ),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "The value's bytes; the marks in the palisade-mark-* headers.", content_type = "application/octet-stream", body = crate::openapi::RawBytes),
        crate::openapi::ReadErrors,
    ),
))]
async fn get_key(State(state): State<AppState>, uri: Uri, headers: HeaderMap) -> Response {
    let (state, uri, headers) = (&state, &uri, &headers);
    handle(
        state,
        Operation::Get,
        uri,
        headers,
        move |lock| async move {
            let key = path_key(uri, state)?;
            let sequencer = sequencer_header(state, headers, &lock)?;
            let deadline = state.deadline();
            if let Some(sequencer) = &sequencer {
                deadline
                    .wait(Dependency::Store, check_raise(state, sequencer))
                    .await??;
                live_check(state, sequencer, &deadline).await?;
            }
            let read = state
                .shared
                .store
                .submit_get(&lock, &key, sequencer.as_ref())?;
            let read = match deadline.wait(Dependency::Store, read).await?? {
                Ok(read) => read,
                Err(refused) => match &sequencer {
                    Some(sequencer) => {
                        return Err(refusal(state, sequencer, refused, &deadline).await);
                    }
                    None => return Err(refused.into()),
                },
            };
            let Some(value) = read.value else {
                return Err(ApiError::not_found(&lock, read.marks));
            };
            let mut response = (
                [(header::CONTENT_TYPE, "application/octet-stream")],
                Body::from(Bytes::from_owner(value)),
            )
                .into_response();
            marks_headers(&mut response, read.marks, false);
            Ok(response.into())
        },
    )
    .await
}

/// `PUT /v1/locks/{lock}/keys/{key}`: store the body as the key's value.
#[cfg_attr(feature = "openapi", utoipa::path(
    put,
    path = "/v1/locks/{lock}/keys/{key}",
    tag = "keys",
    params(
        crate::openapi::KeyPath,
        crate::openapi::WriteHeaders,
    ),
    request_body(content = crate::openapi::RawBytes, content_type = "application/octet-stream", description = "The value's bytes."),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "Applied; the marks are also in the palisade-mark-* headers.", body = WriteAnswer),
        crate::openapi::WriteErrors,
    ),
))]
async fn put_key(
    State(state): State<AppState>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (state, uri, headers) = (&state, &uri, &headers);
    handle(
        state,
        Operation::Put,
        uri,
        headers,
        move |lock| async move {
            let key = path_key(uri, state)?;
            let (sequencer, request_id) = write_headers(state, headers, &lock)?;
            let value = read_body(state, headers, body).await?;
            let ops = [Op::put(key, value)];
            apply_write(state, &lock, &sequencer, request_id.as_ref(), &ops).await
        },
    )
    .await
}

/// `DELETE /v1/locks/{lock}/keys/{key}`.
#[cfg_attr(feature = "openapi", utoipa::path(
    delete,
    path = "/v1/locks/{lock}/keys/{key}",
    tag = "keys",
    params(
        crate::openapi::KeyPath,
        crate::openapi::WriteHeaders,
    ),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "Applied; the marks are also in the palisade-mark-* headers.", body = WriteAnswer),
        crate::openapi::WriteErrors,
    ),
))]
async fn delete_key(State(state): State<AppState>, uri: Uri, headers: HeaderMap) -> Response {
    let (state, uri, headers) = (&state, &uri, &headers);
    handle(
        state,
        Operation::Delete,
        uri,
        headers,
        move |lock| async move {
            let key = path_key(uri, state)?;
            let (sequencer, request_id) = write_headers(state, headers, &lock)?;
            let ops = [Op::delete(key)];
            apply_write(state, &lock, &sequencer, request_id.as_ref(), &ops).await
        },
    )
    .await
}

/// `POST /v1/locks/{lock}/cas/{key}`: compare-and-swap.
#[cfg_attr(feature = "openapi", utoipa::path(
    post,
    path = "/v1/locks/{lock}/cas/{key}",
    tag = "keys",
    params(
        crate::openapi::KeyPath,
        crate::openapi::WriteHeaders,
    ),
    request_body = CasRequest,
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "Applied; the marks are also in the palisade-mark-* headers.", body = WriteAnswer),
        crate::openapi::WriteErrors,
    ),
))]
async fn cas_key(
    State(state): State<AppState>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (state, uri, headers) = (&state, &uri, &headers);
    handle(
        state,
        Operation::Cas,
        uri,
        headers,
        move |lock| async move {
            let key = path_key(uri, state)?;
            let (sequencer, request_id) = write_headers(state, headers, &lock)?;
            let body = read_body(state, headers, body).await?;
            let op = json_body::<CasRequest>(&body)?.into_op(key);
            apply_write(state, &lock, &sequencer, request_id.as_ref(), &[op]).await
        },
    )
    .await
}

/// `POST /v1/locks/{lock}/batch`: several ops, all or none.
#[cfg_attr(feature = "openapi", utoipa::path(
    post,
    path = "/v1/locks/{lock}/batch",
    tag = "keys",
    params(
        crate::openapi::LockPath,
        crate::openapi::WriteHeaders,
    ),
    request_body = BatchRequest,
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "Applied; the marks are also in the palisade-mark-* headers.", body = WriteAnswer),
        crate::openapi::WriteErrors,
    ),
))]
async fn batch(
    State(state): State<AppState>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (state, uri, headers) = (&state, &uri, &headers);
    handle(
        state,
        Operation::Batch,
        uri,
        headers,
        move |lock| async move {
            let (sequencer, request_id) = write_headers(state, headers, &lock)?;
            let body = read_body(state, headers, body).await?;
            let batch = json_body::<BatchRequest>(&body)?;
            let max_ops = state.shared.store.config().limits.max_batch_ops;
            if batch.ops.len() > max_ops {
                return Err(ApiError::too_large(
                    "batch_ops",
                    max_ops,
                    Some(batch.ops.len()),
                ));
            }
            let ops = batch.into_ops();
            apply_write(state, &lock, &sequencer, request_id.as_ref(), &ops).await
        },
    )
    .await
}

/// `GET /v1/locks/{lock}/marks`.
#[cfg_attr(feature = "openapi", utoipa::path(
    get,
    path = "/v1/locks/{lock}/marks",
    tag = "locks",
    params(
        crate::openapi::LockPath,
    ),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "The lock's marks (also in the palisade-mark-* headers).", body = MarksAnswer),
        crate::openapi::MarksErrors,
    ),
))]
async fn marks(State(state): State<AppState>, uri: Uri, headers: HeaderMap) -> Response {
    let state = &state;
    handle(
        state,
        Operation::Marks,
        &uri,
        &headers,
        move |lock| async move {
            let marks = state.shared.store.submit_marks(&lock)?;
            let marks = state.deadline().wait(Dependency::Store, marks).await??;
            let answer = MarksAnswer {
                lock: lock.as_str().to_owned(),
                marks: marks.into(),
            };
            let mut response = axum::Json(answer).into_response();
            marks_headers(&mut response, marks, false);
            Ok(response.into())
        },
    )
    .await
}

/// `GET /healthz`.
#[cfg_attr(feature = "openapi", utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses(
        (status = 200, description = "The store accepts requests.", body = HealthAnswer),
        crate::openapi::HealthErrors,
    ),
))]
async fn health(State(state): State<AppState>) -> Response {
    let health = state
        .deadline()
        .wait(Dependency::Store, state.shared.store.health());
    match health.await {
        Ok(Ok(())) => {
            // The engine's location (a directory, database or endpoints)
            // stays in the start-up log: this endpoint needs no token.
            let engine = state.shared.store.engine_info();
            axum::Json(HealthAnswer {
                status: HealthStatus::Ok,
                durability: state.shared.store.durability().name().to_owned(),
                engine: EngineBody {
                    name: engine.name.to_owned(),
                    durability: engine.durability,
                },
            })
            .into_response()
        }
        Ok(Err(error)) => ApiError::from(error).counted(&state.shared.metrics),
        Err(error) => error.counted(&state.shared.metrics),
    }
}

/// `GET /metrics`.
#[cfg_attr(feature = "openapi", utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses(
        (status = 200, description = "The metrics, as OpenMetrics text.", content_type = "application/openmetrics-text", body = String),
        crate::openapi::CommonErrors,
    ),
))]
async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        state
            .shared
            .metrics
            .render(state.shared.store.flush_stats()),
    )
        .into_response()
}

/// `GET /openapi.json`: this API's OpenAPI 3.1 document.
#[cfg_attr(feature = "openapi", utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses(
        (status = 200, description = "The OpenAPI document (also committed as docs/openapi.json).", content_type = "application/json", body = Object),
        crate::openapi::CommonErrors,
    ),
))]
async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::OPENAPI_JSON,
    )
        .into_response()
}

async fn no_route(State(state): State<AppState>, uri: Uri) -> Response {
    ApiError::new(ErrorKind::NoRoute, format!("no route for {}", uri.path()))
        .counted(&state.shared.metrics)
}

async fn method_not_allowed(State(state): State<AppState>) -> Response {
    ApiError::new(
        ErrorKind::MethodNotAllowed,
        "this route does not support that method",
    )
    .counted(&state.shared.metrics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_lock_routes_shapes_are_claimed() {
        let claimed = [
            (Method::GET, "/v1/locks/a/keys/k", LockRoute::GetKey),
            (Method::PUT, "/v1/locks/a/keys/k%2Fk", LockRoute::PutKey),
            (Method::DELETE, "/v1/locks/a/keys/k", LockRoute::DeleteKey),
            (Method::POST, "/v1/locks/a/cas/k", LockRoute::Cas),
            (Method::POST, "/v1/locks/a/batch", LockRoute::Batch),
            (Method::GET, "/v1/locks/a/marks", LockRoute::Marks),
        ];
        for (method, path, route) in claimed {
            assert_eq!(LockRoute::of(&method, path), Some(route), "{method} {path}");
        }
        // Left to the router: its 404s and 405s (with `allow`), `HEAD`,
        // and any shape it does not route to these handlers.
        let left = [
            (Method::HEAD, "/v1/locks/a/keys/k"),
            (Method::POST, "/v1/locks/a/keys/k"),
            (Method::GET, "/v1/locks/a/batch"),
            (Method::PUT, "/v1/locks/a/marks"),
            (Method::GET, "/v1/locks/a/keys/"),
            (Method::GET, "/v1/locks/a/keys/k/"),
            (Method::GET, "/v1/locks/a/keys/k/more"),
            (Method::GET, "/v1/locks//keys/k"),
            (Method::GET, "/v1/locks/a/keys"),
            (Method::GET, "/v1/locks/a/marks/"),
            (Method::GET, "/v1/locks/a"),
            (Method::GET, "/v1/locks/"),
            (Method::GET, "/v1/locks/a/other/k"),
            (Method::GET, "/healthz"),
        ];
        for (method, path) in left {
            assert_eq!(LockRoute::of(&method, path), None, "{method} {path}");
        }
    }
}
