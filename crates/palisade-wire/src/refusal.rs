//! Core's [`Refused`] on the wire, both ways: the server and the guard
//! answer a refusal with [`ErrorBody::from_refused`], the client turns the
//! body back with [`ErrorKind::to_refused`]. Core keeps no serde: this is
//! the one mapping.

use std::time::Duration;

use palisade_core::{Generation, LockName, Refused, RequestId, Sequencer, SignatureError};

use crate::{
    CasMismatchFields, DecodeError, ErrorBody, ErrorKind, HolderFields, JsonBytes, RaiseFields,
    SignatureFields, StaleFields,
};

impl From<&Refused> for ErrorKind {
    fn from(refused: &Refused) -> Self {
        match refused {
            Refused::Stale {
                lock,
                mode,
                presented,
                marks,
                regression,
            } => ErrorKind::Stale(StaleFields {
                lock: lock.as_str().to_owned(),
                mode: (*mode).into(),
                presented: presented.get(),
                required: marks.required(*mode),
                marks: (*marks).into(),
                regression: *regression,
                recovery: lock.raise_floor_command(),
            }),
            Refused::NotHeld { lock, presented } => ErrorKind::NotHeld(holder(lock, *presented)),
            Refused::SharedOnWrite { lock, presented } => {
                ErrorKind::SharedOnWrite(holder(lock, *presented))
            }
            Refused::CasMismatch { op_index, current } => {
                ErrorKind::CasMismatch(CasMismatchFields {
                    op_index: *op_index as u64,
                    current_exists: current.is_some(),
                    current: current.clone().map(JsonBytes),
                })
            }
            Refused::IdempotencyKeyReused { request_id } => ErrorKind::IdempotencyKeyReused {
                idempotency_key: request_id.as_str().to_owned(),
            },
            Refused::LockMismatch {
                requested,
                presented,
            } => ErrorKind::LockMismatch {
                path_lock: requested.as_str().to_owned(),
                sequencer_lock: presented.as_str().to_owned(),
            },
            Refused::RaiseTooLarge {
                lock,
                mode,
                presented,
                marks,
                max_raise,
                clock_lead,
                by_clock,
                allowed_up_to,
            } => ErrorKind::RaiseTooLarge(RaiseFields {
                lock: lock.as_str().to_owned(),
                mode: (*mode).into(),
                presented: presented.get(),
                max_raise: *max_raise,
                max_raise_time_ms: u64::try_from(clock_lead.as_millis()).unwrap_or(u64::MAX),
                by_clock: *by_clock,
                allowed_up_to: *allowed_up_to,
                marks: (*marks).into(),
            }),
            // A refusal newer than this crate: still refused, never
            // accepted, and loud enough to be added here.
            _ => ErrorKind::Internal,
        }
    }
}

fn holder(lock: &LockName, presented: Generation) -> HolderFields {
    HolderFields {
        lock: lock.as_str().to_owned(),
        presented: presented.get(),
    }
}

impl ErrorBody {
    /// The answer to `refused`: its code, fields and message.
    pub fn from_refused(refused: &Refused) -> Self {
        ErrorBody::new(refused.into(), refused.to_string())
    }

    /// The answer to a sequencer whose signature does not hold: 401
    /// (`unsigned`, `unknown_key`, `bad_signature`) or 403
    /// (`wrong_issuer`), with what the sequencer claims.
    pub fn from_signature(sequencer: &Sequencer, error: &SignatureError) -> Self {
        let fields = SignatureFields {
            lock: sequencer.lock().as_str().to_owned(),
            presented: sequencer.generation().get(),
            key_id: sequencer
                .signature()
                .map(|signature| signature.key_id().to_owned()),
            issuer: sequencer.issuer().map(str::to_owned),
        };
        ErrorBody::new(ErrorKind::signature(error, fields), error.to_string())
    }
}

impl ErrorKind {
    /// The code of a signature that does not hold, with what the
    /// sequencer claims.
    pub fn signature(error: &SignatureError, fields: SignatureFields) -> Self {
        match error {
            SignatureError::Unsigned => ErrorKind::Unsigned(fields),
            SignatureError::UnknownKey { .. } => ErrorKind::UnknownKey(fields),
            SignatureError::BadSignature { .. } => ErrorKind::BadSignature(fields),
            // `WrongIssuer`, and any newer refusal of a proven signature.
            _ => ErrorKind::WrongIssuer(fields),
        }
    }
}

