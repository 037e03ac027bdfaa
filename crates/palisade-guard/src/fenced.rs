//! [`Fenced`]: what a handler gets from the guard, and the extractor.

use std::sync::Arc;

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::http::request::Parts;
use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_store::Marks;

use crate::lock_table::Held;
use crate::{Guard, GuardError};

/// A request's validated sequencer, for its handler.
///
/// # As an extractor
///
/// - **Behind a [`GuardLayer`](crate::GuardLayer)** (recommended), the
///   layer has already decided: `Fenced` hands over its verdict. Every route
///   the layer wraps is fenced, whether or not its handler asks for
///   `Fenced`.
/// - **Without the layer**, put the [`Guard`] in an `Extension` and take
///   `Fenced` in the handlers that must be fenced: the extractor runs the
///   same checks itself. In serialised mode it holds the per-lock lock
///   inside the `Fenced` value, so the handler stays serialised until it
///   drops its `Fenced` (an argument is dropped when the handler returns).
///   Routes whose handlers do not take `Fenced` are not fenced at all.
///
/// `Fenced` refuses a request that passed the guard unfenced (a read
/// without a sequencer) with `400 missing_sequencer`; take
/// `Option<Fenced>` in handlers that serve both. Neither finds a guard:
/// `500 internal` (a wiring mistake).
///
/// # The per-lock lock
///
/// In serialised mode a `Fenced` shares ownership of its request's
/// per-lock lock: the lock is released when the layer's response future
/// has resolved *and* every clone of the `Fenced` is gone. Moving a clone
/// into a streaming response body keeps the lock until the body is done;
/// storing one somewhere long-lived blocks the lock that long.
#[derive(Debug, Clone)]
pub struct Fenced {
    sequencer: Sequencer,
    /// The marks right after the admission (serialised mode); `None` in
    /// transaction mode, where the handler's store transaction decides.
    marks: Option<Marks>,
    /// The per-lock lock this request holds (serialised mode).
    permit: Option<Arc<Permit>>,
}

impl Fenced {
    pub(crate) fn new(
        sequencer: Sequencer,
        marks: Option<Marks>,
        permit: Option<Arc<Permit>>,
    ) -> Self {
        Fenced {
            sequencer,
            marks,
            permit,
        }
    }

    /// The sequencer, validated (and verified, when signatures are
    /// required). In transaction mode, pass it to
    /// [`palisade_store::Store::apply`].
    pub fn sequencer(&self) -> &Sequencer {
        &self.sequencer
    }

    /// The lock.
    pub fn lock(&self) -> &LockName {
        self.sequencer.lock()
    }

    /// The generation.
    pub fn generation(&self) -> Generation {
        self.sequencer.generation()
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.sequencer.mode()
    }

    /// The lock's marks right after this request was admitted (serialised
    /// mode), or `None` (transaction mode: the store has not decided yet).
    pub fn marks(&self) -> Option<Marks> {
        self.marks
    }

    /// Whether this request holds its lock's per-lock lock (serialised
    /// mode), so no newer generation's handler can run until it is done.
    pub fn is_serialised(&self) -> bool {
        self.permit.is_some()
    }
}

/// A granted per-lock lock, with what its release trace needs.
#[derive(Debug)]
pub(crate) struct Permit {
    _held: Held,
    lock: LockName,
    generation: Generation,
}

impl Permit {
    pub(crate) fn new(held: Held, sequencer: &Sequencer) -> Self {
        Permit {
            _held: held,
            lock: sequencer.lock().clone(),
            generation: sequencer.generation(),
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        tracing::debug!(
            target: "palisade_guard::fence",
            lock = %self.lock,
            generation = self.generation.get(),
            decision = "released",
            "released: the handler is done"
        );
    }
}

/// The guard's decision about one request, kept in its extensions.
#[derive(Debug, Clone)]
pub(crate) enum Verdict {
    /// Passed without a sequencer (a read the policy lets through).
    Unfenced,
    /// Validated (and admitted, in serialised mode).
    Fenced(Box<Fenced>),
}

/// The layer's verdict if there is one; otherwise the decision of a
/// `Guard` found in the extensions, remembered for later extractors.
async fn verdict(parts: &mut Parts) -> Result<Verdict, GuardError> {
    if let Some(verdict) = parts.extensions.get::<Verdict>() {
        return Ok(verdict.clone());
    }
    let Some(guard) = parts.extensions.get::<Guard>().cloned() else {
        return Err(GuardError::NotConfigured);
    };
    let verdict = guard.check(parts).await?;
    parts.extensions.insert(verdict.clone());
    Ok(verdict)
}

impl<S: Send + Sync> FromRequestParts<S> for Fenced {
    type Rejection = GuardError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, GuardError> {
        match verdict(parts).await? {
            Verdict::Fenced(fenced) => Ok(*fenced),
            Verdict::Unfenced => Err(GuardError::MissingSequencer { needed: "a" }),
        }
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for Fenced {
    type Rejection = GuardError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Option<Self>, GuardError> {
        match verdict(parts).await? {
            Verdict::Fenced(fenced) => Ok(Some(*fenced)),
            Verdict::Unfenced => Ok(None),
        }
    }
}
