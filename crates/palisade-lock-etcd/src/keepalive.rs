//! The session's keep-alive task.
//!
//! Every keep-alive interval it renews the session lease (then the delay
//! lease, if any) and moves every validity deadline of the session to
//! `options.valid_until(sent_at)`, where `sent_at` is when the renewal was
//! *sent*: etcd extended the lease no earlier than that, so the lease lives
//! at least until `sent_at + ttl`.
//!
//! - An answer with TTL 0, or "lease not found", means the lease is gone:
//!   the session ends at once (`Revoked`).
//! - A failed renewal (stream broken, member down, no answer in time) is
//!   retried quickly on a fresh stream, which the balanced channel may open
//!   to another member, until the deadline; the deadlines then fire
//!   `Expired` by themselves, without waiting for this task.
//! - A success that comes after the deadline does not revive anything: the
//!   session is over (someone else may have been granted the lock in the
//!   gap), and its lease is revoked so the locks it still pins on the
//!   server are freed for the next waiters (their lock-delay applies).

use std::sync::{Arc, Weak};
use std::time::Duration;

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};
use palisade_core::{LockError, LostReason, SessionOptions};
use tokio::time::Instant;

use crate::client::{self, ClientInner, Resend};
use crate::errors;
use crate::keys::lease_hex;
use crate::session::{SessionLease, ceil_secs, valid_until};

/// What the task needs; it holds the session state weakly, so it ends when
/// the session does.
pub(crate) struct KeepAlive {
    pub(crate) connection: Arc<ClientInner>,
    pub(crate) options: SessionOptions,
    pub(crate) lease_id: i64,
    pub(crate) delay_lease_id: Option<i64>,
    pub(crate) state: Weak<SessionLease>,
}

/// An open keep-alive stream for one lease.
struct Stream {
    keeper: LeaseKeeper,
    answers: LeaseKeepAliveStream,
}

enum Renewal {
    /// etcd renewed the lease to this many seconds.
    Alive { ttl_seconds: i64 },
    /// The lease no longer exists.
    Gone,
    /// No answer: the stream broke or timed out.
    Failed(String),
}

/// The shortest pause between two failed renewals.
const FIRST_RETRY: Duration = Duration::from_millis(50);

pub(crate) async fn run(keepalive: KeepAlive) {
    let interval = keepalive.options.keepalive_interval();
    let mut session_stream: Option<Stream> = None;
    let mut delay_stream: Option<Stream> = None;
    let mut next_round = Instant::now() + interval;
    // Failed renewals are retried at most half an interval apart, so a
    // lease outlives a few of them.
    let retries = || palisade_core::retry_pauses(FIRST_RETRY, (interval / 2).max(FIRST_RETRY));
    let mut pauses = retries();
    loop {
        tokio::time::sleep_until(next_round).await;
        let Some(state) = keepalive.state.upgrade() else {
            return;
        };
        let sent_at = Instant::now();
        let renewal = match renew(&keepalive, keepalive.lease_id, &mut session_stream).await {
            Renewal::Alive { ttl_seconds } => match keepalive.delay_lease_id {
                // The delay lease is renewed after the session lease, so it
                // always expires after it.
                Some(delay_lease_id) => {
                    match renew(&keepalive, delay_lease_id, &mut delay_stream).await {
                        Renewal::Alive { .. } => Renewal::Alive { ttl_seconds },
                        other => other,
                    }
                }
                None => Renewal::Alive { ttl_seconds },
            },
            other => other,
        };
        match renewal {
            Renewal::Alive { ttl_seconds } => {
                let deadline = valid_until(&keepalive.options, sent_at, ttl_seconds);
                if !extend_all(&state, deadline) {
                    end_and_revoke(&keepalive, &state, LostReason::Expired).await;
                    return;
                }
                pauses = retries();
                next_round = sent_at + interval;
            }
            Renewal::Gone => {
                state.end(LostReason::Revoked);
                return;
            }
            Renewal::Failed(error) => {
                session_stream = None;
                delay_stream = None;
                if state.ensure_open().is_err() {
                    end_and_revoke(&keepalive, &state, LostReason::KeepAliveFailed).await;
                    return;
                }
                let retry = pauses.next().unwrap_or(FIRST_RETRY);
                tracing::debug!(lease = %lease_hex(keepalive.lease_id), %error, ?retry, "keep-alive failed; retrying");
                next_round = Instant::now() + retry;
            }
        }
    }
}

/// One renewal of `lease_id`, opening a stream if there is none.
async fn renew(keepalive: &KeepAlive, lease_id: i64, stream: &mut Option<Stream>) -> Renewal {
    let connection = &keepalive.connection;
    connection.counters.bump(|counts| &mut counts.keepalives);
    // A renewal stuck on a dead member must not eat the lease's validity:
    // give up after one keep-alive interval and retry on a new stream, which
    // the client routes to a live member.
    let within = connection
        .request_timeout()
        .min(keepalive.options.keepalive_interval());
    let Some(open) = stream else {
        // Opening the stream makes the first renewal; etcd-client checks its
        // TTL and fails with "lease not found" on 0. An unreachable member
        // is skipped for a live one.
        let client = connection.client.lease_client();
        let opened = client::within("keep-alive", within, Resend::Always, || {
            let mut client = client.clone();
            async move { client.keep_alive(lease_id).await }
        })
        .await;
        return match opened {
            Ok((keeper, answers)) => {
                *stream = Some(Stream { keeper, answers });
                Renewal::Alive {
                    ttl_seconds: ceil_secs(keepalive.options.ttl()),
                }
            }
            Err(LockError::SessionClosed) => Renewal::Gone,
            Err(error) => Renewal::Failed(error.to_string()),
        };
    };
    let answer = tokio::time::timeout(within, async {
        open.keeper.keep_alive().await?;
        open.answers.message().await
    })
    .await;
    match answer {
        Ok(Ok(Some(answer))) if answer.ttl() > 0 => Renewal::Alive {
            ttl_seconds: answer.ttl(),
        },
        Ok(Ok(Some(_))) => Renewal::Gone,
        Ok(Ok(None)) => Renewal::Failed("the keep-alive stream ended".into()),
        Ok(Err(error)) if errors::is_lease_not_found(&error) => Renewal::Gone,
        Ok(Err(error)) => Renewal::Failed(error.to_string()),
        Err(_elapsed) => Renewal::Failed(format!("no answer within {within:?}")),
    }
}

/// Moves every deadline of the session to `deadline`. `false` if the
/// session was already over or its deadline had passed.
fn extend_all(state: &SessionLease, deadline: Instant) -> bool {
    if state.holds.ended().is_some() || !state.tracker.extend(deadline) {
        return false;
    }
    // A hold whose key was deleted stays lost.
    state.holds.extend_where(|_| true, deadline);
    true
}

async fn end_and_revoke(keepalive: &KeepAlive, state: &SessionLease, reason: LostReason) {
    state.end(reason);
    // The lease may still exist on the server (the pause was shorter than
    // the TTL but longer than the validity). Nobody here uses it any more:
    // free the locks it pins. If etcd cannot be reached, the lease expires
    // by itself since nothing renews it.
    if let Err(error) = keepalive.connection.lease_revoke(keepalive.lease_id).await {
        tracing::debug!(%error, lease = %lease_hex(keepalive.lease_id), "revoking a lapsed lease failed; it expires by itself");
    }
}
