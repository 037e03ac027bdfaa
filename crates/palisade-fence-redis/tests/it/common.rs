//! What every test module needs: servers, fences, sequencers, unique locks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use palisade_core::marks::Marks;
use palisade_core::{Generation, LockName, Mode, Refused, Sequencer};
use palisade_fence_redis::{RedisFence, Written};
use palisade_testkit::redis::RedisServer;

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

/// A server (spawned, or `PALISADE_REDIS_URL`) and a fence over it.
pub(crate) async fn single() -> (RedisServer, RedisFence) {
    let redis = RedisServer::start();
    let fence = RedisFence::connect(&redis.url())
        .await
        .expect("connect the fence");
    (redis, fence)
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
