//! The [`Guard`]: its configuration and the one procedure that decides
//! about a request.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;
use axum::http::request::Parts;
use palisade_core::{LockName, Mode, RaiseCap, Sequencer, Verifier};
use palisade_store::Refused;

use crate::fenced::{Fenced, Permit, Verdict};
use crate::lock_table::LockTable;
use crate::mark_store::DynMarkStore;
use crate::metrics::GuardMetrics;
use crate::{
    Admission, FencingMode, GuardError, GuardLayer, LockSource, MarkStore, MetricsSnapshot,
    ReadPolicy,
};

/// The fencing configuration and state of a service: a mark store, how
/// requests name their lock, signatures, the raise cap, the read policy,
/// the per-lock locks and the counters.
///
/// Cheap to clone: clones share everything. Build one with
/// [`Guard::builder`], then put it in front of routes with
/// [`Guard::layer`] (or in an `Extension` for the [`Fenced`] extractor
/// alone).
///
/// # Order of checks
///
/// When several things are wrong, the first in this list wins (the
/// Palisade server's order, with the signature right after parsing so that
/// nothing about an unauthenticated sequencer is looked at further):
///
/// 1. reads under [`ReadPolicy::Unfenced`] pass;
/// 2. the route's lock (`400 bad_lock_name`);
/// 3. the header: absent (`400 missing_sequencer`, or an unfenced pass for
///    an optional read), twice, not visible ASCII or not a `v1` sequencer
///    (`400 malformed_sequencer`);
/// 4. the signature, when required (`401 unsigned`/`unknown_key`/
///    `bad_signature`, `403 wrong_issuer`);
/// 5. the lock against the route (`422 lock_mismatch`);
/// 6. a shared sequencer on a write (`403 shared_on_write`);
/// 7. in serialised mode, the per-lock lock is taken here;
/// 8. the raise cap, when configured (`409 raise_too_large`);
/// 9. in serialised mode, the mark store (`409 stale`; `503
///    storage_unavailable` if it fails).
#[derive(Clone)]
pub struct Guard {
    inner: Arc<Inner>,
}

struct Inner {
    /// The high-water marks. In serialised mode every admitted request
    /// raises them before its handler runs; in transaction mode they are
    /// read only for the raise cap (the handler's store transaction raises
    /// them).
    marks: Box<dyn DynMarkStore>,
    mode: FencingMode,
    lock_source: LockSource,
    /// When set, every sequencer must be signed by one of its keys (and
    /// come from one of its issuers, if it names any) before anything else
    /// about it is believed. This is what keeps a forged `u64::MAX` from
    /// moving a mark.
    verifier: Option<Verifier>,
    /// When set, a generation further above the lock's marks than the cap
    /// allows is refused: a buggy (or compromised) issuer cannot jump a
    /// mark out of every honest holder's reach in one request.
    raise_cap: Option<RaiseCap>,
    reads: ReadPolicy,
    /// One read-write lock per lock name with requests in flight
    /// (serialised mode).
    table: Arc<LockTable>,
    metrics: GuardMetrics,
}

/// Builds a [`Guard`]. Defaults: [`FencingMode::Serialised`], the lock is
/// the `{lock}` path parameter, no signatures, no raise cap,
/// [`ReadPolicy::Optional`].
#[must_use]
pub struct GuardBuilder {
    marks: Box<dyn DynMarkStore>,
    mode: FencingMode,
    lock_source: LockSource,
    verifier: Option<Verifier>,
    max_raise: Option<u64>,
    max_raise_time: Option<Duration>,
    reads: ReadPolicy,
}

impl GuardBuilder {
    /// Serialised (default) or store-transaction fencing; see
    /// [`FencingMode`] for what each guarantees.
    pub fn mode(mut self, mode: FencingMode) -> Self {
        self.mode = mode;
        self
    }

    /// How a request names its lock (default: the `{lock}` path parameter).
    pub fn lock_source(mut self, source: LockSource) -> Self {
        self.lock_source = source;
        self
    }

    /// Every request is under lock `name`.
    pub fn fixed_lock(self, name: LockName) -> Self {
        self.lock_source(LockSource::fixed(name))
    }

    /// The lock is the route's path parameter `param`.
    pub fn lock_from_path_param(self, param: &str) -> Self {
        self.lock_source(LockSource::path_param(param))
    }

    /// Requires every sequencer to verify under `verifier`: unsigned, badly
    /// signed, unknown key (401) and untrusted issuer (403) are refused
    /// before the mark store is asked, so the mark never moves for them.
    pub fn require_signatures(mut self, verifier: Verifier) -> Self {
        self.verifier = Some(verifier);
        self
    }

