//! The engine conformance suite against a real PostgreSQL, the crash case
//! being a `kill -9` of PostgreSQL and its restart.

use std::sync::{Arc, Mutex};

use palisade_store::Engine;
use palisade_store_postgres::{PostgresConfig, PostgresEngine};
use palisade_testkit::engine_suite::{self, EngineFactory, EngineOptions};
use palisade_testkit::sql::SqlServer;

/// Engines over one PostgreSQL this test started.
struct PostgresFactory {
    server: Arc<Mutex<SqlServer>>,
    url: String,
}

impl PostgresFactory {
    fn start() -> PostgresFactory {
        let server = SqlServer::postgres();
        let url = server.url();
        PostgresFactory {
            server: Arc::new(Mutex::new(server)),
            url,
        }
    }

    async fn engine(&self, options: EngineOptions) -> Arc<dyn Engine> {
        let config =
            PostgresConfig::new(&self.url).with_idempotency_window(options.idempotency_window);
        match PostgresEngine::open(config).await {
            Ok(engine) => Arc::new(engine),
            Err(error) => panic!("opening the PostgreSQL engine failed: {error}"),
        }
    }
}

impl EngineFactory for PostgresFactory {
    /// Every engine shares the one database; a reopen needs only the
    /// options.
    type Storage = EngineOptions;

    fn name(&self) -> &'static str {
        "postgres"
    }

    async fn open(&self, options: EngineOptions) -> (Arc<dyn Engine>, EngineOptions) {
        (self.engine(options).await, options)
    }

    async fn reopen(
        &self,
        engine: Arc<dyn Engine>,
        options: &mut EngineOptions,
    ) -> Arc<dyn Engine> {
        let server = Arc::clone(&self.server);
        tokio::task::spawn_blocking(move || {
            let mut server = server
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            server.kill().expect("kill -9 of PostgreSQL");
            server.restart().expect("PostgreSQL restarts after kill -9");
        })
        .await
        .expect("the restart task");
        // The old engine's connections died with the server.
        drop(engine);
        self.engine(*options).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance() {
    engine_suite::test_all(PostgresFactory::start()).await;
}
