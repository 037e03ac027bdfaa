//! The hostile corpus's file format, `tests/corpus/hostile/README.md`:
//! parsing only, with nothing but `std`, so the `http_request` fuzz target
//! (`fuzz/fuzz_targets/http_request.rs`) reads its inputs with this very
//! file and every corpus file is also a fuzz seed.
//!
//! ```text
//! # comment lines, before anything else
//! expect 400 malformed_sequencer
//! over tcp
//! PUT /v1/locks/orders%2F42/keys/stock
//! palisade-sequencer: v1;lock=orders%2F42;mode=exclusive;gen=0
//!
//! the body, to the end of the file
//! ```
//!
//! Escapes, in the request line, header values and the body: `\xNN` is the
//! byte `NN` (hex), `\\` a backslash, and `{repeat N}TEXT{end}` is `TEXT`
//! `N` times (no nesting). Anything else is itself.

/// One request of the corpus, with what the server must answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RequestFile {
    /// The comment lines, without `# `: why the case is hostile.
    pub(crate) description: String,
    /// `expect <status> <code>`: the answer the server must give.
    pub(crate) expect: Option<(u16, String)>,
    /// `over tcp`: also send it over a real TCP connection, through the
    /// HTTP/1.1 parser, and expect the same answer.
    pub(crate) over_tcp: bool,
    /// The method, as bytes (it may be anything).
    pub(crate) method: Vec<u8>,
    /// The request target: path and query, still percent-encoded.
    pub(crate) target: Vec<u8>,
    /// The headers, in order; a name may repeat.
    pub(crate) headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// The body: everything after the blank line, without the file's final
    /// line break.
    pub(crate) body: Vec<u8>,
}

/// Why a file is not a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FormatError {
    /// The 1-based line the problem is on.
    pub(crate) line: usize,
    /// What is wrong.
    pub(crate) reason: String,
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

