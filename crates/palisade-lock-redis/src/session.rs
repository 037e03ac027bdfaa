//! [`RedisLock`]: a lock session, the [`Lock`](palisade_core::Lock) implementation.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use palisade_core::holds::{GiveBack, HoldBackend, HoldTable, Task, Turn};
use palisade_core::{
    Generation, LeaseTracker, LockError, LostReason, Obtain, Sequencer, SessionOptions,
};
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::RedisLockClient;
use crate::client::{AcquireReply, Attempt};
use crate::error::{BACKEND, maybe_applied};
use crate::guard::{RedisGuard, RedisHold};
use crate::inbox::Notice;

/// A lock session on Redis: one holder identity, one set of lease
/// settings, re-entry scoped to it.
///
/// Cheap to clone (clones are the same session). Created by
/// [`RedisLockClient::session`] or [`RedisLock::connect`].
///
/// - **acquire** runs one script that grants the lock (`SET NX PX` and the
///   generation) or queues the caller; a queued caller sleeps until the
///   holder's release hands the lock over and publishes to this client's
///   inbox, re-checking only after a bounded time.
/// - **release** is compare-and-delete on the owner token; the same script
///   grants the lock to the next waiter.
/// - the client's **watchdog** extends each hold's lease
///   (compare-and-PEXPIRE) every keep-alive interval; see
///   [`RedisLock::without_watchdog`].
#[derive(Clone, Debug)]
pub struct RedisLock {
    pub(crate) inner: Arc<SessionInner>,
}

#[derive(Debug)]
pub struct SessionInner {
    pub(crate) client: RedisLockClient,
    pub(crate) options: SessionOptions,
    /// Whether holds are kept alive in the background.
    pub(crate) watchdog: bool,
    /// Public id of this session: the sequencer's `holder` field.
    pub(crate) holder: String,
    /// The session's holds: re-entry, and one acquire of a name at a time
    /// (the second re-enters the first's hold instead of queueing behind
    /// its own session). Waiters are counted per client.
    holds: HoldTable<RedisHold>,
    /// Where releases finish when a guard is dropped outside a runtime.
    runtime: Option<Handle>,
}

impl SessionInner {
    fn new(
        client: RedisLockClient,
        options: SessionOptions,
        holder: String,
        watchdog: bool,
    ) -> Self {
        let holds = HoldTable::new(BACKEND, &options, client.inner.waiters.clone());
        SessionInner {
            client,
            options,
            watchdog,
            holder,
            holds,
            runtime: Handle::try_current().ok(),
        }
    }
}

impl RedisLock {
    pub(crate) fn new(client: RedisLockClient, options: SessionOptions, holder: String) -> Self {
        RedisLock {
            inner: Arc::new(SessionInner::new(client, options, holder, true)),
        }
    }

    /// Connects a new client to `url` and opens one session on it: the
    /// shortest way to a lock (a child process in a test, a small tool).
    pub async fn connect(
        url: &str,
        options: SessionOptions,
    ) -> Result<Self, crate::RedisLockError> {
        let client = RedisLockClient::connect(crate::RedisConfig::new(url)).await?;
        client.session(options)
    }

