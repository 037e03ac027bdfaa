//! The lock service as `palisade` sees it: `palisade-lock-any`'s backend
//! flags, refusing the in-process backend (it would exclude no other
//! process), and for the commands that take locks the session and signing
//! flags too.

use std::time::Duration;

use clap::Args;
use palisade_core::{SessionOptions, parse_duration};
use palisade_lock_any::{AnyClient, AnyLock, BackendArgs, BackendKind, Defaults, LockSpec};

use crate::signing::SigningArgs;

/// The service the backend flags name; the embedded backend is refused
/// with the reason.
pub(crate) fn spec_of(backend: &BackendArgs) -> anyhow::Result<LockSpec> {
    if backend.kind(Defaults::None)? == BackendKind::Embedded {
        anyhow::bail!(
            "the embedded backend lives inside one process, so a lock taken here would exclude no other process; use --backend etcd, redis, postgres or mariadb"
        );
    }
    Ok(backend.spec(Defaults::None)?)
}

/// The flags of the commands that take a lock: where the service is, the
/// session's lease, and how its sequencers are signed.
#[derive(Debug, Clone, Args)]
pub(crate) struct SessionArgs {
    #[command(flatten)]
    pub(crate) backend: BackendArgs,

    /// Lease TTL: how long the lock service keeps the lock after this
    /// process stops renewing it (etcd rounds up to whole seconds, at least
    /// 2 s).
    #[arg(long, env = "PALISADE_LOCK_TTL", default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    ttl: Duration,

    /// Chubby's lock-delay: after a lease is lost without a release, nobody
    /// gets the lock for this long.
    #[arg(long, env = "PALISADE_LOCK_DELAY", default_value = "0s", value_parser = parse_duration, value_name = "DURATION")]
    lock_delay: Duration,

    #[command(flatten)]
    signing: SigningArgs,
}

impl SessionArgs {
    /// The session settings.
    fn options(&self) -> anyhow::Result<SessionOptions> {
        let options = SessionOptions::default()
            .with_ttl(self.ttl)
            .with_lock_delay(self.lock_delay);
        options
            .validate()
            .map_err(|reason| anyhow::anyhow!("--ttl {:?}: {reason}", self.ttl))?;
        Ok(options)
    }

    /// Connects to the chosen lock service and opens one session. The
    /// flags and the signing key are checked first, so a bad one fails
    /// before anything is asked of the lock service.
    pub(crate) async fn connect(&self) -> anyhow::Result<AnyLock> {
        let mut spec = spec_of(&self.backend)?;
        let options = self.options()?;
        if let Some(issuer) = &self.signing.issuer {
            spec = spec.with_issuer(issuer.clone());
        }
        if let Some(key) = self.signing.signing_key()? {
            spec = spec.with_signing_key(key);
        }
        Ok(AnyClient::open(&spec, options).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        session: SessionArgs,
    }

    fn flags(args: &[&str]) -> SessionArgs {
        Flags::try_parse_from(std::iter::once("palisade").chain(args.iter().copied()))
            .expect("flags parse")
            .session
    }

    #[test]
    fn embedded_is_refused_with_the_reason() {
        let error = spec_of(&flags(&["--backend", "embedded"]).backend).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("inside one process"), "{text}");
        assert!(text.contains("--backend etcd"), "{text}");
    }

    #[test]
    fn a_ttl_below_the_safety_margin_is_refused() {
        let error = flags(&["--backend", "redis", "--ttl", "400ms"])
            .options()
            .unwrap_err();
        assert!(error.to_string().contains("--ttl"), "{error}");
    }

    #[test]
    fn a_duration_without_a_unit_is_refused() {
        let parsed = Flags::try_parse_from(["palisade", "--ttl", "10"]);
        let error = parsed.unwrap_err().to_string();
        assert!(error.contains("no unit"), "{error}");
    }
}
