//! Opening the engine `--store` names, the one place that names each
//! engine.
//!
//! sled is always built in. The PostgreSQL and etcd engines come with the
//! `postgres` and `etcd` features, so a server embedded without them
//! compiles no SQL or etcd client (and needs no protoc); a `--store` for
//! an engine this build lacks is refused with the feature's name.
//! Settings that only one engine honours (sled's `--durability buffered`
//! and page cache, PostgreSQL's pool size and statement timeout) are
//! refused with another engine rather than ignored.

use palisade_store::{Durability, Store};

use crate::{ServerConfig, ServerError, StoreSpec};

/// The Cargo feature that builds the engine of `spec` in, and whether
/// this build has it; `None` for sled, always built in.
pub(crate) fn feature_of(spec: &StoreSpec) -> Option<(&'static str, bool)> {
    match spec {
        StoreSpec::Sled { .. } => None,
        StoreSpec::Postgres { .. } => Some(("postgres", cfg!(feature = "postgres"))),
        StoreSpec::Etcd { .. } => Some(("etcd", cfg!(feature = "etcd"))),
    }
}

/// Refuses what the engine of `spec` cannot honour: an engine not built in
/// (`feature` says whether its feature is on, as [`feature_of`] does for
/// this build), and sled's own settings given for another engine.
pub(crate) fn check(
    spec: &StoreSpec,
    feature: Option<(&'static str, bool)>,
    config: &ServerConfig,
) -> Result<(), ServerError> {
    if let Some((feature, false)) = feature {
        return Err(not_built(spec, feature));
    }
    let engine = spec.engine();
    let only = |only: &'static str, setting: &'static str, why: &'static str| {
        Err(ServerError::EngineOnly {
            setting,
            only,
            engine,
            why,
        })
    };
    if !matches!(spec, StoreSpec::Sled { .. }) {
        if config.durability() != Durability::Flushed {
            let why = "it acknowledges a write only once its database has committed it durably";
            return only("sled", "--durability buffered", why);
        }
        if config.cache_capacity_bytes != ServerConfig::DEFAULT_CACHE_CAPACITY_BYTES {
            return only("sled", "--cache-capacity-bytes", "it is sled's page cache");
        }
    }
    if let StoreSpec::Postgres { url } = spec {
        let given = [
            (
                "--store-connections",
                config.store_connections.is_some(),
                "max_connections",
            ),
            (
                "--store-statement-timeout",
                config.store_statement_timeout.is_some(),
                "statement_timeout",
            ),
        ];
        let query = url.split_once('?').map_or("", |(_, query)| query);
        let in_url = |name: &str| {
            query
                .split('&')
                .any(|pair| pair.split('=').next() == Some(name))
        };
        if let Some((flag, _, name)) = given.iter().find(|(_, set, name)| *set && in_url(name)) {
            return Err(ServerError::Config(format!(
                "{flag} and the --store URL's `{name}` parameter both set it; give one"
            )));
        }
    }
    if !matches!(spec, StoreSpec::Postgres { .. }) {
        let why = "it sizes the PostgreSQL engine's connection pool";
        if config.store_connections.is_some() {
            return only("postgres", "--store-connections", why);
        }
        if config.store_statement_timeout.is_some() {
            let why = "it is PostgreSQL's statement_timeout for the engine's sessions";
            return only("postgres", "--store-statement-timeout", why);
        }
    }
    Ok(())
}

fn not_built(spec: &StoreSpec, feature: &'static str) -> ServerError {
    ServerError::EngineNotBuilt {
        store: spec.to_string(),
        feature,
    }
}

