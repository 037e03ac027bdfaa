//! [`RedlockClient`] and [`Redlock`]: a lock over N independent masters
//! whose grants carry a quorum-minted generation.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use futures::future::join_all;
use futures::stream::FuturesUnordered;
use palisade_core::holds::{HoldTable, Turn, Waiters};
use palisade_core::{
    FloorRaised, Generation, LeaseState, LeaseTracker, Lock, LockError, LockGuard, LockName,
    LostReason, Mode, Obtain, RaiseFloor, RaiseFloorError, Sequencer, SessionOptions,
};
use tokio::time::Instant;

use super::RedlockConfig;
use super::floor::{MintError, mint};
use super::guard::{RedlockGuard, RedlockHold, follow_members};
use crate::error::BACKEND;
use crate::{RedisGuard, RedisLock, RedisLockClient, RedisLockError};

/// How many minting rounds one grant tries before giving its masters back.
const MINT_ROUNDS: usize = 5;
/// The first pause before a master that failed is asked again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// A client of N independent Redis masters (one [`RedisLockClient`] per
/// master). Cheap to clone.
#[derive(Clone, Debug)]
pub struct RedlockClient {
    inner: Arc<ClientInner>,
}

#[derive(Debug)]
struct ClientInner {
    config: RedlockConfig,
    /// One per configured master, in order; `None` for a master that could
    /// not be reached at connect (it takes no part: the others must still
    /// form a majority of all N).
    masters: Vec<Option<RedisLockClient>>,
    issuer: String,
    client_id: String,
    sessions: AtomicU64,
    /// Waiters per lock over this client's sessions (each master's client
    /// bounds its own too).
    waiters: Waiters,
}

impl RedlockClient {
    /// Connects to every master at once. Succeeds if a majority connected;
    /// the others are left out for this client's life (logged).
    pub async fn connect(config: RedlockConfig) -> Result<Self, RedisLockError> {
        config.validate()?;
        let attempts = join_all(config.masters.iter().map(|master| {
            // The per-master sequencers are never handed out; they carry
            // no signature and a fixed issuer.
            RedisLockClient::connect(master.clone().with_issuer("redlock-member"))
        }))
        .await;
        let mut masters = Vec::with_capacity(attempts.len());
        let mut first_error = None;
        for (attempt, master) in attempts.into_iter().zip(&config.masters) {
            match attempt {
                Ok(client) => masters.push(Some(client)),
                Err(error) => {
                    tracing::warn!(backend = BACKEND, master = %palisade_core::redact::redact_url(&master.urls()[0]), %error, "Redlock master unreachable at connect; left out");
                    first_error.get_or_insert(error);
                    masters.push(None);
                }
            }
        }
        let connected = masters.iter().flatten().count();
        if connected < config.majority() {
            return Err(
                first_error.unwrap_or_else(|| RedisLockError::InvalidConfig {
                    reason: "no master connected".into(),
                }),
            );
        }
        let issuer = match (&config.issuer, &config.signer) {
            (Some(issuer), _) => issuer.clone(),
            (None, Some(signer)) => signer.issuer().to_owned(),
            (None, None) => {
                let mut hosts = Vec::new();
                for master in &config.masters {
                    hosts.push(crate::connection::host_port(&master.urls()[0])?);
                }
                let issuer = format!("redlock@{}", hosts.join(","));
                // The sequencer's issuer field is at most 128 bytes.
                issuer.chars().take(128).collect()
            }
        };
        Ok(RedlockClient {
            inner: Arc::new(ClientInner {
                config,
                masters,
                issuer,
                client_id: format!("{:016x}", rand::random::<u64>()),
                sessions: AtomicU64::new(0),
                waiters: Waiters::default(),
            }),
        })
    }

