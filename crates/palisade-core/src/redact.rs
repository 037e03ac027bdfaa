//! Secrets out of messages: the one redaction for every URL, DSN or
//! endpoint list Palisade shows in an error, a log line, a metric or a
//! `Debug` dump.
//!
//! A connection string can carry a secret in three places, and drivers
//! honour all three: the userinfo (`postgres://user:secret@host/db`), a
//! query parameter (`postgres://user@host/db?password=secret`,
//! `redis://host/?token=...`), and, for libpq's key-value form, a `key=value`
//! pair (`host=db password=secret`). [`redact_url`] masks every one of them
//! with `***`, and [`scrub`] removes the same secrets from a message some
//! other library wrote about that string (a driver error that echoes part
//! of it), so a secret given in any form never reaches an output.
//!
//! Which names count as secret is deliberately broad ([`is_secret_name`]):
//! masking a harmless value costs a little readability, missing a password
//! costs the password.
//!
//! ```
//! use palisade_core::redact::redact_url;
//!
//! assert_eq!(redact_url("postgres://app:hunter2@db:5432/p"), "postgres://app:***@db:5432/p");
//! assert_eq!(
//!     redact_url("postgres://app@db/p?sslmode=require&password=hunter2"),
//!     "postgres://app@db/p?sslmode=require&password=***"
//! );
//! assert_eq!(redact_url("host=db user=app password=hunter2"), "host=db user=app password=***");
//! ```

use std::borrow::Cow;
use std::fmt;

use url::Url;

/// What replaces a secret.
pub const MASK: &str = "***";

/// Whether a query parameter or key-value name holds a secret: anything
/// that names a password, token, secret, key or credential, in any case
/// (`password`, `sslpassword`, `PGPASSWORD`, `auth_token`, `access_key`,
/// `client_secret`, `pwd`, `passwd`...).
pub fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "pass",
        "pwd",
        "secret",
        "token",
        "key",
        "auth",
        "credential",
    ]
    .iter()
    .any(|part| name.contains(part))
}

/// `text` with every secret it carries replaced by [`MASK`]: the password
/// of a `scheme://user:password@host` URL (a userinfo without a password
/// keeps its user name), every secret-named query parameter, and every
/// secret-named pair of a key-value DSN. A comma-separated list of URLs
/// (several Redis masters, etcd endpoints) is redacted item by item.
///
/// Text that is none of these is returned as it is, except that anything
/// between `://` and an `@` is masked: a malformed URL still keeps its
/// userinfo to itself.
pub fn redact_url(text: &str) -> String {
    if text.contains(',') && text.contains("://") {
        return text
            .split(',')
            .map(redact_one)
            .collect::<Vec<_>>()
            .join(",");
    }
    redact_one(text)
}

fn redact_one(text: &str) -> String {
    if let Some(redacted) = redact_parsed(text) {
        return redacted;
    }
    if text.contains('=') && !text.contains("://") {
        return redact_key_values(text);
    }
    redact_malformed(text)
}

/// A [`Url`] with its secrets masked, or `None` if `text` does not parse as
/// one with an authority.
fn redact_parsed(text: &str) -> Option<String> {
    let mut url = Url::parse(text.trim()).ok()?;
    if url.cannot_be_a_base() {
        return None;
    }
    if url.password().is_some() {
        // Cannot fail on a URL with an authority.
        let _ = url.set_password(Some(MASK));
    }
    let has_secret_parameter = url.query_pairs().any(|(name, _)| is_secret_name(&name));
    if has_secret_parameter {
        // Written by hand rather than with `query_pairs_mut`, which would
        // percent-encode the mask.
        let query = url
            .query_pairs()
            .map(|(name, value)| {
                let value = if is_secret_name(&name) {
                    Cow::Borrowed(MASK)
                } else {
                    encode_component(&value)
                };
                format!("{}={value}", encode_component(&name))
            })
            .collect::<Vec<_>>()
            .join("&");
        url.set_query(Some(&query));
    }
    let mut shown = url.to_string();
    // `Url` adds a `/` path to `http://host`; show what was given.
    if shown.ends_with('/')
        && !text.trim().ends_with('/')
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none()
    {
        shown.pop();
    }
    Some(shown)
}

