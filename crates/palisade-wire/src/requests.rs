//! Request bodies: compare-and-swap and batch. (A `PUT` sends the value's
//! raw bytes; the sequencer travels in its header, never in a body.)

use bytes::Bytes;
use palisade_core::op::Op;
use serde::{Deserialize, Serialize};

use crate::JsonBytes;

/// `POST /v1/locks/{lock}/cas/{key}`: set the key to `new` only if its
/// value is `expected`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CasRequest {
    /// The value the key must have now; absent or `null`: the key must not
    /// exist.
    #[serde(default)]
    pub expected: Option<JsonBytes>,
    /// The value to set; absent or `null`: remove the key.
    #[serde(default)]
    pub new: Option<JsonBytes>,
}

impl CasRequest {
    /// The request for a compare-and-swap of `expected` to `new`.
    pub fn new(expected: Option<&[u8]>, new: Option<&[u8]>) -> Self {
        CasRequest {
            expected: expected.map(JsonBytes::from),
            new: new.map(JsonBytes::from),
        }
    }

    /// The op on `key` (the path's key).
    pub fn into_op(self, key: impl Into<Bytes>) -> Op {
        Op::cas(
            key,
            self.expected.map(Bytes::from),
            self.new.map(Bytes::from),
        )
    }
}

/// `POST /v1/locks/{lock}/batch`: ops applied in order, all or none. An
/// empty list only raises `H_excl` (it fences older holders).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchRequest {
    /// The ops.
    pub ops: Vec<BatchOp>,
}

impl BatchRequest {
    /// The request for `ops`.
    pub fn new(ops: &[Op]) -> Self {
        BatchRequest {
            ops: ops.iter().map(BatchOp::from).collect(),
        }
    }

    /// The ops, for the store.
    pub fn into_ops(self) -> Vec<Op> {
        self.ops.into_iter().map(Op::from).collect()
    }
}

/// One op of a batch (core's [`Op`]), tagged by `op`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum BatchOp {
    /// Set `key` to `value`.
    Put {
        /// The key.
        key: JsonBytes,
        /// The value.
        value: JsonBytes,
    },
    /// Remove `key` (absent is fine).
    Delete {
        /// The key.
        key: JsonBytes,
    },
    /// Compare-and-swap, against the value the earlier ops left.
    Cas {
        /// The key.
        key: JsonBytes,
        /// The value the key must have; absent or `null`: must not exist.
        #[serde(default)]
        expected: Option<JsonBytes>,
        /// The value to set; absent or `null`: remove.
        #[serde(default)]
        new: Option<JsonBytes>,
    },
}

impl From<&Op> for BatchOp {
    fn from(op: &Op) -> Self {
        match op {
            Op::Put { key, value } => BatchOp::Put {
                key: key.clone().into(),
                value: value.clone().into(),
            },
            Op::Delete { key } => BatchOp::Delete {
                key: key.clone().into(),
            },
            Op::Cas { key, expected, new } => BatchOp::Cas {
                key: key.clone().into(),
                expected: expected.clone().map(JsonBytes),
                new: new.clone().map(JsonBytes),
            },
        }
    }
}

impl From<BatchOp> for Op {
    fn from(op: BatchOp) -> Self {
        match op {
            BatchOp::Put { key, value } => Op::put(key, value),
            BatchOp::Delete { key } => Op::delete(key),
            BatchOp::Cas { key, expected, new } => {
                Op::cas(key, expected.map(Bytes::from), new.map(Bytes::from))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_written_as_the_api_says_and_reads_back() {
        let ops = [
            Op::put(&b"k"[..], &b"v"[..]),
            Op::delete(&[0xff][..]),
            Op::cas(&b"c"[..], None, Some(Bytes::from_static(b"n"))),
        ];
        let json = serde_json::to_value(BatchRequest::new(&ops)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"ops": [
                {"op": "put", "key": "k", "value": "v"},
                {"op": "delete", "key": {"base64": "/w=="}},
                {"op": "cas", "key": "c", "expected": null, "new": "n"},
            ]})
        );
        let back: BatchRequest = serde_json::from_value(json).unwrap();
        assert_eq!(back.into_ops(), ops);
    }

    #[test]
    fn unknown_ops_and_fields_are_refused() {
        for text in [
            r#"{"ops": [{"op": "rename", "key": "k"}]}"#,
            r#"{"ops": [{"op": "delete", "key": "k", "extra": 1}]}"#,
            r#"{"ops": [], "more": true}"#,
            r#"{"expected": "a", "nw": "b"}"#,
        ] {
            let batch = serde_json::from_str::<BatchRequest>(text);
            let cas = serde_json::from_str::<CasRequest>(text);
            assert!(batch.is_err() && cas.is_err(), "{text}");
        }
        let cas: CasRequest = serde_json::from_str("{}").unwrap();
        assert_eq!(cas.into_op(&b"k"[..]), Op::cas(&b"k"[..], None, None));
    }
}
