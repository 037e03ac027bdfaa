//! The client itself.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use palisade_core::{LockGuard, LockName, Sequencer, SequencerSource};
use palisade_wire::{
    BatchRequest, CasRequest, DecodeError, ErrorBody, ErrorKind, MarksAnswer, WriteAnswer,
};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::tls::TlsTransport;
use crate::{BatchOp, ClientError, Health, Marks, Read, Refused, Written};

/// The header carrying `H_excl` on 2xx answers.
const MARK_EXCLUSIVE_HEADER: &str = "palisade-mark-exclusive";
/// The header carrying `H_shared` on 2xx answers.
const MARK_SHARED_HEADER: &str = "palisade-mark-shared";
/// The idempotency key header.
const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// A typed client for the resource server's HTTP API (docs/http-api.md).
/// Cheap to clone; clones share one connection pool.
///
/// Every call returns `Result<Result<T, Refused>, ClientError>`: the outer
/// error is a failure (the server could not be reached, or said the request
/// or itself is broken), the inner one a refusal the caller acts on (stale
/// generation, failed compare-and-swap...). `?` on the outer error can
/// never swallow a fencing refusal.
///
/// ```no_run
/// use palisade_client::{Client, Refused};
/// use palisade_core::{Generation, LockName, Mode, Sequencer};
///
/// # async fn example() -> Result<(), palisade_client::ClientError> {
/// let client = Client::new("http://127.0.0.1:7411")?;
/// let sequencer = Sequencer::new(
///     LockName::new("orders/42").unwrap(),
///     Mode::Exclusive,
///     Generation::new(33).unwrap(),
/// );
/// match client.put(&sequencer, b"stock", "7", None).await? {
///     Ok(written) => println!("written; H_excl is now {}", written.marks.exclusive),
///     Err(Refused::Stale { marks, .. }) => println!("a newer holder wrote; marks {marks:?}"),
///     Err(other) => println!("refused: {other}"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    transport: Transport,
    /// The base URL without a trailing slash, e.g. `http://127.0.0.1:7411`.
    base: String,
    /// `Bearer <token>`, sent on every request when the server requires
    /// tokens. Marked sensitive, so `Debug` output shows no token.
    authorization: Option<HeaderValue>,
}

/// How requests travel: reqwest for `http://`, our rustls transport for
/// `https://` (see `tls.rs` for why not reqwest's).
#[derive(Debug, Clone)]
enum Transport {
    Plain(reqwest::Client),
    Tls {
        /// Boxed: a pooled hyper client is much larger than reqwest's handle.
        https: Box<TlsTransport>,
        /// The whole exchange's time limit (reqwest has its own).
        timeout: Duration,
    },
}

/// Options for a [`Client`]: timeout, bearer token, trusted CA.
///
/// ```
/// use std::time::Duration;
/// use palisade_client::Client;
///
/// # fn main() -> Result<(), palisade_client::ClientError> {
/// # let ca_pem = include_bytes!("../tests/data/example-ca.pem");
/// let client = Client::builder("https://palisade.internal:7411")
///     .timeout(Duration::from_secs(5))
///     .bearer_token("Zs8AkP2v1nQxWm4rT7yB")
///     .root_ca_pem(ca_pem)
///     .build()?;
/// assert!(!format!("{client:?}").contains("Zs8AkP2v"), "the token never shows");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "call build() to get a Client"]
pub struct ClientBuilder {
    base_url: String,
    timeout: Duration,
    bearer_token: Option<SecretText>,
    root_ca_pem: Option<Vec<u8>>,
    root_ca_error: Option<String>,
}

