//! The router as one connection sees it: marks the connection busy while a
//! request is inside it (so it is never shed mid-request), and keeps the
//! connection's state honest after an answer that left the body unread.
//!
//! When a handler answers before reading the body (a refusal: 400, 401,
//! 403, 413, 422...), hyper reads whatever of the body is already
//! buffered and, if that is not all of it, closes the connection after
//! the answer rather than read a body of unknown size. The answer would
//! still look keep-alive, and the client's next request on that
//! connection would fail with a broken pipe. So such an answer says
//! `connection: close`: the client knows to open a new connection.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, header};
use axum::response::IntoResponse as _;
use http_body_util::BodyExt as _;
use hyper::body::{Body as HttpBody, Bytes, Frame, Incoming, SizeHint};
use tower::ServiceExt as _;

use crate::connections::ConnectionHandle;
use crate::routes::LockRoute;
use crate::{ApiError, AppState};

/// A hyper service for one connection.
#[derive(Clone)]
pub(crate) struct ConnectionService {
    router: Router,
    /// For the lock routes, served without the router ([`LockRoute`]).
    state: AppState,
    connection: Arc<ConnectionHandle>,
}

impl ConnectionService {
    pub(crate) fn new(router: Router, state: AppState, connection: Arc<ConnectionHandle>) -> Self {
        ConnectionService {
            router,
            state,
            connection,
        }
    }
}

impl hyper::service::Service<Request<Incoming>> for ConnectionService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let in_progress = self.connection.begin_request();
        let route = LockRoute::of(request.method(), request.uri().path());
        let (router, state) = (self.router.clone(), self.state.clone());
        Box::pin(async move {
            let Some(in_progress) = in_progress else {
                // Shed just before these headers arrived: the connection
                // is closing, so the request is not handled.
                return Ok(ApiError::connection_shed().into_response());
            };
            let (parts, body) = request.into_parts();
            let read_to_end = Arc::new(AtomicBool::new(body.is_end_stream()));
            let body = Body::new(WatchedBody {
                inner: body,
                read_to_end: Arc::clone(&read_to_end),
            });
            let request = Request::from_parts(parts, body);
            let mut response = match route {
                Some(route) => route.serve_without_router(state, request).await,
                None => router.oneshot(request).await?,
            };
            if !read_to_end.load(Ordering::Acquire) {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            // The request stays in progress until hyper has written the
            // answer's body and drops it (the guard lives in its closure).
            Ok(response.map(|body| {
                Body::new(body.map_frame(move |frame| {
                    let _in_progress = &in_progress;
                    frame
                }))
            }))
        })
    }
}

/// A request body that records whether it was read to its end.
struct WatchedBody {
    inner: Incoming,
    read_to_end: Arc<AtomicBool>,
}

impl HttpBody for WatchedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        let ended = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(_))) => self.inner.is_end_stream(),
            Poll::Ready(Some(Err(_))) | Poll::Pending => false,
        };
        if ended {
            self.read_to_end.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