    /// This session without the watchdog: holds are never extended in the
    /// background, so each lease lapses one TTL after its grant (minus the
    /// safety margin locally) unless [`RedisGuard::extend`] is called.
    /// Must be called before the first acquire.
    ///
    /// This is the "holder outlives its TTL" setting of the fencing tests;
    /// in production, keep the watchdog.
    #[cfg(feature = "testing")]
    pub fn without_watchdog(self) -> Self {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                inner.watchdog = false;
                RedisLock {
                    inner: Arc::new(inner),
                }
            }
            Err(shared) => {
                tracing::warn!(
                    backend = BACKEND,
                    "without_watchdog on a shared session: cloning it into a new session with the same holder id"
                );
                RedisLock {
                    inner: Arc::new(SessionInner::new(
                        shared.client.clone(),
                        shared.options.clone(),
                        shared.holder.clone(),
                        false,
                    )),
                }
            }
        }
    }

    /// The client this session runs on.
    pub fn client(&self) -> &RedisLockClient {
        &self.inner.client
    }

    /// The session's options.
    pub fn options(&self) -> &SessionOptions {
        &self.inner.options
    }

    /// The public holder id put in this session's sequencers.
    pub fn holder_id(&self) -> &str {
        &self.inner.holder
    }

    /// Ends every hold of this session on Redis *without* releasing, as a
    /// crash or a long pause would: watchdogs stop, the holds are gone from
    /// Redis at once, their lock-delay starts, and their guards report
    /// `Lost(Revoked)`. Returns once Redis has applied it.
    ///
    /// For tests, and for fencing off a wedged worker from inside.
    pub async fn expire_session(&self) -> Result<(), LockError> {
        for hold in self.inner.holds.drain() {
            let redis = hold.data();
            redis.stop_watchdog();
            redis.ended.store(true, Ordering::SeqCst);
            hold.tracker().lose(LostReason::Revoked);
            self.inner
                .client
                .expire_call(&redis.keys, &redis.token, hold.mode())
                .await?;
            tracing::info!(backend = BACKEND, lock = %hold.name(), generation = %hold.generation(), "hold expired on purpose (no release)");
        }
        Ok(())
    }
}

impl Obtain for RedisLock {
    type Session = SessionInner;
    type Guard = RedisGuard;

    fn session(&self) -> &Arc<SessionInner> {
        &self.inner
    }

    fn take(
        &self,
        turn: Turn<SessionInner>,
    ) -> impl Future<Output = Result<Option<RedisGuard>, LockError>> + Send {
        self.inner.acquire_remote(turn)
    }
}

/// Releases whatever an attempt may have on Redis if it is dropped or
/// fails before a guard exists: its queue entry, and a grant it never
/// learned about (a hand-off racing with the drop, or an acquire whose
/// reply was lost). Idempotent: the release script compares the token.
struct AttemptCleanup {
    client: RedisLockClient,
    attempt: Attempt,
    /// Whether the attempt may have left anything on Redis.
    armed: bool,
    /// Whether a request was on the wire when the attempt ended: it may be
    /// applied after the first cleanup, so cleanup runs twice.
    in_flight: bool,
}

impl Drop for AttemptCleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.client.clone();
        let attempt = self.attempt.clone();
        let in_flight = self.in_flight;
        let cleanups = &self.client.inner.cleanups;
        cleanups.spawn(&runtime, async move {
            let timeout = client.config().response_timeout();
            // Entries and holds expire by themselves: retry until then.
            let give_up_at = Instant::now() + attempt.ttl.max(attempt.waiter_ttl) + timeout;
            let mut passes = if in_flight { 2 } else { 1 };
            let mut pauses = palisade_core::retry_pauses(Duration::from_millis(20), Duration::from_secs(1));
            while passes > 0 && Instant::now() < give_up_at {
                match client
                    .release_call(&attempt.keys, &attempt.token, attempt.mode, true)
                    .await
                {
                    Ok(had_grant) => {
                        tracing::debug!(backend = BACKEND, lock = %attempt.keys.lock(), had_grant, "abandoned acquire cleaned up");
                        passes -= 1;
                        if passes > 0 {
                            // Let a request still on the wire land first.
                            tokio::time::sleep(timeout).await;
                        }
                    }
                    Err(error) => {
                        tracing::debug!(backend = BACKEND, %error, "cleanup of an abandoned acquire failed; retrying");
                        tokio::time::sleep(pauses.next().unwrap_or(Duration::from_secs(1))).await;
                    }
                }
            }
        });
    }
}

/// The first pause before a queued waiter whose re-check failed tries again.
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(50);
/// The longest such pause (or the re-check interval, if shorter).
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(1);

fn random_hex<const BYTES: usize>() -> String {
    hex::encode(rand::random::<[u8; BYTES]>())
}

