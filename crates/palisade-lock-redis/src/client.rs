//! The shared part of the backend: one connection, one inbox, the scripts,
//! the per-process waiter bound. Sessions, guards and the live check all
//! hang off a [`RedisLockClient`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use palisade_core::holds::Waiters;
use palisade_core::{
    FloorRaised, LockError, LockName, Mode, RaiseFloor, RaiseFloorError, SessionOptions,
};
use redis::Value;

use crate::cleanups::Cleanups;
use crate::connection::Connection;
use crate::error::{BACKEND, bad_reply};
use crate::inbox::Inbox;
use crate::keys::LockKeys;
use crate::scripts::ScriptName;
use crate::scripts::Scripts;
use crate::{GenerationScheme, RedisConfig, RedisLiveCheck, RedisLock, RedisLockError};

/// A connection to Redis shared by any number of lock sessions.
///
/// Cheap to clone. One per process is the normal shape: the waiter bound
/// ([`SessionOptions::max_waiters`]) is counted per client, and every
/// client holds one pub/sub subscription (its inbox).
///
/// ```no_run
/// use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
/// use palisade_lock_redis::{RedisConfig, RedisLockClient};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = RedisLockClient::connect(RedisConfig::new("redis://127.0.0.1:6379")).await?;
/// let session = client.session(SessionOptions::default())?;
/// let guard = session.acquire(&LockName::new("orders/42")?, Mode::Exclusive).await?;
/// println!("writing with {}", guard.sequencer()?);
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisLockClient {
    pub(crate) inner: Arc<ClientInner>,
}

#[derive(Debug)]
pub(crate) struct ClientInner {
    pub(crate) config: RedisConfig,
    pub(crate) connection: Connection,
    pub(crate) scripts: Scripts,
    /// Where this client's waiters hear about their grants.
    pub(crate) inbox: Inbox,
    /// Random, public: names the inbox and prefixes holder ids.
    pub(crate) client_id: String,
    /// Put in every sequencer.
    pub(crate) issuer: String,
    /// Waiters per lock in this client: the fail-fast bound, shared by
    /// the client's sessions' hold tables.
    pub(crate) waiters: Waiters,
    /// The highest generation this client has seen granted per lock. A grant
    /// at or below what was seen before its request was sent means Redis's
    /// counter went backwards (see
    /// [`LockError::GenerationRegression`]). Bounded: cleared when it grows
    /// past [`SEEN_CAPACITY`] names.
    seen: Mutex<HashMap<LockName, u64>>,
    sessions: AtomicU64,
    pub(crate) stats: Counters,
    /// The watchdog schedule of every hold of this client.
    pub(crate) keeper: Arc<crate::keeper::KeeperShared>,
    /// The watchdog task, stopped with the client.
    keeper_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Clean-ups running in the background (abandoned acquires, releases
    /// finishing after their future or guard was dropped).
    pub(crate) cleanups: Cleanups,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        if let Some(task) = self
            .keeper_task
            .lock()
            .map(|mut task| task.take())
            .ok()
            .flatten()
        {
            task.abort();
        }
    }
}

const SEEN_CAPACITY: usize = 100_000;

/// Counters of what a client has asked Redis, for benchmarks and metrics.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    acquire_calls: AtomicU64,
    granted_at_once: AtomicU64,
    queued: AtomicU64,
    handoffs: AtomicU64,
    rechecks: AtomicU64,
    release_calls: AtomicU64,
    extend_calls: AtomicU64,
}

impl Counters {
    pub(crate) fn count_handoff(&self) {
        self.handoffs.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_recheck(&self) {
        self.rechecks.fetch_add(1, Ordering::Relaxed);
    }
}

/// A snapshot of a client's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Acquire script calls (first attempts, re-checks and try-acquires).
    pub acquire_calls: u64,
    /// Acquire calls that were granted on the spot.
    pub granted_at_once: u64,
    /// Acquire calls that queued the caller.
    pub queued: u64,
    /// Grants received by hand-off (a notification in the inbox).
    pub handoffs: u64,
    /// Acquire calls made by a waiter that was already queued: re-checks
    /// after a timeout, a `recheck` notice or a lost subscription.
    pub rechecks: u64,
    /// Release script calls.
    pub release_calls: u64,
    /// Extend (watchdog) script calls.
    pub extend_calls: u64,
}

/// What the acquire script said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The token holds the lock with this generation.
    Granted { generation: u64, server_ms: u64 },
    /// The token is queued; look again within `hint` if nothing arrives.
    Queued { hint: Option<Duration> },
    /// Not granted, not queued (try-acquire).
    NotGranted,
}

