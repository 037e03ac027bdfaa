//! One fenced request of a `PALISADE.FENCE` call, parsed and checked
//! before anything is read or written.
//!
//! A request is one argument (protocol 3): the fields of
//! `palisade_fence_apply`'s requests (see `palisade_fence.lua`) packed,
//! so that Redis and the client handle one string per request rather
//! than a dozen:
//!
//! ```text
//! request = marks SP mode SP generation SP floor-x SP floor-s *(SP op)
//! op      = "set" SP key SP bytes / "del" SP key / "get" SP key
//!         / "incr" SP key SP integer SP (integer / "-")
//!         / "hset" SP key SP bytes SP bytes
//!         / "hdel" SP key SP bytes / "hget" SP key SP bytes
//! bytes   = length ":" <length bytes>
//! ```
//!
//! `marks` and `key` are 1-based indexes into the request's keys; numbers
//! are canonical decimals.

use palisade_core::marks::Marks;
use palisade_core::{Generation, Mode};

/// The largest counter value, increment or floor (2^53 − 1): the
/// function's bound (Lua's exact integers), kept so that both answer
/// the same.
pub(crate) const EXACT: i64 = (1 << 53) - 1;

/// An op of a request; `key` is the data key's place among the call's
/// keys.
#[derive(Debug)]
pub(crate) struct Op<'a> {
    pub(crate) key: usize,
    pub(crate) kind: OpKind<'a>,
}

#[derive(Debug)]
pub(crate) enum OpKind<'a> {
    Set(&'a [u8]),
    Del,
    Incr { by: i64, floor: Option<i64> },
    HSet(&'a [u8], &'a [u8]),
    HDel(&'a [u8]),
    Get,
    HGet(&'a [u8]),
}

impl OpKind<'_> {
    pub(crate) fn writes(&self) -> bool {
        !matches!(self, OpKind::Get | OpKind::HGet(_))
    }

    /// The kind of value the op needs its key to hold (`None`: any; SET
    /// replaces whatever is there).
    pub(crate) fn needs(&self) -> Option<&'static str> {
        match self {
            OpKind::Incr { .. } | OpKind::Get => Some("string"),
            OpKind::HSet(..) | OpKind::HDel(_) | OpKind::HGet(_) => Some("hash"),
            OpKind::Set(_) | OpKind::Del => None,
        }
    }
}

/// A request: whose marks, who asks, the floor of marks the client saw
/// before, and the ops.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    /// The marks record's place among the call's keys.
    pub(crate) marks: usize,
    pub(crate) mode: Mode,
    pub(crate) generation: Generation,
    pub(crate) floor: Marks,
    pub(crate) ops: Vec<Op<'a>>,
}

/// `text` if it is a canonical decimal u64 (no sign, no leading zero);
/// `0` only when `zero_ok`.
pub(crate) fn decimal(text: &[u8], zero_ok: bool) -> Option<u64> {
    if text == b"0" {
        return zero_ok.then_some(0);
    }
    if text
        .first()
        .is_none_or(|first| !(b'1'..=b'9').contains(first))
    {
        return None;
    }
    text.iter().try_fold(0u64, |value, digit| {
        let digit = digit.checked_sub(b'0').filter(|digit| *digit <= 9)?;
        value.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// A canonical Redis integer within ±[`EXACT`].
pub(crate) fn integer(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix(b"-") {
        Some(digits) => (true, digits),
        None => (false, text),
    };
    let magnitude = i64::try_from(decimal(digits, !negative)?).ok()?;
    let value = if negative { -magnitude } else { magnitude };
    (-EXACT..=EXACT).contains(&value).then_some(value)
}

/// Reads a packed request: tokens separated by one space.
struct Cursor<'a> {
    rest: &'a [u8],
    started: bool,
}

impl<'a> Cursor<'a> {
    /// The separator before every token but the first.
    fn separator(&mut self) -> Option<()> {
        if self.started {
            self.rest = self.rest.strip_prefix(b" ")?;
        }
        self.started = true;
        Some(())
    }

    fn token(&mut self) -> Option<&'a [u8]> {
        self.separator()?;
        let end = self
            .rest
            .iter()
            .position(|byte| *byte == b' ')
            .unwrap_or(self.rest.len());
        let (token, rest) = self.rest.split_at(end);
        self.rest = rest;
        (!token.is_empty()).then_some(token)
    }

    /// `length ":" bytes`.
    fn bytes(&mut self) -> Option<&'a [u8]> {
        self.separator()?;
        let colon = self.rest.iter().position(|byte| *byte == b':')?;
        let len = usize::try_from(decimal(&self.rest[..colon], true)?).ok()?;
        let start = colon + 1;
        let end = start
            .checked_add(len)
            .filter(|end| *end <= self.rest.len())?;
        let bytes = &self.rest[start..end];
        self.rest = &self.rest[end..];
        Some(bytes)
    }

    fn is_done(&self) -> bool {
        self.rest.is_empty()
    }
}

