//! What every handler shares.

use std::sync::Arc;
use std::time::Duration;

use palisade_core::{SharedLiveCheck, Verifier};
use palisade_store::Store;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::deadline::Deadline;
use crate::decisions::DecisionLog;
use crate::limits::ServerLimits;
use crate::metrics::{Metrics, OpenGauge};
use crate::sequencer_policy::SequencerPolicy;
use crate::tls::TlsConfig;
use crate::tokens::TokenTable;

/// The server's state: the store, the optional live check, the security
/// settings (tokens, signature keys, raise cap, TLS), limits and metrics.
/// Cheap to clone.
///
/// ```
/// use palisade_server::{AppState, ServerLimits, TokenTable};
/// use palisade_store::{Store, StoreConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let tokens: TokenTable = "Zs8AkP2v1nQxWm4rT7yB orders/".parse()?;
/// let state = AppState::new(Store::open(dir.path(), StoreConfig::default())?)
///     .with_max_body_bytes(64 * 1024)
///     .with_tokens(tokens)
///     .with_max_mark_raise(Some(1_000_000))
///     .with_limits(ServerLimits::default());
/// let router = palisade_server::app(state);
/// # drop(router);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct AppState {
    /// One allocation, so that cloning the state (axum does, for every
    /// extractor and middleware of every request) is one reference count,
    /// not one per field shared between the worker threads.
    pub(crate) shared: Arc<Shared>,
}

/// What [`AppState`] shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) store: Store,
    /// Chubby's CheckSequencer, when the server is embedded next to a lock
    /// backend: asked before every request that carries a sequencer. `None`
    /// (the binary's default) means the generation check alone decides.
    pub(crate) live_check: Option<SharedLiveCheck>,
    pub(crate) max_body_bytes: usize,
    /// Signature verification and the raise cap: checked after the
    /// sequencer is parsed and before the store sees it.
    pub(crate) policy: Arc<SequencerPolicy>,
    /// The bearer tokens, when the server requires them: checked first,
    /// before the sequencer is even parsed. `None`: no authentication.
    pub(crate) tokens: Option<Arc<TokenTable>>,
    /// Served by `run`'s accept loop; `None` is plain HTTP.
    pub(crate) tls: Option<TlsConfig>,
    pub(crate) limits: ServerLimits,
    /// One permit per `/v1/locks/...` request being handled, out of
    /// `limits.max_in_flight`. `try_acquire`, never `acquire`: a request
    /// over the bound is refused at once instead of queueing.
    pub(crate) in_flight: Arc<Semaphore>,
    pub(crate) metrics: Arc<Metrics>,
    /// The recent writes accepted and refused, for `/ui` and `/v1/events`.
    pub(crate) decisions: Arc<DecisionLog>,
}

/// A request's place among those in flight: returns the permit and lowers
/// the gauge when dropped.
pub(crate) struct InFlight {
    _permit: OwnedSemaphorePermit,
    _gauge: OpenGauge,
}

impl AppState {
    /// State over `store`, with no live check, no authentication, no
    /// signature keys, an 8 MiB body limit and the default
    /// [`ServerLimits`].
    pub fn new(store: Store) -> Self {
        let limits = ServerLimits::default();
        let shared = Shared {
            store,
            live_check: None,
            max_body_bytes: 8 * 1024 * 1024,
            policy: Arc::new(SequencerPolicy::default()),
            tokens: None,
            tls: None,
            limits,
            in_flight: Arc::new(Semaphore::new(limits.max_in_flight)),
            metrics: Arc::new(Metrics::default()),
            decisions: Arc::new(DecisionLog::default()),
        };
        AppState {
            shared: Arc::new(shared),
        }
    }

    /// The shared part, to change while the state is being built (copied
    /// first if a clone already shares it).
    fn building(&mut self) -> &mut Shared {
        Arc::make_mut(&mut self.shared)
    }

    /// Refuses requests whose sequencer the lock side says is no longer
    /// held (409 `not_held`), and requests it cannot check (503
    /// `live_check_unavailable`).
    pub fn with_live_check(mut self, live_check: SharedLiveCheck) -> Self {
        self.building().live_check = Some(live_check);
        self
    }

