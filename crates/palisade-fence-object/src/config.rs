//! Where the objects are: an `s3://bucket/prefix` URL plus the endpoint,
//! region and credentials, with the secret shown only masked.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use derive_setters::Setters;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{ClientOptions, ObjectStore, RetryConfig};
use palisade_core::redact::{MASK, redact_url};
use url::Url;

use crate::connector::HyperConnector;
use crate::{FenceError, ObjectFence};

/// An S3 (or S3-compatible) location and how to reach it: what the CLI's
/// `palisade object` commands and an embedding service configure.
///
/// ```
/// use palisade_fence_object::S3Config;
///
/// let config = S3Config::parse("s3://tables/orders")
///     .unwrap()
///     .with_endpoint("http://127.0.0.1:9000")
///     .with_region("us-east-1")
///     .with_credentials("AKIDEXAMPLE", "wJalrXUtnFEMI");
/// assert_eq!(config.bucket(), "tables");
/// assert_eq!(config.prefix(), "orders");
/// assert!(!format!("{config:?}").contains("wJalrXUtnFEMI"));
/// assert_eq!(config.to_string(), "s3://tables/orders at http://127.0.0.1:9000");
/// ```
///
/// The plain setters are derived from the fields below and carry their
/// documentation.
#[derive(Clone, Setters)]
#[setters(prefix = "with_", generate = false, into, strip_option)]
pub struct S3Config {
    bucket: String,
    prefix: String,
    /// The S3 endpoint, e.g. `http://127.0.0.1:9000` for a local
    /// compatible store (path-style requests).
    #[setters(generate)]
    endpoint: Option<String>,
    /// The region.
    #[setters(generate)]
    region: String,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
    /// A session token, with temporary credentials.
    #[setters(generate)]
    session_token: Option<String>,
    /// How long one request may take before its outcome is in doubt (and
    /// read back).
    #[setters(generate, into = false)]
    timeout: Duration,
}

