//! The plain store: **the storage a plain lock relies on**.
//!
//! A tiny HTTP key-value service that applies every write it is sent, the
//! way most storage does: the lock alone is supposed to keep writers apart.
//! The unfenced runs of both demos use it, so that client processes can
//! share it. It runs inside the demo driver's process on a free loopback
//! port.
//!
//! It checks nothing. It does *look* at the sequencer header when a client
//! sends one, only to count what it let through: a write whose generation
//! is older than one it already applied to the same key is a stale write,
//! and the demos report how many it accepted. Palisade's resource server
//! refuses exactly those.
//!
//! ```text
//! GET /keys/{key}    200 with the value, or 404
//! PUT /keys/{key}    applies the body; 200
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use palisade_core::Sequencer;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::DemoError;

/// A write the plain store applied although a newer generation had
/// already written the same key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleWrite {
    /// The key written.
    pub key: String,
    /// The generation the write carried.
    pub presented: u64,
    /// The newest generation already applied to the key.
    pub newest: u64,
    /// The value it wrote.
    pub value: String,
}

#[derive(Debug, Default)]
struct Contents {
    values: HashMap<String, String>,
    /// The newest generation each key was written with (observation only).
    newest_generation: HashMap<String, u64>,
    stale_writes: Vec<StaleWrite>,
}

type Shared = Arc<Mutex<Contents>>;

fn contents(shared: &Shared) -> std::sync::MutexGuard<'_, Contents> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running plain store. Stopped when dropped.
#[derive(Debug)]
pub struct PlainStore {
    address: SocketAddr,
    contents: Shared,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl PlainStore {
    /// Starts a plain store on a free port of 127.0.0.1.
    pub async fn start() -> Result<PlainStore, DemoError> {
        let contents = Shared::default();
        let app = Router::new()
            .route("/keys/{key}", get(read).put(write))
            .with_state(contents.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
        });
        Ok(PlainStore {
            address,
            contents,
            stop: Some(stop),
            task,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The stale writes it applied so far.
    pub fn stale_writes(&self) -> Vec<StaleWrite> {
        contents(&self.contents).stale_writes.clone()
    }
}

impl Drop for PlainStore {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

async fn read(State(shared): State<Shared>, Path(key): Path<String>) -> (StatusCode, String) {
    match contents(&shared).values.get(&key) {
        Some(value) => (StatusCode::OK, value.clone()),
        None => (StatusCode::NOT_FOUND, String::new()),
    }
}

async fn write(
    State(shared): State<Shared>,
    Path(key): Path<String>,
    headers: HeaderMap,
    value: String,
) -> StatusCode {
    let presented = headers
        .get(Sequencer::HTTP_HEADER)
        .and_then(|header| header.to_str().ok())
        .and_then(|text| text.parse::<Sequencer>().ok())
        .map(|sequencer| sequencer.generation().get());
    let mut contents = contents(&shared);
    if let Some(presented) = presented {
        let newest = contents.newest_generation.get(&key).copied().unwrap_or(0);
        if presented < newest {
            tracing::info!(%key, presented, newest, "plain store applied a stale write (it checks nothing)");
            contents.stale_writes.push(StaleWrite {
                key: key.clone(),
                presented,
                newest,
                value: value.clone(),
            });
        } else {
            contents.newest_generation.insert(key.clone(), presented);
        }
    }
    contents.values.insert(key, value);
    StatusCode::OK
}

/// A client of the plain store.
#[derive(Debug, Clone)]
pub(crate) struct PlainClient {
    http: reqwest::Client,
    base: String,
}

impl PlainClient {
    pub(crate) fn new(base: &str) -> Result<PlainClient, DemoError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|error| DemoError::PlainStore {
                url: base.to_owned(),
                message: error.to_string(),
            })?;
        Ok(PlainClient {
            http,
            base: base.trim_end_matches('/').to_owned(),
        })
    }

    fn key_url(&self, key: &str) -> String {
        format!("{}/keys/{key}", self.base)
    }

    /// The value under `key`, if any.
    pub(crate) async fn get(&self, key: &str) -> Result<Option<String>, DemoError> {
        let url = self.key_url(key);
        let failed = |message: String| DemoError::PlainStore {
            url: url.clone(),
            message,
        };
        let response = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|error| failed(error.to_string()))?;
        match response.status() {
            StatusCode::NOT_FOUND => Ok(None),
            StatusCode::OK => Ok(Some(
                response
                    .text()
                    .await
                    .map_err(|error| failed(error.to_string()))?,
            )),
            status => Err(failed(format!("unexpected status {status}"))),
        }
    }

    /// Writes `value` under `key`, with the sequencer header if given (the
    /// store only looks at it to count stale writes).
    pub(crate) async fn put(
        &self,
        key: &str,
        value: String,
        sequencer: Option<&Sequencer>,
    ) -> Result<(), DemoError> {
        let url = self.key_url(key);
        let failed = |message: String| DemoError::PlainStore {
            url: url.clone(),
            message,
        };
        let mut request = self.http.put(&url).body(value);
        if let Some(sequencer) = sequencer {
            request = request.header(Sequencer::HTTP_HEADER, sequencer.to_string());
        }
        let response = request
            .send()
            .await
            .map_err(|error| failed(error.to_string()))?;
        match response.status() {
            StatusCode::OK => Ok(()),
            status => Err(failed(format!("unexpected status {status}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use palisade_core::{Generation, LockName, Mode};

    use super::*;

    fn sequencer(generation: u64) -> Sequencer {
        Sequencer::new(
            LockName::new("accounts/alice").expect("valid"),
            Mode::Exclusive,
            Generation::new(generation).expect("non-zero"),
        )
    }

    #[tokio::test]
    async fn applies_every_write_and_counts_the_stale_ones() -> Result<(), DemoError> {
        let store = PlainStore::start().await?;
        let client = PlainClient::new(&store.url())?;
        let key = "accounts%2Falice.balance";
        assert_eq!(client.get(key).await?, None);
        client.put(key, "100".into(), Some(&sequencer(5))).await?;
        // Older than 5: applied all the same, and counted.
        client.put(key, "130".into(), Some(&sequencer(3))).await?;
        client.put(key, "140".into(), None).await?;
        client.put(key, "150".into(), Some(&sequencer(5))).await?;
        assert_eq!(client.get(key).await?.as_deref(), Some("150"));
        assert_eq!(
            store.stale_writes(),
            vec![StaleWrite {
                key: "accounts/alice.balance".into(),
                presented: 3,
                newest: 5,
                value: "130".into(),
            }]
        );
        Ok(())
    }
}
