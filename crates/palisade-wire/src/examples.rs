//! One example body of every error code: what the OpenAPI document shows
//! under each status, and the list of codes a decoder knows.

use std::sync::LazyLock;
use std::time::Duration;

use bytes::Bytes;
use palisade_core::marks::Marks;
use palisade_core::{Generation, LockName, Mode, Refused, RequestId, Sequencer, SignatureError};

use crate::{Dependency, ErrorBody, ErrorKind, MarksBody};

static EXAMPLES: LazyLock<Vec<ErrorBody>> = LazyLock::new(build);

/// Every example, one per code.
pub(crate) fn all() -> &'static [ErrorBody] {
    &EXAMPLES
}

fn build() -> Vec<ErrorBody> {
    let lock = LockName::new("orders/42").expect("a valid name");
    let generation = |n| Generation::new(n).expect("not 0");
    let marks = Marks {
        exclusive: 34,
        shared: 0,
    };
    let sequencer = Sequencer::new(lock.clone(), Mode::Exclusive, generation(u64::MAX));
    let signature = |error: SignatureError| ErrorBody::from_signature(&sequencer, &error);
    let refused = |refused: Refused| ErrorBody::from_refused(&refused);
    let plain = |kind: ErrorKind, message: &str| ErrorBody::new(kind, message);
    vec![
        plain(
            ErrorKind::MissingSequencer,
            "writes need a palisade-sequencer header with an exclusive sequencer",
        ),
        plain(
            ErrorKind::MalformedSequencer,
            "malformed sequencer: `gen` is not a positive decimal number",
        ),
        plain(ErrorKind::BadLockName, "lock name is empty"),
        plain(ErrorKind::BadKey, "the key's percent-encoding is broken"),
        plain(
            ErrorKind::BadRequest,
            "invalid JSON body: expected value at line 1 column 1",
        ),
        plain(
            ErrorKind::Unauthenticated,
            "the bearer token is not known to this server",
        ),
        signature(SignatureError::Unsigned),
        signature(SignatureError::UnknownKey {
            key_id: "k9".into(),
        }),
        signature(SignatureError::BadSignature {
            key_id: "k1".into(),
        }),
        plain(
            ErrorKind::Forbidden {
                lock: lock.as_str().into(),
            },
            "this token may not use lock `orders/42`",
        ),
        signature(SignatureError::WrongIssuer {
            issuer: Some("redis-eu".into()),
        }),
        refused(Refused::SharedOnWrite {
            lock: lock.clone(),
            presented: generation(33),
        }),
        plain(
            ErrorKind::NotFound {
                lock: lock.as_str().into(),
                marks: MarksBody::from(marks),
            },
            "no such key",
        ),
        plain(ErrorKind::NoRoute, "no route for /v2/locks"),
        plain(
            ErrorKind::MethodNotAllowed,
            "this route does not support that method",
        ),
        plain(
            ErrorKind::BodyTimeout { timeout_ms: 30_000 },
            "the request body did not arrive within 30s",
        ),
        refused(Refused::Stale {
            lock: lock.clone(),
            mode: Mode::Exclusive,
            presented: generation(33),
            marks,
            regression: false,
        }),
        refused(Refused::NotHeld {
            lock: lock.clone(),
            presented: generation(33),
        }),
        refused(Refused::RaiseTooLarge {
            lock: lock.clone(),
            mode: Mode::Exclusive,
            presented: generation(50_000),
            marks,
            max_raise: 10_000,
            clock_lead: Duration::from_secs(3600),
            by_clock: false,
            allowed_up_to: 10_034,
        }),
        refused(Refused::CasMismatch {
            op_index: 0,
            current: Some(Bytes::from_static(b"7")),
        }),
        plain(
            ErrorKind::too_large("value", 1_048_576, Some(2_000_000)),
            "the value is 2000000 bytes; the limit is 1048576 bytes",
        ),
        refused(Refused::LockMismatch {
            requested: lock.clone(),
            presented: LockName::new("orders/43").expect("a valid name"),
        }),
        refused(Refused::IdempotencyKeyReused {
            request_id: RequestId::new("order-42-attempt-1").expect("a valid key"),
        }),
        plain(
            ErrorKind::Internal,
            "an internal error; see the server's log",
        ),
        plain(
            ErrorKind::UnsupportedTransferCoding,
            "transfer coding `gzip, chunked` is not implemented: send the body plain, with content-length or chunked alone",
        ),
        plain(
            ErrorKind::StorageUnavailable,
            "the store has fail-stopped after a failed flush; restart the server",
        ),
        plain(
            ErrorKind::LiveCheckUnavailable,
            "the live check did not answer within 5s",
        ),
        plain(
            ErrorKind::ConnectionShed,
            "the server closed this connection to admit another; nothing was done: retry on a new connection",
        ),
        plain(
            ErrorKind::Overloaded { max_in_flight: 256 },
            "the server is handling its limit of 256 requests; retry shortly",
        ),
        plain(
            ErrorKind::DeadlineExceeded {
                waiting_for: Dependency::Store,
                deadline_ms: 10_000,
            },
            "the store did not answer within the request deadline of 10 s; a write may still be applied: retry with the same idempotency key",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use utoipa::PartialSchema as _;
    use utoipa::openapi::{RefOr, Schema};

    use super::*;

    /// The `code` of each alternative of the generated error schema: every
    /// variant of [`ErrorKind`], as the derive sees it.
    fn schema_codes() -> BTreeSet<String> {
        let schema = serde_json::to_value(ErrorKind::schema()).unwrap();
        let alternatives = schema["oneOf"]
            .as_array()
            .expect("one alternative per code");
        alternatives
            .iter()
            .map(|alternative| code_in(alternative).unwrap())
            .collect()
    }

    /// The one value of a `code` property somewhere in `schema`.
    fn code_in(schema: &serde_json::Value) -> Option<String> {
        if let Some(code) = schema["properties"]["code"]["enum"][0].as_str() {
            return Some(code.to_owned());
        }
        match schema {
            serde_json::Value::Array(items) => items.iter().find_map(code_in),
            serde_json::Value::Object(map) => map.values().find_map(code_in),
            _ => None,
        }
    }

    #[test]
    fn the_examples_cover_every_code_once_with_its_own_status() {
        let codes: Vec<&str> = all().iter().map(ErrorBody::code).collect();
        let unique: BTreeSet<&str> = codes.iter().copied().collect();
        assert_eq!(unique.len(), codes.len(), "one example per code: {codes:?}");
        let from_schema = schema_codes();
        assert_eq!(
            unique
                .iter()
                .map(|code| code.to_string())
                .collect::<BTreeSet<_>>(),
            from_schema,
            "every variant of ErrorKind has an example"
        );
        for example in all() {
            let json = serde_json::to_vec(example).unwrap();
            assert_eq!(&ErrorBody::decode(&json).unwrap(), example);
            let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
            assert_eq!(value["code"], example.code());
            assert!((400..600).contains(&example.status()));
        }
        let _: RefOr<Schema> = ErrorBody::schema();
    }
}
