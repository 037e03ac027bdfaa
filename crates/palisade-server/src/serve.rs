//! Running the server: bind, accept within the limits, serve until
//! shutdown, flush.
//!
//! The accept loop is our own rather than `axum::serve`, for the limits
//! `axum::serve` does not offer: a bound on connections (shedding the
//! longest idle one at the bound, see `connections.rs`), a time
//! limit on headers (and on the TLS handshake), bounds on header size and
//! count, and TLS.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use palisade_core::SharedLiveCheck;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::connection_service::ConnectionService;
use crate::connections::{ConnectionHandle, Connections};
use crate::metrics::{ConnectionEnd, Metrics};
use crate::tls::TlsConfig;
use crate::{AppState, ServerConfig, ServerError, app};

/// hyper's own bound on header fields, kept on the stack.
const HYPER_DEFAULT_MAX_HEADERS: usize = 100;

/// The longest pause after a failed accept.
const ACCEPT_PAUSE_CAP: Duration = Duration::from_secs(1);

/// The pauses after failed accepts, from 10 ms up to [`ACCEPT_PAUSE_CAP`]
/// (the one retry helper, `palisade_core::retry_pauses`); a new run
/// starts after a successful accept.
fn accept_pauses() -> impl Iterator<Item = Duration> {
    palisade_core::retry_pauses(Duration::from_millis(10), ACCEPT_PAUSE_CAP)
}

/// Serves `state` on `listener` until `shutdown` resolves, then stops
/// accepting, lets the requests in flight finish, and flushes the store.
///
/// This is the mini-redis shape: the caller owns the listener (tests bind
/// `127.0.0.1:0`) and the shutdown signal (`main` passes Ctrl-C/SIGTERM).
/// TLS and the connection limits come from `state`
/// ([`AppState::with_tls`], [`AppState::with_limits`]).
///
/// At most `max_connections` connections are served at once. At the bound
/// a new connection takes the place of the connection that has been
/// outside a request the longest (docs/SECURITY.md, "Limits"); a connection
/// inside a request is never shed. If every connection is inside a
/// request, the new one waits up to the header time limit for one to end.
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let store = state.store().clone();
    let limits = *state.limits();
    let tls = state.shared.tls.clone();
    let metrics = Arc::clone(&state.shared.metrics);
    let decisions = Arc::clone(&state.shared.decisions);
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(
            %addr,
            engine = store.engine_info().name,
            durability = %store.engine_info().durability,
            tls = tls.is_some(),
            max_connections = limits.max_connections,
            max_in_flight = limits.max_in_flight,
            "palisade-server listening"
        );
    }
    let router = app(state.clone());
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_header_bytes)
        .max_buf_size(limits.read_buffer_bytes());
    if limits.max_headers != HYPER_DEFAULT_MAX_HEADERS {
        // Any other count moves hyper's header array from the stack to the
        // heap, one allocation per request: only pay for it when asked.
        http.max_headers(limits.max_headers);
    }
    let connection = Arc::new(Connection {
        http,
        router,
        state,
        tls,
        handshake_timeout: limits.header_read_timeout,
        metrics,
    });

    // Each connection holds a permit; at shutdown, taking them all back
    // is how we know every connection has finished.
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let connections = Arc::new(Connections::default());
    let (stop_connections, stopping) = watch::channel(false);
    // The pauses of the current run of failed accepts, if one is under way.
    let mut pauses = None;
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    pauses = None;
                    accepted
                }
                Err(error) => {
                    // Out of file descriptors, or a connection reset while
                    // queued: not fatal. Back off, longer while it lasts,
                    // so an EMFILE storm does not spin.
                    tracing::warn!(%error, "accept failed");
                    let pause = pauses
                        .get_or_insert_with(accept_pauses)
                        .next()
                        .unwrap_or(ACCEPT_PAUSE_CAP);
                    tokio::select! {
                        biased;
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(pause) => continue,
                    }
                }
            },
        };
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_at_the_bound) => {
                // Make room by shedding the connection idle the longest;
                // if every connection is inside a request, wait for one
                // to end, at most a header time limit.
                let shed = connections.shed_one();
                tracing::debug!(%peer, shed, "at the connection bound");
                let room = tokio::time::timeout(
                    limits.header_read_timeout,
                    Arc::clone(&permits).acquire_owned(),
                );
                tokio::select! {
                    biased;
                    () = &mut shutdown => break,
                    room = room => match room {
                        Ok(permit) => permit.expect("the semaphore is never closed"),
                        Err(_elapsed) => {
                            tracing::debug!(%peer, "no room within the header time limit: closed");
                            continue;
                        }
                    },
                }
            }
        };
        let _ = stream.set_nodelay(true);
        tracing::trace!(%peer, "connection accepted");
        let handle = Arc::new(connections.register());
        tokio::spawn(Arc::clone(&connection).serve(stream, permit, handle, stopping.clone()));
    }

    drop(listener);
    tracing::info!("shutting down: finishing the requests in flight");
    let _ = stop_connections.send(true);
    // Event streams never end by themselves: end them, or their
    // connections would hold the shutdown forever.
    decisions.close();
    let total = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _all_closed = permits.acquire_many(total).await;
    tracing::info!("shutting down: flushing the store");
    tokio::task::spawn_blocking(move || store.flush())
        .await
        .map_err(|e| ServerError::Io(std::io::Error::other(e)))??;
    Ok(())
}

/// What every connection task shares.
struct Connection {
    http: http1::Builder,
    router: axum::Router,
    /// For the lock routes, served without the router.
    state: AppState,
    tls: Option<TlsConfig>,
    /// The TLS handshake gets the header time limit: a client trickling
    /// its handshake is a slowloris too.
    handshake_timeout: Duration,
    metrics: Arc<Metrics>,
}

