//! A wiped ensemble: its zxids start over below the generations already
//! handed out. The regression is named (by this process, which saw the
//! higher generation, and by a resource server's mark), and raising the
//! floor recovers: every later grant is above the mark.

use std::time::Duration;

use palisade_core::{Lock, LockError, LockGuard, LockName, Mode, RaiseFloor};
use palisade_testkit::zookeeper::ZooKeeperServer;

use crate::fixtures::{client, config, options, session, unique_prefix};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_server_is_named_as_a_regression_and_a_raised_floor_recovers() {
    let mut server = ZooKeeperServer::spawn();
    let config = config(&server.connect_string(), &unique_prefix("floor"));
    let name = LockName::new("stock/7").unwrap();

    // Generations before the wipe: push the zxid up a little.
    let before = client(config.clone()).await;
    let locks = session(&before, options(Duration::from_secs(4))).await;
    let mut mark = 0;
    for _ in 0..20 {
        let guard = locks.acquire(&name, Mode::Exclusive).await.unwrap();
        mark = guard.generation().get();
        guard.release().await.unwrap();
    }
    drop(locks);

    server.wipe().expect("wiping ZooKeeper");

    // The process that saw `mark` refuses the lower grant, naming it.
    let locks = session(&before, options(Duration::from_secs(4))).await;
    match locks.acquire(&name, Mode::Exclusive).await {
        Err(LockError::GenerationRegression { offered, floor, .. }) => {
            assert!(offered <= mark, "offered {offered}, mark {mark}");
            assert_eq!(floor, mark);
        }
        other => panic!("expected a named regression, got {other:?}"),
    }
    // ...and raised the floor on its way out: the next grant is above.
    let guard = locks.acquire(&name, Mode::Exclusive).await.unwrap();
    assert!(guard.generation().get() > mark);
    guard.release().await.unwrap();

    // A fresh process (it saw nothing) after another wipe: the grant is
    // below a resource server's mark until `raise_floor(mark)`.
    let mark = mark + 1_000_000;
    server.wipe().expect("wiping ZooKeeper again");
    let fresh = client(config.clone()).await;
    let locks = session(&fresh, options(Duration::from_secs(4))).await;
    let guard = locks.acquire(&name, Mode::Exclusive).await.unwrap();
    assert!(
        guard.generation().get() < mark,
        "a wiped ensemble starts low"
    );
    guard.release().await.unwrap();
    let raised = fresh.raise_floor(&name, mark).await.unwrap();
    assert_eq!((raised.before, raised.after), (0, mark));
    assert_eq!(fresh.floor().await.unwrap(), mark);
    // Idempotent, and never lowered.
    assert_eq!(
        fresh.raise_floor(&name, mark - 5).await.unwrap().after,
        mark
    );
    let guard = locks.acquire(&name, Mode::Exclusive).await.unwrap();
    assert!(guard.generation().get() > mark);
    let first = guard.generation();
    guard.release().await.unwrap();
    let guard = locks.acquire(&name, Mode::Exclusive).await.unwrap();
    assert!(
        guard.generation() > first,
        "still increasing after the raise"
    );
}

/// A session keeps the floor under a watch instead of reading it with
/// every grant (floor_cache.rs): a raise by another process, right before
/// the session's next create, still reaches that grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_by_another_process_reaches_a_session_that_keeps_the_floor() {
    let server = ZooKeeperServer::spawn();
    let config = config(&server.connect_string(), &unique_prefix("floor-copy"));
    let name = LockName::new("stock/8").unwrap();
    let holder = client(config.clone()).await;
    let locks = session(&holder, options(Duration::from_secs(4))).await;
    let other = client(config).await;
    let mut floor = 0;
    for round in 1..=5u64 {
        // Two grants: the first reads the floor (and keeps it), the
        // second uses the copy.
        for _ in 0..2 {
            let guard = locks.acquire(&name, Mode::Exclusive).await.unwrap();
            assert!(guard.generation().get() > floor, "round {round}");
            guard.release().await.unwrap();
        }
        floor = round * 1_000_000_000;
        other.raise_floor(&name, floor).await.unwrap();
        let guard = locks.acquire(&name, Mode::Exclusive).await.unwrap();
        assert!(
            guard.generation().get() > floor,
            "round {round}: generation {} not above the floor {floor} raised before the create",
            guard.generation()
        );
        guard.release().await.unwrap();
    }
}