impl S3Config {
    /// Parses `s3://bucket` or `s3://bucket/prefix`. The region defaults
    /// to `us-east-1`, the request timeout to 30 s.
    pub fn parse(location: &str) -> Result<Self, FenceError> {
        let bad = |why: &str| FenceError::Config(format!("`{}`: {why}", redact_url(location)));
        let url = Url::parse(location).map_err(|error| bad(&error.to_string()))?;
        if url.scheme() != "s3" {
            return Err(bad("the location must be an s3:// URL"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad(
                "credentials do not belong in the location; set them apart",
            ));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(bad("the location takes no query or fragment"));
        }
        let bucket = url
            .host_str()
            .filter(|bucket| !bucket.is_empty())
            .ok_or_else(|| bad("no bucket"))?;
        let prefix = url.path().trim_matches('/').to_owned();
        Path::parse(&prefix).map_err(|error| bad(&error.to_string()))?;
        Ok(S3Config {
            bucket: bucket.to_owned(),
            prefix,
            endpoint: None,
            region: "us-east-1".into(),
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            timeout: Duration::from_secs(30),
        })
    }

    /// Static credentials.
    pub fn with_credentials(
        mut self,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
    ) -> Self {
        self.access_key_id = Some(access_key_id.into());
        self.secret_access_key = Some(secret_access_key.into());
        self
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The prefix inside the bucket (empty: the whole bucket).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Builds the store: scoped to the prefix, with `object_store`'s own
    /// retries off (the fence resolves in-doubt writes itself). Plain HTTP
    /// only in this build: an `https` endpoint, or none (AWS's own, which
    /// is https), is refused rather than tried.
    pub fn build_store(&self) -> Result<Arc<dyn ObjectStore>, FenceError> {
        let endpoint = self.endpoint.as_deref().ok_or_else(|| {
            FenceError::Config(
                "no endpoint: AWS's own endpoint needs TLS, which this build leaves to the CLI integration; give an http:// endpoint".into(),
            )
        })?;
        let parsed = Url::parse(endpoint).map_err(|error| {
            FenceError::Config(format!("endpoint `{}`: {error}", redact_url(endpoint)))
        })?;
        if parsed.scheme() != "http" {
            return Err(FenceError::Config(format!(
                "endpoint `{}`: only http:// endpoints are supported by this build (no TLS yet)",
                redact_url(endpoint)
            )));
        }
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&self.bucket)
            .with_region(&self.region)
            .with_endpoint(endpoint)
            .with_virtual_hosted_style_request(false)
            .with_retry(RetryConfig {
                max_retries: 0,
                retry_timeout: self.timeout,
                ..RetryConfig::default()
            })
            .with_client_options(ClientOptions::new().with_allow_http(true))
            .with_http_connector(HyperConnector {
                timeout: self.timeout,
            });
        match (&self.access_key_id, &self.secret_access_key) {
            (Some(id), Some(secret)) => {
                builder = builder
                    .with_access_key_id(id)
                    .with_secret_access_key(secret);
            }
            _ => builder = builder.with_skip_signature(true),
        }
        if let Some(token) = &self.session_token {
            builder = builder.with_token(token);
        }
        let store = builder
            .build()
            .map_err(|error| FenceError::Config(self.scrub(&error.to_string())))?;
        Ok(if self.prefix.is_empty() {
            Arc::new(store)
        } else {
            Arc::new(PrefixStore::new(store, self.prefix.as_str()))
        })
    }

    /// Builds the store and opens the fence over it (running the probe).
    pub async fn open(&self) -> Result<ObjectFence, FenceError> {
        ObjectFence::open(self.build_store()?, self.to_string()).await
    }

    /// `message` without this configuration's secrets.
    fn scrub(&self, message: &str) -> String {
        let mut message = message.to_owned();
        for secret in [&self.secret_access_key, &self.session_token]
            .into_iter()
            .flatten()
        {
            if !secret.is_empty() {
                message = message.replace(secret.as_str(), MASK);
            }
        }
        message
    }
}

impl fmt::Display for S3Config {
    /// `s3://bucket/prefix at <endpoint, redacted>`: safe for messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{}", self.bucket)?;
        if !self.prefix.is_empty() {
            write!(f, "/{}", self.prefix)?;
        }
        if let Some(endpoint) = &self.endpoint {
            write!(f, " at {}", redact_url(endpoint))?;
        }
        Ok(())
    }
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let masked = |value: &Option<String>| value.as_ref().map(|_| MASK);
        f.debug_struct("S3Config")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint.as_deref().map(redact_url))
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &masked(&self.secret_access_key))
            .field("session_token", &masked(&self.session_token))
            .field("timeout", &self.timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse_or_are_refused_with_a_reason() {
        let config = S3Config::parse("s3://b").unwrap();
        assert_eq!((config.bucket(), config.prefix()), ("b", ""));
        let config = S3Config::parse("s3://b/a/b/").unwrap();
        assert_eq!(config.prefix(), "a/b");
        for bad in [
            "http://b/x",
            "s3://",
            "s3://k:secret@b/x",
            "s3://b/x?y=1",
            "not a url",
        ] {
            let error = S3Config::parse(bad).unwrap_err().to_string();
            assert!(!error.contains("secret"), "{error}");
        }
    }

    #[test]
    fn what_this_build_cannot_reach_is_refused() {
        let config = S3Config::parse("s3://b").unwrap();
        assert!(
            config
                .build_store()
                .unwrap_err()
                .to_string()
                .contains("no endpoint")
        );
        let tls = config.clone().with_endpoint("https://s3.example");
        assert!(
            tls.build_store()
                .unwrap_err()
                .to_string()
                .contains("only http://")
        );
        let ok = config
            .with_endpoint("http://127.0.0.1:1")
            .with_credentials("id", "secret");
        assert!(ok.build_store().is_ok());
    }

    #[test]
    fn secrets_never_show() {
        let config = S3Config::parse("s3://b/p")
            .unwrap()
            .with_endpoint("http://user:hunter2@127.0.0.1:9000")
            .with_credentials("id", "s3cr3t-key")
            .with_session_token("t0ken-value");
        let shown = format!("{config} {config:?}");
        for secret in ["hunter2", "s3cr3t-key", "t0ken-value"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert_eq!(config.scrub("bad key s3cr3t-key"), "bad key ***");
    }
}