    /// Opens a session with `options` (its own holder identity, re-entry
    /// scope and lease settings): one session per master underneath.
    pub fn session(&self, options: SessionOptions) -> Result<Redlock, RedisLockError> {
        options
            .validate()
            .map_err(|reason| RedisLockError::InvalidConfig { reason })?;
        let mut members = Vec::with_capacity(self.inner.masters.len());
        for master in &self.inner.masters {
            members.push(match master {
                Some(client) => Some(client.session(options.clone())?),
                None => None,
            });
        }
        let number = self.inner.sessions.fetch_add(1, Ordering::Relaxed);
        Ok(Redlock {
            inner: Arc::new(RedlockSessionInner::new(
                self.clone(),
                format!("{}.{number}", self.inner.client_id),
                options,
                members,
            )),
        })
    }

    /// The issuer put in every sequencer.
    pub fn issuer(&self) -> &str {
        &self.inner.issuer
    }

    /// The configuration.
    pub fn config(&self) -> &RedlockConfig {
        &self.inner.config
    }

    /// How many masters a grant needs.
    pub fn majority(&self) -> usize {
        self.inner.config.majority()
    }

    /// How many masters this client reached at connect.
    pub fn masters_connected(&self) -> usize {
        self.inner.masters.iter().flatten().count()
    }

    /// Each master's generation floor for `name` as it is now (`None` for
    /// a master that did not answer; `Some(0)` for one that has none).
    pub async fn generation_floors(&self, name: &LockName) -> Vec<Option<u64>> {
        super::floor::read_floors(&self.inner.masters, name).await
    }
}

/// Raising the floor on every master: the quorum-minted generation then
/// starts above the mark (`redlock/floor.rs`).
impl RaiseFloor for RedlockClient {
    async fn raise_floor(
        &self,
        name: &LockName,
        mark: u64,
    ) -> Result<FloorRaised, RaiseFloorError> {
        super::floor::raise(&self.inner.masters, self.majority(), name, mark).await
    }
}

/// A lock session over N Redis masters (Redlock), with a generation that a
/// majority of masters accepted by compare-and-set: the [`Lock`]
/// implementation. Cheap to clone (clones are the same session).
///
/// A grant holds the lock (the single-master scripts: FIFO queue, shared
/// mode, lock-delay, watchdog) on a majority of masters, then mints the
/// generation (`redlock/floor.rs`); its lease is valid while a majority of
/// its per-master leases are, less the clock drift allowance.
#[derive(Clone, Debug)]
pub struct Redlock {
    pub(crate) inner: Arc<RedlockSessionInner>,
}

#[derive(Debug)]
pub struct RedlockSessionInner {
    client: RedlockClient,
    holder: String,
    options: SessionOptions,
    /// One single-master session per master (`None`: not connected).
    members: Vec<Option<RedisLock>>,
    /// The session's holds. Acquires of one name by this session go one at
    /// a time, so the second re-enters the first's hold.
    holds: HoldTable<RedlockHold>,
}

impl RedlockSessionInner {
    fn new(
        client: RedlockClient,
        holder: String,
        options: SessionOptions,
        members: Vec<Option<RedisLock>>,
    ) -> Self {
        let holds = HoldTable::new(BACKEND, &options, client.inner.waiters.clone());
        RedlockSessionInner {
            client,
            holder,
            options,
            members,
            holds,
        }
    }

    pub(crate) fn holds(&self) -> &HoldTable<RedlockHold> {
        &self.holds
    }
}

type MemberAttempt = Pin<Box<dyn Future<Output = (usize, Result<RedisGuard, LockError>)> + Send>>;

