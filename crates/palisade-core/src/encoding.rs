//! Canonical percent-encoding, shared by the sequencer text form and by the
//! key segments backends build from lock names.
//!
//! Canonical means: a byte is escaped if and only if it is outside the set,
//! escapes use upper-case hex, and decoding rejects anything `encode` would
//! not have produced. So every value has exactly one encoding, and comparing
//! encoded text is the same as comparing values.

/// Which ASCII bytes stand for themselves.
#[derive(Clone, Copy)]
pub(crate) struct Set {
    slash: bool,
}

/// RFC 3986 unreserved characters only: `A-Z a-z 0-9 - . _ ~`.
pub(crate) const KEY_SEGMENT: Set = Set { slash: false };

/// Unreserved characters plus `/`, so `orders/42` stays readable in a header.
pub(crate) const SEQUENCER_VALUE: Set = Set { slash: true };

impl Set {
    fn passes(self, byte: u8) -> bool {
        byte.is_ascii_alphanumeric()
            || matches!(byte, b'-' | b'.' | b'_' | b'~')
            || (self.slash && byte == b'/')
    }
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

pub(crate) fn encode(value: &str, set: Set) -> String {
    let mut out = String::with_capacity(value.len());
    for &byte in value.as_bytes() {
        if set.passes(byte) {
            out.push(byte as char);
        } else {
            out.push('%');
            out.push(HEX_UPPER[usize::from(byte >> 4)] as char);
            out.push(HEX_UPPER[usize::from(byte & 0xF)] as char);
        }
    }
    out
}

/// Why an encoded value was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// `%` not followed by two hex digits.
    BadEscape,
    /// The decoded bytes are not UTF-8.
    NotUtf8,
    /// Valid, but not how `encode` writes it (`%61`, `%2f`, a raw `;`...).
    NotCanonical,
}

impl DecodeError {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            DecodeError::BadEscape => "`%` must be followed by two upper-case hex digits",
            DecodeError::NotUtf8 => "percent-escapes do not decode to UTF-8",
            DecodeError::NotCanonical => {
                "not canonically encoded (escape exactly the bytes outside `A-Z a-z 0-9 - . _ ~ /`, with upper-case hex)"
            }
        }
    }
}

pub(crate) fn decode_canonical(encoded: &str, set: Set) -> Result<String, DecodeError> {
    let bytes = percent_decode(encoded).ok_or(DecodeError::BadEscape)?;
    let decoded = String::from_utf8(bytes).map_err(|_| DecodeError::NotUtf8)?;
    if encode(&decoded, set) != encoded {
        return Err(DecodeError::NotCanonical);
    }
    Ok(decoded)
}

/// Percent-decodes `encoded` into bytes, leniently: hex of either case,
/// any byte may be escaped or not, `+` is a literal plus. `None` when a
/// `%` is not followed by two hex digits. The sequencer's canonical
/// decoding is this plus a round-trip check; the resource server decodes
/// keys in its paths with it (keys are bytes, not UTF-8).
///
/// ```
/// assert_eq!(palisade_core::percent_decode("a%2fb%FF").as_deref(), Some(&b"a/b\xff"[..]));
/// assert_eq!(palisade_core::percent_decode("%4"), None);
/// ```
pub fn percent_decode(encoded: &str) -> Option<Vec<u8>> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hi = hex_value(*bytes.get(i + 1)?)?;
            let lo = hex_value(*bytes.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        // Lower-case hex decodes, and is then refused as non-canonical.
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decode_table() {
        let check = |input: &str, expected: Option<&[u8]>| {
            assert_eq!(percent_decode(input).as_deref(), expected, "{input:?}");
        };
        check("plain", Some(b"plain"));
        check("a%2Fb", Some(b"a/b"));
        check("a%2fb", Some(b"a/b"));
        check("%FF%00", Some(&[0xff, 0x00]));
        check("a+b", Some(b"a+b"));
        check("", Some(b""));
        check("%", None);
        check("%4", None);
        check("%zz", None);
        check("%%41", None);
    }

    #[test]
    fn round_trips_and_refuses_non_canonical() {
        for value in ["orders/42", "a b;c=d%", "日本", "~._-", ""] {
            for set in [KEY_SEGMENT, SEQUENCER_VALUE] {
                let encoded = encode(value, set);
                assert_eq!(decode_canonical(&encoded, set).as_deref(), Ok(value));
            }
        }
        assert_eq!(encode("a/b", KEY_SEGMENT), "a%2Fb");
        assert_eq!(encode("a/b", SEQUENCER_VALUE), "a/b");
        assert_eq!(
            decode_canonical("%61", SEQUENCER_VALUE),
            Err(DecodeError::NotCanonical)
        );
        assert_eq!(
            decode_canonical("a%2fb", KEY_SEGMENT),
            Err(DecodeError::NotCanonical)
        );
        assert_eq!(
            decode_canonical("a;b", SEQUENCER_VALUE),
            Err(DecodeError::NotCanonical)
        );
        assert_eq!(
            decode_canonical("%4", SEQUENCER_VALUE),
            Err(DecodeError::BadEscape)
        );
        assert_eq!(
            decode_canonical("%ZZ", SEQUENCER_VALUE),
            Err(DecodeError::BadEscape)
        );
        assert_eq!(
            decode_canonical("%FF", SEQUENCER_VALUE),
            Err(DecodeError::NotUtf8)
        );
    }
}
