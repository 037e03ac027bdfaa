//! [`GuardLayer`]: the tower layer that fences every request of the routes
//! it wraps.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::{HeaderName, HeaderValue, Request};
use axum::response::{IntoResponse, Response};
use tower::{Layer, Service};

use crate::Guard;
use crate::fenced::Verdict;

/// The response header with `H_excl` after an admitted request, as the
/// Palisade server sends it.
const MARK_EXCLUSIVE: HeaderName = HeaderName::from_static("palisade-mark-exclusive");
/// The response header with `H_shared` after an admitted request.
const MARK_SHARED: HeaderName = HeaderName::from_static("palisade-mark-shared");

/// A tower [`Layer`] that runs a [`Guard`] in front of a service.
///
/// For each request it decides (see the order of checks on [`Guard`]):
/// a refusal is answered at once with the JSON error and the inner service
/// never sees the request; otherwise the verdict goes into the request's
/// extensions (for the [`Fenced`](crate::Fenced) extractor) and the inner
/// service is called. In serialised mode the per-lock lock is held until
/// the inner service's response future resolves; a successful answer then
/// carries the lock's marks in `palisade-mark-exclusive` and
/// `palisade-mark-shared`, as the Palisade server's do.
///
/// With axum, add it with `Router::route_layer` (or `Router::layer`): both
/// run it after routing, so the `{lock}` path parameter is known.
/// `route_layer` leaves unmatched paths a plain 404.
#[derive(Debug, Clone)]
pub struct GuardLayer {
    guard: Guard,
}

impl GuardLayer {
    /// A layer running `guard`.
    pub fn new(guard: Guard) -> Self {
        GuardLayer { guard }
    }
}

impl<S> Layer<S> for GuardLayer {
    type Service = GuardService<S>;

    fn layer(&self, inner: S) -> GuardService<S> {
        GuardService {
            guard: self.guard.clone(),
            inner,
        }
    }
}

/// The service [`GuardLayer`] makes.
#[derive(Debug, Clone)]
pub struct GuardService<S> {
    guard: Guard,
    inner: S,
}

/// The future of [`GuardService`].
pub type GuardFuture<E> = Pin<Box<dyn Future<Output = Result<Response, E>> + Send>>;

impl<S, B> Service<Request<B>> for GuardService<S>
where
    S: Service<Request<B>, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = GuardFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // `self.inner` is the instance `poll_ready` made ready: take it, and
        // leave a clone for the next request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let guard = self.guard.clone();
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            let verdict = match guard.check(&mut parts).await {
                Ok(verdict) => verdict,
                Err(refusal) => return Ok(refusal.into_response()),
            };
            parts.extensions.insert(verdict.clone());
            let mut response = inner.call(Request::from_parts(parts, body)).await?;
            if let Verdict::Fenced(fenced) = &verdict {
                if let Some(marks) = fenced.marks() {
                    if response.status().is_success() {
                        let headers = response.headers_mut();
                        for (name, value) in [
                            (MARK_EXCLUSIVE, marks.exclusive),
                            (MARK_SHARED, marks.shared),
                        ] {
                            headers.entry(name).or_insert(HeaderValue::from(value));
                        }
                    }
                }
            }
            // The handler's future has resolved: release this request's
            // share of the per-lock lock (explicitly, to say where it ends).
            drop(verdict);
            Ok(response)
        })
    }
}