    /// Refuses (`409 raise_too_large`) a generation more than `max_raise`
    /// above the lock's highest mark, `max(H_excl, H_shared)`, when that
    /// mark is a counter (etcd revisions, Redis's counter scheme); a clock
    /// generation (Redis's default scheme), or the first generation of a
    /// lock with no mark, more than [`GuardBuilder::max_raise_time`] ahead
    /// of this machine's clock. Off by default. [`RaiseCap`] says how the
    /// mark tells the two apart.
    ///
    /// It guards against a buggy issuer, not a forger (signatures do that):
    /// an issuer whose generations jump by 10^18 would otherwise fence every
    /// honest holder out for good, since marks never go down. Pick a cap
    /// above the largest honest jump of a counter: with etcd that is the
    /// number of cluster-wide revisions between two grants of the lock.
    pub fn max_raise(mut self, max_raise: u64) -> Self {
        self.max_raise = Some(max_raise);
        self
    }

    /// With [`GuardBuilder::max_raise`]: how far ahead of this machine's
    /// clock a clock generation may be (default one hour). It must exceed
    /// the clock difference between the lock service and this machine.
    pub fn max_raise_time(mut self, clock_lead: Duration) -> Self {
        self.max_raise_time = Some(clock_lead);
        self
    }

    /// What reads (the safe methods: `GET`, `HEAD`, `OPTIONS`, `TRACE`)
    /// need (default: [`ReadPolicy::Optional`]).
    pub fn reads(mut self, reads: ReadPolicy) -> Self {
        self.reads = reads;
        self
    }

    /// The guard.
    pub fn build(self) -> Guard {
        Guard {
            inner: Arc::new(Inner {
                marks: self.marks,
                mode: self.mode,
                lock_source: self.lock_source,
                verifier: self.verifier,
                raise_cap: self.max_raise.map(|max_raise| {
                    RaiseCap::new(max_raise).with_clock_lead(
                        self.max_raise_time.unwrap_or(RaiseCap::DEFAULT_CLOCK_LEAD),
                    )
                }),
                reads: self.reads,
                table: Arc::new(LockTable::default()),
                metrics: GuardMetrics::default(),
            }),
        }
    }
}

/// What the decision saw before it refused, for the refusal's trace.
#[derive(Default)]
struct Seen {
    route_lock: Option<LockName>,
    sequencer: Option<Sequencer>,
}

impl Guard {
    /// A builder over `marks` with the defaults (see [`GuardBuilder`]).
    pub fn builder(marks: impl MarkStore) -> GuardBuilder {
        GuardBuilder {
            marks: Box::new(marks),
            mode: FencingMode::default(),
            lock_source: LockSource::default(),
            verifier: None,
            max_raise: None,
            max_raise_time: None,
            reads: ReadPolicy::default(),
        }
    }

    /// The tower layer that fences every request of the routes it wraps.
    pub fn layer(&self) -> GuardLayer {
        GuardLayer::new(self.clone())
    }

    /// The fencing mode.
    pub fn mode(&self) -> FencingMode {
        self.inner.mode
    }

    /// The counters so far.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    /// How many requests are waiting for an earlier request on `lock` to
    /// finish (serialised mode).
    pub fn waiting(&self, lock: &LockName) -> usize {
        self.inner.table.waiting(lock)
    }

    /// How many locks have requests in flight: the per-lock locks the guard
    /// holds in memory right now. It returns to 0 when the service is idle.
    pub fn locks_in_flight(&self) -> usize {
        self.inner.table.len()
    }

    /// Decides about one request: refused, passed unfenced, or admitted
    /// (with its per-lock lock held, in serialised mode). Counts and traces
    /// the decision.
    pub(crate) async fn check(&self, parts: &mut Parts) -> Result<Verdict, GuardError> {
        let mut seen = Seen::default();
        let decision = self.decide(parts, &mut seen).await;
        if let Err(error) = &decision {
            self.inner.metrics.refused(error.code());
            let lock = seen
                .sequencer
                .as_ref()
                .map(|s| s.lock().clone())
                .or(seen.route_lock);
            tracing::info!(
                target: "palisade_guard::fence",
                lock = lock.as_ref().map(|l| l.as_str()),
                mode = seen.sequencer.as_ref().map(|s| s.mode().as_str()),
                generation = seen.sequencer.as_ref().map(|s| s.generation().get()),
                method = %parts.method,
                decision = "refused",
                reason = error.code(),
                "refused: {error}"
            );
        }
        decision
    }

