//! Bearer tokens: who may use which locks.
//!
//! A tokens file has one token per line with the lock-name prefixes it may
//! use: `<token> orders/,inventory/`, or `<token> *` for every lock. The
//! server keeps only the SHA-256 digest of each token, so a memory dump
//! or a debug print shows no usable token, and looks a presented token up
//! by its digest: the lookup's timing depends on the digest, which tells
//! an attacker nothing about any valid token.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use axum::http::{HeaderMap, HeaderValue, header};
use palisade_core::LockName;
use palisade_wire::ErrorKind;
use sha2::{Digest as _, Sha256};

use crate::ServerError;
use crate::error::ApiError;

/// A SHA-256 digest of a token.
type TokenDigest = [u8; 32];

/// The tokens a server accepts, each with the lock-name prefixes it may use.
/// Parsed from the tokens file's text with [`str::parse`].
///
/// ```
/// use palisade_server::TokenTable;
///
/// let file = "Zs8AkP2v1nQxWm4rT7yB orders/,inventory/\n9fLq2RmX7cVb3NtK8sWd *\n";
/// let table: TokenTable = file.parse()?;
/// assert_eq!(table.len(), 2);
/// assert!(format!("{table:?}").find("Zs8AkP2v").is_none(), "tokens never show");
/// # Ok::<(), palisade_server::ServerError>(())
/// ```
#[derive(Clone, Default)]
pub struct TokenTable {
    grants: HashMap<TokenDigest, Grant>,
}

/// What one token may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The first 12 hex digits of the token's SHA-256: names the token in
    /// logs without revealing it.
    pub(crate) token_id: String,
    /// The lock-name prefixes this token may use; `None` is `*`, every lock.
    prefixes: Option<Vec<String>>,
}

impl Grant {
    /// Whether this token may use `lock`: plain string prefixes, so end a
    /// prefix with `/` to mean "this folder" (`orders/` allows `orders/42`
    /// but not `orders-archive/1`).
    pub(crate) fn allows(&self, lock: &LockName) -> bool {
        self.allows_name(lock.as_str())
    }

    /// [`Grant::allows`] for a lock name already checked.
    pub(crate) fn allows_name(&self, lock: &str) -> bool {
        match &self.prefixes {
            None => true,
            Some(prefixes) => prefixes
                .iter()
                .any(|prefix| lock.starts_with(prefix.as_str())),
        }
    }
}

impl TokenTable {
    /// The shortest token accepted, in characters: shorter is a password.
    pub const MIN_TOKEN_LEN: usize = 16;

    /// An empty table (it accepts nothing).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `token`, allowed the lock-name `prefixes` (`["*"]` for every
    /// lock). Tokens are RFC 6750 `b64token`s: letters, digits and
    /// `-._~+/`, then optional `=` padding; at least 16 characters.
    pub fn insert<'a>(
        &mut self,
        token: &str,
        prefixes: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), ServerError> {
        self.insert_at(0, token, prefixes)
    }

    fn insert_at<'a>(
        &mut self,
        line: usize,
        token: &str,
        prefixes: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), ServerError> {
        let invalid = |reason: &'static str| ServerError::Tokens { line, reason };
        if token.len() < Self::MIN_TOKEN_LEN {
            return Err(invalid("the token is shorter than 16 characters"));
        }
        if !is_b64token(token) {
            return Err(invalid(
                "the token has a character outside letters, digits and -._~+/ (then = padding)",
            ));
        }
        let mut all = false;
        let mut listed = Vec::new();
        for prefix in prefixes {
            match prefix {
                "" => return Err(invalid("an empty lock-name prefix")),
                "*" => all = true,
                prefix => listed.push(prefix.to_owned()),
            }
        }
        if all && !listed.is_empty() {
            return Err(invalid("`*` must stand alone"));
        }
        if !all && listed.is_empty() {
            return Err(invalid("no lock-name prefixes"));
        }
        let digest = digest(token);
        if self.grants.contains_key(&digest) {
            return Err(invalid("the same token appears twice"));
        }
        let grant = Grant {
            token_id: token_id(&digest),
            prefixes: (!all).then_some(listed),
        };
        self.grants.insert(digest, grant);
        Ok(())
    }

    /// How many tokens.
    pub fn len(&self) -> usize {
        self.grants.len()
    }

    /// Whether there are no tokens.
    pub fn is_empty(&self) -> bool {
        self.grants.is_empty()
    }

    /// The grant of the request's bearer token, or 401 `unauthenticated`
    /// with a `www-authenticate: Bearer` challenge.
    pub(crate) fn authenticate(&self, headers: &HeaderMap) -> Result<&Grant, ApiError> {
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(unauthenticated(
                "this server needs `authorization: Bearer <token>` (exactly one)",
                None,
            ));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|text| {
                let (scheme, token) = text.split_once(' ')?;
                scheme
                    .eq_ignore_ascii_case("bearer")
                    .then(|| token.trim_matches(' '))
            })
            .ok_or_else(|| {
                unauthenticated(
                    "the authorization header is not `Bearer <token>`",
                    Some("invalid_request"),
                )
            })?;
        self.grants.get(&digest(token)).ok_or_else(|| {
            unauthenticated(
                "the bearer token is not known to this server",
                Some("invalid_token"),
            )
        })
    }
}