fn encode_component(text: &str) -> Cow<'static, str> {
    Cow::Owned(url::form_urlencoded::byte_serialize(text.as_bytes()).collect())
}

/// libpq's `key=value key=value` form.
fn redact_key_values(text: &str) -> String {
    text.split(' ')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if is_secret_name(name) => format!("{name}={MASK}"),
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Masks the whole userinfo, and every secret-named query parameter, of
/// something URL-shaped that did not parse (a bad port, say): the driver
/// may still be shown it, or a user may fix the port and keep the rest.
fn redact_malformed(text: &str) -> String {
    let Some(scheme_end) = text.find("://") else {
        return text.to_owned();
    };
    let rest = &text[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let shown = match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}://{MASK}{}", &text[..scheme_end], &rest[at..]),
        None => text.to_owned(),
    };
    match shown.split_once('?') {
        Some((before, query)) => {
            let pairs = raw_query_pairs(query)
                .map(|(pair, name, _)| match name {
                    Some(name) if is_secret_name(&name) => {
                        format!("{}={MASK}", &pair[..pair.find('=').unwrap_or(pair.len())])
                    }
                    _ => pair.to_owned(),
                })
                .collect::<Vec<_>>()
                .join("&");
            format!("{before}?{pairs}")
        }
        None => shown,
    }
}

fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// The `&`-separated pairs of a query no URL parser read (up to a `#`):
/// each pair as written, and its name and value percent-decoded.
fn raw_query_pairs(query: &str) -> impl Iterator<Item = (&str, Option<String>, String)> {
    let query = query.split('#').next().unwrap_or_default();
    query.split('&').map(|pair| match pair.split_once('=') {
        Some((name, value)) => (pair, Some(decode(name)), decode(value)),
        None => (pair, None, String::new()),
    })
}

/// The secret values `text` carries (a URL's password, its secret-named
/// query parameters, a DSN's secret-named pairs), decoded as a driver would
/// see them. Empty values are left out.
pub fn secrets_in(text: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    for item in text.split(',') {
        if let Ok(url) = Url::parse(item.trim()) {
            if let Some(password) = url.password() {
                secrets.push(password.to_owned());
                if let Ok(decoded) = percent_encoding::percent_decode_str(password).decode_utf8() {
                    secrets.push(decoded.into_owned());
                }
            }
            for (name, value) in url.query_pairs() {
                if is_secret_name(&name) {
                    secrets.push(value.into_owned());
                }
            }
        } else if let Some(scheme_end) = item.find("://") {
            // URL-shaped but malformed: what a driver might still read.
            let rest = &item[scheme_end + 3..];
            let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            if let Some((_, password)) = rest[..authority_end]
                .rsplit_once('@')
                .and_then(|(userinfo, _)| userinfo.split_once(':'))
            {
                secrets.push(password.to_owned());
                secrets.push(decode(password));
            }
            if let Some((_, query)) = rest.split_once('?') {
                for (_, name, value) in raw_query_pairs(query) {
                    if name.is_some_and(|name| is_secret_name(&name)) {
                        secrets.push(value);
                    }
                }
            }
        } else {
            for pair in item.split(' ') {
                if let Some((name, value)) = pair.split_once('=')
                    && is_secret_name(name)
                {
                    secrets.push(value.to_owned());
                }
            }
        }
    }
    secrets.retain(|secret| !secret.is_empty());
    secrets.sort();
    secrets.dedup();
    secrets
}

/// `message` with every secret of `connection` (see [`secrets_in`])
/// replaced by [`MASK`], and every copy of `connection` itself shown
/// redacted: for an error some library wrote about a connection string
/// Palisade was given.
pub fn scrub(message: &str, connection: &str) -> String {
    let mut message = message.replace(connection, &redact_url(connection));
    for secret in secrets_in(connection) {
        // A one-character secret would mask half the message; it is weak
        // enough that hiding it buys nothing, but still mask it where it
        // stands alone after a `=` or `:`.
        if secret.len() < 3 {
            for sep in ['=', ':'] {
                message = message.replace(&format!("{sep}{secret}@"), &format!("{sep}{MASK}@"));
                message = message.replace(&format!("{sep}{secret}&"), &format!("{sep}{MASK}&"));
            }
            continue;
        }
        message = message.replace(&secret, MASK);
    }
    message
}

