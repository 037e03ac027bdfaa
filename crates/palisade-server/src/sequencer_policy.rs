//! What the server demands of a sequencer beyond the fencing rule: a valid
//! signature from a trusted issuer, checked before the store is touched,
//! and a bounded raise of the mark, which a write's engine checks in its
//! atomic step and a fenced read's server checks first. A refused request
//! changes nothing.

use std::time::Duration;

use axum::http::{HeaderValue, header};
use palisade_core::{RaiseCap, Sequencer, SignatureError, Verifier};
use palisade_store::{RaiseLimit, Refused};
use palisade_wire::ErrorBody;

use crate::error::ApiError;
use crate::state::AppState;

/// The server's sequencer rules beyond the fencing rule itself.
#[derive(Debug, Clone, Default)]
pub(crate) struct SequencerPolicy {
    /// The signing keys accepted and the issuers trusted. `None`: the
    /// server has no keys and checks no signature (the fencing rule alone
    /// decides, and anyone who can reach the server can raise a mark).
    verifier: Option<Verifier>,
    /// Whether a sequencer without a signature is refused. `false` with a
    /// verifier is the rollout mode: signed sequencers are verified (a bad
    /// one is refused), unsigned ones still pass, so lock sides can start
    /// signing one by one before the servers insist.
    require_signatures: bool,
    /// How far one request may raise a lock's highest mark. `None`: no cap.
    /// Guards against a buggy issuer minting a generation far above the
    /// rest, which would lock out every correct holder after it.
    max_mark_raise: Option<u64>,
    /// How far ahead of this server's clock a clock generation may be, once
    /// the cap is on. `None`: [`RaiseCap::DEFAULT_CLOCK_LEAD`].
    clock_lead: Option<Duration>,
}

impl SequencerPolicy {
    pub(crate) fn set_verifier(&mut self, verifier: Verifier, require_signatures: bool) {
        self.verifier = Some(verifier);
        self.require_signatures = require_signatures;
    }

    pub(crate) fn set_max_mark_raise(&mut self, max_mark_raise: Option<u64>) {
        self.max_mark_raise = max_mark_raise;
    }

    pub(crate) fn set_max_mark_raise_time(&mut self, clock_lead: Duration) {
        self.clock_lead = Some(clock_lead);
    }

    pub(crate) fn signatures_required(&self) -> bool {
        self.verifier.is_some() && self.require_signatures
    }

    pub(crate) fn verifier(&self) -> Option<&Verifier> {
        self.verifier.as_ref()
    }

    /// The cap, when `max_mark_raise` turned it on.
    pub(crate) fn raise_cap(&self) -> Option<RaiseCap> {
        self.max_mark_raise.map(|max_raise| {
            RaiseCap::new(max_raise)
                .with_clock_lead(self.clock_lead.unwrap_or(RaiseCap::DEFAULT_CLOCK_LEAD))
        })
    }

    /// Checks the signature and the issuer. 401 for a sequencer that
    /// proves nothing (unsigned, unknown key, bad MAC), 403 for a proven
    /// sequencer from an issuer this server does not trust.
    pub(crate) fn verify(&self, sequencer: &Sequencer) -> Result<(), ApiError> {
        let Some(verifier) = &self.verifier else {
            return Ok(());
        };
        if sequencer.signature().is_none() && !self.require_signatures {
            return Ok(());
        }
        verifier
            .verify(sequencer)
            .map_err(|error| signature_refusal(sequencer, &error))
    }
}

fn signature_refusal(sequencer: &Sequencer, error: &SignatureError) -> ApiError {
    let lock = sequencer.lock();
    let generation = sequencer.generation().get();
    tracing::info!(
        target: "palisade_server::fence",
        lock = %lock,
        generation,
        key_id = sequencer.signature().map(|s| s.key_id()),
        issuer = sequencer.issuer(),
        reason = error.code(),
        "refused: the sequencer's signature does not hold"
    );
    let refusal = ApiError::from(ErrorBody::from_signature(sequencer, error));
    if error.is_unauthenticated() {
        return refusal.with_header(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Palisade-Sequencer realm=\"palisade\""),
        );
    }
    refusal
}

/// Refuses a fenced read whose generation is further above its lock's
/// marks than the raise cap allows (409 `raise_too_large`): more than
/// `max_raise` above a counter mark, more than `clock_lead` ahead of this
/// server's clock for a clock mark or a lock without marks ([`RaiseCap`]
/// says why the mark decides). A write carries the cap into its engine's
/// atomic step instead (`Store::submit_capped`), which costs no read.
///
/// The marks are read before the read is queued, not in its step. That is
/// enough: marks only rise, so by the time the read commits, the raise is
/// at most what was checked here.
pub(crate) async fn check_raise(state: &AppState, sequencer: &Sequencer) -> Result<(), ApiError> {
    let Some(cap) = state.shared.policy.raise_cap() else {
        return Ok(());
    };
    let marks = state.shared.store.submit_marks(sequencer.lock())?.await?;
    RaiseLimit::now(cap)
        .check(sequencer, marks)
        .map_err(|refused| {
            warn_raise_too_large(sequencer, &refused);
            refused.into()
        })
}

/// The warning of a `raise_too_large` refusal, wherever it was decided.
pub(crate) fn warn_raise_too_large(sequencer: &Sequencer, refused: &Refused) {
    let Refused::RaiseTooLarge {
        marks,
        allowed_up_to,
        by_clock,
        ..
    } = refused
    else {
        return;
    };
    tracing::warn!(
        target: "palisade_server::fence",
        lock = %sequencer.lock(),
        generation = sequencer.generation().get(),
        highest_mark = marks.highest(),
        allowed_up_to,
        by_clock,
        issuer = sequencer.issuer(),
        reason = "raise_too_large",
        "refused: the generation is too far above the marks (a buggy issuer?)"
    );
}
