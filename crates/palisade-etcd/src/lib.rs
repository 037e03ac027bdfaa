//! Where etcd is and how to connect to it: what the etcd lock backend
//! (`palisade-lock-etcd`) and the etcd storage engine
//! (`palisade-store-etcd`) share, written once.
//!
//! [`EtcdConnection`] holds the endpoints, the credentials, the TLS
//! settings and the two timeouts, and turns them into etcd-client's
//! `ConnectOptions` with the settings both need (HTTP/2 keep-alive pings,
//! `require_leader`, token refresh). [`Failure`] classifies etcd-client's
//! errors (sent or not, may pass or not, refused outright) once for both.
//! Everything else (key prefixes, session and storage limits) stays in the
//! crate it belongs to, and so does each crate's error type:
//! [`EndpointError`] converts into both, and each maps a [`Failure`] to its
//! own. [`KvHandles`] keeps KV client handles between requests.
//!
//! **Architecture Invariant:** this crate depends on `palisade-core` (for
//! the one redaction of what it shows), etcd-client, tonic and h2 (to
//! classify its errors) and tokio (to try the endpoints' ports) only, and
//! on no other Palisade crate: both etcd crates may depend on it without
//! depending on each other.

mod failure;
mod kv_handles;

use std::fmt;
use std::time::Duration;

use derive_setters::Setters;
use palisade_core::redact::redact_url;

pub use failure::{Failure, is_lease_not_found, is_over_cluster_limit};
pub use kv_handles::{KvHandle, KvHandles};

/// An endpoint list that cannot work, caught before any connection is made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// No endpoint was given.
    #[error("no etcd endpoint given")]
    NoEndpoints,
    /// An endpoint is not `host:port`, `http://host:port` or (with the `tls`
    /// feature) `https://host:port`.
    #[error("etcd endpoint `{endpoint}`: {reason}")]
    BadEndpoint {
        /// The endpoint as given, any password masked.
        endpoint: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// User name and password for etcd's authentication. The password is never
/// printed.
#[derive(Clone, PartialEq, Eq)]
struct Credentials {
    user: String,
    password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Where etcd is and how to talk to it.
///
/// ```
/// use std::time::Duration;
/// use palisade_etcd::EtcdConnection;
///
/// let connection = EtcdConnection::from_endpoint_list("127.0.0.1:2379, http://127.0.0.1:22379")?
///     .with_request_timeout(Duration::from_secs(2))
///     .with_user("orders", "secret");
/// assert_eq!(connection.endpoints(), ["127.0.0.1:2379", "http://127.0.0.1:22379"]);
/// assert!(!format!("{connection:?}").contains("secret"));
/// assert!(EtcdConnection::from_endpoint_list(" , ").is_err());
/// # Ok::<(), palisade_etcd::EndpointError>(())
/// ```
///
/// The two timeout setters are derived from their fields and carry their
/// documentation.
#[derive(Clone, Debug, Setters)]
#[setters(prefix = "with_", generate = false)]
pub struct EtcdConnection {
    /// Every member the client may talk to. Requests are balanced over the
    /// reachable ones, so losing one member of three costs nothing but the
    /// requests in flight to it.
    endpoints: Vec<String>,
    /// The per-request timeout (default 5 s), applied to every unary
    /// request: a request that takes longer is reported as a timeout, its
    /// effect unknown. It must be positive: see
    /// [`EtcdConnection::zero_timeout`].
    #[setters(generate)]
    request_timeout: Duration,
    /// The connect timeout (default 3 s), applied to opening a TCP
    /// connection to one member. It must be positive: see
    /// [`EtcdConnection::zero_timeout`].
    #[setters(generate)]
    connect_timeout: Duration,
    credentials: Option<Credentials>,
    #[cfg(feature = "tls")]
    tls: Option<etcd_client::TlsOptions>,
}

impl EtcdConnection {
    /// The request timeout unless set: 5 s.
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
    /// The connect timeout unless set: 3 s.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

    /// A connection to these endpoints, with the default timeouts.
    pub fn new<I, S>(endpoints: I) -> Result<Self, EndpointError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let endpoints: Vec<String> = endpoints
            .into_iter()
            .map(|endpoint| endpoint.into().trim().to_owned())
            .collect();
        if endpoints.is_empty() {
            return Err(EndpointError::NoEndpoints);
        }
        for endpoint in &endpoints {
            validate_endpoint(endpoint)?;
        }
        Ok(EtcdConnection {
            endpoints,
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            credentials: None,
            #[cfg(feature = "tls")]
            tls: None,
        })
    }

    /// A connection from a comma-separated endpoint list, as found in
    /// `PALISADE_ETCD_ENDPOINTS` or a `--etcd-endpoints` flag.
    pub fn from_endpoint_list(list: &str) -> Result<Self, EndpointError> {
        EtcdConnection::new(
            list.split(',')
                .map(str::trim)
                .filter(|endpoint| !endpoint.is_empty()),
        )
    }

    /// Authenticates as `user` (etcd's auth must be enabled on the server).
    pub fn with_user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some(Credentials {
            user: user.into(),
            password: password.into(),
        });
        self
    }

    /// Uses TLS for `https://` endpoints (and for endpoints without a
    /// scheme), with these settings passed through to the gRPC channel.
    #[cfg(feature = "tls")]
    pub fn with_tls(mut self, tls: etcd_client::TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The endpoints.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The per-request timeout.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The name of a timeout set to zero (`"request timeout"` or `"connect
    /// timeout"`), if one is: such a connection cannot work. Each etcd
    /// crate refuses it in its own error type, when its configuration is
    /// checked.
    pub fn zero_timeout(&self) -> Option<&'static str> {
        if self.request_timeout.is_zero() {
            Some("request timeout")
        } else if self.connect_timeout.is_zero() {
            Some("connect timeout")
        } else {
            None
        }
    }

    /// The user name, if authentication is configured.
    pub fn user(&self) -> Option<&str> {
        self.credentials
            .as_ref()
            .map(|credentials| credentials.user.as_str())
    }

    /// An error naming the endpoints when every one of them refuses a TCP
    /// connection outright (nothing listens there), and `None` as soon as
    /// one accepts or does not answer within the connect timeout.
    ///
    /// Checked before etcd-client connects: its channel is lazy and
    /// balanced, and while no endpoint is ready it may hold a request
    /// until the request's timeout instead of failing it, so an etcd that
    /// is simply not running would be reported as a timeout, and only
    /// sometimes. Each etcd crate reports this as unavailable, at once.
    pub async fn every_endpoint_refuses(&self) -> Option<std::io::Error> {
        let mut refused = Vec::with_capacity(self.endpoints.len());
        for endpoint in &self.endpoints {
            let connect = tokio::net::TcpStream::connect(authority(endpoint));
            match tokio::time::timeout(self.connect_timeout, connect).await {
                Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
                    refused.push(redact_url(endpoint));
                }
                _ => return None,
            }
        }
        Some(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            format!(
                "connection refused by every endpoint: {}",
                refused.join(", ")
            ),
        ))
    }

    /// The etcd-client options this connection stands for.
    pub fn connect_options(&self) -> etcd_client::ConnectOptions {
        let mut options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(self.connect_timeout)
            // HTTP/2 pings find a dead connection between requests. etcd
            // refuses pings more often than every 5 s (`too_many_pings`).
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            // A member that has lost its leader fails requests and watch
            // streams at once instead of leaving them hanging, so the
            // client moves on to a member that can serve them.
            .with_require_leader(true);
        if let Some(credentials) = &self.credentials {
            options = options
                .with_user(credentials.user.clone(), credentials.password.clone())
                .with_auto_token_refresh(true);
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            options = options.with_tls(tls.clone());
        }
        options
    }
}

