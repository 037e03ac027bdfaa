//! Answer bodies of the lock routes and `/healthz`. (A read's `200` is the
//! value's raw bytes, with the marks in headers.)

use palisade_core::LockName;
use palisade_core::op::Applied;
use serde::{Deserialize, Serialize};

use crate::{MarksBody, OpResultName};

/// The body of every successful write (`PUT`, `DELETE`, cas, batch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WriteAnswer {
    /// The lock.
    pub lock: String,
    /// One result per op, in order.
    pub results: Vec<OpResultName>,
    /// The lock's marks right after the write.
    pub marks: MarksBody,
    /// The store's commit sequence number of the write: strictly
    /// increasing in commit order, not contiguous; a replay carries the
    /// original write's number.
    pub commit_seq: u64,
    /// `true` when this is the remembered outcome of an earlier request
    /// with the same idempotency key: nothing was applied this time.
    pub replayed: bool,
}

impl WriteAnswer {
    /// The answer to a write on `lock` that the store applied.
    pub fn new(lock: &LockName, applied: &Applied) -> Self {
        WriteAnswer {
            lock: lock.as_str().to_owned(),
            results: applied.results.iter().copied().map(Into::into).collect(),
            marks: applied.marks.into(),
            commit_seq: applied.commit_seq,
            replayed: applied.replayed,
        }
    }

    /// The write as core's [`Applied`].
    pub fn into_applied(self) -> Applied {
        Applied {
            results: self.results.into_iter().map(Into::into).collect(),
            marks: self.marks.into(),
            commit_seq: self.commit_seq,
            replayed: self.replayed,
        }
    }
}

/// `GET /v1/locks/{lock}/marks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MarksAnswer {
    /// The lock.
    pub lock: String,
    /// Its marks; 0 and 0 for a lock never seen.
    pub marks: MarksBody,
}

/// `GET /healthz` while the store accepts requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HealthAnswer {
    /// Always `ok` on a 200.
    pub status: HealthStatus,
    /// The `--durability` mode: `flushed` or `buffered`.
    pub durability: String,
    /// The storage engine, in its own words.
    pub engine: EngineBody,
}

/// The only status a healthy server reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum HealthStatus {
    /// The store accepts requests.
    Ok,
}

/// The storage engine behind the server (never where it keeps its data).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EngineBody {
    /// `sled`, `postgres`, `etcd`.
    pub name: String,
    /// When a 2xx is sent, in the engine's words.
    pub durability: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use palisade_core::OpResult;
    use palisade_core::marks::Marks;

    #[test]
    fn a_write_answer_round_trips_to_applied() {
        let applied = Applied {
            results: vec![OpResult::Created, OpResult::Absent],
            marks: Marks {
                exclusive: 33,
                shared: 2,
            },
            commit_seq: 1093,
            replayed: true,
        };
        let answer = WriteAnswer::new(&LockName::new("orders/42").unwrap(), &applied);
        let json = serde_json::to_value(&answer).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "lock": "orders/42",
                "results": ["created", "absent"],
                "marks": {"exclusive": 33, "shared": 2},
                "commit_seq": 1093,
                "replayed": true,
            })
        );
        let back: WriteAnswer = serde_json::from_value(json).unwrap();
        assert_eq!(back.into_applied(), applied);
    }
}