impl Redlock {
    /// Connects a client to `urls` (one per master) and opens a session.
    pub async fn connect<I, S>(urls: I, options: SessionOptions) -> Result<Self, RedisLockError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedlockClient::connect(RedlockConfig::new(urls))
            .await?
            .session(options)
    }

    /// This session without the per-master watchdogs: each hold lapses one
    /// TTL after its grant. The "holder outlives its TTL" setting of the
    /// fencing tests. Must be called before the first acquire.
    #[cfg(feature = "testing")]
    pub fn without_watchdog(self) -> Self {
        let inner = &self.inner;
        Redlock {
            inner: Arc::new(RedlockSessionInner::new(
                inner.client.clone(),
                inner.holder.clone(),
                inner.options.clone(),
                inner
                    .members
                    .iter()
                    .map(|member| member.clone().map(RedisLock::without_watchdog))
                    .collect(),
            )),
        }
    }

    /// The client this session runs on.
    pub fn client(&self) -> &RedlockClient {
        &self.inner.client
    }

    /// The public holder id put in this session's sequencers.
    pub fn holder_id(&self) -> &str {
        &self.inner.holder
    }

    /// Ends every hold of this session on every master *without* releasing,
    /// as a crash would: the guards report `Lost(Revoked)`, the lock-delay
    /// starts. Fails only if a majority of masters could not be told.
    pub async fn expire_session(&self) -> Result<(), LockError> {
        for hold in self.inner.holds.drain() {
            hold.tracker().lose(LostReason::Revoked);
        }
        let outcomes = join_all(
            self.inner
                .members
                .iter()
                .flatten()
                .map(RedisLock::expire_session),
        )
        .await;
        let done = outcomes.iter().filter(|outcome| outcome.is_ok()).count();
        if done < self.inner.client.majority() {
            if let Some(Err(error)) = outcomes.into_iter().find(Result::is_err) {
                return Err(error);
            }
        }
        Ok(())
    }
}

impl Obtain for Redlock {
    type Session = RedlockSessionInner;
    type Guard = RedlockGuard;

    fn session(&self) -> &Arc<RedlockSessionInner> {
        &self.inner
    }

    async fn take(
        &self,
        turn: Turn<RedlockSessionInner>,
    ) -> Result<Option<RedlockGuard>, LockError> {
        let (name, mode, wait) = (&turn.name().clone(), turn.mode(), turn.patience().waits());
        let mut pauses =
            palisade_core::retry_pauses(Duration::from_millis(20), Duration::from_millis(200));
        loop {
            let members = if wait {
                self.inner.hold_majority(name, mode).await?
            } else {
                match self.inner.try_majority(name, mode).await? {
                    Some(members) => members,
                    None => return Ok(None),
                }
            };
            match self.inner.mint(name, mode, members).await {
                Ok((sequencer, tracker, hold)) => {
                    let guard = turn.grant(sequencer, tracker, hold)?;
                    tracing::debug!(backend = BACKEND, lock = %name, %mode, generation = %guard.generation(), "redlock granted");
                    return Ok(Some(RedlockGuard(guard)));
                }
                Err(Retry::Again(why)) if wait => {
                    let pause = pauses.next().unwrap_or(Duration::from_millis(200));
                    tracing::debug!(backend = BACKEND, lock = %name, why, ?pause, "redlock grant abandoned; trying again");
                    tokio::time::sleep(pause).await;
                }
                Err(Retry::Again(_)) => return Ok(None),
                Err(Retry::Fail(error)) => return Err(error),
            }
        }
    }
}

/// Why a majority of per-master holds did not become a grant.
enum Retry {
    /// Not granted this time (validity ran out, a concurrent mint won).
    Again(&'static str),
    Fail(LockError),
}

/// `base` plus up to half of it again, at random.
fn jitter(base: Duration) -> Duration {
    base + base.mul_f64(rand::random::<f64>() / 2.0)
}

async fn give_back_all(guards: Vec<RedisGuard>) {
    join_all(guards.into_iter().map(LockGuard::release)).await;
}

impl RedlockSessionInner {
    fn majority(&self) -> usize {
        self.client.majority()
    }

    fn drift(&self) -> Duration {
        self.client.inner.config.drift(self.options.ttl())
    }

    fn split_timeout(&self) -> Duration {
        self.client.inner.config.split_timeout.unwrap_or_else(|| {
            (self.options.ttl() / 8).clamp(Duration::from_millis(50), Duration::from_millis(500))
        })
    }

    fn member_attempt(
        &self,
        index: usize,
        name: &LockName,
        mode: Mode,
        after: Duration,
    ) -> MemberAttempt {
        let member = self.members[index].clone();
        let name = name.clone();
        Box::pin(async move {
            if !after.is_zero() {
                tokio::time::sleep(after).await;
            }
            let result = match member {
                Some(member) => member.acquire(&name, mode).await,
                None => Err(LockError::Unavailable {
                    backend: BACKEND,
                    source: "master not connected".into(),
                }),
            };
            (index, result)
        })
    }