/// An endpoint's `host:port` (endpoints are validated when the connection
/// is made: a scheme of http or https, no credentials, no path).
fn authority(endpoint: &str) -> &str {
    endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .unwrap_or(endpoint)
        .trim_end_matches('/')
}

fn validate_endpoint(endpoint: &str) -> Result<(), EndpointError> {
    let bad = |reason| {
        Err(EndpointError::BadEndpoint {
            endpoint: redact_url(endpoint),
            reason,
        })
    };
    let https = endpoint.starts_with("https://");
    if https && cfg!(not(feature = "tls")) {
        return bad("https needs the `tls` feature (of palisade-lock-etcd or palisade-store-etcd)");
    }
    if !https && !endpoint.starts_with("http://") && endpoint.contains("://") {
        return bad("the scheme must be http or https");
    }
    let authority = authority(endpoint);
    if authority.contains('@') {
        // etcd-client would send them nowhere useful, and every log line
        // and `Debug` of the endpoint would show the password.
        return bad("credentials do not go in the endpoint: give them as the user and password");
    }
    match authority.rsplit_once(':') {
        None => bad("no port; expected host:port"),
        Some(("", _)) => bad("no host; expected host:port"),
        Some((_, port)) if port.parse::<u16>().is_err() => bad("the port is not a number"),
        Some(_) if authority.contains('/') => bad("a path is not allowed"),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(endpoint: &str) -> Option<&'static str> {
        match EtcdConnection::new([endpoint]) {
            Ok(_) => None,
            Err(EndpointError::BadEndpoint { reason, .. }) => Some(reason),
            Err(other) => panic!("{endpoint}: {other}"),
        }
    }

    #[test]
    fn endpoints_table() {
        for good in [
            "127.0.0.1:2379",
            " http://127.0.0.1:2379 ",
            "http://etcd-0.etcd:2379/",
        ] {
            assert_eq!(reason(good), None, "{good}");
        }
        for (bad, why) in [
            ("127.0.0.1", "no port; expected host:port"),
            (":2379", "no host; expected host:port"),
            ("ftp://h:21", "the scheme must be http or https"),
            ("h:port", "the port is not a number"),
            ("h:1/v3", "the port is not a number"),
            ("h/v3:1", "a path is not allowed"),
            (
                "http://root:hunter2@h:1",
                "credentials do not go in the endpoint: give them as the user and password",
            ),
        ] {
            assert_eq!(reason(bad), Some(why), "{bad}");
        }
        assert_eq!(
            EtcdConnection::new(Vec::<String>::new()).map(|_| ()),
            Err(EndpointError::NoEndpoints)
        );
    }

    #[test]
    fn a_password_in_an_endpoint_is_refused_without_showing_it() {
        let refused =
            EtcdConnection::new(["http://root:hunter2@h:1?password=hunter2"]).unwrap_err();
        assert!(!refused.to_string().contains("hunter2"), "{refused}");
    }

    #[test]
    fn the_password_is_never_printed() {
        let connection = EtcdConnection::new(["h:1"])
            .unwrap()
            .with_user("alice", "hunter2");
        let printed = format!("{connection:?}");
        assert!(printed.contains("alice"), "{printed}");
        assert!(!printed.contains("hunter2"), "{printed}");
        assert_eq!(connection.user(), Some("alice"));
    }
}
