//! What a request can be refused for: one type for every part that refuses
//! (the fenced store, the resource server, the guard, the SQL fence) and
//! for the client that decodes the server's answer.
//!
//! A refusal is an expected outcome in a fenced system, not a failure: it
//! lives in the inner `Result` of a store, client or guard call, apart
//! from I/O and server failures. Nothing changed where it was refused: no
//! data, no mark, no idempotency record.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;

use crate::marks::Marks;
use crate::{Generation, LockName, Mode, Sequencer};

/// A request considered and refused; nothing changed.
///
/// [`Refused::reason`] is the refusal's stable name, the same as the
/// `code` of the HTTP API's JSON body (docs/http-api.md), and
/// [`Refused::http_status`] its status there. The `Display` text is the
/// message a person reads (the server's `message`, what the CLI prints).
/// Its body on the wire, both ways, is `palisade-wire`'s: core keeps no
/// serde.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// `stale` (409): the sequencer's generation is below what the marks
    /// require. Either a newer holder has been honoured, or the lock
    /// service's generations went backwards. Carries the current marks so
    /// the lock side can raise its generation floor above them.
    #[error("{}", stale_text(lock, *mode, *presented, *marks, *regression))]
    Stale {
        /// The lock.
        lock: LockName,
        /// The mode of the sequencer.
        mode: Mode,
        /// The generation offered.
        presented: Generation,
        /// The lock's current marks.
        marks: Marks,
        /// `true`: a live check says the presented sequencer's holder
        /// still holds the lock, so no newer holder exists and the lock
        /// service's generations went backwards (raise its floor above
        /// `marks`). `false`: not established. The store always says
        /// `false`; only a resource server with a live check can tell.
        regression: bool,
    },
    /// `not_held` (409): a live check says the sequencer's holder no
    /// longer holds the lock. Only a resource server with a live check
    /// refuses this way.
    #[error("the lock service says generation {presented} of lock `{lock}` is no longer held")]
    NotHeld {
        /// The lock.
        lock: LockName,
        /// The generation offered.
        presented: Generation,
    },
    /// `shared_on_write` (403): a write under a shared (reader) sequencer.
    #[error("lock `{lock}`: writes need an exclusive sequencer; generation {presented} is shared")]
    SharedOnWrite {
        /// The lock.
        lock: LockName,
        /// The generation offered.
        presented: Generation,
    },
    /// `cas_mismatch` (412): a compare-and-swap whose comparison failed.
    /// The whole request was rolled back.
    #[error(
        "compare-and-swap failed at op {op_index}: the current value differs from the expected one"
    )]
    CasMismatch {
        /// Which op of the request (0-based).
        op_index: usize,
        /// The key's current value (`None`: absent). The HTTP API carries
        /// it in the body's `current` (and `current_exists`), so a client
        /// knows it as well as the store.
        current: Option<Bytes>,
    },
    /// `idempotency_key_reused` (422): the idempotency key was already
    /// used on this lock for a *different* request (other ops, mode or
    /// generation).
    #[error("idempotency key `{request_id}` was already used for a different request")]
    IdempotencyKeyReused {
        /// The key.
        request_id: RequestId,
    },
    /// `lock_mismatch` (422): the request names one lock and presents a
    /// sequencer for another.
    #[error("the request is for lock `{requested}` but the sequencer is for lock `{presented}`")]
    LockMismatch {
        /// The lock the request names.
        requested: LockName,
        /// The lock the sequencer is for.
        presented: LockName,
    },
    /// `raise_too_large` (409): the generation is further above the
    /// lock's marks than the raise cap allows ([`RaiseCap`]). A lock side
    /// minting such generations has a bug (or a forger has a valid key):
    /// fix it rather than retry, and do not raise a generation floor for
    /// it.
    ///
    /// [`RaiseCap`]: crate::RaiseCap
    #[error("{}", raise_text(self))]
    RaiseTooLarge {
        /// The lock.
        lock: LockName,
        /// The mode of the sequencer.
        mode: Mode,
        /// The generation offered.
        presented: Generation,
        /// The lock's marks at the time of the check.
        marks: Marks,
        /// The cap's count, for a counter mark.
        max_raise: u64,
        /// The cap's lead over the clock, for a clock mark or a lock
        /// without marks.
        clock_lead: Duration,
        /// Which rule decided: `true` the clock's (the highest mark is a
        /// clock generation, or both are 0), `false` the count's.
        by_clock: bool,
        /// The highest generation the cap allowed.
        allowed_up_to: u64,
    },
}