impl Connection {
    async fn serve(
        self: Arc<Self>,
        stream: TcpStream,
        permit: OwnedSemaphorePermit,
        handle: Arc<ConnectionHandle>,
        mut stopping: watch::Receiver<bool>,
    ) {
        let _open = self.metrics.open_connections.open();
        let end = match &self.tls {
            None => self.drive(stream, &handle, stopping).await,
            Some(tls) => {
                let handshake =
                    tokio::time::timeout(self.handshake_timeout, tls.acceptor().accept(stream));
                let accepted = tokio::select! {
                    accepted = handshake => accepted,
                    () = handle.shed() => {
                        self.metrics.connection_closed(ConnectionEnd::Shed);
                        return;
                    }
                    () = stop_requested(&mut stopping) => return,
                };
                match accepted {
                    Ok(Ok(tls_stream)) => self.drive(tls_stream, &handle, stopping).await,
                    Ok(Err(error)) => {
                        tracing::debug!(%error, "TLS handshake failed");
                        ConnectionEnd::TlsHandshakeFailed
                    }
                    Err(_elapsed) => {
                        tracing::debug!("TLS handshake timed out");
                        ConnectionEnd::TlsHandshakeFailed
                    }
                }
            }
        };
        self.metrics.connection_closed(end);
        // Out of the shedding order before the permit admits another.
        drop(handle);
        drop(permit);
    }

    /// Serves HTTP/1.1 on `io` until the connection ends or is shed; on
    /// shutdown, finishes the request in progress and closes.
    async fn drive<I>(
        &self,
        io: I,
        handle: &Arc<ConnectionHandle>,
        mut stopping: watch::Receiver<bool>,
    ) -> ConnectionEnd
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let service =
            ConnectionService::new(self.router.clone(), self.state.clone(), Arc::clone(handle));
        let connection = self.http.serve_connection(TokioIo::new(io), service);
        tokio::pin!(connection);
        let result = tokio::select! {
            result = connection.as_mut() => result,
            // Only ever while outside a request: dropping the connection
            // cuts no request.
            () = handle.shed() => return ConnectionEnd::Shed,
            () = stop_requested(&mut stopping) => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        match result {
            Ok(()) => ConnectionEnd::Closed,
            Err(error) => {
                let end = if error.is_timeout() {
                    ConnectionEnd::HeaderTimeout
                } else if error.is_parse_too_large() {
                    ConnectionEnd::HeaderTooLarge
                } else if error.is_parse() || error.is_parse_status() {
                    ConnectionEnd::BadRequest
                } else if error.is_incomplete_message() || error.is_canceled() {
                    ConnectionEnd::Closed
                } else {
                    ConnectionEnd::IoError
                };
                tracing::debug!(%error, end = end.as_str(), "connection ended with an error");
                end
            }
        }
    }
}

/// Resolves once shutdown has begun. (The watch's borrow guard must not be
/// held across an await, so it is dropped here.)
async fn stop_requested(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stop| *stop).await;
}

impl ServerConfig {
    /// Opens the store and builds the state, with `live_check` if given,
    /// and every security setting and limit of the configuration. Blocks
    /// while sled opens (recovery can take a moment on a big store). The
    /// key ring, tokens and certificate are read and checked before the
    /// store is opened.
    pub fn open_state(&self, live_check: Option<SharedLiveCheck>) -> Result<AppState, ServerError> {
        if self.max_body_bytes == 0 {
            return Err(ServerError::Config(
                "--max-body-bytes must be positive".into(),
            ));
        }
        let limits = self.limits()?;
        let verifier = self.verifier()?;
        let max_mark_raise = self.max_mark_raise()?;
        let max_mark_raise_time = self.max_mark_raise_time()?;
        let tokens = self.tokens()?;
        let tls = self.tls()?;

        let store = self.open_store()?;
        let mut state = AppState::new(store)
            .with_max_body_bytes(self.max_body_bytes)
            .with_limits(limits)
            .with_max_mark_raise(max_mark_raise)
            .with_max_mark_raise_time(max_mark_raise_time);
        match verifier {
            Some((verifier, required)) => {
                tracing::info!(
                    key_ids = ?verifier.keys().key_ids().collect::<Vec<_>>(),
                    issuers = ?verifier.issuers().collect::<Vec<_>>(),
                    signatures_required = required,
                    "verifying sequencer signatures"
                );
                state = state.with_verifier(verifier, required);
            }
            None => tracing::warn!(
                "no --verify-keys-file: sequencers are not verified, and anyone who can reach this server can raise a mark"
            ),
        }
        if let Some(tokens) = tokens {
            tracing::info!(tokens = tokens.len(), "bearer tokens required");
            state = state.with_tokens(tokens);
        }
        if let Some(tls) = tls {
            state = state.with_tls(tls);
        }
        Ok(match live_check {
            Some(live_check) => state.with_live_check(live_check),
            None => state,
        })
    }

    /// Binds the listen address. A failure names it
    /// ([`ServerError::Bind`]: `cannot listen on 127.0.0.1:7411: address
    /// already in use`).
    pub async fn bind(&self) -> Result<TcpListener, ServerError> {
        TcpListener::bind(self.listen)
            .await
            .map_err(|error| ServerError::bind(self.listen, &error))
    }
}

/// Opens the store, binds, and serves until `shutdown`: everything the
/// binary does, for embedding (the `palisade` CLI adds its live check).
pub async fn serve(
    config: ServerConfig,
    live_check: Option<SharedLiveCheck>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let state = config.open_state(live_check)?;
    let listener = config.bind().await?;
    run(listener, state, shutdown).await
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
