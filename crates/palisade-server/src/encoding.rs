//! Percent-decoding of path segments (keys are bytes, not UTF-8).

/// Decodes a percent-encoded path segment into bytes. `None` when a `%` is
/// not followed by two hex digits. `+` is a literal plus.
pub(crate) fn percent_decode(segment: &str) -> Option<Vec<u8>> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let high = hex_value(*bytes.get(index + 1)?)?;
            let low = hex_value(*bytes.get(index + 2)?)?;
            out.push(high << 4 | low);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    Some(out)
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_table() {
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
}