impl ErrorKind {
    /// The refusal this answer stands for (`stale`, `not_held`,
    /// `shared_on_write`, `cas_mismatch`, `idempotency_key_reused`,
    /// `lock_mismatch`, `raise_too_large`), with its fields checked;
    /// `Ok(None)` for every other code.
    pub fn to_refused(&self) -> Result<Option<Refused>, DecodeError> {
        let code = self.code();
        let invalid = |detail: &str| DecodeError::Fields {
            code: code.to_owned(),
            detail: detail.to_owned(),
        };
        let lock = |name: &str| LockName::new(name).map_err(|e| invalid(&e.to_string()));
        let generation =
            |number: u64| Generation::new(number).ok_or_else(|| invalid("generation 0"));
        Ok(Some(match self {
            ErrorKind::Stale(fields) => Refused::Stale {
                lock: lock(&fields.lock)?,
                mode: fields.mode.into(),
                presented: generation(fields.presented)?,
                marks: fields.marks.into(),
                regression: fields.regression,
            },
            ErrorKind::NotHeld(fields) => Refused::NotHeld {
                lock: lock(&fields.lock)?,
                presented: generation(fields.presented)?,
            },
            ErrorKind::SharedOnWrite(fields) => Refused::SharedOnWrite {
                lock: lock(&fields.lock)?,
                presented: generation(fields.presented)?,
            },
            ErrorKind::CasMismatch(fields) => {
                if fields.current_exists != fields.current.is_some() {
                    return Err(invalid("`current_exists` disagrees with `current`"));
                }
                Refused::CasMismatch {
                    op_index: usize::try_from(fields.op_index)
                        .map_err(|_| invalid("op index out of range"))?,
                    current: fields.current.clone().map(JsonBytes::into_bytes),
                }
            }
            ErrorKind::IdempotencyKeyReused { idempotency_key } => Refused::IdempotencyKeyReused {
                request_id: RequestId::new(idempotency_key.as_str())
                    .map_err(|e| invalid(&e.to_string()))?,
            },
            ErrorKind::LockMismatch {
                path_lock,
                sequencer_lock,
            } => Refused::LockMismatch {
                requested: lock(path_lock)?,
                presented: lock(sequencer_lock)?,
            },
            ErrorKind::RaiseTooLarge(fields) => Refused::RaiseTooLarge {
                lock: lock(&fields.lock)?,
                mode: fields.mode.into(),
                presented: generation(fields.presented)?,
                marks: fields.marks.into(),
                max_raise: fields.max_raise,
                clock_lead: Duration::from_millis(fields.max_raise_time_ms),
                by_clock: fields.by_clock,
                allowed_up_to: fields.allowed_up_to,
            },
            _ => return Ok(None),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use palisade_core::Mode;
    use palisade_core::marks::Marks;
    use proptest::prelude::*;

    fn lock_name() -> impl Strategy<Value = LockName> {
        "[a-z0-9/._-]{1,24}|[^\\x00-\\x1f\\x7f]{1,8}"
            .prop_filter_map("a valid lock name", |name| LockName::new(name).ok())
    }

    fn generation() -> impl Strategy<Value = Generation> {
        (1..=u64::MAX).prop_map(|n| Generation::new(n).unwrap())
    }

    fn mode() -> impl Strategy<Value = Mode> {
        prop_oneof![Just(Mode::Exclusive), Just(Mode::Shared)]
    }

    fn marks() -> impl Strategy<Value = Marks> {
        (any::<u64>(), any::<u64>()).prop_map(|(exclusive, shared)| Marks { exclusive, shared })
    }

    /// Every variant of core's refusal, with any fields the API can carry
    /// (a clock lead in whole milliseconds, as the body writes it).
    fn refused() -> impl Strategy<Value = Refused> {
        prop_oneof![
            (lock_name(), mode(), generation(), marks(), any::<bool>()).prop_map(
                |(lock, mode, presented, marks, regression)| Refused::Stale {
                    lock,
                    mode,
                    presented,
                    marks,
                    regression,
                }
            ),
            (lock_name(), generation())
                .prop_map(|(lock, presented)| Refused::NotHeld { lock, presented }),
            (lock_name(), generation())
                .prop_map(|(lock, presented)| Refused::SharedOnWrite { lock, presented }),
            (
                0..10_000usize,
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..32))
            )
                .prop_map(|(op_index, current)| Refused::CasMismatch {
                    op_index,
                    current: current.map(Bytes::from),
                }),
            "[!-~]{1,128}".prop_map(|key| Refused::IdempotencyKeyReused {
                request_id: RequestId::new(key).unwrap(),
            }),
            (lock_name(), lock_name()).prop_map(|(requested, presented)| {
                Refused::LockMismatch {
                    requested,
                    presented,
                }
            }),
            (
                lock_name(),
                mode(),
                generation(),
                marks(),
                any::<u64>(),
                0..u64::from(u32::MAX),
                any::<bool>(),
                any::<u64>(),
            )
                .prop_map(
                    |(lock, mode, presented, marks, max_raise, ms, by_clock, allowed_up_to)| {
                        Refused::RaiseTooLarge {
                            lock,
                            mode,
                            presented,
                            marks,
                            max_raise,
                            clock_lead: Duration::from_millis(ms),
                            by_clock,
                            allowed_up_to,
                        }
                    }
                ),
        ]
    }

    proptest! {
        #[test]
        fn every_refusal_round_trips_through_its_body(refused in refused()) {
            let body = ErrorBody::from_refused(&refused);
            prop_assert_eq!(body.code(), refused.reason());
            prop_assert_eq!(body.status(), refused.http_status());
            let json = serde_json::to_vec(&body).unwrap();
            let decoded = ErrorBody::decode(&json).unwrap();
            prop_assert_eq!(&decoded, &body);
            prop_assert_eq!(decoded.kind.to_refused().unwrap(), Some(refused));
        }
    }

    #[test]
    fn a_stale_body_is_the_documented_one() {
        let orders = LockName::new("orders/42").unwrap();
        let sequencer = Sequencer::new(orders, Mode::Exclusive, Generation::new(33).unwrap());
        let marks = Marks {
            exclusive: 34,
            shared: 0,
        };
        let refused = Refused::stale(&sequencer, marks);
        let json = serde_json::to_value(ErrorBody::from_refused(&refused)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "code": "stale",
                "message": refused.to_string(),
                "lock": "orders/42",
                "mode": "exclusive",
                "presented": 33,
                "required": 34,
                "marks": {"exclusive": 34, "shared": 0},
                "regression": false,
                "recovery": "palisade raise-floor orders/42",
            })
        );
    }