/// Parses `packed` (key indexes count from 1 past `base`, the keys of the
/// requests before it); `Err` is the request's own error message.
pub(crate) fn parse<'a>(
    keys: &[&[u8]],
    base: usize,
    packed: &'a [u8],
) -> Result<Request<'a>, String> {
    let key_at = |index: &[u8]| -> Option<usize> {
        let index = usize::try_from(decimal(index, false)?).ok()?;
        let at = base.checked_add(index)? - 1;
        (at < keys.len()).then_some(at)
    };
    let mut cursor = Cursor {
        rest: packed,
        started: false,
    };
    let marks = cursor
        .token()
        .and_then(key_at)
        .ok_or("bad marks record index")?;
    let mode = match cursor.token() {
        Some(b"x") => Mode::Exclusive,
        Some(b"s") => Mode::Shared,
        _ => return Err("mode must be x or s".into()),
    };
    let generation = cursor
        .token()
        .and_then(|token| decimal(token, false))
        .and_then(Generation::new);
    let floor_x = cursor.token().and_then(|token| decimal(token, true));
    let floor_s = cursor.token().and_then(|token| decimal(token, true));
    let (Some(generation), Some(exclusive), Some(shared)) = (generation, floor_x, floor_s) else {
        return Err("bad generation or floor".into());
    };
    let mut ops = Vec::with_capacity(1);
    while !cursor.is_done() {
        let index = ops.len();
        let bad = || format!("op {index}: bad arguments");
        let code = cursor.token().ok_or_else(bad)?;
        let key = cursor
            .token()
            .and_then(key_at)
            .filter(|key| keys[*key] != keys[marks])
            .ok_or_else(|| format!("op {index}: bad key index"))?;
        let kind = match code {
            b"set" => OpKind::Set(cursor.bytes().ok_or_else(bad)?),
            b"del" => OpKind::Del,
            b"get" => OpKind::Get,
            b"incr" => {
                let by = cursor.token().and_then(integer);
                let floor = match cursor.token() {
                    Some(b"-") => Some(None),
                    Some(floor) => integer(floor).map(Some),
                    None => None,
                };
                let (Some(by), Some(floor)) = (by, floor) else {
                    return Err(format!("op {index}: bad increment or floor"));
                };
                OpKind::Incr { by, floor }
            }
            b"hset" => {
                let field = cursor.bytes().ok_or_else(bad)?;
                OpKind::HSet(field, cursor.bytes().ok_or_else(bad)?)
            }
            b"hdel" => OpKind::HDel(cursor.bytes().ok_or_else(bad)?),
            b"hget" => OpKind::HGet(cursor.bytes().ok_or_else(bad)?),
            _ => {
                return Err(format!("unknown op {}", String::from_utf8_lossy(code)));
            }
        };
        ops.push(Op { key, kind });
    }
    Ok(Request {
        marks,
        mode,
        generation,
        floor: Marks { exclusive, shared },
        ops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_canonical_u64() {
        assert_eq!(decimal(b"0", true), Some(0));
        assert_eq!(decimal(b"0", false), None);
        assert_eq!(decimal(b"18446744073709551615", false), Some(u64::MAX));
        for bad in [
            &b"18446744073709551616"[..],
            b"01",
            b"+1",
            b"-1",
            b"",
            b"1a",
        ] {
            assert_eq!(decimal(bad, true), None, "{bad:?}");
        }
    }

    #[test]
    fn integers_are_canonical_and_exact() {
        assert_eq!(integer(b"-5"), Some(-5));
        assert_eq!(integer(b"0"), Some(0));
        assert_eq!(integer(b"9007199254740991"), Some(EXACT));
        for bad in [&b"9007199254740992"[..], b"-0", b"007", b"", b"1.0"] {
            assert_eq!(integer(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn requests_name_their_keys_by_index_and_match_their_ops() {
        let keys: Vec<&[u8]> = vec![b"other", b"m", b"{a}:k"];
        let packed = b"1 x 7 0 3 incr 2 -1 0 get 2 set 2 5:a b:c hset 2 0: 1:  incr 2 1 -";
        let request = parse(&keys, 1, packed).unwrap();
        assert_eq!(keys[request.marks], b"m");
        assert_eq!(
            request.floor,
            Marks {
                exclusive: 0,
                shared: 3
            }
        );
        assert!(matches!(
            request.ops[0].kind,
            OpKind::Incr {
                by: -1,
                floor: Some(0)
            }
        ));
        assert_eq!(keys[request.ops[1].key], b"{a}:k");
        assert!(matches!(request.ops[2].kind, OpKind::Set(b"a b:c")));
        assert!(matches!(request.ops[3].kind, OpKind::HSet(b"", b" ")));
        assert!(matches!(
            request.ops[4].kind,
            OpKind::Incr { by: 1, floor: None }
        ));
        for bad in [
            &b"1 x 7 0 3 incr 2 -1"[..],
            b"1 x 7 0 3 set 2 6:a",
            b"1 x 7 0 3 get 2 ",
            b"1 x 7 0  3",
            b"1 x 0 0 3",
            b"1 y 7 0 3",
            b"1 x 7 0 3 get 3",
        ] {
            assert!(
                parse(&keys, 1, bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            parse(&keys, 1, b"1 x 7 0 3 get 1").unwrap_err(),
            "op 0: bad key index"
        );
    }
}
