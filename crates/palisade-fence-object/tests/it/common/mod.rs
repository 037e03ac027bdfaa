//! Shared setup: a moto server with a bucket, a fence over it, sequencers.

use std::sync::Arc;
use std::time::Duration;

use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_fence_object::{ObjectFence, RetryBudget, S3Config};
use palisade_testkit::s3::S3Server;

/// moto with a bucket `tests`.
pub(crate) fn moto() -> S3Server {
    let server = S3Server::start();
    server.create_bucket("tests").expect("create the bucket");
    server
}

/// The configuration of `s3://tests/<prefix>` at `endpoint`.
pub(crate) fn config(endpoint: &str, prefix: &str) -> S3Config {
    S3Config::parse(&format!("s3://tests/{prefix}"))
        .expect("a valid location")
        .with_endpoint(endpoint)
        .with_credentials("testing", "testing-secret")
}

/// A probed fence over `s3://tests/<prefix>` at `endpoint`.
pub(crate) async fn fence(endpoint: &str, prefix: &str) -> Arc<ObjectFence> {
    Arc::new(
        config(endpoint, prefix)
            .open()
            .await
            .expect("moto enforces conditional writes")
            .with_retry(RetryBudget {
                total: Duration::from_secs(60),
                ..RetryBudget::default()
            }),
    )
}

/// An exclusive sequencer of `lock` with `generation`.
pub(crate) fn exclusive(lock: &str, generation: u64) -> Sequencer {
    sequencer(lock, Mode::Exclusive, generation)
}

pub(crate) fn sequencer(lock: &str, mode: Mode, generation: u64) -> Sequencer {
    Sequencer::new(
        LockName::new(lock).expect("a valid lock name"),
        mode,
        Generation::new(generation).expect("a non-zero generation"),
    )
}
