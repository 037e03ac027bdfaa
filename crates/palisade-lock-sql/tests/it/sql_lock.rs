//! Backend-specific behaviour on real PostgreSQL and MariaDB servers: what
//! the conformance suite cannot see through the `Lock` trait.

use std::time::Duration;

use palisade_core::{LeaseState, LiveCheck, Liveness, Lock, LockError, LockGuard, LockName, Mode};
use palisade_lock_sql::{SqlConfig, SqlLiveCheck, SqlLockClient, SqlLockError};
use palisade_testkit::sql::SqlServer;
use tokio::time::Instant;

use crate::common;

fn name(text: &str) -> LockName {
    LockName::new(text).expect("a valid lock name")
}

/// Takes and releases `name` `times` times; returns the generations.
async fn cycle(client: &SqlLockClient, name: &LockName, times: usize) -> Vec<u64> {
    let session = client
        .session(common::options(Duration::from_secs(5)))
        .await
        .expect("open a session");
    let mut generations = Vec::new();
    for _ in 0..times {
        let guard = session
            .acquire_timeout(name, Mode::Exclusive, Duration::from_secs(10))
            .await
            .expect("an uncontended acquire");
        generations.push(guard.generation().get());
        guard.release().await.expect("release");
    }
    generations
}

/// The generation lives in a row that is never deleted, committed with the
/// grant: after `kill -9` and crash recovery it continues above every
/// generation issued before, and never repeats.
async fn generation_survives_kill_9(mut server: SqlServer) {
    let lock = name("ledger/survivor");
    let client = common::client(&server).await;
    let before = cycle(&client, &lock, 3).await;
    assert!(
        before.windows(2).all(|pair| pair[0] < pair[1]),
        "{before:?}"
    );
    drop(client);

    server.kill().expect("kill -9 the database");
    server.restart().expect("restart after kill -9");

    let client = common::client(&server).await;
    let after = cycle(&client, &lock, 2).await;
    let newest_before = *before.last().expect("three grants");
    assert!(
        after.iter().all(|generation| *generation > newest_before),
        "generations after the crash {after:?} must all be above those before it {before:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_generation_survives_kill_9_and_restart() {
    common::trace();
    generation_survives_kill_9(SqlServer::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_generation_survives_kill_9_and_restart() {
    common::trace();
    generation_survives_kill_9(SqlServer::mariadb()).await;
}

/// With the database dead, renewals fail: the guard reports its lease lost
/// by its validity deadline, not later, and refuses to hand out its
/// sequencer.
async fn lease_lost_when_the_database_dies(mut server: SqlServer) {
    let ttl = Duration::from_secs(2);
    let client = common::client(&server).await;
    let session = client
        .session(common::options(ttl))
        .await
        .expect("open a session");
    let guard = session
        .acquire(&name("jobs/nightly"), Mode::Exclusive)
        .await
        .expect("acquire");
    let mut lease = guard.lease();

    server.kill().expect("kill -9 the database");
    let killed_at = Instant::now();
    // No renewal can succeed from here on: this deadline is final.
    let deadline = lease.valid_until().expect("a fresh hold is valid");
    // The local deadline is at most ttl - margin away; allow generous slack
    // for a loaded machine on top.
    let state = tokio::time::timeout(ttl * 2 + Duration::from_secs(2), lease.lost())
        .await
        .expect("the lease-lost signal must fire while the database stays down");
    assert!(
        matches!(state, LeaseState::Lost(_)),
        "expected Lost, got {state:?}"
    );
    let noticed = Instant::now();
    assert!(
        noticed <= deadline + Duration::from_millis(500),
        "lease loss reported {:?} after the validity deadline",
        noticed - deadline
    );
    assert!(
        noticed - killed_at <= ttl,
        "lease loss reported {:?} after the kill; the ttl is {ttl:?}",
        noticed - killed_at
    );
    assert!(matches!(
        guard.sequencer(),
        Err(LockError::LeaseLost { .. })
    ));
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lease_lost_when_the_database_dies() {
    common::trace();
    lease_lost_when_the_database_dies(SqlServer::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_lease_lost_when_the_database_dies() {
    common::trace();
    lease_lost_when_the_database_dies(SqlServer::mariadb()).await;
}

/// On PostgreSQL a waiter in another client (its own pool and LISTEN
/// connection, as in another process) is woken by the release's NOTIFY: the
/// hand-off takes far less than the holder's 30 s lease and the waiter's
/// 5 s fallback re-check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_waiter_in_another_client_is_woken_by_notify() {
    common::trace();
    let server = SqlServer::postgres();
    let (holder_client, waiter_client) =
        (common::client(&server).await, common::client(&server).await);
    let options = common::options(Duration::from_secs(30));
    let holder = holder_client
        .session(options.clone())
        .await
        .expect("session");
    let waiter = waiter_client.session(options).await.expect("session");
    let lock = name("orders/notify");

    let held = holder
        .acquire(&lock, Mode::Exclusive)
        .await
        .expect("acquire");
    let waiting = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let guard = waiter.acquire(&lock, Mode::Exclusive).await?;
            Ok::<_, LockError>((Instant::now(), guard))
        })
    };
    // Wait until the waiter's queue entry is in the table: then it sleeps.
    let queued = Instant::now() + Duration::from_secs(20);
    while server
        .query("SELECT count(*) FROM palisade_waiters")
        .expect("count waiters")
        != "1"
    {
        assert!(Instant::now() < queued, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the waiter settle into its sleep.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "granted while the lock was held");

    let released_at = Instant::now();
    held.release().await.expect("release");
    let (granted_at, guard) = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiter must be granted")
        .expect("the waiter task")
        .expect("the waiter's acquire");
    let handoff = granted_at - released_at;
    println!("hand-off across clients by NOTIFY: {handoff:?}");
    assert!(
        handoff < Duration::from_millis(2500),
        "hand-off took {handoff:?}: the waiter was not woken by NOTIFY (its fallback re-check is 5 s)"
    );
    guard.release().await.expect("release");
}

/// A waiter in another client on MariaDB, which has no notifications, is
/// granted within its bounded back-off after the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_waiter_in_another_client_is_granted_after_release() {
    common::trace();
    let server = SqlServer::mariadb();
    let (holder_client, waiter_client) =
        (common::client(&server).await, common::client(&server).await);
    let options = common::options(Duration::from_secs(30));
    let holder = holder_client
        .session(options.clone())
        .await
        .expect("session");
    let waiter = waiter_client.session(options).await.expect("session");
    let lock = name("orders/poll");
    let held = holder
        .acquire(&lock, Mode::Exclusive)
        .await
        .expect("acquire");
    let waiting = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let guard = waiter.acquire(&lock, Mode::Exclusive).await?;
            Ok::<_, LockError>((Instant::now(), guard))
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "granted while the lock was held");
    let released_at = Instant::now();
    held.release().await.expect("release");
    let (granted_at, guard) = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiter must be granted")
        .expect("the waiter task")
        .expect("the waiter's acquire");
    let handoff = granted_at - released_at;
    println!("hand-off across clients by back-off: {handoff:?}");
    assert!(
        handoff < Duration::from_millis(2500),
        "hand-off took {handoff:?}"
    );
    guard.release().await.expect("release");
}

/// The live check answers from the tables: `Held` for the current hold,
/// `NotHeld` once it is released or its session's lease ended.
async fn live_check_follows_the_tables(server: SqlServer) {
    let client = common::client(&server).await;
    let check = SqlLiveCheck::connect(SqlConfig::new(server.url()))
        .await
        .expect("connect the live check");
    let session = client
        .session(common::options(Duration::from_secs(5)))
        .await
        .expect("session");
    let lock = name("catalog/live");

    let guard = session
        .acquire(&lock, Mode::Exclusive)
        .await
        .expect("acquire");
    let current = guard.sequencer().expect("valid");
    assert_eq!(check.check(&current).await.expect("check"), Liveness::Held);
    guard.release().await.expect("release");
    assert_eq!(
        check.check(&current).await.expect("check"),
        Liveness::NotHeld
    );

    let guard = session
        .acquire(&lock, Mode::Exclusive)
        .await
        .expect("acquire");
    let sequencer = guard.sequencer().expect("valid");
    assert_eq!(
        check.check(&sequencer).await.expect("check"),
        Liveness::Held
    );
    session.expire_session().await.expect("expire the session");
    assert_eq!(
        check.check(&sequencer).await.expect("check"),
        Liveness::NotHeld,
        "a hold whose session ended is not held"
    );
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_live_check_follows_the_tables() {
    live_check_follows_the_tables(SqlServer::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_live_check_follows_the_tables() {
    live_check_follows_the_tables(SqlServer::mariadb()).await;
}

/// Clients starting together on an empty database all connect: their
/// first-time migrations take turns instead of colliding on the catalog
/// ("relation already exists" on PostgreSQL). Several rounds, the tables
/// dropped between them, each with a crowd of clients at once.
async fn clients_starting_together_all_create_the_tables(server: SqlServer) {
    const ROUNDS: usize = 8;
    const CLIENTS: usize = 8;
    for round in 0..ROUNDS {
        let mut connects = tokio::task::JoinSet::new();
        for _ in 0..CLIENTS {
            connects.spawn(SqlLockClient::connect(SqlConfig::new(server.url())));
        }
        while let Some(outcome) = connects.join_next().await {
            if let Err(error) = outcome.expect("a connect task") {
                panic!("round {round}: {error}");
            }
        }
        server
            .query(
                "DROP TABLE palisade_schema, palisade_locks, palisade_sessions, \
                 palisade_holders, palisade_waiters",
            )
            .expect("drop the tables for the next round");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_clients_starting_together_all_create_the_tables() {
    common::trace();
    clients_starting_together_all_create_the_tables(SqlServer::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_clients_starting_together_all_create_the_tables() {
    common::trace();
    clients_starting_together_all_create_the_tables(SqlServer::mariadb()).await;
}

/// Tables written by a newer schema are refused with a clear error, and
/// nothing is changed in them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused() {
    let server = SqlServer::postgres();
    drop(common::client(&server).await);
    server
        .query("UPDATE palisade_schema SET version = 99")
        .expect("pretend a newer Palisade created the tables");
    match SqlLockClient::connect(SqlConfig::new(server.url())).await {
        Err(SqlLockError::SchemaTooNew { found: 99, known }) => assert!(known < 99),
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    assert_eq!(
        server.query("SELECT version FROM palisade_schema").unwrap(),
        "99"
    );
}

/// With a signer, every sequencer handed out (fresh grant and re-entry)
/// carries the signer's issuer and verifies under its key; the live check of
/// a signed client answers `NotHeld` for a sequencer of another issuer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequencers_are_signed_with_the_configured_signer() {
    use palisade_core::{Signer, SigningKey, Verifier};

    let server = SqlServer::postgres();
    let key = || SigningKey::new("k1", [7u8; 32]).expect("a valid key");
    let signer = Signer::new("sql-signing-test", key()).expect("a valid issuer");
    let config = SqlConfig::new(server.url()).with_signer(signer);
    let client = SqlLockClient::connect(config.clone())
        .await
        .expect("connect");
    let session = client
        .session(common::options(Duration::from_secs(5)))
        .await
        .expect("session");
    let verifier = Verifier::new()
        .with_key(key())
        .expect("one key")
        .with_issuer("sql-signing-test")
        .expect("a valid issuer");

    let lock = name("payments/signed");
    let guard = session
        .acquire(&lock, Mode::Exclusive)
        .await
        .expect("acquire");
    let again = session
        .acquire(&lock, Mode::Exclusive)
        .await
        .expect("re-entry");
    for sequencer in [
        guard.sequencer().expect("valid"),
        again.sequencer().expect("valid"),
    ] {
        assert_eq!(sequencer.issuer(), Some("sql-signing-test"));
        verifier
            .verify(&sequencer)
            .expect("a sequencer of the signer verifies");
    }

    let check = SqlLiveCheck::connect(config).await.expect("live check");
    let ours = guard.sequencer().expect("valid");
    assert_eq!(check.check(&ours).await.expect("check"), Liveness::Held);
    let foreign = ours
        .clone()
        .without_signature()
        .with_issuer("someone-else")
        .expect("a valid issuer");
    assert_eq!(
        check.check(&foreign).await.expect("check"),
        Liveness::NotHeld
    );
    again.release().await.expect("release");
    guard.release().await.expect("release");
}

/// A release that fails because the database is down is retried in the
/// background once it is back: the holder's session stays alive (its lease
/// outlives the outage), so without the retry its row would block the lock
/// for the rest of the session's life.
async fn failed_release_is_retried(mut server: SqlServer) {
    let client = common::client(&server).await;
    let options = common::options(Duration::from_secs(30));
    let (holder, next) = (
        client.session(options.clone()).await.expect("session"),
        client.session(options).await.expect("session"),
    );
    let lock = name("reports/outage");
    let guard = holder
        .acquire(&lock, Mode::Exclusive)
        .await
        .expect("acquire");

    server.kill().expect("kill -9 the database");
    assert!(
        guard.release().await.is_err(),
        "a release with the database down must report an error"
    );
    server.restart().expect("restart the database");

    let taken = next
        .acquire_timeout(&lock, Mode::Exclusive, Duration::from_secs(15))
        .await
        .expect("the lock must be free once the failed release was retried");
    taken.release().await.expect("release");
    drop(holder);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_failed_release_is_retried() {
    common::trace();
    failed_release_is_retried(SqlServer::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_failed_release_is_retried() {
    common::trace();
    failed_release_is_retried(SqlServer::mariadb()).await;
}

/// A waiter whose process died (its session row expired, nobody left to
/// clean up) never blocks the queue: the next grant skips it and deletes
/// its row.
async fn a_dead_waiter_is_skipped(server: SqlServer) {
    let client = common::client(&server).await;
    let session = client
        .session(common::options(Duration::from_secs(5)))
        .await
        .expect("session");
    server
        .query(
            "INSERT INTO palisade_sessions (id, expires_at_us, lock_delay_us, ended) \
             VALUES ('dead-process', 1, 0, 0)",
        )
        .expect("a session that expired long ago");
    server
        .query(
            "INSERT INTO palisade_waiters (name, session_id, mode) \
             VALUES ('queue/ghost', 'dead-process', 'exclusive')",
        )
        .expect("its waiter row, left behind");

    let guard = session
        .try_acquire(&name("queue/ghost"), Mode::Exclusive)
        .await
        .expect("try_acquire")
        .expect("a dead waiter must not hold up the queue");
    assert_eq!(
        server
            .query("SELECT count(*) FROM palisade_waiters")
            .expect("count waiters"),
        "0",
        "the dead waiter's row is deleted"
    );
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_dead_waiter_is_skipped() {
    a_dead_waiter_is_skipped(SqlServer::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_a_dead_waiter_is_skipped() {
    a_dead_waiter_is_skipped(SqlServer::mariadb()).await;
}

/// On PostgreSQL a release wakes every waiting client, but only the head of
/// the queue runs a grant transaction: the others see, in one unlocked
/// read, that a live waiter is still ahead of them and sleep on. (Each of
/// them used to run a grant transaction, queued on the lock row in front
/// of the head's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_release_sends_only_the_head_waiter_into_a_grant() {
    const WAITERS: usize = 6;
    common::trace();
    let server = SqlServer::postgres();
    let options = common::options(Duration::from_secs(30));
    let holder_client = common::client(&server).await;
    let holder = holder_client
        .session(options.clone())
        .await
        .expect("session");
    let lock = name("orders/head-only");
    let held = holder
        .acquire(&lock, Mode::Exclusive)
        .await
        .expect("acquire");

    let mut clients = Vec::new();
    let mut waiting = Vec::new();
    for queued in 1..=WAITERS {
        let client = common::client(&server).await;
        let session = client.session(options.clone()).await.expect("session");
        let lock = lock.clone();
        waiting.push(tokio::spawn(async move {
            session.acquire(&lock, Mode::Exclusive).await
        }));
        clients.push(client);
        // One at a time, so the queue order is the order of `clients`.
        let deadline = Instant::now() + Duration::from_secs(20);
        while server
            .query("SELECT count(*) FROM palisade_waiters")
            .expect("count waiters")
            != queued.to_string()
        {
            assert!(Instant::now() < deadline, "waiter {queued} never queued");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let before: Vec<_> = clients.iter().map(|client| client.stats()).collect();

    held.release().await.expect("release");
    let head = waiting.remove(0);
    let head_guard = tokio::time::timeout(Duration::from_secs(20), head)
        .await
        .expect("the head of the queue must be granted")
        .expect("the head's task")
        .expect("the head's acquire");
    // Every other waiter was woken; wait until each has answered its wake-up
    // (skipped or re-checked).
    let answered = |clients: &[SqlLockClient]| -> (u64, u64) {
        clients[1..]
            .iter()
            .zip(&before[1..])
            .map(|(client, before)| {
                let now = client.stats();
                (
                    now.rechecks_skipped - before.rechecks_skipped,
                    now.rechecks - before.rechecks,
                )
            })
            .fold((0, 0), |(s, r), (ds, dr)| (s + ds, r + dr))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let (skipped, rechecked) = loop {
        let (skipped, rechecked) = answered(&clients);
        if skipped + rechecked >= (WAITERS - 1) as u64 {
            break (skipped, rechecked);
        }
        assert!(
            Instant::now() < deadline,
            "the other waiters did not answer the wake-up: {skipped} skipped, {rechecked} re-checked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // At most one re-check from a 5 s fallback that happened to fall here.
    assert!(
        rechecked <= 1,
        "{rechecked} waiters that were not at the head ran a grant transaction ({skipped} skipped)"
    );
    for task in &waiting {
        assert!(!task.is_finished(), "a waiter behind the head was granted");
    }

    // The rest of the queue is still served in order.
    head_guard.release().await.expect("release");
    for task in waiting {
        let guard = tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("every waiter is granted in turn")
            .expect("the waiter's task")
            .expect("the waiter's acquire");
        guard.release().await.expect("release");
    }
}

/// Connections that sat idle in the pool through a `kill -9` and restart
/// are tested before a grant gets one (the pool pings a connection idle for
/// a while): the first acquire after the restart succeeds instead of
/// failing on a connection the dead server cut. Nothing touches the pool
/// during the outage (the keep-alive is 15 s away), so every idle
/// connection is a dead one.
async fn idle_connections_cut_by_a_restart_are_replaced(mut server: SqlServer) {
    let client = common::client(&server).await;
    let session = client
        .session(common::options(Duration::from_secs(60)))
        .await
        .expect("session");
    // Several connections in the pool: holds of different locks at once.
    let mut holds = tokio::task::JoinSet::new();
    for index in 0..4 {
        let session = session.clone();
        holds.spawn(async move {
            let guard = session
                .acquire(&name(&format!("pool/{index}")), Mode::Exclusive)
                .await
                .expect("acquire");
            guard.release().await.expect("release");
        });
    }
    holds.join_all().await;

    server.kill().expect("kill -9 the database");
    server.restart().expect("restart the database");

    let guard = session
        .acquire(&name("pool/after-restart"), Mode::Exclusive)
        .await
        .expect("the first acquire after the restart must not get a dead connection");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_idle_connections_cut_by_a_restart_are_replaced() {
    common::trace();
    idle_connections_cut_by_a_restart_are_replaced(SqlServer::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_idle_connections_cut_by_a_restart_are_replaced() {
    common::trace();
    idle_connections_cut_by_a_restart_are_replaced(SqlServer::mariadb()).await;
}

/// An acquire whose future stops being polled at any point, even inside
/// its grant transaction (its task paused, or a `select!` busy with
/// another branch), holds no lock row meanwhile: the transaction runs to
/// its end on a task of its own. Another session's grant on the same lock
/// answers at once instead of waiting for the stalled future.
async fn an_unpolled_acquire_holds_nobody_back(server: SqlServer) {
    let client = common::client(&server).await;
    let lock = name("ledger/unpolled");
    let open = || client.session(common::options(Duration::from_secs(5)));
    let (holder, waiter, other) = (
        open().await.unwrap(),
        open().await.unwrap(),
        open().await.unwrap(),
    );
    let held = holder
        .acquire(&lock, Mode::Exclusive)
        .await
        .expect("the holder");
    // Polling windows from nothing to well past one grant transaction, in
    // steps far finer than one: some stop inside it.
    for step in 0..80_u64 {
        let polled = Duration::from_micros(100 * step);
        let mut acquire = Box::pin(waiter.acquire(&lock, Mode::Exclusive));
        if tokio::time::timeout(polled, acquire.as_mut()).await.is_ok() {
            panic!("step {step}: granted while another session holds the lock");
        }
        // `acquire` is not polled from here until it is dropped. A
        // try-acquire takes milliseconds; behind a held lock row it would
        // wait for the operation timeout (5 s).
        let answer = tokio::time::timeout(
            Duration::from_secs(4),
            other.try_acquire(&lock, Mode::Exclusive),
        )
        .await
        .unwrap_or_else(|_| {
            panic!(
                "step {step}: a try-acquire waited 4 s behind an acquire left unpolled after \
                 {polled:?}"
            )
        });
        assert!(
            matches!(answer, Ok(None)),
            "step {step}: expected `not granted`, got {answer:?}"
        );
        drop(acquire);
    }
    held.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_unpolled_acquire_holds_nobody_back() {
    common::trace();
    an_unpolled_acquire_holds_nobody_back(SqlServer::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_an_unpolled_acquire_holds_nobody_back() {
    common::trace();
    an_unpolled_acquire_holds_nobody_back(SqlServer::mariadb()).await;
}