impl SessionInner {
    /// Asks Redis: grant, or queue and wait for the hand-off.
    async fn acquire_remote(
        self: &Arc<Self>,
        turn: Turn<SessionInner>,
    ) -> Result<Option<RedisGuard>, LockError> {
        let (name, mode, wait) = (&turn.name().clone(), turn.mode(), turn.patience().waits());
        let client = &self.client;
        let ttl = self.options.ttl();
        let recheck = client.config().waiter_recheck_for(ttl);
        let keys = client.keys(name);
        let attempt = Attempt {
            channel: client.inner.inbox.channel(&keys),
            keys,
            token: random_hex::<16>(),
            lease: random_hex::<8>(),
            holder: self.holder.clone(),
            mode,
            ttl,
            lock_delay: self.options.lock_delay(),
            waiter_ttl: recheck * 4 + Duration::from_secs(1),
        };
        let mut registration = match wait {
            true => Some(
                client
                    .inner
                    .inbox
                    .register(&attempt.lease, &attempt.channel)
                    .await,
            ),
            false => None,
        };
        let mut cleanup = AttemptCleanup {
            client: client.clone(),
            attempt: attempt.clone(),
            armed: true,
            in_flight: false,
        };

        // The grant happened after the server processed the last request
        // that saw us still waiting, so that request's send time starts the
        // lease's validity.
        let mut last_seen_waiting: Option<Instant> = None;
        // Likewise, every generation this client saw granted before that
        // request was sent is below the one we are granted.
        let mut floor_when_last_waiting = 0;
        let mut queued_once = false;
        let retry_pauses = || {
            palisade_core::retry_pauses(
                FIRST_RETRY_PAUSE,
                recheck.clamp(FIRST_RETRY_PAUSE, MAX_RETRY_PAUSE),
            )
        };
        let mut retry_pause = retry_pauses();
        loop {
            let floor_at_send = client.generation_floor(name);
            let sent_at = Instant::now();
            if queued_once {
                client.inner.stats.count_recheck();
            }
            cleanup.in_flight = true;
            let reply = client.acquire_call(&attempt, wait).await;
            cleanup.in_flight = matches!(&reply, Err(error) if maybe_applied(error));
            let reply = match reply {
                Ok(reply) => reply,
                Err(error) if queued_once && maybe_applied(&error) => {
                    // Queued, and the service failed (no answer, a dropped
                    // connection), not the request: the entry stays in Redis
                    // until its deadline (if it lapses, the next call queues
                    // us again at the back). Try again until the caller's
                    // deadline; a grant made meanwhile is reported by the
                    // acquire script.
                    let pause = retry_pause.next().unwrap_or(FIRST_RETRY_PAUSE);
                    tracing::warn!(backend = BACKEND, lock = %name, %error, ?pause, "re-check failed; trying again");
                    tokio::time::sleep(pause).await;
                    continue;
                }
                Err(error) => {
                    if !maybe_applied(&error) && !queued_once {
                        cleanup.armed = false;
                    }
                    tracing::warn!(backend = BACKEND, lock = %name, %error, "acquire failed; cleaning up by owner token");
                    return Err(error);
                }
            };
            match reply {
                AcquireReply::Granted {
                    generation,
                    server_ms,
                } => {
                    let (valid_from, floor) = match last_seen_waiting {
                        Some(seen_at) => (seen_at, floor_when_last_waiting),
                        None => (sent_at, floor_at_send),
                    };
                    cleanup.armed = false;
                    let guard = self
                        .install(
                            turn,
                            &attempt,
                            generation,
                            server_ms,
                            valid_from,
                            floor,
                            &mut cleanup,
                        )
                        .await?;
                    tracing::debug!(backend = BACKEND, lock = %name, %mode, generation, via = if queued_once { "recheck" } else { "immediate" }, "acquired");
                    return Ok(Some(guard));
                }
                AcquireReply::NotGranted => {
                    cleanup.armed = false;
                    tracing::trace!(backend = BACKEND, lock = %name, %mode, "not granted (try-acquire)");
                    return Ok(None);
                }
                AcquireReply::Queued { hint } => {
                    retry_pause = retry_pauses();
                    last_seen_waiting = Some(sent_at);
                    floor_when_last_waiting = floor_at_send;
                    if !queued_once {
                        tracing::debug!(backend = BACKEND, lock = %name, %mode, "queued");
                    }
                    queued_once = true;
                    let registration = registration
                        .as_mut()
                        .expect("only waiting acquires are queued");
                    let mut sleep_for = hint.map_or(recheck, |hint| hint.min(recheck));
                    if !client.inner.inbox.is_listening(&attempt.channel) {
                        sleep_for = sleep_for.min(Duration::from_millis(100));
                    }
                    tokio::select! {
                        notice = registration.notices.recv() => match notice {
                            Some(notice @ Notice::Granted { .. }) if !notice.proves(&attempt.token) => {
                                // Not our grant (forged, or misrouted): ask
                                // Redis, which reports a real one.
                                tracing::warn!(backend = BACKEND, lock = %name, "a grant notice did not prove this attempt's owner token; re-checking");
                            }
                            Some(Notice::Granted { generation, server_ms, .. }) => {
                                client.inner.stats.count_handoff();
                                cleanup.armed = false;
                                let guard = self
                                    .install(turn, &attempt, generation, server_ms, sent_at, floor_at_send, &mut cleanup)
                                    .await?;
                                tracing::debug!(backend = BACKEND, lock = %name, %mode, generation, via = "handoff", "woken and acquired");
                                return Ok(Some(guard));
                            }
                            Some(Notice::Recheck) | None => {
                                tracing::trace!(backend = BACKEND, lock = %name, "woken to re-check");
                            }
                        },
                        () = tokio::time::sleep(sleep_for) => {
                            tracing::trace!(backend = BACKEND, lock = %name, ?sleep_for, "re-checking after the bounded wait");
                        }
                    }
                }
            }
        }
    }