    #[test]
    fn bodies_that_break_their_codes_rules_are_refused() {
        for (json, words) in [
            (r#"{"code": "stale", "message": "m"}"#, "missing field"),
            (
                r#"{"code": "not_held", "message": "m", "lock": "a", "presented": 0}"#,
                "generation 0",
            ),
            (
                r#"{"code": "not_held", "message": "m", "lock": "", "presented": 1}"#,
                "lock",
            ),
            (
                r#"{"code": "cas_mismatch", "message": "m", "op_index": 0, "current_exists": true, "current": null}"#,
                "current_exists",
            ),
        ] {
            let error = ErrorBody::decode(json.as_bytes())
                .and_then(|body| body.kind.to_refused())
                .unwrap_err();
            assert!(error.to_string().contains(words), "{json}: {error}");
        }
        let unknown = ErrorBody::decode(br#"{"code": "new_in_v9", "message": "later"}"#);
        assert_eq!(
            unknown,
            Err(DecodeError::UnknownCode {
                code: "new_in_v9".into(),
                message: "later".into()
            })
        );
        assert!(matches!(
            ErrorBody::decode(b"<html>"),
            Err(DecodeError::Shape { .. })
        ));
        let other = ErrorBody::decode(br#"{"code": "bad_key", "message": "m", "extra": 1}"#);
        assert_eq!(
            other.unwrap().kind.to_refused(),
            Ok(None),
            "new fields are fine"
        );
    }
}
