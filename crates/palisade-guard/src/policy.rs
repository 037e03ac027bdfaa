//! What a guard is configured with: the fencing mode, how a request names
//! its lock, and what reads need.

use std::fmt;
use std::sync::Arc;

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use palisade_core::LockName;

use crate::GuardError;

/// How the guard closes the gap between the mark check and the handler's
/// write (time of check to time of use).
///
/// Without either, a request with generation 4 could pass the check, stall,
/// and write after a request with generation 5 has passed and written: the
/// check alone does not fence anything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FencingMode {
    /// The default. The guard takes a per-lock lock (exclusive requests
    /// alone, shared requests together), checks and raises the mark in the
    /// [`MarkStore`](crate::MarkStore), runs the handler, and releases the
    /// lock only when the handler's response future has resolved (and every
    /// clone of its [`Fenced`](crate::Fenced) is dropped).
    ///
    /// **Guarantee:** under one lock, a handler never runs for generation
    /// `g` after, or at the same time as, a handler for an exclusive
    /// generation above `g`; a writer's handler never overlaps any other
    /// handler of that lock. This holds for whatever the handler does with
    /// its own data, as long as that work is finished when its future
    /// resolves (work handed to a spawned task or a streaming body is not
    /// covered unless it keeps its `Fenced`). It holds within one process:
    /// several replicas of a service need transaction mode, or a shared
    /// store whose transaction checks the mark. A handler must not wait for
    /// another request under its own lock (a call back into the service,
    /// say): that request waits for the handler, forever.
    #[default]
    Serialised,
    /// The guard only validates (format, signature, lock against the route,
    /// mode against the method, the raise cap) and hands the sequencer to
    /// the handler, which writes through
    /// [`palisade_store::Store::apply`]/[`submit`](palisade_store::Store::submit)
    /// with it. The store checks and raises the mark **in the same sled
    /// transaction as the write**, so there is no gap to close and no
    /// per-lock lock: requests under one lock run in parallel.
    ///
    /// **Guarantee:** exactly the fenced store's: a write under generation
    /// `g` is never applied after one under a higher exclusive generation,
    /// across any number of service replicas sharing the store, and a
    /// refused write changes nothing. Work the handler does *outside* the
    /// store's transaction is not fenced. A stale request passes the guard
    /// and is refused by the store (the handler returns the refusal:
    /// `GuardError: From<Refused>` gives the same `409 stale`).
    StoreTransaction,
}

/// What reads (the safe methods: `GET`, `HEAD`, `OPTIONS`, `TRACE`) need.
/// Every other method is a write and needs an exclusive sequencer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReadPolicy {
    /// The default, as in the Palisade server: a read may carry a sequencer
    /// (shared or exclusive); if it does, it is checked and raises the mark
    /// like any other, so a reader with a new generation fences older
    /// writers. A read without one passes unfenced.
    #[default]
    Optional,
    /// A read must carry a sequencer (shared or exclusive).
    Required,
    /// Reads pass through untouched; the header is not even parsed.
    Unfenced,
}

impl ReadPolicy {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ReadPolicy::Optional => "optional",
            ReadPolicy::Required => "required",
            ReadPolicy::Unfenced => "unfenced",
        }
    }
}

/// The path parameters of the matched route, percent-decoded (`{lock}` in
/// `/stock/{lock}` requested as `/stock/orders%2F42` is `orders/42`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteParams {
    params: Vec<(String, String)>,
}

impl RouteParams {
    /// The value of parameter `name`, if the route has one.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// Every parameter, in route order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.params.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The matched route's parameters. axum puts them in the request's
    /// extensions when it routes, so a layer added with `Router::layer` or
    /// `Router::route_layer` sees them; outside a router there are none.
    async fn of(parts: &mut Parts) -> Result<RouteParams, GuardError> {
        use axum::extract::rejection::RawPathParamsRejection;
        match RawPathParams::from_request_parts(parts, &()).await {
            Ok(raw) => Ok(RouteParams {
                params: raw
                    .iter()
                    .map(|(key, value)| (key.to_owned(), value.to_owned()))
                    .collect(),
            }),
            Err(RawPathParamsRejection::InvalidUtf8InPathParam(rejection)) => {
                Err(GuardError::LockNotResolved {
                    reason: rejection.body_text(),
                })
            }
            Err(_) => Ok(RouteParams::default()),
        }
    }
}

type Resolver = dyn Fn(&Parts, &RouteParams) -> Result<LockName, String> + Send + Sync;

/// How a request names the lock it must hold a sequencer for. The guard
/// refuses a sequencer for any other lock (`422 lock_mismatch`), so a holder
/// of lock `a` can never write under lock `b`.
#[derive(Clone)]
pub struct LockSource {
    kind: SourceKind,
}

#[derive(Clone)]
enum SourceKind {
    Fixed(LockName),
    PathParam(String),
    Custom(Arc<Resolver>),
}

impl LockSource {
    /// Every request is under one lock, `name` (a service that owns one
    /// resource).
    pub fn fixed(name: LockName) -> Self {
        LockSource {
            kind: SourceKind::Fixed(name),
        }
    }

    /// The lock is the route's path parameter `param`, percent-decoded. The
    /// default is `LockSource::path_param("lock")`.
    pub fn path_param(param: &str) -> Self {
        LockSource {
            kind: SourceKind::PathParam(param.to_owned()),
        }
    }

    /// The lock is whatever `resolve` makes of the request and its route
    /// parameters; an `Err(reason)` refuses the request with
    /// `400 bad_lock_name`.
    ///
    /// ```
    /// use palisade_core::LockName;
    /// use palisade_guard::LockSource;
    ///
    /// // `/items/{sku}` is guarded by lock `items/<sku>`.
    /// let source = LockSource::from_fn(|_parts, params| {
    ///     let sku = params.get("sku").ok_or("the route has no {sku}")?;
    ///     LockName::new(format!("items/{sku}")).map_err(|e| e.to_string())
    /// });
    /// # let _ = source;
    /// ```
    pub fn from_fn<F>(resolve: F) -> Self
    where
        F: Fn(&Parts, &RouteParams) -> Result<LockName, String> + Send + Sync + 'static,
    {
        LockSource {
            kind: SourceKind::Custom(Arc::new(resolve)),
        }
    }

    /// The lock `parts` names.
    pub(crate) async fn resolve(&self, parts: &mut Parts) -> Result<LockName, GuardError> {
        match &self.kind {
            SourceKind::Fixed(name) => Ok(name.clone()),
            SourceKind::PathParam(param) => {
                let params = RouteParams::of(parts).await?;
                let value = params.get(param).ok_or_else(|| GuardError::NoLockParam {
                    param: param.clone(),
                })?;
                LockName::new(value).map_err(GuardError::BadLockName)
            }
            SourceKind::Custom(resolve) => {
                let params = RouteParams::of(parts).await?;
                resolve(parts, &params).map_err(|reason| GuardError::LockNotResolved { reason })
            }
        }
    }
}

impl Default for LockSource {
    fn default() -> Self {
        LockSource::path_param("lock")
    }
}

impl fmt::Debug for LockSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            SourceKind::Fixed(name) => f.debug_tuple("Fixed").field(name).finish(),
            SourceKind::PathParam(param) => f.debug_tuple("PathParam").field(param).finish(),
            SourceKind::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}
