//! What the server demands of a sequencer before the store sees it:
//! a valid signature from a trusted issuer, and a bounded raise of the
//! mark. Both checks run before the store is touched, so a refused
//! request changes nothing.

use std::time::{Duration, SystemTime};

use axum::http::{HeaderValue, header};
use palisade_core::{RaiseCap, Sequencer, SignatureError, Verifier};
use palisade_store::{Marks, Refused};
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

/// Refuses a request whose generation is further above its lock's marks
/// than the raise cap allows (409 `raise_too_large`): more than
/// `max_raise` above a counter mark, more than `clock_lead` ahead of this
/// server's clock for a clock mark or a lock without marks ([`RaiseCap`]
/// says why the mark decides).
///
/// The marks are read before the request is queued, not in its
/// transaction. That is enough: marks only rise, so by the time the
/// request commits, the raise is at most what was checked here.
pub(crate) async fn check_raise(state: &AppState, sequencer: &Sequencer) -> Result<(), ApiError> {
    let Some(cap) = state.policy.raise_cap() else {
        return Ok(());
    };
    let lock = sequencer.lock();
    let marks: Marks = state.store.submit_marks(lock)?.await?;
    let highest = marks.exclusive.max(marks.shared);
    let presented = sequencer.generation().get();
    let allowed_up_to = cap.allowed_up_to(highest, SystemTime::now());
    if presented <= allowed_up_to {
        return Ok(());
    }
    let by_clock = RaiseCap::by_clock(highest);
    tracing::warn!(
        target: "palisade_server::fence",
        lock = %lock,
        generation = presented,
        highest_mark = highest,
        allowed_up_to,
        by_clock,
        issuer = sequencer.issuer(),
        reason = "raise_too_large",
        "refused: the generation is too far above the marks (a buggy issuer?)"
    );
    Err(Refused::RaiseTooLarge {
        lock: lock.clone(),
        mode: sequencer.mode(),
        presented: sequencer.generation(),
        marks,
        max_raise: cap.max_raise(),
        clock_lead: cap.clock_lead(),
        by_clock,
        allowed_up_to,
    }
    .into())
}