    /// Waits (queued on every master) until a majority granted the lock.
    ///
    /// A waiter holding some masters but not a majority gives them back
    /// after the split timeout and queues there again, so waiters split
    /// across masters cannot wait for each other forever. A master that
    /// fails is asked again after a pause; if a majority is failing at
    /// once, the acquire fails.
    async fn hold_majority(
        &self,
        name: &LockName,
        mode: Mode,
    ) -> Result<Vec<RedisGuard>, LockError> {
        let total = self.members.len();
        let majority = self.majority();
        let mut pending: FuturesUnordered<MemberAttempt> = FuturesUnordered::new();
        let mut failing = vec![false; total];
        let fresh = || palisade_core::retry_pauses(RETRY_PAUSE, Duration::from_secs(1));
        let mut pauses: Vec<_> = (0..total).map(|_| fresh()).collect();
        for (index, member) in self.members.iter().enumerate() {
            match member {
                Some(_) => pending.push(self.member_attempt(index, name, mode, Duration::ZERO)),
                None => failing[index] = true,
            }
        }
        let mut granted: Vec<(usize, RedisGuard)> = Vec::new();
        let mut split_deadline: Option<Instant> = None;
        let mut last_error = None;
        loop {
            if granted.len() >= majority {
                return Ok(granted.into_iter().map(|(_, guard)| guard).collect());
            }
            if failing.iter().filter(|failing| **failing).count() > total - majority {
                give_back_all(granted.into_iter().map(|(_, guard)| guard).collect()).await;
                return Err(last_error.unwrap_or_else(|| LockError::Unavailable {
                    backend: BACKEND,
                    source: "fewer than a majority of masters are reachable".into(),
                }));
            }
            let split = async {
                match split_deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some((index, result)) = pending.next() => match result {
                    Ok(guard) => {
                        failing[index] = false;
                        pauses[index] = fresh();
                        granted.push((index, guard));
                        split_deadline.get_or_insert_with(|| Instant::now() + jitter(self.split_timeout()));
                    }
                    Err(error) if matches!(error, LockError::Busy { .. } | LockError::ModeConflict { .. }) => {
                        give_back_all(granted.into_iter().map(|(_, guard)| guard).collect()).await;
                        return Err(error);
                    }
                    Err(error) => {
                        tracing::debug!(backend = BACKEND, lock = %name, master = index, %error, "master failed; asking again after a pause");
                        failing[index] = true;
                        let pause = pauses[index].next().unwrap_or(RETRY_PAUSE);
                        pending.push(self.member_attempt(index, name, mode, pause));
                        last_error = Some(error);
                    }
                },
                () = split => {
                    tracing::debug!(backend = BACKEND, lock = %name, held = granted.len(), "split between waiters: giving back a minority and queueing again");
                    split_deadline = None;
                    for (index, guard) in std::mem::take(&mut granted) {
                        let _ = guard.release().await;
                        pending.push(self.member_attempt(index, name, mode, Duration::ZERO));
                    }
                }
            }
        }
    }

    /// `try_acquire` on every master at once: the grants if a majority
    /// granted, `None` (after giving the minority back) otherwise.
    async fn try_majority(
        &self,
        name: &LockName,
        mode: Mode,
    ) -> Result<Option<Vec<RedisGuard>>, LockError> {
        let outcomes = join_all(self.members.iter().map(|member| async move {
            match member {
                Some(member) => member.try_acquire(name, mode).await,
                None => Err(LockError::Unavailable {
                    backend: BACKEND,
                    source: "master not connected".into(),
                }),
            }
        }))
        .await;
        let (mut granted, mut failures) = (Vec::new(), Vec::new());
        for outcome in outcomes {
            match outcome {
                Ok(Some(guard)) => granted.push(guard),
                Ok(None) => {}
                Err(error) => failures.push(error),
            }
        }
        if granted.len() >= self.majority() {
            return Ok(Some(granted));
        }
        give_back_all(granted).await;
        if failures.len() > self.members.len() - self.majority() {
            return Err(failures.remove(0));
        }
        Ok(None)
    }