/// A connection string shown redacted: `Display` and `Debug` print
/// [`redact_url`] of it. For `tracing` fields and error payloads.
#[derive(Clone, PartialEq, Eq)]
pub struct Redacted<'a>(pub &'a str);

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(self.0))
    }
}

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", redact_url(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One table for every form a secret can take: (input, shown).
    const CASES: &[(&str, &str)] = &[
        (
            "postgres://app:hunter2@db:5432/p",
            "postgres://app:***@db:5432/p",
        ),
        ("postgres://app@db:5432/p", "postgres://app@db:5432/p"),
        (
            "postgres://app@db/p?password=hunter2",
            "postgres://app@db/p?password=***",
        ),
        (
            "postgres://app@db/p?sslmode=verify-full&sslpassword=hunter2&application_name=x",
            "postgres://app@db/p?sslmode=verify-full&sslpassword=***&application_name=x",
        ),
        (
            "mysql://root@127.0.0.1:3306/test?password=hunter2",
            "mysql://root@127.0.0.1:3306/test?password=***",
        ),
        ("mysql://root:hunter2@h/test", "mysql://root:***@h/test"),
        ("redis://:hunter2@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://user:hunter2@h:6379/0", "redis://user:***@h:6379/0"),
        (
            "rediss://user:hunter2@h:6380/#insecure",
            "rediss://user:***@h:6380/#insecure",
        ),
        ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
        (
            "redis://:hunter2@a:1,redis://:hunter3@b:2",
            "redis://:***@a:1,redis://:***@b:2",
        ),
        (
            "etcd://10.0.0.1:2379,10.0.0.2:2379/pfx",
            "etcd://10.0.0.1:2379,10.0.0.2:2379/pfx",
        ),
        (
            "host=db user=app password=hunter2 sslmode=require",
            "host=db user=app password=*** sslmode=require",
        ),
        ("http://u:p%40ss@h/", "http://u:***@h/"),
        ("postgres://u:hunter2@[bad/db", "postgres://***@[bad/db"),
        (
            "postgres://u:hunter2@h:port/db?sslmode=require&password=hunter3#x",
            "postgres://***@h:port/db?sslmode=require&password=***",
        ),
        ("127.0.0.1:2379", "127.0.0.1:2379"),
        ("/var/lib/palisade", "/var/lib/palisade"),
    ];

    #[test]
    fn every_form_is_masked() {
        for (input, shown) in CASES {
            assert_eq!(redact_url(input), *shown, "{input}");
            assert!(!redact_url(input).contains("hunter"), "{input}");
        }
    }

    #[test]
    fn driver_messages_are_scrubbed() {
        let url = "postgres://app@db/p?password=hunter2";
        let message =
            format!("error connecting to {url}: password authentication failed (hunter2)");
        let scrubbed = scrub(&message, url);
        assert!(!scrubbed.contains("hunter2"), "{scrubbed}");
        assert!(scrubbed.contains("password authentication failed"));
        let malformed = "postgres://app:hunter2@db:port/p?password=hunter3";
        let scrubbed = scrub("hunter2 and hunter3 in a driver's words", malformed);
        assert!(!scrubbed.contains("hunter"), "{scrubbed}");
        let encoded = "postgres://app:p%40ss-word@db/p";
        let scrubbed = scrub("auth failed for p@ss-word", encoded);
        assert!(!scrubbed.contains("p@ss-word"), "{scrubbed}");
    }

    #[test]
    fn secret_names() {
        for name in [
            "password",
            "PGPASSWORD",
            "sslpassword",
            "auth_token",
            "pwd",
            "client_secret",
            "access_key",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["sslmode", "user", "host", "application_name", "dbname"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn the_wrapper_shows_the_redacted_form() {
        let url = "redis://:hunter2@h:6379";
        assert_eq!(Redacted(url).to_string(), "redis://:***@h:6379");
        assert!(!format!("{:?}", Redacted(url)).contains("hunter2"));
    }
}
