//! The HTTP transport under `object_store`: hyper's pooled HTTP/1.1 client,
//! with a deadline per request. A request past its deadline fails with
//! `HttpErrorKind::Timeout`, which the fence treats as in doubt.
//!
//! Plain HTTP for now; TLS (tokio-rustls on `ring`, as `palisade-client`
//! does) plugs in here.

use std::time::Duration;

use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector as TcpConnector;
use hyper_util::rt::TokioExecutor;
use object_store::ClientOptions;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpRequestBody,
    HttpResponse, HttpResponseBody, HttpService,
};

/// Builds [`Hyper`] clients with one request deadline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HyperConnector {
    pub(crate) timeout: Duration,
}

impl HttpConnector for HyperConnector {
    fn connect(&self, _options: &ClientOptions) -> object_store::Result<HttpClient> {
        let mut tcp = TcpConnector::new();
        tcp.set_connect_timeout(Some(self.timeout));
        tcp.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).build(tcp);
        Ok(HttpClient::new(Hyper {
            client,
            timeout: self.timeout,
        }))
    }
}

#[derive(Debug)]
struct Hyper {
    client: Client<TcpConnector, HttpRequestBody>,
    timeout: Duration,
}

#[async_trait::async_trait]
impl HttpService for Hyper {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let response = tokio::time::timeout(self.timeout, self.client.request(request))
            .await
            .map_err(|elapsed| HttpError::new(HttpErrorKind::Timeout, elapsed))?
            .map_err(|error| {
                let kind = if error.is_connect() {
                    HttpErrorKind::Connect
                } else {
                    HttpErrorKind::Request
                };
                HttpError::new(kind, error)
            })?;
        let (parts, body) = response.into_parts();
        // The body's own deadline: the same again, from the head's arrival.
        let body = Timed {
            inner: body,
            deadline: Box::pin(tokio::time::sleep(self.timeout)),
        };
        Ok(HttpResponse::from_parts(parts, HttpResponseBody::new(body)))
    }
}

/// A response body that fails with `Timeout` past its deadline.
struct Timed {
    inner: hyper::body::Incoming,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl hyper::body::Body for Timed {
    type Data = bytes::Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        if let Poll::Ready(frame) = std::pin::Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| {
                frame.map_err(|error| HttpError::new(HttpErrorKind::Request, error))
            }));
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(HttpError::new(
                HttpErrorKind::Timeout,
                std::io::Error::new(std::io::ErrorKind::TimedOut, "response body timed out"),
            )))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}