impl Refused {
    /// [`Refused::Stale`] of `sequencer` against the lock's `marks`, as a
    /// fence or a store decides it: not a regression, which only a resource
    /// server with a live check can tell.
    pub fn stale(sequencer: &Sequencer, marks: Marks) -> Refused {
        Refused::Stale {
            lock: sequencer.lock().clone(),
            mode: sequencer.mode(),
            presented: sequencer.generation(),
            marks,
            regression: false,
        }
    }

    /// The stable name: `stale`, `not_held`, `shared_on_write`,
    /// `cas_mismatch`, `idempotency_key_reused`, `lock_mismatch`,
    /// `raise_too_large`; the JSON `code` of the HTTP API.
    pub fn reason(&self) -> &'static str {
        match self {
            Refused::Stale { .. } => "stale",
            Refused::NotHeld { .. } => "not_held",
            Refused::SharedOnWrite { .. } => "shared_on_write",
            Refused::CasMismatch { .. } => "cas_mismatch",
            Refused::IdempotencyKeyReused { .. } => "idempotency_key_reused",
            Refused::LockMismatch { .. } => "lock_mismatch",
            Refused::RaiseTooLarge { .. } => "raise_too_large",
        }
    }

    /// The HTTP status the API answers this refusal with.
    pub fn http_status(&self) -> u16 {
        match self {
            Refused::Stale { .. } | Refused::NotHeld { .. } | Refused::RaiseTooLarge { .. } => 409,
            Refused::SharedOnWrite { .. } => 403,
            Refused::CasMismatch { .. } => 412,
            Refused::IdempotencyKeyReused { .. } | Refused::LockMismatch { .. } => 422,
        }
    }

    /// The lock's marks, when the refusal carries them (`stale`,
    /// `raise_too_large`).
    pub fn marks(&self) -> Option<Marks> {
        match self {
            Refused::Stale { marks, .. } | Refused::RaiseTooLarge { marks, .. } => Some(*marks),
            _ => None,
        }
    }
}

/// What a generation regression says about its cause, from the only two
/// numbers known where it is found: the generation the lock service has
/// just granted (so its newest) and the mark that generation fell below.
///
/// Generations are counters (etcd revisions, the Redis `Counter` scheme,
/// the SQL backend) or clock generations (microseconds, the Redis
/// `ServerClock` scheme), and a mark says which it is (see
/// [`RaiseCap`](crate::RaiseCap)). A mark no lock service of the granted
/// kind issues was not lost by it: someone sent it.
///
/// ```
/// use palisade_core::RegressionCause;
///
/// assert_eq!(RegressionCause::of(3, 40), RegressionCause::CounterLost);
/// assert_eq!(RegressionCause::of(3, u64::MAX), RegressionCause::BeyondAnyCounter);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegressionCause {
    /// The mark is a generation the lock service could have issued: its
    /// generations went backwards (its counter lost with its data, or its
    /// data wiped or restored from a backup). Raising its floor above the
    /// mark recovers.
    CounterLost,
    /// The service grants counters, and the mark is at or above
    /// [`RaiseCap::CLOCK_GENERATION_FLOOR`](crate::RaiseCap::CLOCK_GENERATION_FLOOR),
    /// where no counter gets (`u64::MAX`, say): a forged or runaway
    /// generation was honoured.
    BeyondAnyCounter,
    /// The service grants clock generations, and the mark is more than
    /// [`RaiseCap::DEFAULT_CLOCK_LEAD`](crate::RaiseCap::DEFAULT_CLOCK_LEAD)
    /// ahead of the one it just granted, its clock: a forged or runaway
    /// generation was honoured.
    AheadOfItsClock,
}