/// The arguments of one acquire attempt, fixed for its lifetime.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    pub(crate) keys: LockKeys,
    pub(crate) token: String,
    pub(crate) lease: String,
    pub(crate) holder: String,
    pub(crate) mode: Mode,
    pub(crate) ttl: Duration,
    pub(crate) lock_delay: Duration,
    pub(crate) waiter_ttl: Duration,
    /// Where a hand-off is published for this attempt, recorded in its
    /// queue entry.
    pub(crate) channel: String,
}

pub(crate) fn mode_arg(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "x",
        Mode::Shared => "s",
    }
}

fn millis(duration: Duration) -> String {
    duration.as_millis().max(1).to_string()
}

impl RedisLockClient {
    /// Connects to Redis, loads the scripts and subscribes the inbox.
    pub async fn connect(config: RedisConfig) -> Result<Self, RedisLockError> {
        config.validate()?;
        let connection = Connection::connect(&config).await?;
        let scripts = Scripts::new();
        connection
            .load_scripts(&scripts, config.response_timeout)
            .await?;
        let client_id = format!("{:016x}", rand::random::<u64>());
        let inbox = Inbox::start(&config, &client_id).await?;
        let issuer = match config.issuer() {
            Some(issuer) => issuer.to_owned(),
            None => format!(
                "redis@{}",
                crate::connection::host_port(&config.endpoints[0])?
            ),
        };
        tracing::debug!(backend = BACKEND, %client_id, %issuer, cluster = config.is_cluster(), "connected");
        let keeper = Arc::new(crate::keeper::KeeperShared::default());
        let inner = Arc::new(ClientInner {
            config,
            connection,
            scripts,
            inbox,
            client_id,
            issuer,
            waiters: Waiters::default(),
            seen: Mutex::default(),
            sessions: AtomicU64::new(0),
            stats: Counters::default(),
            keeper: keeper.clone(),
            keeper_task: Mutex::new(None),
            cleanups: Cleanups::default(),
        });
        let task = crate::keeper::start(Arc::downgrade(&inner), keeper);
        *inner.keeper_task.lock().expect("keeper task poisoned") = Some(task);
        Ok(RedisLockClient { inner })
    }

    /// Opens a lock session with `options` (its own holder identity,
    /// re-entry scope and lease settings), with the watchdog on.
    pub fn session(&self, options: SessionOptions) -> Result<RedisLock, RedisLockError> {
        options
            .validate()
            .map_err(|reason| RedisLockError::InvalidConfig { reason })?;
        let number = self.inner.sessions.fetch_add(1, Ordering::Relaxed);
        let holder = format!("{}.{number}", self.inner.client_id);
        Ok(RedisLock::new(self.clone(), options, holder))
    }

    /// A live check (Chubby's CheckSequencer) for resource servers.
    pub fn live_check(&self) -> RedisLiveCheck {
        RedisLiveCheck::new(self.clone())
    }

    /// The issuer id put in this client's sequencers.
    pub fn issuer(&self) -> &str {
        &self.inner.issuer
    }

    /// The configuration.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    /// The keys of `name` under this client's prefix.
    pub fn keys(&self, name: &LockName) -> LockKeys {
        LockKeys::new(&self.inner.config.key_prefix, name)
    }

    /// Waits until every clean-up this client runs in the background has
    /// finished: the queue entry of an abandoned acquire (a dropped or
    /// timed-out future) removed, the release of a dropped guard done.
    /// Call it before the process exits: an entry left behind holds up the
    /// waiters queued after it until its TTL runs out. Each clean-up gives
    /// up by itself once what it removes would have expired anyway.
    pub async fn settle(&self) {
        self.inner.cleanups.settled().await;
    }

    /// A snapshot of what this client has asked Redis so far.
    pub fn stats(&self) -> ClientStats {
        let stats = &self.inner.stats;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ClientStats {
            acquire_calls: load(&stats.acquire_calls),
            granted_at_once: load(&stats.granted_at_once),
            queued: load(&stats.queued),
            handoffs: load(&stats.handoffs),
            rechecks: load(&stats.rechecks),
            release_calls: load(&stats.release_calls),
            extend_calls: load(&stats.extend_calls),
        }
    }

    /// The generation counter of `name` as Redis has it now (`None` if it
    /// does not exist: never granted, or lost with Redis's data).
    pub async fn generation_counter(&self, name: &LockName) -> Result<Option<u64>, LockError> {
        let keys = self.keys(name);
        let timeout = self.inner.config.response_timeout;
        let mut get = redis::cmd("GET");
        get.arg(keys.generation());
        let reply = tokio::time::timeout(timeout * 2, self.inner.connection.query(&get))
            .await
            .map_err(|_elapsed| LockError::BackendTimeout {
                backend: BACKEND,
                operation: "get generation",
                after: timeout * 2,
            })?
            .map_err(|error| crate::error::from_redis("get generation", timeout, error))?;
        match reply {
            Value::Nil => Ok(None),
            Value::BulkString(bytes) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(|text| text.parse().ok())
                .map(Some)
                .ok_or_else(|| bad_reply("get generation", &Value::BulkString(bytes.clone()))),
            other => Err(bad_reply("get generation", &other)),
        }
    }

