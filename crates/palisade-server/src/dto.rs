//! JSON bodies of the HTTP API. The sequencer never appears here: it
//! travels in its header, in its canonical text form.

use base64::Engine as _;
use bytes::Bytes;
use palisade_core::LockName;
use palisade_store::{Applied, Op};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::error::{ApiError, marks_json};

/// Bytes in JSON: a string (its UTF-8 bytes) or `{"base64": "..."}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum JsonBytes {
    Text(String),
    Base64 { base64: String },
}

impl JsonBytes {
    pub(crate) fn decode(self, field: &str) -> Result<Bytes, ApiError> {
        match self {
            JsonBytes::Text(text) => Ok(Bytes::from(text.into_bytes())),
            JsonBytes::Base64 { base64 } => base64::engine::general_purpose::STANDARD
                .decode(base64.as_bytes())
                .map(Bytes::from)
                .map_err(|e| ApiError::bad_request(format!("`{field}`: invalid base64: {e}"))),
        }
    }
}

/// Bytes as this API writes them in JSON, the way [`JsonBytes`] reads
/// them: a string when they are UTF-8, `{"base64": ...}` otherwise.
pub(crate) fn json_bytes(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => Value::String(text.to_owned()),
        Err(_) => {
            serde_json::json!({"base64": base64::engine::general_purpose::STANDARD.encode(bytes)})
        }
    }
}

fn optional(bytes: Option<JsonBytes>, field: &str) -> Result<Option<Bytes>, ApiError> {
    bytes.map(|b| b.decode(field)).transpose()
}

/// `POST /v1/locks/{lock}/cas/{key}`: absent `expected` means "the key
/// must not exist"; absent `new` deletes.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CasBody {
    #[serde(default)]
    expected: Option<JsonBytes>,
    #[serde(default)]
    new: Option<JsonBytes>,
}

impl CasBody {
    pub(crate) fn into_op(self, key: Vec<u8>) -> Result<Op, ApiError> {
        Ok(Op::cas(
            key,
            optional(self.expected, "expected")?,
            optional(self.new, "new")?,
        ))
    }
}

/// `POST /v1/locks/{lock}/batch`: applied all or none.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchBody {
    ops: Vec<BatchOp>,
}

/// One op of a batch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
enum BatchOp {
    Put {
        key: JsonBytes,
        value: JsonBytes,
    },
    Delete {
        key: JsonBytes,
    },
    Cas {
        key: JsonBytes,
        #[serde(default)]
        expected: Option<JsonBytes>,
        #[serde(default)]
        new: Option<JsonBytes>,
    },
}

impl BatchBody {
    pub(crate) fn len(&self) -> usize {
        self.ops.len()
    }

    pub(crate) fn into_ops(self) -> Result<Vec<Op>, ApiError> {
        self.ops
            .into_iter()
            .map(|op| {
                Ok(match op {
                    BatchOp::Put { key, value } => {
                        Op::put(key.decode("key")?, value.decode("value")?)
                    }
                    BatchOp::Delete { key } => Op::delete(key.decode("key")?),
                    BatchOp::Cas { key, expected, new } => Op::cas(
                        key.decode("key")?,
                        optional(expected, "expected")?,
                        optional(new, "new")?,
                    ),
                })
            })
            .collect()
    }
}

/// The body of every successful write.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WriteResponse {
    lock: String,
    /// One result per op, in order.
    #[schema(value_type = Vec<String>)]
    results: Vec<&'static str>,
    #[schema(value_type = crate::openapi::MarksBody)]
    marks: Value,
    commit_seq: u64,
    replayed: bool,
}

impl WriteResponse {
    pub(crate) fn new(lock: &LockName, applied: &Applied) -> Self {
        WriteResponse {
            lock: lock.as_str().to_owned(),
            results: applied.results.iter().map(|r| r.as_str()).collect(),
            marks: marks_json(applied.marks),
            commit_seq: applied.commit_seq,
            replayed: applied.replayed,
        }
    }
}