impl RegressionCause {
    /// The cause of `granted` (the lock service's newest generation)
    /// falling below `mark`.
    pub fn of(granted: u64, mark: u64) -> RegressionCause {
        let lead =
            u64::try_from(crate::RaiseCap::DEFAULT_CLOCK_LEAD.as_micros()).unwrap_or(u64::MAX);
        if crate::RaiseCap::by_clock(granted) {
            if mark > granted.saturating_add(lead) {
                return RegressionCause::AheadOfItsClock;
            }
        } else if mark >= crate::RaiseCap::CLOCK_GENERATION_FLOOR {
            return RegressionCause::BeyondAnyCounter;
        }
        RegressionCause::CounterLost
    }

    /// What it means, as a clause of a regression's message (without the
    /// recovery command, which each caller spells for its own flags).
    pub fn meaning(self) -> String {
        let forged = "a forged or runaway generation was honoured, not a lost counter; a mark cannot be lowered, so find who sent it (signed sequencers and the raise cap refuse such generations) and move the lock's data to a new lock name";
        match self {
            RegressionCause::CounterLost => "the lock service's generations went backwards (its counter was lost, or its data wiped or restored from a backup)".to_owned(),
            RegressionCause::BeyondAnyCounter => format!(
                "that mark is far above any generation the lock service issues (no counter reaches {}): {forged}",
                crate::RaiseCap::CLOCK_GENERATION_FLOOR
            ),
            RegressionCause::AheadOfItsClock => format!(
                "that mark is far above any generation the lock service issues (more than {:?} ahead of its clock): {forged}",
                crate::RaiseCap::DEFAULT_CLOCK_LEAD
            ),
        }
    }

    /// Whether raising the lock service's generation floor above the mark
    /// recovers (`palisade raise-floor`): only when its counter went back.
    pub fn floor_recovers(self) -> bool {
        self == RegressionCause::CounterLost
    }
}

/// The text of [`Refused::Stale`]: a regression says so, what it can know
/// of the cause ([`RegressionCause`]) and the way out; otherwise both
/// generations and the marks.
fn stale_text(
    lock: &LockName,
    mode: Mode,
    presented: Generation,
    marks: Marks,
    regression: bool,
) -> String {
    let required = marks.required(mode);
    if regression {
        let cause = RegressionCause::of(presented.get(), required);
        let mut text = format!(
            "generation regression on lock `{lock}`: the lock service still grants generation {presented}, yet generation {required} has already been honoured here: {}",
            cause.meaning()
        );
        if cause.floor_recovers() {
            text.push_str(&format!("; recover with `{}`", lock.raise_floor_command()));
        }
        text
    } else {
        format!(
            "stale sequencer for lock `{lock}`: {mode} generation {presented} is below the required {required} ({marks})"
        )
    }
}

/// The text of [`Refused::RaiseTooLarge`], by the rule that decided: each
/// rule's text names the fields it used.
fn raise_text(refused: &Refused) -> String {
    match refused {
        Refused::RaiseTooLarge {
            by_clock: true,
            lock,
            presented,
            marks,
            clock_lead,
            allowed_up_to,
            ..
        } => format!(
            "generation {presented} of lock `{lock}` is more than {clock_lead:?} ahead of this server's clock in microseconds, the limit for a lock whose mark is a clock generation or absent (allowed up to {allowed_up_to}; marks at {})",
            marks.highest()
        ),
        Refused::RaiseTooLarge {
            lock,
            presented,
            marks,
            max_raise,
            ..
        } => format!(
            "generation {presented} of lock `{lock}` would raise its mark by {} (from {}); this server allows at most {max_raise}",
            presented.get().saturating_sub(marks.highest()),
            marks.highest()
        ),
        other => other.reason().to_owned(),
    }
}

/// A client-chosen idempotency key: 1 to 128 bytes of visible ASCII
/// (`!` to `~`), scoped to one lock.
///
/// ```
/// use palisade_core::RequestId;
///
/// assert!(RequestId::new("order-42-attempt").is_ok());
/// assert!(RequestId::new("").is_err());
/// assert!(RequestId::new("has space").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestId(String);

/// Why a text is not a [`RequestId`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid idempotency key: {reason}")]
pub struct RequestIdError {
    /// What is wrong, e.g. "it is empty".
    pub reason: &'static str,
}

