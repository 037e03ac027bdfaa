//! One fenced request of a `PALISADE.FENCE` call, parsed: the layout of
//! `palisade_fence_apply`'s requests (see `palisade_fence.lua`), checked
//! before anything is read or written.

use palisade_core::marks::Marks;
use palisade_core::{Generation, Mode};

/// The largest counter value, increment or floor (2^53 − 1): the
/// function's bound (Lua's exact integers), kept so that both answer
/// the same.
pub(crate) const EXACT: i64 = (1 << 53) - 1;

/// An op of a request; `key` is the data key.
#[derive(Debug)]
pub(crate) struct Op<'a> {
    pub(crate) key: &'a [u8],
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
    pub(crate) marks_key: &'a [u8],
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
        || !text.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// A canonical Redis integer within ±[`EXACT`].
pub(crate) fn integer(text: &[u8]) -> Option<i64> {
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    if text != b"0" && decimal(digits, false).is_none() {
        return None;
    }
    let value: i64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    (-EXACT..=EXACT).contains(&value).then_some(value)
}

/// Parses request `a` (key indexes count from 1 past `base`, the keys of
/// the requests before it); `Err` is the request's own error message.
pub(crate) fn parse<'a>(
    keys: &[&'a [u8]],
    base: usize,
    a: &[&'a [u8]],
) -> Result<Request<'a>, String> {
    let key_at = |index: &[u8]| -> Option<&'a [u8]> {
        let index = usize::try_from(decimal(index, false)?).ok()?;
        keys.get(base.checked_add(index)? - 1).copied()
    };
    let marks_key = key_at(a[0]).ok_or("bad marks record index")?;
    let mode = match a[1] {
        b"x" => Mode::Exclusive,
        b"s" => Mode::Shared,
        _ => return Err("mode must be x or s".into()),
    };
    let generation = decimal(a[2], false).and_then(Generation::new);
    let floor_x = decimal(a[3], true);
    let floor_s = decimal(a[4], true);
    let (Some(generation), Some(exclusive), Some(shared)) = (generation, floor_x, floor_s) else {
        return Err("bad generation or floor".into());
    };
    let count = decimal(a[5], true)
        .and_then(|count| usize::try_from(count).ok())
        .ok_or("bad op count")?;
    let mut ops = Vec::with_capacity(count.min(a.len()));
    let mut at = 6;
    for index in 0..count {
        let arg = |offset: usize| a.get(at + offset).copied();
        let (Some(code), Some(key)) = (arg(0), arg(1)) else {
            return Err("arguments do not match the ops".into());
        };
        let arity = match code {
            b"del" | b"get" => 0,
            b"set" | b"hdel" | b"hget" => 1,
            b"incr" | b"hset" => 2,
            _ => {
                return Err(format!("unknown op {}", String::from_utf8_lossy(code)));
            }
        };
        let key = key_at(key)
            .filter(|key| *key != marks_key)
            .ok_or_else(|| format!("op {index}: bad key index"))?;
        let (Some(first), Some(second)) = (
            arg(2).or((arity < 1).then_some(b"")),
            arg(3).or((arity < 2).then_some(b"")),
        ) else {
            return Err("arguments do not match the ops".into());
        };
        let kind = match code {
            b"set" => OpKind::Set(first),
            b"del" => OpKind::Del,
            b"incr" => {
                let by = integer(first);
                let floor = if second.is_empty() {
                    Some(None)
                } else {
                    integer(second).map(Some)
                };
                let (Some(by), Some(floor)) = (by, floor) else {
                    return Err(format!("op {index}: bad increment or floor"));
                };
                OpKind::Incr { by, floor }
            }
            b"hset" => OpKind::HSet(first, second),
            b"hdel" => OpKind::HDel(first),
            b"get" => OpKind::Get,
            _ => OpKind::HGet(first),
        };
        ops.push(Op { key, kind });
        at += 2 + arity;
    }
    if at != a.len() {
        return Err("arguments do not match the ops".into());
    }
    Ok(Request {
        marks_key,
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
        let args: Vec<&[u8]> = vec![
            b"1", b"x", b"7", b"0", b"3", b"2", b"incr", b"2", b"-1", b"0", b"get", b"2",
        ];
        let request = parse(&keys, 1, &args).unwrap();
        assert_eq!(request.marks_key, b"m");
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
        assert_eq!(request.ops[1].key, b"{a}:k");
        let mut short = args.clone();
        short.pop();
        assert!(parse(&keys, 1, &short).is_err());
        let mut marks_as_data = args.clone();
        marks_as_data[11] = b"1";
        assert_eq!(
            parse(&keys, 1, &marks_as_data).unwrap_err(),
            "op 1: bad key index"
        );
    }
}