    /// Raises the generation counter of `name` so that the next grant is
    /// above `mark`: the recovery path after Redis lost the counter. A thin
    /// call of [`RaiseFloor::raise_floor`], answering the counter
    /// afterwards.
    ///
    /// Feed it the current mark from a resource server's refusal (the 409
    /// body carries it) or any generation known to have been honoured.
    /// Raising is idempotent and never lowers the counter. Marks at or
    /// above 2^53 - 1 are refused: no generation this backend issues gets
    /// there, so such a mark is forged or from another issuer.
    ///
    /// ```no_run
    /// # use palisade_core::LockName;
    /// # async fn run(client: palisade_lock_redis::RedisLockClient) -> Result<(), palisade_core::LockError> {
    /// // The resource server refused generation 3 with "current mark 1700000000000123".
    /// client.raise_floor(&LockName::new("orders/42").unwrap(), 1_700_000_000_000_123).await?;
    /// # Ok(()) }
    /// ```
    pub async fn raise_floor(&self, name: &LockName, mark: u64) -> Result<u64, LockError> {
        match RaiseFloor::raise_floor(self, name, mark).await {
            Ok(raised) => Ok(raised.after),
            Err(RaiseFloorError::Lock(error)) => Err(error),
            Err(refused) => Err(LockError::Backend {
                backend: BACKEND,
                source: Box::new(refused),
            }),
        }
    }

    pub(crate) async fn eval_script(
        &self,
        script: &crate::scripts::LuaScript,
        keys: &LockKeys,
        args: &[&str],
    ) -> Result<Value, LockError> {
        self.inner
            .connection
            .eval(script, keys, args, self.inner.config.response_timeout)
            .await
    }