impl RequestId {
    /// The longest id, in bytes.
    pub const MAX_LEN: usize = 128;

    /// Validates and wraps `id`.
    pub fn new(id: impl Into<String>) -> Result<RequestId, RequestIdError> {
        let id = id.into();
        let reason = if id.is_empty() {
            "it is empty"
        } else if id.len() > Self::MAX_LEN {
            "it is longer than 128 bytes"
        } else if !id.bytes().all(|b| (b'!'..=b'~').contains(&b)) {
            "it contains a byte outside visible ASCII"
        } else {
            return Ok(RequestId(id));
        };
        Err(RequestIdError { reason })
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An exclusive sequencer of `orders/42` at `presented`, refused
    /// against an exclusive mark at `mark`.
    fn stale(presented: u64, mark: u64, regression: bool) -> Refused {
        Refused::Stale {
            lock: LockName::new("orders/42").unwrap(),
            mode: Mode::Exclusive,
            presented: Generation::new(presented).unwrap(),
            marks: Marks {
                exclusive: mark,
                shared: 0,
            },
            regression,
        }
    }

    #[test]
    fn request_ids_are_visible_ascii_up_to_128_bytes() {
        assert!(RequestId::new("a".repeat(128)).is_ok());
        assert!(RequestId::new("a".repeat(129)).is_err());
        assert!(RequestId::new("tab\t").is_err());
        assert!(RequestId::new("é").is_err());
        assert_eq!(
            RequestId::new("").unwrap_err().to_string(),
            "invalid idempotency key: it is empty"
        );
    }

    #[test]
    fn a_stale_text_gives_both_generations_and_a_regression_the_way_out() {
        assert_eq!(
            stale(33, 34, false).to_string(),
            "stale sequencer for lock `orders/42`: exclusive generation 33 is below the required 34 (H_excl=34 H_shared=0)"
        );
        let regression = stale(33, 34, true).to_string();
        assert!(
            regression.starts_with("generation regression on lock `orders/42`"),
            "{regression}"
        );
        assert!(
            regression.ends_with("recover with `palisade raise-floor orders/42`"),
            "{regression}"
        );
        assert_eq!(stale(33, 34, true).reason(), "stale");
        assert_eq!(stale(33, 34, true).http_status(), 409);
    }

    #[test]
    fn a_regression_names_what_can_be_known_of_its_cause() {
        let regression = |presented, mark| stale(presented, mark, true).to_string();
        // A counter that restarted below the mark.
        let lost = regression(3, 40);
        assert!(lost.contains("its counter was lost"), "{lost}");
        assert!(!lost.contains("forged"), "{lost}");
        // A forged maximum under a counter service.
        let forged = regression(3, u64::MAX);
        assert!(forged.contains("forged or runaway"), "{forged}");
        assert!(!forged.contains("counter was lost"), "{forged}");
        // Clock generations: a mark two hours ahead of the service's clock
        // was not issued by it; one a minute ahead could have been.
        let now_us = 1_800_000_000_000_000;
        let ahead = regression(now_us, now_us + 7_200_000_000);
        assert!(ahead.contains("ahead of its clock"), "{ahead}");
        let recent = regression(now_us, now_us + 60_000_000);
        assert!(recent.contains("its counter was lost"), "{recent}");
    }

    #[test]
    fn a_raise_too_large_text_names_the_rule_that_decided() {
        let raise = |by_clock| Refused::RaiseTooLarge {
            lock: LockName::new("a").unwrap(),
            mode: Mode::Exclusive,
            presented: Generation::new(5000).unwrap(),
            marks: Marks {
                exclusive: 10,
                shared: 0,
            },
            max_raise: 1000,
            clock_lead: Duration::from_secs(3600),
            by_clock,
            allowed_up_to: 1010,
        };
        assert_eq!(
            raise(false).to_string(),
            "generation 5000 of lock `a` would raise its mark by 4990 (from 10); this server allows at most 1000"
        );
        assert!(raise(true).to_string().contains("more than 3600s ahead"));
        assert_eq!(raise(true).reason(), "raise_too_large");
    }
}