/// A token kept out of `Debug` output.
#[derive(Clone)]
struct SecretText(String);

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl ClientBuilder {
    /// The time limit for one request (default 30 s); connecting gets at
    /// most 5 s of it.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sends `authorization: Bearer <token>` on every request, for a
    /// server started with `--tokens-file`. Use `https://` (or loopback):
    /// over plain HTTP the token is readable on the network.
    pub fn bearer_token(mut self, token: &str) -> Self {
        self.bearer_token = Some(SecretText(token.trim().to_owned()));
        self
    }

    /// Trusts the CA certificates in this PEM text (one or more
    /// `CERTIFICATE` blocks) for `https://`, *instead of* the system's CA
    /// bundle: a private CA is then the only one trusted. Without it,
    /// `https://` trusts the operating system's CAs (`SSL_CERT_FILE` or
    /// `SSL_CERT_DIR` if set, else the platform's store, through
    /// `rustls-native-certs`).
    pub fn root_ca_pem(mut self, pem: impl AsRef<[u8]>) -> Self {
        self.root_ca_pem = Some(pem.as_ref().to_vec());
        self
    }

    /// [`ClientBuilder::root_ca_pem`] with the contents of `path`. A file
    /// that cannot be read fails [`ClientBuilder::build`].
    pub fn root_ca_file(mut self, path: impl AsRef<Path>) -> Self {
        let path = path.as_ref();
        match std::fs::read(path) {
            Ok(pem) => self.root_ca_pem = Some(pem),
            Err(error) => {
                self.root_ca_error = Some(format!("cannot read {}: {error}", path.display()))
            }
        }
        self
    }

    /// The client. Fails on a base URL that is not `http://` or
    /// `https://`, a token that is not an RFC 6750 `b64token`, a CA that is
    /// not PEM, or a CA given for an `http://` URL.
    pub fn build(self) -> Result<Client, ClientError> {
        let url = check_base_url(&self.base_url)?;
        if let Some(reason) = self.root_ca_error {
            return Err(ClientError::InvalidOption {
                option: "root CA",
                reason,
            });
        }
        let authorization = self
            .bearer_token
            .map(|SecretText(token)| bearer_header(&token))
            .transpose()?;
        let connect_timeout = self.timeout.min(Duration::from_secs(5));
        let transport = if url.scheme() == "https" {
            let roots = match &self.root_ca_pem {
                Some(pem) => crate::tls::roots_from_pem(pem)?,
                None => crate::tls::system_roots()?,
            };
            Transport::Tls {
                https: Box::new(TlsTransport::new(roots, connect_timeout)),
                timeout: self.timeout,
            }
        } else {
            if self.root_ca_pem.is_some() {
                return Err(ClientError::InvalidOption {
                    option: "root CA",
                    reason: "a CA certificate only applies to https:// URLs".into(),
                });
            }
            let http = reqwest::Client::builder()
                .timeout(self.timeout)
                .connect_timeout(connect_timeout)
                .build()
                .map_err(|source| ClientError::Transport {
                    url: self.base_url.clone(),
                    source,
                })?;
            Transport::Plain(http)
        };
        Ok(Client {
            transport,
            base: self.base_url.trim_end_matches('/').to_owned(),
            authorization,
        })
    }
}

/// `Bearer <token>`, checked and marked sensitive.
fn bearer_header(token: &str) -> Result<HeaderValue, ClientError> {
    let body = token.trim_end_matches('=');
    let valid = !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b));
    if !valid {
        return Err(ClientError::InvalidOption {
            option: "bearer token",
            reason: "a token is letters, digits and -._~+/ (then = padding)".into(),
        });
    }
    let mut value =
        HeaderValue::from_str(&format!("Bearer {token}")).expect("checked to be visible ASCII");
    value.set_sensitive(true);
    Ok(value)
}

/// The base URL, checked. Credentials in it are refused (a server takes a
/// bearer token, [`ClientBuilder::bearer_token`]), so no URL this client
/// shows in an error can hold a secret; the refusal itself shows the URL
/// redacted.
fn check_base_url(base_url: &str) -> Result<reqwest::Url, ClientError> {
    let invalid = |reason| ClientError::InvalidUrl {
        url: palisade_core::redact::redact_url(base_url),
        reason,
    };
    let url = reqwest::Url::parse(base_url).map_err(|_| invalid("not a URL"))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(invalid("the scheme must be http or https"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("a base URL has no query or fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            "credentials in a base URL are not supported; use a bearer token",
        ));
    }
    Ok(url)
}

/// A 2xx answer, read in full.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

