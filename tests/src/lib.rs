//! Shared fixtures for Palisade's integration tests. The tests live in
//! `tests/tests/<area>/main.rs`, one binary per area:
//!
//! - `fencing`: the vertical slice on the embedded backend: lock, sequencer,
//!   HTTP resource server, sled, and the stale write refused.

use std::net::SocketAddr;

use palisade::client::Client;
use palisade::server::{ServerConfig, run};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A resource server running in this process on a free loopback port, with
/// its own temporary data directory. Stopped (gracefully, with a flush) on
/// [`ResourceServer::stop`]; on drop, its task is aborted.
pub struct ResourceServer {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), palisade::server::ServerError>>,
    _data_dir: TempDir,
}

impl ResourceServer {
    /// Starts a server with the default (durable) configuration.
    pub async fn start() -> anyhow::Result<Self> {
        let data_dir = tempfile::tempdir()?;
        let state = ServerConfig::new(data_dir.path()).open_state(None)?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(run(listener, state, async {
            let _ = stopped.await;
        }));
        Ok(ResourceServer {
            address,
            stop: Some(stop),
            task,
            _data_dir: data_dir,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// A client for this server.
    pub fn client(&self) -> Client {
        Client::new(&self.base_url()).expect("a loopback URL is valid")
    }

    /// Shuts down gracefully and returns the server's result.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await??;
        Ok(())
    }
}

impl Drop for ResourceServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
