//! Running the server: bind, serve until shutdown, flush.

use std::future::Future;

use palisade_core::SharedLiveCheck;
use palisade_store::Store;
use tokio::net::TcpListener;

use crate::{AppState, ServerConfig, ServerError, app};

/// Serves `state` on `listener` until `shutdown` resolves, then stops
/// accepting, lets the requests in flight finish, and flushes the store.
///
/// This is the mini-redis shape: the caller owns the listener (tests bind
/// `127.0.0.1:0`) and the shutdown signal (`main` passes Ctrl-C/SIGTERM).
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let store = state.store().clone();
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, durability = %store.durability(), "palisade-server listening");
    }
    axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown)
        .await?;
    tracing::info!("shutting down: flushing the store");
    tokio::task::spawn_blocking(move || store.flush())
        .await
        .map_err(|e| ServerError::Io(std::io::Error::other(e)))??;
    Ok(())
}

impl ServerConfig {
    /// Opens the store and builds the state, with `live_check` if given.
    /// Blocks while sled opens (recovery can take a moment on a big store).
    pub fn open_state(&self, live_check: Option<SharedLiveCheck>) -> Result<AppState, ServerError> {
        if self.max_body_bytes == 0 {
            return Err(ServerError::Config(
                "--max-body-bytes must be positive".into(),
            ));
        }
        let store = Store::open(&self.data_dir, self.store_config())?;
        let state = AppState::new(store).with_max_body_bytes(self.max_body_bytes);
        Ok(match live_check {
            Some(live_check) => state.with_live_check(live_check),
            None => state,
        })
    }

    /// Binds the listen address.
    pub async fn bind(&self) -> Result<TcpListener, ServerError> {
        Ok(TcpListener::bind(self.listen).await?)
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
