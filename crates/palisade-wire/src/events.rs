//! The event feed, `GET /v1/events` (server-sent events): a `snapshot`,
//! then one `decision` per fencing decision, and `lagged` (a bare number)
//! when a stream fell behind.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{MarksBody, Operation};

/// One request on a lock accepted or refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Decision {
    /// Increases by one per decision, across the server.
    pub seq: u64,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The lock.
    pub lock: String,
    /// What was asked.
    pub op: Operation,
    /// `accepted` or `refused`.
    pub outcome: Outcome,
    /// The refusal's `code`, or `regression` for a stale refusal known to
    /// be a generation regression; `null` when accepted.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub reason: Option<Cow<'static, str>>,
    /// The HTTP status answered.
    pub status: u16,
    /// The presented generation, when the request carried a readable
    /// sequencer.
    pub generation: Option<u64>,
    /// The lock's marks as the answer gave them, when it gave them.
    pub marks: Option<MarksBody>,
}

/// Whether a decision admitted the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Outcome {
    /// Admitted.
    Accepted,
    /// Refused; nothing changed.
    Refused,
}

/// The first event of a stream: the recent decisions the watcher may see,
/// oldest first, and the latest marks seen per lock.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Snapshot {
    /// Oldest first.
    pub decisions: Vec<Decision>,
    /// Per lock.
    pub marks: BTreeMap<String, MarksBody>,
}