impl ServerConfig {
    /// Opens the store that `--store` (or `--data-dir`) names. Blocks
    /// while sled opens; another engine connects on the caller's
    /// (multi-threaded) tokio runtime.
    pub fn open_store(&self) -> Result<Store, ServerError> {
        let spec = self.store_spec()?;
        let store = match &spec {
            StoreSpec::Sled { dir } => Store::open(dir, self.store_config())?,
            #[cfg(feature = "postgres")]
            StoreSpec::Postgres { url } => self.open_postgres(&spec, url)?,
            #[cfg(feature = "etcd")]
            StoreSpec::Etcd { endpoints, prefix } => {
                self.open_etcd(&spec, endpoints, prefix.as_deref())?
            }
            // An engine this build lacks (`store_spec` refuses it first).
            #[allow(unreachable_patterns)]
            other => {
                let feature = feature_of(other).map_or("", |(feature, _)| feature);
                return Err(not_built(other, feature));
            }
        };
        let engine = store.engine_info();
        tracing::info!(
            engine = engine.name,
            location = %engine.location,
            durability = %engine.durability,
            "store opened"
        );
        Ok(store)
    }

    /// Connects the PostgreSQL engine. Its connections belong to the
    /// runtime that opens them, so this waits for them in place on the
    /// caller's (multi-threaded) tokio runtime.
    #[cfg(feature = "postgres")]
    fn open_postgres(&self, spec: &StoreSpec, url: &str) -> Result<Store, ServerError> {
        use palisade_store_postgres::{PostgresConfig, PostgresEngine};
        let runtime = multi_threaded_runtime(spec, "PostgreSQL")?;
        let mut config = PostgresConfig::new(url)
            .with_idempotency_window(self.store_config().idempotency_window);
        // Set here, checked (0 refused) and overridden by the URL's own
        // parameters of the same name when the engine opens; both at once
        // is refused in `store_spec`.
        if let Some(connections) = self.store_connections {
            config.max_connections = connections;
        }
        if let Some(timeout) = self.store_statement_timeout {
            config.statement_timeout = timeout;
        }
        let engine = tokio::task::block_in_place(|| runtime.block_on(PostgresEngine::open(config)))
            .map_err(|error| open_failed(spec, error.to_string()))?;
        Ok(Store::with_engine(
            std::sync::Arc::new(engine),
            self.store_config(),
        ))
    }

    /// Connects the etcd engine (checking the cluster answers and the
    /// prefix holds this version's layout) and builds the store over it.
    /// The engine's gRPC channel lives on the runtime that connects it.
    #[cfg(feature = "etcd")]
    fn open_etcd(
        &self,
        spec: &StoreSpec,
        endpoints: &[String],
        prefix: Option<&str>,
    ) -> Result<Store, ServerError> {
        use palisade_store_etcd::{DEFAULT_PREFIX, EtcdEngine, EtcdEngineConfig};
        let prefix =
            prefix.map_or_else(|| DEFAULT_PREFIX.to_owned(), |prefix| format!("/{prefix}"));
        let config = EtcdEngineConfig::new(endpoints.iter().cloned())
            .and_then(|config| config.with_prefix(prefix))
            .map_err(|error| open_failed(spec, error.to_string()))?
            .with_idempotency_window(self.store_config().idempotency_window);
        let runtime = multi_threaded_runtime(spec, "etcd")?;
        let engine = tokio::task::block_in_place(|| runtime.block_on(EtcdEngine::connect(config)))
            .map_err(|error| open_failed(spec, error.to_string()))?;
        Ok(Store::with_engine(
            std::sync::Arc::new(engine),
            self.store_config(),
        ))
    }
}

#[cfg(any(feature = "postgres", feature = "etcd"))]
fn open_failed(spec: &StoreSpec, message: String) -> ServerError {
    ServerError::OpenEngine {
        store: spec.to_string(),
        message,
    }
}

