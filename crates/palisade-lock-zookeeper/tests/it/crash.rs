//! `ZkLock::simulate_crash`, the test hook other crates' tests use to end
//! a holder's session on the server as an expiry after a crash would.

use std::time::Duration;

use palisade_core::{LeaseState, Lock, LockGuard, LockName, Mode};
use palisade_testkit::zookeeper::ZooKeeperEnsemble;

use crate::fixtures::{client, config, options, session, started, unique_prefix};

/// Far more than a close takes on a loaded machine, far less than the
/// request timeout the hook used to run into.
const CRASH_WITHIN: Duration = Duration::from_secs(5);

/// On a single-threaded runtime (`#[tokio::test]`'s default, as in the
/// CLI and fault tests), the crash ends the session at once: the holder's
/// node is gone and another session is granted the lock, and the holder
/// learns that its lease is lost.
///
/// This timed out ("close session: timeout") about one run in two while
/// the hook closed the session by attaching to it from a second
/// connection: the holder's own client, cut off by the server's move of
/// the session, attached again and cut the closing connection off in turn.
#[tokio::test]
async fn a_simulated_crash_ends_the_session_on_a_current_thread_runtime() {
    let (_server, client) = started("crash").await;
    let name = LockName::new("crash/one").unwrap();
    let holder = session(&client, options(Duration::from_secs(20))).await;
    let guard = holder.acquire(&name, Mode::Exclusive).await.unwrap();

    tokio::time::timeout(CRASH_WITHIN, holder.simulate_crash())
        .await
        .expect("the crash returns promptly")
        .expect("the session is ended on the server");

    let next = session(&client, options(Duration::from_secs(20))).await;
    let taken = next
        .try_acquire(&name, Mode::Exclusive)
        .await
        .unwrap()
        .expect("the crashed holder's node is gone at once");
    assert!(taken.generation() > guard.generation());
    let mut lease = guard.lease();
    let state = tokio::time::timeout(CRASH_WITHIN, lease.lost())
        .await
        .expect("the holder learns of the end of its session");
    assert!(matches!(state, LeaseState::Lost(_)), "{state:?}");
}

/// On an ensemble, where the closing connection and the holder's own
/// client may reach different members and cut each other off: the crash
/// still returns promptly, every time.
#[tokio::test]
async fn a_simulated_crash_ends_the_session_on_an_ensemble() {
    let ensemble = ZooKeeperEnsemble::start();
    let client = client(config(&ensemble.connect_string(), &unique_prefix("crash"))).await;
    let name = LockName::new("crash/ensemble").unwrap();
    let mut last = None;
    for _ in 0..3 {
        let holder = session(&client, options(Duration::from_secs(20))).await;
        let guard = holder.acquire(&name, Mode::Exclusive).await.unwrap();
        assert!(last < Some(guard.generation()));
        last = Some(guard.generation());
        tokio::time::timeout(CRASH_WITHIN, holder.simulate_crash())
            .await
            .expect("the crash returns promptly")
            .expect("the session is ended on the server");
        let mut lease = guard.lease();
        tokio::time::timeout(CRASH_WITHIN, lease.lost())
            .await
            .expect("the holder learns of the end of its session");
    }
}
