//! Opening the engine `--store` names, the one place that names each
//! engine.
//!
//! sled is always built in. The PostgreSQL and etcd engines come with the
//! `postgres` and `etcd` features, so a server embedded without them
//! compiles no SQL or etcd client (and needs no protoc); a `--store` for
//! an engine this build lacks is refused with the feature's name.
//! Settings that only sled honours (`--durability buffered`, its page
//! cache) are refused with another engine rather than ignored.

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
    if matches!(spec, StoreSpec::Sled { .. }) {
        return Ok(());
    }
    let engine = spec.engine();
    if config.durability() != Durability::Flushed {
        return Err(ServerError::SledOnly {
            setting: "--durability buffered",
            engine,
            why: "it acknowledges a write only once its database has committed it durably",
        });
    }
    if config.cache_capacity_bytes != ServerConfig::DEFAULT_CACHE_CAPACITY_BYTES {
        return Err(ServerError::SledOnly {
            setting: "--cache-capacity-bytes",
            engine,
            why: "it is sled's page cache",
        });
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
        let config = PostgresConfig::new(url)
            .with_idempotency_window(self.store_config().idempotency_window);
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
}