/// Parses one file. `max_expanded` bounds what `{repeat}` may produce in
/// any one place (fuzz inputs can ask for gigabytes).
pub(crate) fn parse(bytes: &[u8], max_expanded: usize) -> Result<RequestFile, FormatError> {
    let mut request = RequestFile::default();
    let mut lines = bytes.split(|&byte| byte == b'\n').enumerate().peekable();
    let error = |index: usize, reason: &str| FormatError {
        line: index + 1,
        reason: reason.to_owned(),
    };

    // Comments and directives, up to the request line.
    let mut description = Vec::new();
    let (request_index, request_line) = loop {
        let Some((index, line)) = lines.next() else {
            return Err(error(0, "no request line"));
        };
        let line = strip_cr(line);
        if let Some(comment) = line.strip_prefix(b"#") {
            description.push(String::from_utf8_lossy(comment.trim_ascii()).into_owned());
        } else if let Some(expect) = line.strip_prefix(b"expect ") {
            request.expect = Some(
                parse_expect(expect)
                    .ok_or_else(|| error(index, "expected `expect <status> <code>`"))?,
            );
        } else if line == b"over tcp" {
            request.over_tcp = true;
        } else if !line.is_empty() {
            break (index, line);
        }
    };
    request.description = description.join(" ");

    let mut words = request_line.splitn(2, |&byte| byte == b' ');
    let (Some(method), Some(target)) = (words.next(), words.next()) else {
        return Err(error(request_index, "expected `<METHOD> <target>`"));
    };
    request.method = unescape(method, max_expanded).map_err(|e| error(request_index, e))?;
    request.target = unescape(target, max_expanded).map_err(|e| error(request_index, e))?;

    // Headers, up to a blank line.
    let mut body_starts = None;
    for (index, line) in lines.by_ref() {
        let line = strip_cr(line);
        if line.is_empty() {
            body_starts = Some(index + 1);
            break;
        }
        let Some(colon) = line.iter().position(|&byte| byte == b':') else {
            return Err(error(index, "expected `<name>: <value>`"));
        };
        let name = line[..colon].to_vec();
        let value =
            unescape(line[colon + 1..].trim_ascii(), max_expanded).map_err(|e| error(index, e))?;
        request.headers.push((name, value));
    }

    // The body: the rest of the file, as it is, minus the final newline.
    if let Some(first_line) = body_starts {
        let rest: Vec<&[u8]> = lines.map(|(_, line)| line).collect();
        let mut body = rest.join(&b'\n');
        if body.last() == Some(&b'\n') {
            body.pop();
        }
        request.body = unescape(&body, max_expanded).map_err(|e| error(first_line, e))?;
    }
    Ok(request)
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn parse_expect(text: &[u8]) -> Option<(u16, String)> {
    let text = std::str::from_utf8(text).ok()?;
    let (status, code) = text.trim().split_once(' ')?;
    let status: u16 = status.parse().ok()?;
    let code = code.trim();
    (!code.is_empty() && !code.contains(' ')).then(|| (status, code.to_owned()))
}

/// Expands `\xNN`, `\\` and `{repeat N}TEXT{end}`.
fn unescape(text: &[u8], max_expanded: usize) -> Result<Vec<u8>, &'static str> {
    const REPEAT: &[u8] = b"{repeat ";
    const END: &[u8] = b"{end}";
    let mut out = Vec::with_capacity(text.len());
    let mut at = 0;
    while at < text.len() {
        let rest = &text[at..];
        if rest.starts_with(REPEAT) {
            let close = rest
                .iter()
                .position(|&byte| byte == b'}')
                .ok_or("`{repeat` without `}`")?;
            let count: usize = std::str::from_utf8(&rest[REPEAT.len()..close])
                .ok()
                .and_then(|n| n.trim().parse().ok())
                .ok_or("`{repeat N}` needs a decimal N")?;
            let inner_start = close + 1;
            let inner_len = rest[inner_start..]
                .windows(END.len())
                .position(|window| window == END)
                .ok_or("`{repeat N}` without `{end}`")?;
            let inner = unescape(&rest[inner_start..inner_start + inner_len], max_expanded)?;
            let total = inner
                .len()
                .checked_mul(count)
                .filter(|&total| out.len() + total <= max_expanded)
                .ok_or("`{repeat}` expands past the limit")?;
            if total > 0 {
                out.reserve(total);
                for _ in 0..count {
                    out.extend_from_slice(&inner);
                }
            }
            at += inner_start + inner_len + END.len();
        } else if rest.starts_with(b"\\\\") {
            out.push(b'\\');
            at += 2;
        } else if rest.starts_with(b"\\x") {
            let hex = rest.get(2..4).ok_or("`\\x` needs two hex digits")?;
            let byte = std::str::from_utf8(hex)
                .ok()
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or("`\\x` needs two hex digits")?;
            out.push(byte);
            at += 4;
        } else {
            out.push(rest[0]);
            at += 1;
        }
        if out.len() > max_expanded {
            return Err("the expansion is over the limit");
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_with_every_part() {
        let file = b"# why\n# and more\nexpect 413 too_large\nover tcp\nPUT /v1/locks/a/keys/b\\x20c\nx-one: 1\nx-two:\tspaced\\x09\nx-one: 2\n\n{repeat 3}ab{end}\\\\\nline two\n";
        let request = parse(file, 1 << 20).unwrap();
        assert_eq!(request.description, "why and more");
        assert_eq!(request.expect, Some((413, "too_large".to_owned())));
        assert!(request.over_tcp);
        assert_eq!(request.method, b"PUT");
        assert_eq!(request.target, b"/v1/locks/a/keys/b c");
        assert_eq!(
            request.headers,
            [
                (b"x-one".to_vec(), b"1".to_vec()),
                (b"x-two".to_vec(), b"spaced\t".to_vec()),
                (b"x-one".to_vec(), b"2".to_vec()),
            ]
        );
        assert_eq!(request.body, b"ababab\\\nline two");
    }

    #[test]
    fn no_body_and_empty_header_values() {
        let request = parse(b"GET /healthz\nx-empty:\n", 16).unwrap();
        assert_eq!(request.headers, [(b"x-empty".to_vec(), Vec::new())]);
        assert!(request.body.is_empty());
        assert_eq!(request.expect, None);
    }

    #[test]
    fn malformed_files_and_oversized_expansions_are_errors() {
        assert!(parse(b"", 16).is_err());
        assert!(parse(b"# only a comment\n", 16).is_err());
        assert!(parse(b"GET\n", 16).is_err());
        assert!(parse(b"expect 4xx code\nGET /\n", 16).is_err());
        assert!(parse(b"GET /\nno colon\n", 16).is_err());
        assert!(parse(b"GET /\\xZZ\n", 16).is_err());
        assert!(parse(b"GET /{repeat 99}x{end}\n", 16).is_err());
        assert!(parse(b"GET /{repeat 99999999999999999999}x{end}\n", 16).is_err());
        assert!(parse(b"GET /{repeat 2}x\n", 16).is_err());
        // An empty text repeated any number of times is empty, at once.
        let request = parse(b"GET /{repeat 18446744073709551615}{end}\n", 16).unwrap();
        assert_eq!(request.target, b"/");
    }
}
