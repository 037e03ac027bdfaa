//! Which lock service a demo runs on: `palisade-lock-any`'s backend flags
//! with the demos' defaults (the embedded backend when none is named, a
//! service's usual local port when its endpoint is not given), a key
//! prefix of its own for each run, and sessions that can be paused.

use std::time::Duration;

use palisade_core::SessionOptions;
use palisade_lock_any::{AnyClient, AnyLock, BackendArgs, BackendKind, Defaults, LockSpec};
use serde::{Deserialize, Serialize};

use crate::DemoError;

/// The kind of service the flags name; on flags that name none usable, the
/// embedded backend (the error is reported when the demo starts).
pub(crate) fn kind_of(args: &BackendArgs) -> BackendKind {
    args.kind(Defaults::Local).unwrap_or(BackendKind::Embedded)
}

/// The lease TTL a demo uses unless told otherwise: short on the
/// in-process backend, 2 s (etcd's smallest lease) on the servers.
pub(crate) fn default_ttl(kind: BackendKind) -> Duration {
    match kind {
        BackendKind::Embedded => Duration::from_millis(1000),
        _ => Duration::from_millis(2000),
    }
}

/// Where the locks of one demo run live: `tag` goes into the key prefix
/// (under `--prefix`, if given), so two runs on the same etcd, Redis or
/// ZooKeeper never share a lock. The SQL lock tables have no prefix: a demo's lock
/// name is shared with any other demo on the same database (runs in turn
/// are fine; generations only grow).
pub(crate) fn target(args: &BackendArgs, tag: &str) -> Result<BackendTarget, DemoError> {
    let spec = args.spec(Defaults::Local)?;
    let base = spec.prefix().map(str::to_owned);
    let prefix = match spec.kind() {
        BackendKind::Etcd | BackendKind::ZooKeeper => {
            Some(format!("{}/palisade-demo/{tag}", base.unwrap_or_default()))
        }
        BackendKind::Redis | BackendKind::Redlock => {
            Some(format!("{}palisade-demo:{tag}:", base.unwrap_or_default()))
        }
        _ => base,
    };
    Ok(BackendTarget {
        url: spec.to_url(),
        prefix,
    })
}

/// A lock service, resolved: what a client process needs to reach it
/// (sent to it as JSON, secrets and all, over its standard input).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BackendTarget {
    /// The service's URL form ([`LockSpec::to_url`]).
    url: String,
    /// The key prefix of this run.
    prefix: Option<String>,
}

impl BackendTarget {
    fn spec(&self) -> Result<LockSpec, DemoError> {
        let spec: LockSpec = self.url.parse()?;
        Ok(match &self.prefix {
            Some(prefix) => spec.with_prefix(prefix.clone()),
            None => spec,
        })
    }

    /// The kind of service.
    pub(crate) fn kind(&self) -> BackendKind {
        self.spec()
            .map_or(BackendKind::Embedded, |spec| spec.kind())
    }

    /// For the demo's header line, secrets masked.
    pub(crate) fn describe(&self) -> String {
        self.spec()
            .map_or_else(|error| error.to_string(), |spec| spec.to_string())
    }
}

impl std::fmt::Debug for BackendTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BackendTarget({})", self.describe())
    }
}

/// Whether a session will be paused on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Renewed in the background as usual.
    KeepAlive,
    /// A session the demo will pause in-process
    /// ([`AnyLock::without_watchdog`], then [`AnySession::stop_renewal`]).
    Pausable,
}

/// A connected lock service: makes sessions.
#[derive(Clone)]
pub(crate) struct Locks(AnyClient);

impl std::fmt::Debug for Locks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Locks({})", self.0.kind())
    }
}

impl Locks {
    /// Connects (or, for the embedded backend, creates a fresh service).
    pub(crate) async fn connect(target: &BackendTarget) -> Result<Locks, DemoError> {
        let spec = target.spec()?;
        Ok(Locks(AnyClient::connect(&spec).await?))
    }

    /// Opens a session of its own (its own lease and holder identity).
    pub(crate) async fn session(
        &self,
        options: &SessionOptions,
        renewal: Renewal,
    ) -> Result<AnySession, DemoError> {
        let lock = self.0.session(options.clone()).await?;
        Ok(AnySession {
            lock: match renewal {
                Renewal::KeepAlive => lock,
                Renewal::Pausable => lock.without_watchdog(),
            },
            ttl: options.ttl(),
        })
    }
}

/// A session on any backend, and its lease TTL.
#[derive(Clone, Debug)]
pub(crate) struct AnySession {
    pub(crate) lock: AnyLock,
    ttl: Duration,
}

impl AnySession {
    /// Stops renewing the lease, as a stop-the-world pause would, and says
    /// how (for the timeline).
    pub(crate) fn stop_renewal(&self) -> &'static str {
        self.lock.stop_renewal(self.ttl)
    }
}

/// Session options for a demo client with lease `ttl`: renewals four times
/// per TTL, a safety margin of a fifth of it.
pub(crate) fn session_options(ttl: Duration) -> SessionOptions {
    SessionOptions::default()
        .with_ttl(ttl)
        .with_keepalive_interval(ttl / 4)
        .with_safety_margin(ttl / 5)
}

/// A tag unique to this demo invocation, for key prefixes.
pub(crate) fn invocation_tag() -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis())
        .unwrap_or(0);
    format!("{}-{millis}", std::process::id())
}