    fn clock_arg(&self) -> &'static str {
        match self.inner.config.generation_scheme {
            GenerationScheme::ServerClock => "1",
            GenerationScheme::Counter => "0",
        }
    }

    /// Runs the acquire script for `attempt`.
    pub(crate) async fn acquire_call(
        &self,
        attempt: &Attempt,
        enqueue: bool,
    ) -> Result<AcquireReply, LockError> {
        let stats = &self.inner.stats;
        stats.acquire_calls.fetch_add(1, Ordering::Relaxed);
        let ttl = millis(attempt.ttl);
        let delay = attempt.lock_delay.as_millis().to_string();
        let waiter_ttl = millis(attempt.waiter_ttl);
        let args = [
            attempt.token.as_str(),
            mode_arg(attempt.mode),
            &ttl,
            &delay,
            &attempt.lease,
            &attempt.holder,
            &attempt.channel,
            if enqueue { "1" } else { "0" },
            &waiter_ttl,
            self.clock_arg(),
        ];
        let reply = self
            .eval_script(
                &self.inner.scripts[ScriptName::Acquire],
                &attempt.keys,
                &args,
            )
            .await?;
        let Value::Array(items) = &reply else {
            return Err(bad_reply("acquire", &reply));
        };
        let numbers: Vec<i64> = items.iter().filter_map(as_i64).collect();
        match numbers.as_slice() {
            [1, generation, server_ms] if *generation > 0 && *server_ms >= 0 => {
                stats.granted_at_once.fetch_add(1, Ordering::Relaxed);
                Ok(AcquireReply::Granted {
                    generation: *generation as u64,
                    server_ms: *server_ms as u64,
                })
            }
            [0, hint] => {
                stats.queued.fetch_add(1, Ordering::Relaxed);
                Ok(AcquireReply::Queued {
                    hint: (*hint > 0).then(|| Duration::from_millis(*hint as u64)),
                })
            }
            [-1, _] => Ok(AcquireReply::NotGranted),
            _ => Err(bad_reply("acquire", &reply)),
        }
    }

    /// Runs the release script: drops `token`'s hold and, with `dequeue`
    /// (an abandoned attempt), its queue entry. `Ok(true)` if it held the
    /// lock.
    pub(crate) async fn release_call(
        &self,
        keys: &LockKeys,
        token: &str,
        mode: Mode,
        dequeue: bool,
    ) -> Result<bool, LockError> {
        self.inner
            .stats
            .release_calls
            .fetch_add(1, Ordering::Relaxed);
        let reply = self
            .eval_script(
                &self.inner.scripts[ScriptName::Release],
                keys,
                &[
                    token,
                    mode_arg(mode),
                    self.clock_arg(),
                    if dequeue { "1" } else { "0" },
                ],
            )
            .await?;
        as_flag(&reply).ok_or_else(|| bad_reply("release", &reply))
    }

    /// Runs the extend script (compare-and-PEXPIRE). `Ok(true)` if extended.
    pub(crate) async fn extend_call(
        &self,
        keys: &LockKeys,
        token: &str,
        mode: Mode,
        options: &SessionOptions,
    ) -> Result<bool, LockError> {
        self.inner
            .stats
            .extend_calls
            .fetch_add(1, Ordering::Relaxed);
        let ttl = millis(options.ttl());
        let delay = options.lock_delay().as_millis().to_string();
        let reply = self
            .eval_script(
                &self.inner.scripts[ScriptName::Extend],
                keys,
                &[token, mode_arg(mode), &ttl, &delay],
            )
            .await?;
        as_flag(&reply).ok_or_else(|| bad_reply("extend", &reply))
    }

    /// Runs the expire script: ends `token`'s hold as a crash would.
    pub(crate) async fn expire_call(
        &self,
        keys: &LockKeys,
        token: &str,
        mode: Mode,
    ) -> Result<bool, LockError> {
        let reply = self
            .eval_script(
                &self.inner.scripts[ScriptName::Expire],
                keys,
                &[token, mode_arg(mode), self.clock_arg()],
            )
            .await?;
        as_flag(&reply).ok_or_else(|| bad_reply("expire", &reply))
    }

    /// Runs the check script for the live check.
    pub(crate) async fn check_call(
        &self,
        keys: &LockKeys,
        mode: Mode,
        generation: u64,
        lease: Option<&str>,
    ) -> Result<bool, LockError> {
        let generation = generation.to_string();
        let reply = self
            .eval_script(
                &self.inner.scripts[ScriptName::Check],
                keys,
                &[mode_arg(mode), &generation, lease.unwrap_or("")],
            )
            .await?;
        as_flag(&reply).ok_or_else(|| bad_reply("check", &reply))
    }

    /// The highest generation of `name` this client has seen granted so far.
    ///
    /// Taken when a request is *sent*: a grant made for that request comes
    /// after every grant seen before, so its generation must be above this.
    /// (Comparing with the highest seen at *install* time would misfire
    /// when two grants of one client, say two shared holders, are installed
    /// in the other order.)
    pub(crate) fn generation_floor(&self, name: &LockName) -> u64 {
        self.inner
            .seen
            .lock()
            .expect("seen generations poisoned")
            .get(name)
            .copied()
            .unwrap_or(0)
    }

    /// Records a generation seen granted (or known honoured).
    pub(crate) fn observe_generation(&self, name: &LockName, generation: u64) {
        let mut seen = self.inner.seen.lock().expect("seen generations poisoned");
        if !seen.contains_key(name) && seen.len() >= SEEN_CAPACITY {
            seen.clear();
        }
        let highest = seen.entry(name.clone()).or_insert(0);
        *highest = (*highest).max(generation);
    }
}

/// Raising a lock's counter: one script, `SET` to the mark if it is
/// higher, in the lock's hash slot.
impl RaiseFloor for RedisLockClient {
    async fn raise_floor(
        &self,
        name: &LockName,
        mark: u64,
    ) -> Result<FloorRaised, RaiseFloorError> {
        crate::scripts::refuse_unreachable_mark(mark)?;
        let keys = self.keys(name);
        let mark_text = mark.to_string();
        let reply = self
            .eval_script(
                &self.inner.scripts[ScriptName::RaiseFloor],
                &keys,
                &[&mark_text],
            )
            .await?;
        let (before, after) = match &reply {
            Value::Array(items) => match items.as_slice() {
                [before, after] => as_u64(before).zip(as_u64(after)),
                _ => None,
            },
            _ => None,
        }
        .ok_or_else(|| bad_reply("raise_floor", &reply))?;
        self.observe_generation(name, mark);
        tracing::info!(backend = BACKEND, lock = %name, mark, before, after, "generation floor raised");
        Ok(FloorRaised::new(before, after))
    }
}

fn as_i64(value: &Value) -> Option<i64> {
    match value {
        Value::Int(number) => Some(*number),
        _ => None,
    }
}

fn as_u64(value: &Value) -> Option<u64> {
    as_i64(value).and_then(|number| u64::try_from(number).ok())
}

fn as_flag(value: &Value) -> Option<bool> {
    match as_i64(value)? {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}