    async fn decide(&self, parts: &mut Parts, seen: &mut Seen) -> Result<Verdict, GuardError> {
        let inner = &*self.inner;
        // The safe methods (GET, HEAD, OPTIONS, TRACE) are reads; a CORS
        // preflight (OPTIONS) carries no sequencer and must not need one.
        let is_read = parts.method.is_safe();
        if is_read && inner.reads == ReadPolicy::Unfenced {
            inner.metrics.unfenced();
            return Ok(Verdict::Unfenced);
        }

        let route_lock = inner.lock_source.resolve(parts).await?;
        seen.route_lock = Some(route_lock.clone());

        let Some(sequencer) = sequencer_header(&parts.headers)? else {
            if is_read && inner.reads == ReadPolicy::Optional {
                inner.metrics.unfenced();
                tracing::debug!(
                    target: "palisade_guard::fence",
                    lock = %route_lock,
                    method = %parts.method,
                    decision = "unfenced",
                    reason = "read without a sequencer",
                    "passed unfenced"
                );
                return Ok(Verdict::Unfenced);
            }
            return Err(GuardError::MissingSequencer {
                needed: if is_read { "a" } else { "an exclusive" },
            });
        };
        seen.sequencer = Some(sequencer.clone());

        if let Some(verifier) = &inner.verifier {
            verifier
                .verify(&sequencer)
                .map_err(|source| GuardError::Signature {
                    lock: sequencer.lock().clone(),
                    presented: sequencer.generation(),
                    key_id: sequencer.signature().map(|s| s.key_id().to_owned()),
                    issuer: sequencer.issuer().map(str::to_owned),
                    source,
                })?;
        }
        if *sequencer.lock() != route_lock {
            return Err(Refused::LockMismatch {
                requested: route_lock,
                presented: sequencer.lock().clone(),
            }
            .into());
        }
        if !is_read && sequencer.mode() != Mode::Exclusive {
            return Err(Refused::SharedOnWrite {
                lock: route_lock,
                presented: sequencer.generation(),
            }
            .into());
        }

        match inner.mode {
            FencingMode::Serialised => self.admit_serialised(sequencer).await,
            FencingMode::StoreTransaction => {
                self.check_raise(&sequencer).await?;
                inner.metrics.validated();
                tracing::debug!(
                    target: "palisade_guard::fence",
                    lock = %sequencer.lock(),
                    mode = sequencer.mode().as_str(),
                    generation = sequencer.generation().get(),
                    decision = "validated",
                    reason = "the store's transaction fences the write",
                    "validated"
                );
                Ok(Verdict::Fenced(Box::new(Fenced::new(
                    sequencer, None, None,
                ))))
            }
        }
    }

    /// Serialised mode: per-lock lock, raise cap, mark store; the lock stays
    /// held in the returned verdict.
    async fn admit_serialised(&self, sequencer: Sequencer) -> Result<Verdict, GuardError> {
        let inner = &*self.inner;
        let (held, waited) = inner
            .table
            .acquire(sequencer.lock(), sequencer.mode(), sequencer.generation())
            .await;
        self.check_raise(&sequencer).await?;
        match inner.marks.admit_dyn(&sequencer).await? {
            Admission::Admitted { marks } => {
                inner.metrics.admitted(waited);
                tracing::debug!(
                    target: "palisade_guard::fence",
                    lock = %sequencer.lock(),
                    mode = sequencer.mode().as_str(),
                    generation = sequencer.generation().get(),
                    h_excl = marks.exclusive,
                    h_shared = marks.shared,
                    waited,
                    decision = "admitted",
                    "admitted"
                );
                let permit = Permit::new(held, &sequencer);
                Ok(Verdict::Fenced(Box::new(Fenced::new(
                    sequencer,
                    Some(marks),
                    Some(Arc::new(permit)),
                ))))
            }
            Admission::Stale { marks } => Err(Refused::stale(&sequencer, marks).into()),
        }
    }

    async fn check_raise(&self, sequencer: &Sequencer) -> Result<(), GuardError> {
        let Some(cap) = self.inner.raise_cap else {
            return Ok(());
        };
        // Marks only rise, so reading them before the admission can only
        // make this check stricter, never let a larger jump through: no
        // need to make it atomic with the admission.
        let marks = self.inner.marks.marks_dyn(sequencer.lock()).await?;
        let highest = marks.highest();
        let presented = sequencer.generation().get();
        let allowed_up_to = cap.allowed_up_to(highest, SystemTime::now());
        if presented > allowed_up_to {
            return Err(Refused::RaiseTooLarge {
                lock: sequencer.lock().clone(),
                mode: sequencer.mode(),
                presented: sequencer.generation(),
                marks,
                max_raise: cap.max_raise(),
                clock_lead: cap.clock_lead(),
                by_clock: RaiseCap::by_clock(highest),
                allowed_up_to,
            }
            .into());
        }
        Ok(())
    }
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = &*self.inner;
        f.debug_struct("Guard")
            .field("mode", &inner.mode)
            .field("lock_source", &inner.lock_source)
            .field("signatures", &inner.verifier.is_some())
            .field("raise_cap", &inner.raise_cap)
            .field("reads", &inner.reads.as_str())
            .finish_non_exhaustive()
    }
}

/// The `palisade-sequencer` header, parsed: `None` if absent.
fn sequencer_header(headers: &HeaderMap) -> Result<Option<Sequencer>, GuardError> {
    let mut values = headers.get_all(Sequencer::HTTP_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(GuardError::BadHeader {
            reason: "appears more than once",
        });
    }
    let text = value.to_str().map_err(|_| GuardError::BadHeader {
        reason: "is not visible ASCII",
    })?;
    text.parse::<Sequencer>()
        .map(Some)
        .map_err(GuardError::MalformedSequencer)
}
