//! Where the demos keep their numbers: the plain store that trusts the
//! lock, or Palisade's resource server that checks every sequencer.

use std::net::SocketAddr;

use palisade_client::{Client, Refused};
use palisade_core::{LockName, Sequencer};
use palisade_server::{ServerConfig, ServerError, run};
use serde::{Deserialize, Serialize};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::DemoError;
use crate::plain_store::PlainClient;
#[cfg(feature = "redis")]
use crate::redis_stock::RedisStock;
use crate::sql_stock::{self, SqlStock};

/// How to reach a storage; sent to client processes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "storage", rename_all = "snake_case")]
pub(crate) enum StorageTarget {
    /// The plain store at `url`.
    Plain { url: String },
    /// A Palisade resource server at `url`.
    Fenced { url: String },
    /// A table in the user's own PostgreSQL at `url` (`--store`); `fenced`:
    /// every read and write in a `palisade_fence_sql` fenced transaction.
    Postgres { url: String, fenced: bool },
    /// A counter per segment in the user's own Redis at `url` (`--store`);
    /// `fenced`: every read and sale through `palisade_fence_redis`.
    Redis { url: String, fenced: bool },
}

/// `--store redis://...` in a build without the Redis client.
#[cfg(not(feature = "redis"))]
pub(crate) const REDIS_NOT_BUILT: &str = "--store redis://... keeps the stock in Redis, which this build leaves out: build with `--features redis` (cargo run -p example-flash-sale --features redis -- --store redis://...)";

/// A refusal of a stale sequencer: a newer holder has been honoured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stale {
    /// The generation presented.
    pub(crate) presented: u64,
    /// The lock's exclusive mark when it was refused.
    pub(crate) mark: u64,
}

/// What became of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub(crate) enum WriteOutcome {
    /// Applied. `mark` is the resource server's exclusive mark right after
    /// the write (it equals the write's generation when fencing works);
    /// `None` from the plain store, which keeps no marks.
    Accepted { mark: Option<u64> },
    /// Refused as stale by the resource server (409).
    Refused { presented: u64, mark: u64 },
}

/// A storage client.
#[derive(Debug, Clone)]
pub(crate) enum Storage {
    /// The plain store: applies every write.
    Plain(PlainClient),
    /// Palisade's resource server: refuses stale sequencers.
    Fenced(Client),
    /// The user's own PostgreSQL table, fenced or not.
    Sql(SqlStock),
    /// Counters in the user's own Redis, fenced or not.
    #[cfg(feature = "redis")]
    Redis(RedisStock),
}

impl Storage {
    pub(crate) async fn connect(target: &StorageTarget) -> Result<Storage, DemoError> {
        Ok(match target {
            StorageTarget::Plain { url } => Storage::Plain(PlainClient::new(url)?),
            StorageTarget::Fenced { url } => Storage::Fenced(Client::new(url)?),
            StorageTarget::Postgres { url, fenced } => {
                Storage::Sql(SqlStock::connect(url, *fenced)?)
            }
            #[cfg(feature = "redis")]
            StorageTarget::Redis { url, fenced } => {
                Storage::Redis(RedisStock::connect(url, *fenced).await?)
            }
            #[cfg(not(feature = "redis"))]
            StorageTarget::Redis { .. } => return Err(DemoError::usage(REDIS_NOT_BUILT)),
        })
    }

    pub(crate) fn is_fenced(&self) -> bool {
        match self {
            Storage::Plain(_) => false,
            Storage::Fenced(_) => true,
            Storage::Sql(stock) => stock.is_fenced(),
            #[cfg(feature = "redis")]
            Storage::Redis(stock) => stock.is_fenced(),
        }
    }

    /// Reads the number under `key` of `lock`. With fencing the read
    /// carries `sequencer` (raising the lock's mark, so an older holder can
    /// no longer write); it is refused if a newer holder was honoured.
    pub(crate) async fn read(
        &self,
        lock: &LockName,
        key: &str,
        sequencer: Option<&Sequencer>,
    ) -> Result<Result<Option<i64>, Stale>, DemoError> {
        let text = match self {
            Storage::Sql(stock) => return stock.read(&sql_stock::item(lock, key), sequencer).await,
            #[cfg(feature = "redis")]
            Storage::Redis(stock) => {
                match stock.read(&RedisStock::keys(lock), key, sequencer).await? {
                    Ok(text) => text,
                    Err(stale) => return Ok(Err(stale)),
                }
            }
            Storage::Plain(client) => client.get(&plain_key(lock, key)).await?,
            Storage::Fenced(client) => match client.get(lock, key.as_bytes(), sequencer).await? {
                Ok(read) => read
                    .value
                    .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
                Err(Refused::Stale {
                    presented, marks, ..
                }) => {
                    return Ok(Err(Stale {
                        presented: presented.get(),
                        mark: marks.exclusive,
                    }));
                }
                Err(refused) => {
                    return Err(DemoError::Refused {
                        what: format!("the read of `{key}`"),
                        refused: Box::new(refused),
                    });
                }
            },
        };
        match text {
            None => Ok(Ok(None)),
            Some(text) => match text.trim().parse::<i64>() {
                Ok(number) => Ok(Ok(Some(number))),
                Err(_) => Err(DemoError::NotANumber {
                    key: key.to_owned(),
                    value: text,
                }),
            },
        }
    }

