//! The engine conformance suite (`palisade_testkit::engine_suite`) on the
//! sled engine, each engine in a temporary directory of its own.

use std::future::Future;
use std::sync::Arc;

use palisade_store::{Engine, StoreConfig, open_sled_engine};
use palisade_testkit::engine_suite::{self, EngineFactory, EngineOptions};
use tempfile::TempDir;

struct Sled;

/// What a reopen needs: the directory, and the options it was opened with.
struct SledStorage {
    dir: TempDir,
    config: StoreConfig,
}

impl EngineFactory for Sled {
    type Storage = SledStorage;

    fn name(&self) -> &'static str {
        "sled"
    }

    async fn open(&self, options: EngineOptions) -> (Arc<dyn Engine>, SledStorage) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = StoreConfig::default().with_idempotency_window(options.idempotency_window);
        let engine = open_sled_engine(dir.path(), &config).expect("sled opens");
        (engine, SledStorage { dir, config })
    }

    /// sled's hardest crash inside one process: the engine is dropped (its
    /// committer stops) and the directory opened again.
    fn reopen(
        &self,
        engine: Arc<dyn Engine>,
        storage: &mut SledStorage,
    ) -> impl Future<Output = Arc<dyn Engine>> + Send {
        drop(engine);
        let reopened = open_sled_engine(storage.dir.path(), &storage.config);
        async move { reopened.expect("sled reopens its directory") }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sled_engine_passes_the_engine_suite() {
    engine_suite::test_all(Sled).await;
}