/// What a path segment keeps as is: RFC 3986's unreserved characters,
/// `A-Z a-z 0-9 - . _ ~`.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes bytes for one path segment: everything but the
/// unreserved characters becomes `%XX`.
fn segment(bytes: &[u8]) -> String {
    percent_encoding::percent_encode(bytes, UNRESERVED).to_string()
}

/// A JSON request body.
fn json_body(body: &impl Serialize) -> Bytes {
    Bytes::from(serde_json::to_vec(body).expect("a request body serialises"))
}

/// An error answer, decoded with the wire decoder.
struct ErrorAnswer {
    status: StatusCode,
    body: ErrorBody,
}

impl ErrorAnswer {
    fn unexpected(&self, detail: impl std::fmt::Display) -> ClientError {
        ClientError::UnexpectedResponse {
            status: self.status.as_u16(),
            detail: detail.to_string(),
        }
    }

    /// The refusal this answer stands for, if it is one: core's
    /// [`Refused`], from the fields its code carries. `lock_mismatch` is
    /// left to [`ErrorAnswer::failure`] (a `BadRequest`): a client sends
    /// the path's lock's own sequencer, so it is a caller's bug, not an
    /// outcome to act on. A code on a status that is not its own is not
    /// this refusal.
    fn refusal(&self) -> Result<Option<Refused>, ClientError> {
        if self.body.status() != self.status.as_u16()
            || matches!(self.body.kind, ErrorKind::LockMismatch { .. })
        {
            return Ok(None);
        }
        self.body.kind.to_refused().map_err(|e| self.unexpected(e))
    }

    /// The failure this answer stands for.
    fn failure(self) -> ClientError {
        let code = self.body.code().to_owned();
        let too_large = match &self.body.kind {
            ErrorKind::TooLarge(fields) => Some((fields.limit.clone(), fields.max)),
            _ => None,
        };
        failure(self.status, code, self.body.message, too_large)
    }
}

/// The failure an error answer with `status` and `code` stands for.
fn failure(
    status: StatusCode,
    code: String,
    message: String,
    too_large: Option<(String, u64)>,
) -> ClientError {
    match status {
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => ClientError::BadRequest {
            status: status.as_u16(),
            code,
            message,
        },
        StatusCode::NOT_FOUND => ClientError::NotFound { code, message },
        StatusCode::UNAUTHORIZED => ClientError::Unauthenticated { code, message },
        StatusCode::FORBIDDEN => ClientError::Forbidden { code, message },
        StatusCode::PAYLOAD_TOO_LARGE => {
            let (limit, max) = too_large.unwrap_or_default();
            ClientError::TooLarge {
                limit,
                max,
                message,
            }
        }
        StatusCode::SERVICE_UNAVAILABLE => ClientError::Unavailable { code, message },
        status => ClientError::Server {
            status: status.as_u16(),
            code,
            message,
        },
    }
}

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.parse().ok()
}

impl Client {
    /// The default time limit for one request.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

    /// A client for the server at `base_url` (e.g. `http://127.0.0.1:7411`),
    /// with a 30 s request timeout and a 5 s connect timeout. `https://`
    /// trusts the system's CA bundle; use [`Client::builder`] for a
    /// private CA or a bearer token.
    pub fn new(base_url: &str) -> Result<Client, ClientError> {
        Client::builder(base_url).build()
    }

    /// Like [`Client::new`] with another request timeout.
    pub fn with_timeout(base_url: &str, timeout: Duration) -> Result<Client, ClientError> {
        Client::builder(base_url).timeout(timeout).build()
    }

    /// Options beyond the base URL: timeout, bearer token, trusted CA.
    pub fn builder(base_url: &str) -> ClientBuilder {
        ClientBuilder {
            base_url: base_url.to_owned(),
            timeout: Client::DEFAULT_TIMEOUT,
            bearer_token: None,
            root_ca_pem: None,
            root_ca_error: None,
        }
    }

    /// A client using an existing `reqwest::Client` (its pool and settings)
    /// for an `http://` server.
    pub fn with_http_client(base_url: &str, http: reqwest::Client) -> Result<Client, ClientError> {
        check_base_url(base_url)?;
        Ok(Client {
            transport: Transport::Plain(http),
            base: base_url.trim_end_matches('/').to_owned(),
            authorization: None,
        })
    }

