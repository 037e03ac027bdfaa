//! The client: one connection pool, the lock tables, and the wake-up
//! channel every session of the process shares.

use std::sync::Arc;
use std::time::Duration;

use palisade_core::holds::Waiters;
use palisade_core::{SessionOptions, Signer};
use sqlx::any::AnyPoolOptions;
use sqlx::{Connection, Executor};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::dialect::Statements;
use crate::store::{ClientStats, Store};
use crate::{Dialect, SqlConfig, SqlLock, SqlLockError};

/// Session rows that ended this long ago, with nothing left pointing at
/// them, are deleted when a session opens.
const FORGET_SESSIONS_AFTER: Duration = Duration::from_secs(3600);

/// A pooled connection idle at least this long is pinged before use: it
/// may have been cut while it sat there. A database killed and restarted
/// takes far longer than this, so a connection that sat through the outage
/// is always pinged; a busy one is not.
const PING_IF_IDLE_FOR: Duration = Duration::from_millis(100);

/// The database's own bounds on every session of the pool, a second past
/// the operation timeout: a transaction left idle (its process paused or
/// cut off mid-transaction) is ended by the server, letting go of the lock
/// row every other session of that lock waits for; a wait for a row lock
/// that the client gave up on (its operation timed out) ends soon after.
fn session_bounds(dialect: Dialect, operation_timeout: Duration) -> Vec<String> {
    let timeout = operation_timeout + Duration::from_secs(1);
    match dialect {
        Dialect::Postgres => {
            let ms = timeout.as_millis().max(1);
            vec![
                format!("SET idle_in_transaction_session_timeout = {ms}"),
                format!("SET lock_timeout = {ms}"),
            ]
        }
        Dialect::MariaDb => {
            // Whole seconds, rounded up.
            let seconds = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
            vec![format!(
                "SET SESSION idle_transaction_timeout = {seconds}, innodb_lock_wait_timeout = {seconds}"
            )]
        }
    }
}

/// A connection to the lock tables, shared by many sessions.
///
/// Cheap to clone. [`SqlLockClient::session`] opens a [`SqlLock`], which
/// implements [`palisade_core::Lock`].
#[derive(Clone)]
pub struct SqlLockClient {
    pub(crate) inner: Arc<ClientInner>,
}

impl std::fmt::Debug for SqlLockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlLockClient")
            .field("dialect", &self.dialect())
            .field("issuer", &self.issuer())
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
pub(crate) struct ClientInner {
    pub(crate) store: Arc<Store>,
    pub(crate) signer: Option<Signer>,
    listener: Option<JoinHandle<()>>,
    /// Waiters per lock over this client's sessions: the per-process bound
    /// (`SessionOptions::max_waiters`).
    pub(crate) waiters: Waiters,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        if let Some(listener) = &self.listener {
            listener.abort();
        }
    }
}

impl SqlLockClient {
    /// Connects, creates the lock tables if they are missing (refusing
    /// tables of a newer schema), and on PostgreSQL starts listening for
    /// releases.
    pub async fn connect(config: SqlConfig) -> Result<SqlLockClient, SqlLockError> {
        let dialect = config.validate()?;
        let timeout = config.operation_timeout;
        sqlx::any::install_default_drivers();
        let pool = AnyPoolOptions::new()
            .max_connections(config.max_connections)
            .acquire_timeout(config.operation_timeout)
            // sqlx pings every connection as it returns to the pool; a ping
            // again on the way out costs a round trip per transaction. Only
            // a connection idle long enough to have outlived a database
            // restart is pinged (and replaced if dead) before use.
            .test_before_acquire(false)
            .before_acquire(|connection, meta| {
                Box::pin(async move {
                    if meta.idle_for >= PING_IF_IDLE_FOR {
                        connection.ping().await?;
                    }
                    Ok(true)
                })
            })
            // A request cancelled while its `BEGIN` was in flight leaves
            // the connection inside that transaction: sqlx counts a
            // transaction only once `BEGIN` is answered, so its drop queues
            // no rollback. Reused, the connection would run the next
            // requests' statements in it, holding their row locks until
            // some later `BEGIN` committed them. On MariaDB a `ROLLBACK` as
            // the connection comes back ends it (and is a no-op outside a
            // transaction); PostgreSQL would warn on every idle one.
            .after_release(move |connection, _meta| {
                Box::pin(async move {
                    if dialect == Dialect::MariaDb {
                        connection.execute("ROLLBACK").await?;
                    }
                    Ok(true)
                })
            })
            .after_connect(move |connection, _meta| {
                let bounds = session_bounds(dialect, timeout);
                Box::pin(async move {
                    // READ COMMITTED on both: every grant reads the rows it
                    // decides on after locking the lock row, so it must see
                    // the latest committed state (MariaDB's default,
                    // REPEATABLE READ, would show it an older snapshot).
                    let statement = match dialect {
                        Dialect::Postgres => {
                            "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED"
                        }
                        Dialect::MariaDb => "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                    };
                    connection.execute(statement).await?;
                    for bound in &bounds {
                        connection.execute(crate::store::safe(bound)).await?;
                    }
                    Ok(())
                })
            })
            .connect(&config.url)
            .await
            .map_err(|e| SqlLockError::Lock(crate::error::from_sqlx(dialect.backend(), e)))?;
        let (wake, _) = broadcast::channel(1024);
        let store = Arc::new(Store {
            pool,
            dialect,
            sql: Statements::new(dialect),
            timeout: config.operation_timeout,
            wake,
            counters: Default::default(),
        });
        store.ensure_durable().await?;
        store.ensure_schema().await?;
        let listener = match dialect {
            Dialect::Postgres => Some(crate::wake::listen(&config.url, store.wake.clone()).await?),
            Dialect::MariaDb => None,
        };
        Ok(SqlLockClient {
            inner: Arc::new(ClientInner {
                store,
                signer: config.signer,
                listener,
                waiters: Waiters::default(),
            }),
        })
    }

    /// Opens a session: its own lease (a row in `palisade_sessions`, kept
    /// alive in the background) and identity.
    pub async fn session(&self, options: SessionOptions) -> Result<SqlLock, SqlLockError> {
        options
            .validate()
            .map_err(|reason| SqlLockError::InvalidConfig { reason })?;
        if let Err(error) = self
            .inner
            .store
            .forget_old_sessions(FORGET_SESSIONS_AFTER)
            .await
        {
            tracing::debug!(%error, "forgetting old session rows failed; they stay");
        }
        Ok(SqlLock::open(self.clone(), options).await?)
    }

    /// A snapshot of what this client has asked the database so far.
    pub fn stats(&self) -> ClientStats {
        self.inner.store.counters.snapshot()
    }

    /// The database this client uses.
    pub fn dialect(&self) -> Dialect {
        self.inner.store.dialect
    }

    /// The issuer of signed sequencers, when a signer is set.
    pub fn issuer(&self) -> Option<&str> {
        self.inner.signer.as_ref().map(Signer::issuer)
    }
}
