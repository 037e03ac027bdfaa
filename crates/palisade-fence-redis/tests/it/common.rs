//! What every test module needs: servers, fences, sequencers, unique locks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use palisade_core::marks::Marks;
use palisade_core::{Generation, LockName, Mode, Refused, Sequencer};
use std::path::PathBuf;

use palisade_fence_redis::{FenceOptions, RedisFence, Written};
use palisade_testkit::redis::{REDIS_URL_ENV, RedisOptions, RedisServer};

/// A lock name no other test (or earlier run against the same server)
/// uses.
pub(crate) fn unique_lock(name: &str) -> LockName {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    LockName::new(format!(
        "fence-it/{name}/{}-{nanos}-{n}",
        std::process::id()
    ))
    .unwrap()
}

pub(crate) fn exclusive(lock: &LockName, generation: u64) -> Sequencer {
    Sequencer::new(
        lock.clone(),
        Mode::Exclusive,
        Generation::new(generation).unwrap(),
    )
}

pub(crate) fn shared(lock: &LockName, generation: u64) -> Sequencer {
    Sequencer::new(
        lock.clone(),
        Mode::Shared,
        Generation::new(generation).unwrap(),
    )
}

pub(crate) fn marks(exclusive: u64, shared: u64) -> Marks {
    Marks { exclusive, shared }
}

/// The Redis fence's module, `libpalisade_fence_redis_module.so`: cargo
/// builds it beside this test binary (`<target>/<profile>/deps`), as this
/// crate dev-depends on it; `PALISADE_REDIS_MODULE` names another.
pub(crate) fn module_path() -> PathBuf {
    if let Some(path) = std::env::var_os("PALISADE_REDIS_MODULE") {
        return path.into();
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let path = exe
        .parent()
        .expect("the test binary's directory")
        .join("libpalisade_fence_redis_module.so");
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build -p palisade-fence-redis-module` (cargo test -p palisade-fence-redis builds it), or name one in PALISADE_REDIS_MODULE",
        path.display()
    );
    path
}

/// `options`, with the fence's module loaded.
pub(crate) fn with_module(options: RedisOptions) -> RedisOptions {
    options.with_module(module_path())
}

/// Which implementation of the fence a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// The module's `PALISADE.FENCE`.
    Module,
    /// The functions library's `palisade_fence_apply`.
    Function,
}

/// A server with the module loaded (spawned; or `PALISADE_REDIS_URL`,
/// which must have it) and a fence over it through `via`.
pub(crate) async fn single_via(via: Via) -> (RedisServer, RedisFence) {
    let redis = if std::env::var_os(REDIS_URL_ENV).is_some() {
        RedisServer::start()
    } else {
        RedisServer::spawn(with_module(RedisOptions::default()))
    };
    let options = FenceOptions::default().with_module(via == Via::Module);
    let fence = connect_with(&redis, options).await;
    assert_eq!(
        fence.uses_module(),
        via == Via::Module,
        "the fence must run through {via:?} (is the module loaded?)"
    );
    (redis, fence)
}

/// The default: the module.
pub(crate) async fn single() -> (RedisServer, RedisFence) {
    single_via(Via::Module).await
}

/// A fence over `redis` with `options`.
pub(crate) async fn connect_with(redis: &RedisServer, options: FenceOptions) -> RedisFence {
    let client = palisade_fence_redis::redis::Client::open(redis.url()).unwrap();
    // Replies may take as long as a call's `WAIT` (the driver's default
    // response timeout would cut a 2 s `WAIT` short).
    let config = palisade_fence_redis::redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(Some(std::time::Duration::from_secs(10)));
    let connection = client
        .get_connection_manager_with_config(config)
        .await
        .unwrap();
    RedisFence::with_options(connection, options)
        .await
        .expect("connect the fence")
}

/// Unwraps an accepted write, naming what was expected.
pub(crate) fn accepted<T: std::fmt::Debug>(
    outcome: Result<Result<Written<T>, Refused>, palisade_fence_redis::RedisFenceError>,
    what: &str,
) -> Written<T> {
    match outcome {
        Ok(Ok(written)) => written,
        other => panic!("{what}: expected acceptance, got {other:?}"),
    }
}

/// The stale refusal's marks, or a panic naming what was expected.
pub(crate) fn stale<T: std::fmt::Debug>(
    outcome: Result<Result<T, Refused>, palisade_fence_redis::RedisFenceError>,
    what: &str,
) -> Marks {
    match outcome {
        Ok(Err(Refused::Stale { marks, .. })) => marks,
        other => panic!("{what}: expected a stale refusal, got {other:?}"),
    }
}
