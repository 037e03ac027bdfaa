//! The start-up probe: a store that ignores `If-Match` is refused, naming
//! the store; moto and the in-memory store pass; a store without
//! conditional replace (the local file system) is refused too.

use std::sync::Arc;

use palisade_fence_object::{FenceError, ObjectFence};
use palisade_testkit::s3::ConditionStrippingProxy;

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_refuses_a_store_that_ignores_conditions() {
    let moto = common::moto();
    let proxy = ConditionStrippingProxy::start(moto.address()).unwrap();
    let config = common::config(&proxy.endpoint(), "probe");
    let error = config.open().await.expect_err("conditions are ignored");
    assert!(
        matches!(error, FenceError::ConditionsIgnored { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains(&proxy.endpoint()),
        "names the store: {message}"
    );
    assert!(
        message.contains("If-None-Match") || message.contains("If-Match"),
        "{message}"
    );
    assert!(proxy.stripped() > 0);
    assert!(!message.contains("testing-secret"), "{message}");

    // A store that honours `If-None-Match: *` but ignores `If-Match`.
    let only_if_match = ConditionStrippingProxy::stripping(moto.address(), &["if-match"]).unwrap();
    let error = common::config(&only_if_match.endpoint(), "probe")
        .open()
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            FenceError::ConditionsIgnored {
                condition: "If-Match",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains(&only_if_match.endpoint()),
        "{error}"
    );

    // The same store without the proxy passes.
    assert!(
        common::config(&moto.endpoint(), "probe")
            .open()
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn stores_without_conditional_replace_are_refused() {
    let memory = ObjectFence::open(Arc::new(object_store::memory::InMemory::new()), "memory").await;
    assert!(memory.is_ok());
    let dir = tempfile_dir();
    let local = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let error = ObjectFence::open(Arc::new(local), "local files")
        .await
        .unwrap_err();
    assert!(matches!(error, FenceError::Unsupported { .. }), "{error:?}");
    assert!(error.to_string().contains("local files"), "{error}");
}

fn tempfile_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}