    /// Sets the largest accepted request body, in bytes.
    pub fn with_max_body_bytes(mut self, max_body_bytes: usize) -> Self {
        self.building().max_body_bytes = max_body_bytes;
        self
    }

    /// Verifies the signature of every sequencer with `verifier` (its keys
    /// and trusted issuers) before the store sees it. With
    /// `require_signatures`, an unsigned sequencer is refused (401
    /// `unsigned`); without, unsigned sequencers pass and only signed ones
    /// are verified (the rollout mode).
    pub fn with_verifier(mut self, verifier: Verifier, require_signatures: bool) -> Self {
        Arc::make_mut(&mut self.building().policy).set_verifier(verifier, require_signatures);
        self
    }

    /// Refuses (409 `raise_too_large`) a request whose generation is more
    /// than `max_raise` above its lock's highest mark, when that mark is a
    /// counter (etcd revisions, Redis's counter scheme). `None` (the
    /// default) is no cap. Clock generations (Redis's default scheme:
    /// microseconds, recognised by a mark at or above 2020-01-01 in µs) and
    /// locks without a mark are held instead to at most
    /// [`AppState::with_max_mark_raise_time`] ahead of this server's clock.
    pub fn with_max_mark_raise(mut self, max_raise: Option<u64>) -> Self {
        Arc::make_mut(&mut self.building().policy).set_max_mark_raise(max_raise);
        self
    }

    /// How far ahead of this server's clock a clock generation may be once
    /// [`AppState::with_max_mark_raise`] turned the cap on (default one
    /// hour). It must exceed the clock difference between the lock
    /// service and this server; it is also the longest a runaway clock
    /// generation can fence a lock's honest holders.
    pub fn with_max_mark_raise_time(mut self, clock_lead: Duration) -> Self {
        Arc::make_mut(&mut self.building().policy).set_max_mark_raise_time(clock_lead);
        self
    }

    /// Requires a bearer token from `tokens` on every `/v1/locks/...`
    /// request, used only within its lock-name prefixes.
    pub fn with_tokens(mut self, tokens: TokenTable) -> Self {
        self.building().tokens = Some(Arc::new(tokens));
        self
    }

    /// Serves TLS (through [`run`](crate::run)) with this certificate.
    pub fn with_tls(mut self, tls: TlsConfig) -> Self {
        self.building().tls = Some(tls);
        self
    }

    /// Sets the connection and request limits.
    pub fn with_limits(mut self, limits: ServerLimits) -> Self {
        let shared = self.building();
        shared.limits = limits;
        shared.in_flight = Arc::new(Semaphore::new(limits.max_in_flight));
        self
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// The connection and request limits.
    pub fn limits(&self) -> &ServerLimits {
        &self.shared.limits
    }

    /// A request deadline starting now ([`ServerLimits::request_timeout`]).
    pub(crate) fn deadline(&self) -> Deadline {
        Deadline::start(self.shared.limits.request_timeout)
    }

    /// A place among the requests in flight, or `None` when all are taken.
    pub(crate) fn admit_request(&self) -> Option<InFlight> {
        let permit = Arc::clone(&self.shared.in_flight)
            .try_acquire_owned()
            .ok()?;
        Some(InFlight {
            _permit: permit,
            _gauge: self.shared.metrics.in_flight.open(),
        })
    }
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("store", &self.shared.store)
            .field("live_check", &self.shared.live_check.is_some())
            .field("max_body_bytes", &self.shared.max_body_bytes)
            .field(
                "signatures_required",
                &self.shared.policy.signatures_required(),
            )
            .field(
                "verify_key_ids",
                &self
                    .shared
                    .policy
                    .verifier()
                    .map(|v| v.keys().key_ids().collect::<Vec<_>>()),
            )
            .field("raise_cap", &self.shared.policy.raise_cap())
            .field("tokens", &self.shared.tokens.as_ref().map(|t| t.len()))
            .field("tls", &self.shared.tls.is_some())
            .field("limits", &self.shared.limits)
            .finish_non_exhaustive()
    }
}