    /// Turns a grant into a hold and its first guard: checks the generation
    /// against what this client had seen before the grant (`floor`), makes
    /// sure the lease is valid, starts the watchdog.
    #[allow(clippy::too_many_arguments)]
    async fn install(
        self: &Arc<Self>,
        turn: Turn<SessionInner>,
        attempt: &Attempt,
        generation: u64,
        server_ms: u64,
        mut valid_from: Instant,
        floor: u64,
        cleanup: &mut AttemptCleanup,
    ) -> Result<RedisGuard, LockError> {
        let client = &self.client;
        let name = &turn.name().clone();
        let Some(checked) = Generation::new(generation) else {
            cleanup.armed = true;
            return Err(LockError::Backend {
                backend: BACKEND,
                source: "Redis granted generation 0".into(),
            });
        };
        if generation <= floor {
            // Redis's counter went backwards (restart without persistence,
            // failover). Lift it above what we have seen, give this grant
            // back, and refuse: the next attempt gets a valid generation.
            tracing::error!(backend = BACKEND, lock = %name, offered = generation, floor, "generation regression: Redis issued a generation not above one already granted");
            let _ = client.raise_floor(name, floor).await;
            cleanup.armed = true;
            return Err(LockError::GenerationRegression {
                name: name.clone(),
                offered: generation,
                floor,
            });
        }
        client.observe_generation(name, generation);

        // A hand-off to a waiter that had not looked for a long time can
        // leave little validity: claim the lease now instead of handing out
        // a guard that is born lost.
        let ttl_left = self
            .options
            .valid_until(valid_from)
            .saturating_duration_since(Instant::now());
        if ttl_left < self.options.keepalive_interval() / 2 {
            let sent_at = Instant::now();
            match client
                .extend_call(&attempt.keys, &attempt.token, attempt.mode, &self.options)
                .await
            {
                Ok(true) => valid_from = sent_at,
                Ok(false) => {
                    return Err(LockError::LeaseLost {
                        name: name.clone(),
                        generation: checked,
                        reason: LostReason::Expired,
                    });
                }
                Err(error) => {
                    cleanup.armed = true;
                    return Err(error);
                }
            }
        }

        let sequencer = Sequencer::new(name.clone(), attempt.mode, checked)
            .with_issuer(client.issuer())
            .and_then(|sequencer| sequencer.with_holder(&attempt.holder))
            .and_then(|sequencer| sequencer.with_lease(&attempt.lease))
            .map_err(|error| {
                cleanup.armed = true;
                LockError::Backend {
                    backend: BACKEND,
                    source: Box::new(error),
                }
            })?
            .with_expiry_hint(server_ms + attempt.ttl.as_millis() as u64);
        // Signed once per hold: re-entrant guards share this very text.
        let sequencer = match client.config().signer() {
            Some(signer) => {
                tracing::debug!(backend = BACKEND, lock = %name, generation = checked.get(), key_id = signer.key_id(), "sequencer signed");
                signer.sign(sequencer)
            }
            None => sequencer,
        };
        let granted = turn.grant(
            sequencer,
            Arc::new(LeaseTracker::new(self.options.valid_until(valid_from))),
            RedisHold {
                keys: attempt.keys.clone(),
                token: attempt.token.clone(),
                options: self.options.clone(),
                keeper: self.watchdog.then(|| client.inner.keeper.clone()),
                keeper_slot: Mutex::new(None),
                last_extension_sent: Mutex::new(valid_from),
                ended: AtomicBool::new(false),
            },
        );
        let guard = match granted {
            Ok(guard) => guard,
            Err(error) => {
                cleanup.armed = true;
                return Err(error);
            }
        };
        let hold = guard.hold();
        if let Some(keeper) = &hold.data().keeper
            && let Some(at) = crate::keeper::next_extension(hold, valid_from)
        {
            keeper.schedule(hold, at);
        }
        Ok(RedisGuard(guard))
    }
}