    /// This client, sending `authorization: Bearer <token>` on every
    /// request (see [`ClientBuilder::bearer_token`]).
    pub fn with_bearer_token(mut self, token: &str) -> Result<Client, ClientError> {
        self.authorization = Some(bearer_header(token.trim())?);
        Ok(self)
    }

    /// The base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    fn lock_url(&self, lock: &LockName, rest: &str) -> String {
        format!(
            "{}/v1/locks/{}/{rest}",
            self.base,
            segment(lock.as_str().as_bytes())
        )
    }

    /// The request's headers: sequencer, idempotency key, token.
    fn headers(
        &self,
        sequencer: Option<&Sequencer>,
        idempotency_key: Option<&str>,
    ) -> Result<HeaderMap, ClientError> {
        let mut headers = HeaderMap::new();
        if let Some(sequencer) = sequencer {
            let value = HeaderValue::from_str(&sequencer.to_string()).map_err(|_| {
                ClientError::InvalidOption {
                    option: "sequencer",
                    reason: "its text form is not a valid header value".into(),
                }
            })?;
            headers.insert(Sequencer::HTTP_HEADER, value);
        }
        if let Some(key) = idempotency_key {
            let value = HeaderValue::from_str(key).map_err(|_| ClientError::InvalidOption {
                option: "idempotency key",
                reason: "not a valid header value".into(),
            })?;
            headers.insert(IDEMPOTENCY_KEY_HEADER, value);
        }
        if let Some(authorization) = &self.authorization {
            headers.insert(AUTHORIZATION, authorization.clone());
        }
        Ok(headers)
    }

    /// Sends a request and reads the answer in full.
    async fn exchange(
        &self,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Option<Bytes>,
    ) -> Result<Answer, ClientError> {
        match &self.transport {
            Transport::Plain(http) => {
                let mut request = http.request(method, url).headers(headers);
                if let Some(body) = body {
                    request = request.body(body);
                }
                let response = request.send().await.map_err(|source| {
                    if source.is_timeout() {
                        ClientError::Timeout {
                            url: url.to_owned(),
                        }
                    } else if source.is_connect() {
                        ClientError::Connect {
                            url: url.to_owned(),
                            source,
                        }
                    } else {
                        ClientError::Transport {
                            url: url.to_owned(),
                            source,
                        }
                    }
                })?;
                let status = response.status();
                let headers = response.headers().clone();
                let body = read_body(response, url).await?;
                Ok(Answer {
                    status,
                    headers,
                    body,
                })
            }
            Transport::Tls { https, timeout } => {
                let exchange = https.send(method, url, headers, body);
                let (status, headers, body) = tokio::time::timeout(*timeout, exchange)
                    .await
                    .map_err(|_| ClientError::Timeout {
                        url: url.to_owned(),
                    })??;
                Ok(Answer {
                    status,
                    headers,
                    body,
                })
            }
        }
    }

    /// Sends a request; returns the 2xx answer, or the decoded error.
    async fn send(
        &self,
        method: Method,
        url: String,
        sequencer: Option<&Sequencer>,
        idempotency_key: Option<&str>,
        body: Option<Bytes>,
    ) -> Result<Result<Answer, ErrorAnswer>, ClientError> {
        let headers = self.headers(sequencer, idempotency_key)?;
        // Sending again is safe only where a second copy changes nothing:
        // a read, or a write the server deduplicates by its key.
        let safe_to_resend = method == Method::GET || idempotency_key.is_some();
        let first = self
            .exchange(method.clone(), &url, headers.clone(), body.clone())
            .await;
        let answer = match first {
            Err(error) if safe_to_resend && error.is_connection_lost() => {
                tracing::debug!(%url, %error, "the connection broke before the answer: sending again");
                self.exchange(method, &url, headers, body).await?
            }
            first => first?,
        };
        let status = answer.status;
        if status.is_success() {
            return Ok(Ok(answer));
        }
        match ErrorBody::decode(&answer.body) {
            Ok(body) => Ok(Err(ErrorAnswer { status, body })),
            // A code newer than this client: never a refusal it acts on.
            Err(DecodeError::UnknownCode { code, message }) => {
                Err(failure(status, code, message, None))
            }
            Err(error) => Err(ClientError::UnexpectedResponse {
                status: status.as_u16(),
                detail: error.to_string(),
            }),
        }
    }

    /// A write under `holder`'s sequencer to `path` below its lock's URL:
    /// decodes the result or the refusal. A holder whose lease may have
    /// lapsed sends nothing ([`ClientError::Lock`]).
    async fn write<S: SequencerSource + ?Sized>(
        &self,
        method: Method,
        holder: &S,
        path: &str,
        idempotency_key: Option<&str>,
        body: Option<Bytes>,
    ) -> Result<Result<Written, Refused>, ClientError> {
        let sequencer = holder.sequencer_now()?;
        let sequencer = sequencer.as_ref();
        let url = self.lock_url(sequencer.lock(), path);
        match self
            .send(method, url, Some(sequencer), idempotency_key, body)
            .await?
        {
            Ok(answer) => decode::<WriteAnswer>(answer.status, &answer.body)
                .map(|written| Ok(written.into_applied())),
            Err(answer) => match answer.refusal()? {
                Some(refused) => {
                    tracing::debug!(
                        lock = %sequencer.lock(),
                        generation = sequencer.generation().get(),
                        code = refused.reason(),
                        "write refused"
                    );
                    Ok(Err(refused))
                }
                None => Err(answer.failure()),
            },
        }
    }

    /// Reads `key` under `lock`. With a sequencer (shared or exclusive, for
    /// `lock`), the server checks it and raises the marks; without one it is
    /// a plain read. A missing key is `Ok(Ok(Read { value: None, .. }))`.
    pub async fn get(
        &self,
        lock: &LockName,
        key: &[u8],
        sequencer: Option<&Sequencer>,
    ) -> Result<Result<Read, Refused>, ClientError> {
        let url = self.lock_url(lock, &format!("keys/{}", segment(key)));
        match self
            .send(Method::GET, url.clone(), sequencer, None, None)
            .await?
        {
            Ok(answer) => {
                let marks = Marks {
                    exclusive: header_u64(&answer.headers, MARK_EXCLUSIVE_HEADER)
                        .unwrap_or_default(),
                    shared: header_u64(&answer.headers, MARK_SHARED_HEADER).unwrap_or_default(),
                };
                Ok(Ok(Read {
                    value: Some(answer.body),
                    marks,
                }))
            }
            Err(ErrorAnswer {
                status: StatusCode::NOT_FOUND,
                body:
                    ErrorBody {
                        kind: ErrorKind::NotFound { marks, .. },
                        ..
                    },
            }) => Ok(Ok(Read {
                value: None,
                marks: marks.into(),
            })),
            Err(answer) => match answer.refusal()? {
                Some(refused) => Ok(Err(refused)),
                None => Err(answer.failure()),
            },
        }
    }

    /// Sets `key` to `value` under `holder`'s sequencer (exclusive).
    ///
    /// `holder` is a [`Sequencer`] or a lock guard. A guard is asked for its
    /// sequencer first, so once its lease may have lapsed nothing is sent
    /// and the call fails with [`ClientError::Lock`]; the server's check
    /// catches the rest. The same holds for every write below.
    pub async fn put<S: SequencerSource + ?Sized>(
        &self,
        holder: &S,
        key: &[u8],
        value: impl Into<Bytes>,
        idempotency_key: Option<&str>,
    ) -> Result<Result<Written, Refused>, ClientError> {
        let path = format!("keys/{}", segment(key));
        let value = Some(value.into());
        self.write(Method::PUT, holder, &path, idempotency_key, value)
            .await
    }

    /// Removes `key` under `holder`'s sequencer (exclusive). Deleting a
    /// missing key succeeds with [`OpResult::Absent`](crate::OpResult::Absent).
    pub async fn delete<S: SequencerSource + ?Sized>(
        &self,
        holder: &S,
        key: &[u8],
        idempotency_key: Option<&str>,
    ) -> Result<Result<Written, Refused>, ClientError> {
        let path = format!("keys/{}", segment(key));
        self.write(Method::DELETE, holder, &path, idempotency_key, None)
            .await
    }

    /// Compare-and-swap: sets `key` to `new` (removes it when `None`) only
    /// if its value is `expected` (absent when `None`).
    pub async fn cas<S: SequencerSource + ?Sized>(
        &self,
        holder: &S,
        key: &[u8],
        expected: Option<&[u8]>,
        new: Option<&[u8]>,
        idempotency_key: Option<&str>,
    ) -> Result<Result<Written, Refused>, ClientError> {
        let path = format!("cas/{}", segment(key));
        let body = json_body(&CasRequest::new(expected, new));
        self.write(Method::POST, holder, &path, idempotency_key, Some(body))
            .await
    }

    /// Applies `ops` atomically under `holder`'s sequencer (exclusive): all
    /// or none. An empty batch only raises the mark (fences older holders).
    pub async fn batch<S: SequencerSource + ?Sized>(
        &self,
        holder: &S,
        ops: &[BatchOp],
        idempotency_key: Option<&str>,
    ) -> Result<Result<Written, Refused>, ClientError> {
        let body = json_body(&BatchRequest::new(ops));
        self.write(Method::POST, holder, "batch", idempotency_key, Some(body))
            .await
    }

    /// The marks of `lock` (0 and 0 for a lock never seen).
    pub async fn marks(&self, lock: &LockName) -> Result<Marks, ClientError> {
        let url = self.lock_url(lock, "marks");
        match self
            .send(Method::GET, url.clone(), None, None, None)
            .await?
        {
            Ok(answer) => {
                decode::<MarksAnswer>(answer.status, &answer.body).map(|answer| answer.marks.into())
            }
            Err(answer) => Err(answer.failure()),
        }
    }

    /// `GET /healthz`.
    pub async fn health(&self) -> Result<Health, ClientError> {
        let url = format!("{}/healthz", self.base);
        match self
            .send(Method::GET, url.clone(), None, None, None)
            .await?
        {
            Ok(answer) => decode::<Health>(answer.status, &answer.body),
            Err(answer) => Err(answer.failure()),
        }
    }

    /// [`Client::get`] under `guard`'s lock with its sequencer.
    pub async fn get_with<G: LockGuard>(
        &self,
        guard: &G,
        key: &[u8],
    ) -> Result<Result<Read, Refused>, ClientError> {
        let sequencer = guard.sequencer()?;
        self.get(sequencer.lock(), key, Some(&sequencer)).await
    }
}