    /// The deadline a majority of `members`' leases guarantee, less drift.
    fn quorum_deadline(&self, members: &[RedisGuard]) -> Option<Instant> {
        let mut held: Vec<Instant> = members
            .iter()
            .filter_map(|member| match member.lease().state() {
                LeaseState::Held { valid_until } => Some(valid_until),
                _ => None,
            })
            .collect();
        if held.len() < self.majority() {
            return None;
        }
        held.sort_unstable_by(|a, b| b.cmp(a));
        held[self.majority() - 1].checked_sub(self.drift())
    }

    /// Mints the generation for a majority of per-master holds: the
    /// sequencer, the lease that follows the members' and the hold, for
    /// the table to record; gives the members back if that fails.
    async fn mint(
        &self,
        name: &LockName,
        mode: Mode,
        members: Vec<RedisGuard>,
    ) -> Result<(Sequencer, Arc<LeaseTracker>, RedlockHold), Retry> {
        let masters = &self.client.inner.masters;
        let mut minted = Err(MintError::Contended { accepted: 0 });
        let mut pauses =
            palisade_core::retry_pauses(Duration::from_millis(2), Duration::from_millis(64));
        for _round in 0..MINT_ROUNDS {
            minted = mint(masters, self.majority(), name).await;
            match minted {
                Ok(_) | Err(MintError::NoQuorum { .. } | MintError::Exhausted { .. }) => break,
                // Shared holders mint side by side; the loser reads again.
                Err(MintError::Contended { .. }) => {
                    tokio::time::sleep(pauses.next().unwrap_or(Duration::from_millis(64))).await;
                }
            }
        }
        let generation = match minted {
            Ok(generation) => generation,
            Err(MintError::Contended { .. }) => {
                give_back_all(members).await;
                return Err(Retry::Again("another grant won the generation"));
            }
            Err(error) => {
                give_back_all(members).await;
                return Err(Retry::Fail(error.into_lock_error(name)));
            }
        };
        let Some(valid_until) = self
            .quorum_deadline(&members)
            .filter(|deadline| *deadline > Instant::now())
        else {
            give_back_all(members).await;
            return Err(Retry::Again(
                "validity ran out before the generation was minted",
            ));
        };
        let sequencer = match self.sequencer(name, mode, generation) {
            Ok(sequencer) => sequencer,
            Err(error) => {
                give_back_all(members).await;
                return Err(Retry::Fail(error));
            }
        };
        let tracker = Arc::new(LeaseTracker::new(valid_until));
        let follower = follow_members(
            tracker.clone(),
            members.iter().map(LockGuard::lease).collect(),
            self.majority(),
            self.drift(),
        );
        let hold = RedlockHold {
            members: Mutex::new(members),
            majority: self.majority(),
            follower,
        };
        Ok((sequencer, tracker, hold))
    }

    fn sequencer(
        &self,
        name: &LockName,
        mode: Mode,
        generation: u64,
    ) -> Result<Sequencer, LockError> {
        let generation = Generation::new(generation).ok_or_else(|| LockError::Backend {
            backend: BACKEND,
            source: "minted generation 0".into(),
        })?;
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_millis() as u64)
            .unwrap_or_default();
        let sequencer = Sequencer::new(name.clone(), mode, generation)
            .with_issuer(self.client.issuer())
            .and_then(|sequencer| sequencer.with_holder(&self.holder))
            .and_then(|sequencer| sequencer.with_lease(&format!("{:016x}", rand::random::<u64>())))
            .map_err(|error| LockError::Backend {
                backend: BACKEND,
                source: Box::new(error),
            })?
            .with_expiry_hint(now_ms + self.options.ttl().as_millis() as u64);
        Ok(match &self.client.inner.config.signer {
            Some(signer) => signer.sign(sequencer),
            None => sequencer,
        })
    }
}