/// The Redis protocol behind the session's hold table: a hold is given back
/// by the release script (compare-and-delete on the owner token, then the
/// hand-off to the next waiter).
impl HoldBackend for SessionInner {
    type Data = RedisHold;

    fn holds(&self) -> &HoldTable<RedisHold> {
        &self.holds
    }

    /// Owner tokens are unique per grant, so a new acquire of this session
    /// cannot collide with this release: the gate is not kept.
    async fn give_back(&self, hold: GiveBack<RedisHold>) -> Result<bool, LockError> {
        let redis = hold.data();
        redis.stop_watchdog();
        if redis.ended.swap(true, Ordering::SeqCst) {
            // Already expired on purpose (`expire_session`).
            return Ok(false);
        }
        match self
            .client
            .release_call(&redis.keys, &redis.token, hold.mode(), false)
            .await
        {
            Ok(released) => Ok(released),
            Err(error) => {
                // Retry in the background like an abandoned attempt: the
                // compare-and-delete is safe to repeat.
                drop(AttemptCleanup {
                    client: self.client.clone(),
                    attempt: Attempt {
                        keys: redis.keys.clone(),
                        token: redis.token.clone(),
                        lease: String::new(),
                        holder: String::new(),
                        mode: hold.mode(),
                        ttl: self.options.ttl(),
                        lock_delay: Duration::ZERO,
                        waiter_ttl: Duration::ZERO,
                        channel: String::new(),
                    },
                    armed: true,
                    in_flight: maybe_applied(&error),
                });
                Err(error)
            }
        }
    }

    fn spawn(&self, task: Task) {
        match Handle::try_current().ok().or_else(|| self.runtime.clone()) {
            Some(runtime) => self.client.inner.cleanups.spawn(&runtime, task),
            // No runtime to release from: the lease runs out by itself.
            None => tracing::warn!(
                backend = BACKEND,
                "guard dropped outside a runtime; the hold expires with its TTL"
            ),
        }
    }
}
