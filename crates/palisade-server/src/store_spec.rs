//! `--store`: which engine keeps the marks and the data, and where.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use palisade_core::redact::redact_url;

/// Where the resource server keeps its marks and data: the value of
/// `--store` (or `--data-dir DIR`, which is `sled:DIR`).
///
/// | `--store` | engine |
/// |---|---|
/// | `sled:<dir>` | sled in `<dir>` (the default engine) |
/// | `postgres://…`, `postgresql://…` | PostgreSQL, a libpq-style URL (the `postgres` feature) |
/// | `etcd://host:port,host:port[/prefix]` | etcd, keys under `prefix` (the `etcd` feature) |
///
/// Every engine's value parses in every build; opening one this build
/// lacks is refused naming its feature
/// ([`ServerConfig::store_spec`](crate::ServerConfig::store_spec)).
///
/// ```
/// use palisade_server::StoreSpec;
///
/// let spec: StoreSpec = "etcd://10.0.0.1:2379,10.0.0.2:2379/palisade".parse()?;
/// assert_eq!(spec.engine(), "etcd");
/// let spec: StoreSpec = "postgres://app:s3cret@db:5432/palisade".parse()?;
/// // Never printed with its password.
/// assert_eq!(spec.to_string(), "postgres://app:***@db:5432/palisade");
/// # Ok::<(), palisade_server::StoreSpecError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreSpec {
    /// sled, in this directory (created if missing).
    Sled {
        /// The data directory.
        dir: PathBuf,
    },
    /// PostgreSQL at this URL (it may hold a password: [`StoreSpec`]'s
    /// `Display` and `Debug` hide it).
    Postgres {
        /// The URL, `postgres://` or `postgresql://`, as given.
        url: String,
    },
    /// etcd, over these endpoints, under this key prefix.
    Etcd {
        /// `host:port` of each member, at least one.
        endpoints: Vec<String>,
        /// The key prefix after the endpoints (without the leading `/`),
        /// or `None` when the URL has none.
        prefix: Option<String>,
    },
}

/// `--store` could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid --store `{shown}`: {reason}")]
pub struct StoreSpecError {
    /// The value, with any password hidden.
    pub shown: String,
    /// What is wrong with it.
    pub reason: String,
}

impl StoreSpec {
    /// The engine's name: `sled`, `postgres`, `etcd`.
    pub fn engine(&self) -> &'static str {
        match self {
            StoreSpec::Sled { .. } => "sled",
            StoreSpec::Postgres { .. } => "postgres",
            StoreSpec::Etcd { .. } => "etcd",
        }
    }
}

impl FromStr for StoreSpec {
    type Err = StoreSpecError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = |reason: &str| StoreSpecError {
            shown: redact_url(text),
            reason: reason.to_owned(),
        };
        if let Some(dir) = text.strip_prefix("sled:") {
            if dir.is_empty() {
                return Err(invalid(
                    "`sled:` needs a directory, e.g. `sled:/var/lib/palisade`",
                ));
            }
            return Ok(StoreSpec::Sled { dir: dir.into() });
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            let rest = text.split_once("://").map_or("", |(_, rest)| rest);
            if rest.is_empty() {
                return Err(invalid("the URL names no host"));
            }
            return Ok(StoreSpec::Postgres {
                url: text.to_owned(),
            });
        }
        if let Some(rest) = text.strip_prefix("etcd://") {
            let (hosts, prefix) = match rest.split_once('/') {
                Some((hosts, prefix)) => (hosts, Some(prefix)),
                None => (rest, None),
            };
            if hosts.contains('@') {
                // Also keeps a password out of the reasons below.
                return Err(invalid("credentials in an etcd URL are not supported"));
            }
            let endpoints = hosts
                .split(',')
                .map(|endpoint| parse_endpoint(endpoint).map_err(|reason| invalid(&reason)))
                .collect::<Result<Vec<_>, _>>()?;
            let prefix = match prefix {
                None => None,
                Some("") => return Err(invalid("the key prefix after `/` is empty")),
                Some(prefix) => Some(prefix.to_owned()),
            };
            return Ok(StoreSpec::Etcd { endpoints, prefix });
        }
        Err(invalid(
            "expected `sled:<dir>`, `postgres://...` (or `postgresql://...`) or `etcd://host:port,...[/prefix]`",
        ))
    }
}