    /// Writes `value` under `key` of the sequencer's lock (of `lock` when
    /// there is no sequencer, which only the plain store accepts).
    pub(crate) async fn write(
        &self,
        lock: &LockName,
        key: &str,
        sequencer: Option<&Sequencer>,
        value: i64,
    ) -> Result<WriteOutcome, DemoError> {
        match self {
            Storage::Sql(stock) => {
                stock
                    .write(&sql_stock::item(lock, key), sequencer, value)
                    .await
            }
            #[cfg(feature = "redis")]
            Storage::Redis(stock) => {
                stock
                    .write(&RedisStock::keys(lock), key, sequencer, value)
                    .await
            }
            Storage::Plain(client) => {
                client
                    .put(&plain_key(lock, key), value.to_string(), sequencer)
                    .await?;
                Ok(WriteOutcome::Accepted { mark: None })
            }
            Storage::Fenced(client) => {
                let sequencer = sequencer.ok_or_else(|| {
                    DemoError::story("a write to the resource server needs a sequencer")
                })?;
                match client
                    .put(sequencer, key.as_bytes(), value.to_string(), None)
                    .await?
                {
                    Ok(written) => Ok(WriteOutcome::Accepted {
                        mark: Some(written.marks.exclusive),
                    }),
                    Err(Refused::Stale {
                        presented, marks, ..
                    }) => Ok(WriteOutcome::Refused {
                        presented: presented.get(),
                        mark: marks.exclusive,
                    }),
                    Err(refused) => Err(DemoError::Refused {
                        what: format!("the write of `{key}`"),
                        refused: Box::new(refused),
                    }),
                }
            }
        }
    }
}

impl Storage {
    /// Whether [`Storage::sell`] decrements in place (Redis) rather than
    /// writing back `seen - 1`.
    pub(crate) fn decrements_in_place(&self) -> bool {
        match self {
            #[cfg(feature = "redis")]
            Storage::Redis(_) => true,
            _ => false,
        }
    }

    /// Sells one item of the number under `key`, which was `seen` when
    /// read: Redis decrements it where it is (a plain `DECRBY`, or the
    /// fence's "only if at least 0 stay"), the other storages write back
    /// `seen - 1`.
    pub(crate) async fn sell(
        &self,
        lock: &LockName,
        key: &str,
        sequencer: Option<&Sequencer>,
        seen: i64,
    ) -> Result<WriteOutcome, DemoError> {
        match self {
            #[cfg(feature = "redis")]
            Storage::Redis(stock) => stock.sell(&RedisStock::keys(lock), key, sequencer).await,
            _ => self.write(lock, key, sequencer, seen - 1).await,
        }
    }
}

/// The plain store has one flat keyspace; the lock name keeps the demos'
/// keys apart the way the resource server's per-lock keyspaces do.
fn plain_key(lock: &LockName, key: &str) -> String {
    format!("{}.{key}", lock.key_segment())
}

/// Palisade's resource server, in this process, on a free loopback port,
/// with a temporary data directory. Stopped when dropped.
#[derive(Debug)]
pub struct ResourceServer {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServerError>>,
    data_dir: TempDir,
}

impl ResourceServer {
    /// Starts `palisade_server::run` on 127.0.0.1:0 with a fresh directory.
    pub async fn start() -> Result<ResourceServer, DemoError> {
        let data_dir = tempfile::Builder::new()
            .prefix("palisade-demo-")
            .tempdir()?;
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
            data_dir,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Where its sled database lives.
    pub fn data_dir(&self) -> &std::path::Path {
        self.data_dir.path()
    }

    /// Stops it gracefully (the store is flushed).
    pub async fn stop(mut self) -> Result<(), DemoError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(result) => Ok(result?),
            Err(join) => Err(DemoError::story(format!(
                "the resource server task failed: {join}"
            ))),
        }
    }
}

impl Drop for ResourceServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
