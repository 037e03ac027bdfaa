//! `--store etcd://host:port,...[/prefix]`: the store over the etcd engine.

use std::sync::Arc;

use palisade_store::{Engine, Store, StoreConfig};
use palisade_store_etcd::{DEFAULT_PREFIX, EtcdEngine, EtcdEngineConfig};
use tokio::runtime::{Handle, RuntimeFlavor};

use crate::{ServerError, StoreSpec};

/// Connects the etcd engine (checking the cluster answers and the prefix
/// holds this version's layout) and builds the store over it.
///
/// `open_store` is synchronous; connecting is not, and the engine's gRPC
/// channel lives on the runtime that connects it. So this runs on the
/// caller's runtime, which must be multi-threaded (as `palisade serve`'s
/// and `palisade-server`'s are): the thread steps out of the runtime's
/// workers while it waits.
pub(crate) fn open(
    spec: &StoreSpec,
    endpoints: &[String],
    prefix: Option<&str>,
    store_config: StoreConfig,
) -> Result<Store, ServerError> {
    let failed = |message: String| ServerError::OpenEngine {
        store: spec.to_string(),
        message,
    };
    let prefix = prefix.map_or_else(|| DEFAULT_PREFIX.to_owned(), |prefix| format!("/{prefix}"));
    let config = EtcdEngineConfig::new(endpoints.iter().cloned())
        .and_then(|config| config.with_prefix(prefix))
        .map_err(|error| failed(error.to_string()))?
        .with_idempotency_window(store_config.idempotency_window);
    let handle = Handle::try_current()
        .ok()
        .filter(|handle| handle.runtime_flavor() == RuntimeFlavor::MultiThread)
        .ok_or_else(|| {
            failed("the etcd engine is opened on a multi-threaded tokio runtime".into())
        })?;
    let engine = tokio::task::block_in_place(|| handle.block_on(EtcdEngine::connect(config)))
        .map_err(|error| failed(error.to_string()))?;
    Ok(Store::with_engine(
        Arc::new(engine) as Arc<dyn Engine>,
        store_config,
    ))
}