async fn read_body(response: reqwest::Response, url: &str) -> Result<Bytes, ClientError> {
    response.bytes().await.map_err(|source| {
        if source.is_timeout() {
            ClientError::Timeout {
                url: url.to_owned(),
            }
        } else {
            ClientError::Transport {
                url: url.to_owned(),
                source,
            }
        }
    })
}

/// A 2xx answer's JSON body, as its wire type.
fn decode<T: DeserializeOwned>(status: StatusCode, bytes: &[u8]) -> Result<T, ClientError> {
    serde_json::from_slice(bytes).map_err(|e| ClientError::UnexpectedResponse {
        status: status.as_u16(),
        detail: format!("the body is not the API's answer: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_escape_everything_but_unreserved() {
        assert_eq!(segment(b"orders/42"), "orders%2F42");
        assert_eq!(segment(&[0xff, 0x00, b' ']), "%FF%00%20");
        assert_eq!(segment(b"a-b.c_d~e"), "a-b.c_d~e");
    }

    #[test]
    fn base_urls_are_checked() {
        assert!(Client::new("http://127.0.0.1:7411/").is_ok());
        assert_eq!(Client::new("http://h:1/").unwrap().base_url(), "http://h:1");
        for bad in ["127.0.0.1:7411", "ftp://h", "http://h/?q=1", ""] {
            assert!(
                matches!(Client::new(bad), Err(ClientError::InvalidUrl { .. })),
                "{bad}"
            );
        }
        let error = Client::new("http://app:s3cret-marker@h:1").unwrap_err();
        let shown = format!("{error} {error:?}");
        assert!(shown.contains("credentials"), "{shown}");
        assert!(!shown.contains("s3cret-marker"), "{shown}");
    }
}