/// One `host:port` of an etcd URL.
fn parse_endpoint(endpoint: &str) -> Result<String, String> {
    let (host, port) = endpoint
        .rsplit_once(':')
        .ok_or_else(|| format!("etcd endpoint `{endpoint}` needs a port (`host:2379`)"))?;
    if host.is_empty() {
        return Err(format!("etcd endpoint `{endpoint}` has no host"));
    }
    match port.parse::<u16>() {
        Ok(port) if port > 0 => Ok(endpoint.to_owned()),
        _ => Err(format!("etcd endpoint `{endpoint}` has an invalid port")),
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Sled { dir } => write!(f, "sled:{}", dir.display()),
            StoreSpec::Postgres { url } => f.write_str(&redact_url(url)),
            StoreSpec::Etcd { endpoints, prefix } => {
                write!(f, "etcd://{}", endpoints.join(","))?;
                match prefix {
                    Some(prefix) => write!(f, "/{prefix}"),
                    None => Ok(()),
                }
            }
        }
    }
}

impl fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreSpec({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<StoreSpec, StoreSpecError> {
        text.parse()
    }

    #[test]
    fn each_engine_parses() {
        assert_eq!(
            parse("sled:/var/lib/palisade"),
            Ok(StoreSpec::Sled {
                dir: "/var/lib/palisade".into()
            })
        );
        for url in [
            "postgres://db/palisade",
            "postgresql://u@db:5433/p?sslmode=require",
        ] {
            assert_eq!(parse(url), Ok(StoreSpec::Postgres { url: url.into() }));
        }
        assert_eq!(
            parse("etcd://a:2379,b:2380/palisade/marks"),
            Ok(StoreSpec::Etcd {
                endpoints: vec!["a:2379".into(), "b:2380".into()],
                prefix: Some("palisade/marks".into()),
            })
        );
        assert_eq!(
            parse("etcd://127.0.0.1:2379"),
            Ok(StoreSpec::Etcd {
                endpoints: vec!["127.0.0.1:2379".into()],
                prefix: None,
            })
        );
    }

    #[test]
    fn bad_values_are_refused_with_a_reason() {
        for bad in [
            "",
            "/var/lib/palisade",
            "sled:",
            "postgres://",
            "etcd://",
            "etcd://host",
            "etcd://host:0",
            "etcd://host:99999",
            "etcd://:2379",
            "etcd://a:2379,,b:2379",
            "etcd://a:2379/",
            "mysql://db/x",
        ] {
            let error = parse(bad).expect_err(bad);
            assert!(!error.reason.is_empty(), "{bad}");
        }
    }

    #[test]
    fn passwords_never_show() {
        let spec = parse("postgres://app:s3cret@db:5432/p").unwrap();
        assert_eq!(spec.to_string(), "postgres://app:***@db:5432/p");
        assert!(!format!("{spec:?}").contains("s3cret"));
        let error = "mysql://app:s3cret@db/x".parse::<StoreSpec>().unwrap_err();
        assert!(!error.to_string().contains("s3cret"), "{error}");
        // A password given as a query parameter, which the driver honours.
        let spec = parse("postgres://app@db/p?sslmode=require&password=s3cret").unwrap();
        assert!(!spec.to_string().contains("s3cret"), "{spec}");
        let error = "mysql://app@db/x?password=s3cret"
            .parse::<StoreSpec>()
            .unwrap_err();
        assert!(!error.to_string().contains("s3cret"), "{error}");
        // No password, nothing to hide; a `@` in the path is not a user.
        assert_eq!(redact_url("postgres://db/p@x"), "postgres://db/p@x");
        assert_eq!(redact_url("postgres://app@db/p"), "postgres://app@db/p");
    }
}