/// The caller's runtime, which must be multi-threaded: `open_store` is
/// synchronous, so the thread steps out of the runtime's workers while it
/// waits for the engine to connect.
#[cfg(any(feature = "postgres", feature = "etcd"))]
fn multi_threaded_runtime(
    spec: &StoreSpec,
    engine: &str,
) -> Result<tokio::runtime::Handle, ServerError> {
    tokio::runtime::Handle::try_current()
        .ok()
        .filter(|runtime| runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
        .ok_or_else(|| {
            open_failed(
                spec,
                format!("the {engine} engine is opened on a multi-threaded tokio runtime"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> ServerConfig {
        let mut config = ServerConfig::new("/unused");
        config.data_dir = None;
        config.store = Some(args[0].to_owned());
        if args.contains(&"buffered") {
            config.durability = crate::DurabilityMode::Buffered;
        }
        config
    }

    /// What a build without the engine's feature answers, whatever this
    /// build has: one line naming the feature, with no password.
    #[test]
    fn an_engine_not_built_in_is_refused_naming_its_feature() {
        for (store, feature) in [
            ("postgres://app:s3cret@db/p", "postgres"),
            ("etcd://127.0.0.1:2379", "etcd"),
        ] {
            let config = config(&[store]);
            let spec = config.store_spec().unwrap();
            let error = check(&spec, Some((feature, false)), &config)
                .unwrap_err()
                .to_string();
            assert!(error.contains(&format!("`{feature}` feature")), "{error}");
            assert!(
                !error.contains('\n') && !error.contains("s3cret"),
                "{error}"
            );
            assert!(check(&spec, Some((feature, true)), &config).is_ok());
        }
    }

    #[test]
    fn sled_only_settings_are_refused_with_another_engine() {
        for store in ["postgres://db/p", "etcd://127.0.0.1:2379"] {
            let error = config(&[store, "buffered"]).store_spec().unwrap_err();
            assert!(
                error.to_string().contains("--durability buffered"),
                "{error}"
            );
            let mut cached = config(&[store]);
            cached.cache_capacity_bytes = 1 << 20;
            let error = cached.store_spec().unwrap_err();
            assert!(
                error.to_string().contains("--cache-capacity-bytes"),
                "{error}"
            );
        }
        // sled takes both.
        let mut sled = config(&["sled:/tmp/x", "buffered"]);
        sled.cache_capacity_bytes = 1 << 20;
        assert!(sled.store_spec().is_ok());
    }

    #[test]
    fn postgres_only_settings_are_refused_with_another_engine() {
        let etcd = cfg!(feature = "etcd").then_some("etcd://127.0.0.1:2379");
        for store in ["sled:/tmp/x"].into_iter().chain(etcd) {
            let mut pooled = config(&[store]);
            pooled.store_connections = Some(4);
            let error = pooled.store_spec().unwrap_err().to_string();
            assert!(
                error.contains("--store-connections applies to the postgres engine only"),
                "{error}"
            );
            let mut timed = config(&[store]);
            timed.store_statement_timeout = Some(std::time::Duration::from_secs(1));
            let error = timed.store_spec().unwrap_err().to_string();
            assert!(error.contains("--store-statement-timeout"), "{error}");
        }
    }

    /// A flag and the URL's parameter of the same name would leave one of
    /// them ignored: refused, naming both, without the password.
    #[cfg(feature = "postgres")]
    #[test]
    fn a_postgres_setting_given_twice_is_refused() {
        let url = "postgres://app:s3cret@db/p?sslmode=disable&max_connections=8";
        let mut both = config(&[url]);
        both.store_connections = Some(4);
        let error = both.store_spec().unwrap_err().to_string();
        assert!(
            error.contains("--store-connections") && error.contains("`max_connections`"),
            "{error}"
        );
        assert!(!error.contains("s3cret"), "{error}");
        // Each alone is taken.
        both.store_connections = None;
        assert!(both.store_spec().is_ok());
        let mut flag = config(&["postgres://db/p?statement_timeout_x=1"]);
        flag.store_connections = Some(4);
        flag.store_statement_timeout = Some(std::time::Duration::from_secs(2));
        assert!(flag.store_spec().is_ok());
    }
}
