//! Waking waiters. Every release in this process wakes its local waiters at
//! once; on PostgreSQL a `LISTEN` connection also forwards every
//! `NOTIFY palisade_lock, '<name>'` from other processes.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::SqlLockError;
use crate::dialect::CHANNEL;
use crate::error::from_sqlx;

/// The message that wakes every waiter: sent when the listener lost its
/// connection and notifications may have been missed.
pub(crate) const EVERYONE: &str = "*";

/// Starts listening; returns once `LISTEN` is in place, so no release after
/// this returns can be missed.
pub(crate) async fn listen(
    url: &str,
    wake: broadcast::Sender<Arc<str>>,
) -> Result<JoinHandle<()>, SqlLockError> {
    let connect = || async {
        let mut listener = PgListener::connect(url).await?;
        listener.listen(CHANNEL).await?;
        Ok::<_, sqlx::Error>(listener)
    };
    let mut listener = connect()
        .await
        .map_err(|e| SqlLockError::Lock(from_sqlx("postgres", e)))?;
    Ok(tokio::spawn(async move {
        let retry_pauses =
            || palisade_core::retry_pauses(Duration::from_millis(100), Duration::from_secs(2));
        let mut pauses = retry_pauses();
        loop {
            match listener.try_recv().await {
                Ok(Some(notification)) => {
                    pauses = retry_pauses();
                    let _ = wake.send(Arc::from(notification.payload()));
                }
                Ok(None) => {
                    // Reconnected: anything sent meanwhile is lost.
                    let _ = wake.send(Arc::from(EVERYONE));
                }
                Err(error) => {
                    let pause = pauses.next().unwrap_or(Duration::from_secs(2));
                    tracing::debug!(%error, ?pause, "LISTEN connection failed; retrying");
                    let _ = wake.send(Arc::from(EVERYONE));
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }))
}

/// Waits until `name` (or everyone) is woken, or `bound` passes.
pub(crate) async fn wait_for(
    receiver: &mut broadcast::Receiver<Arc<str>>,
    name: &str,
    bound: Duration,
) {
    let woken = async {
        loop {
            match receiver.recv().await {
                Ok(changed) if &*changed == name || &*changed == EVERYONE => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    };
    let _ = tokio::time::timeout(bound, woken).await;
}