impl FromStr for TokenTable {
    type Err = ServerError;

    /// One token per line: `<token> <prefix>[,<prefix>...]` or
    /// `<token> *`; `#` comments and blank lines are ignored.
    fn from_str(text: &str) -> Result<Self, ServerError> {
        let mut table = TokenTable::new();
        for entry in palisade_core::two_columns(text) {
            let (line, token, prefixes) = entry.map_err(|line| ServerError::Tokens {
                line,
                reason: "expected `<token> <prefix>,<prefix>...` or `<token> *`",
            })?;
            table.insert_at(line, token, prefixes.split(','))?;
        }
        Ok(table)
    }
}

impl fmt::Debug for TokenTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids: Vec<&str> = self.grants.values().map(|g| g.token_id.as_str()).collect();
        ids.sort_unstable();
        f.debug_struct("TokenTable")
            .field("token_ids", &ids)
            .finish()
    }
}

fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

fn token_id(digest: &TokenDigest) -> String {
    hex::encode(&digest[..6])
}

/// RFC 6750 `b64token`: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" /
/// "/" ) *"="`.
fn is_b64token(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

fn unauthenticated(message: &str, error: Option<&str>) -> ApiError {
    let challenge = match error {
        Some(error) => format!("Bearer realm=\"palisade\", error=\"{error}\""),
        None => "Bearer realm=\"palisade\"".to_owned(),
    };
    ApiError::new(ErrorKind::Unauthenticated, message).with_header(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_str(&challenge).expect("a visible-ASCII challenge"),
    )
}

/// 403 `forbidden`: a known token used outside its prefixes.
pub(crate) fn forbidden(grant: &Grant, lock: &LockName) -> ApiError {
    tracing::info!(
        target: "palisade_server::auth",
        token_id = %grant.token_id,
        lock = %lock,
        reason = "forbidden",
        "refused: the token may not use this lock"
    );
    ApiError::new(
        ErrorKind::Forbidden {
            lock: lock.as_str().to_owned(),
        },
        format!("this token may not use lock `{lock}`"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN_A: &str = "aaaaaaaaaaaaaaaaaaaa";
    const TOKEN_B: &str = "bbbbbbbbbbbbbbbbbbbb";

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        );
        headers
    }

    fn lock(name: &str) -> LockName {
        LockName::new(name).unwrap()
    }

    #[test]
    fn prefixes_are_plain_string_prefixes() {
        let table: TokenTable = format!("{TOKEN_A} orders/,inventory/\n{TOKEN_B} *")
            .parse()
            .unwrap();
        let a = table.authenticate(&bearer(TOKEN_A)).unwrap();
        assert!(a.allows(&lock("orders/42")));
        assert!(a.allows(&lock("inventory/x/y")));
        assert!(!a.allows(&lock("orders")));
        assert!(!a.allows(&lock("orders-archive/1")));
        let b = table.authenticate(&bearer(TOKEN_B)).unwrap();
        assert!(b.allows(&lock("anything")));
        assert_ne!(a.token_id, b.token_id);
    }

    #[test]
    fn missing_malformed_and_unknown_tokens_are_401_with_a_challenge() {
        let table: TokenTable = format!("{TOKEN_A} *").parse().unwrap();
        let mut cases = vec![HeaderMap::new(), bearer("cccccccccccccccccccc")];
        let mut basic = HeaderMap::new();
        basic.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic dXNlcg=="),
        );
        cases.push(basic);
        let mut twice = bearer(TOKEN_A);
        twice.append(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {TOKEN_A}")).unwrap(),
        );
        cases.push(twice);
        for headers in cases {
            let error = table.authenticate(&headers).unwrap_err();
            assert_eq!(
                (error.status().as_u16(), error.code()),
                (401, "unauthenticated")
            );
        }
        let mut lower = HeaderMap::new();
        lower.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("bearer {TOKEN_A}")).unwrap(),
        );
        assert!(
            table.authenticate(&lower).is_ok(),
            "the scheme is case-blind"
        );
    }

    #[test]
    fn bad_files_name_the_line_and_never_echo_the_token() {
        let cases = [
            ("short *", 1, "shorter"),
            (&format!("\n{TOKEN_A}"), 2, "expected"),
            (&format!("{TOKEN_A} a/ b/"), 1, "expected"),
            (&format!("{TOKEN_A} *,a/"), 1, "alone"),
            (&format!("{TOKEN_A} a/,,b/"), 1, "empty"),
            (&format!("{TOKEN_A}\u{e9}xyz *"), 1, "character"),
            (&format!("{TOKEN_A} *\n#\n{TOKEN_A} a/"), 3, "twice"),
        ];
        for (text, expected_line, words) in cases {
            let error = text.parse::<TokenTable>().unwrap_err();
            let ServerError::Tokens { line, .. } = &error else {
                panic!("{error:?}");
            };
            assert_eq!(*line, expected_line, "{text:?}");
            let message = error.to_string();
            assert!(message.contains(words), "{message}");
            assert!(!message.contains(TOKEN_A), "{message}");
        }
        assert!(
            format!("{TOKEN_A}== *").parse::<TokenTable>().is_ok(),
            "padding is allowed"
        );
    }
}
