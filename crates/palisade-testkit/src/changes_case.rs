//! The case of an inspector whose service watches
//! ([`Inspect::changes`] pushed): its hints survive the service going away
//! and coming back, because the backend sets its watch again.
//!
//! The observer's interval is an hour, so no interval tick stands in for
//! a hint: after the restart, a grant and a release, each made once the
//! hints have settled, must each be hinted by the watch itself.

use std::time::Duration;

use palisade_core::{Changes, Inspect, Lock, LockGuard, LockName, Mode};
use tokio::time::Instant;

/// How long the hints must be quiet to count as settled.
const QUIET: Duration = Duration::from_secs(2);
/// The bound on one hint, generous for a loaded machine.
const HINTED_WITHIN: Duration = Duration::from_secs(20);

/// Runs the case: `restart` stops and starts the service (blocking);
/// `open` opens a session once it is back.
pub async fn hints_survive_a_restart<I, L>(
    inspector: &I,
    restart: impl FnOnce(),
    open: impl AsyncFnOnce() -> L,
) where
    I: Inspect,
    L: Lock,
{
    let mut changes = inspector
        .changes("hints/", Duration::from_secs(3600))
        .await
        .expect("watching the locks under hints/");
    assert!(changes.is_pushed(), "this service's inspector must watch");
    hinted(&mut changes, "the first read").await;

    tokio::task::block_in_place(restart);
    let session = open().await;
    let name = LockName::new("hints/after-restart").expect("a valid name");
    settle(&mut changes).await;
    let guard = session
        .acquire(&name, Mode::Exclusive)
        .await
        .expect("acquire after the restart");
    hinted(&mut changes, "a grant after the restart").await;
    settle(&mut changes).await;
    guard.release().await.expect("release");
    hinted(&mut changes, "a release after the restart").await;
}

async fn hinted(changes: &mut Changes, what: &str) {
    match tokio::time::timeout(HINTED_WITHIN, changes.next()).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => panic!("{what}: the hints ended: {error}"),
        Err(_) => panic!("{what}: no hint within {HINTED_WITHIN:?}"),
    }
}

/// Takes the hints already on their way (the restart's own, a grant's
/// several events) until none comes for [`QUIET`].
async fn settle(changes: &mut Changes) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while let Ok(next) = tokio::time::timeout(QUIET, changes.next()).await {
        next.expect("the hints ended");
        assert!(Instant::now() < deadline, "the hints never settle");
    }
}
