//! The storage engine conformance suite against a real etcd started by the
//! testkit. Reopen is the hard way: `kill -9` of etcd, restart on the same
//! data directory, and a new engine connected to it.

use crate::common;

use std::sync::{Arc, Mutex};

use palisade_store::Engine;
use palisade_store_etcd::EtcdEngineConfig;
use palisade_testkit::engine_suite::{self, EngineFactory, EngineOptions};
use palisade_testkit::etcd::EtcdServer;

/// One etcd for the whole suite; every engine gets a prefix of its own.
struct EtcdFactory {
    etcd: Arc<Mutex<EtcdServer>>,
}

impl EngineFactory for EtcdFactory {
    /// The engine's configuration, to connect a new engine after a crash.
    type Storage = EtcdEngineConfig;

    fn name(&self) -> &'static str {
        "etcd"
    }

    async fn open(&self, options: EngineOptions) -> (Arc<dyn Engine>, EtcdEngineConfig) {
        let endpoints = self.etcd.lock().expect("etcd handle").endpoints();
        let config =
            common::config(endpoints, "suite").with_idempotency_window(options.idempotency_window);
        let engine = common::connect(config.clone()).await;
        (Arc::new(engine), config)
    }

    async fn reopen(
        &self,
        engine: Arc<dyn Engine>,
        config: &mut EtcdEngineConfig,
    ) -> Arc<dyn Engine> {
        drop(engine);
        let etcd = self.etcd.clone();
        tokio::task::spawn_blocking(move || {
            let mut etcd = etcd.lock().expect("etcd handle");
            etcd.kill().expect("kill -9 of etcd");
            etcd.restart()
                .unwrap_or_else(|error| panic!("restarting etcd: {error}\n{}", etcd.log_tail()));
        })
        .await
        .expect("the restart task");
        Arc::new(common::connect(config.clone()).await)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_passes_the_engine_suite() {
    let etcd = tokio::task::spawn_blocking(EtcdServer::spawn)
        .await
        .expect("starting etcd");
    engine_suite::test_all(EtcdFactory {
        etcd: Arc::new(Mutex::new(etcd)),
    })
    .await;
}
