//! The Redis backend against a real `redis-server` (one per test, on a free
//! loopback port): mutual exclusion, owner safety, the seeds' failure
//! sequences, wake-up without polling, the waiter bound, cancellation,
//! re-entry, shared mode, lock-delay, counter loss and recovery, the live
//! check.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use palisade_core::{
    LeaseState, LiveCheck, Liveness, Lock, LockError, LockGuard, LockName, LostReason, Mode,
    Sequencer,
};
use palisade_lock_redis::{GenerationScheme, LockKeys, RedisConfig, RedisLock, RedisLockClient};
use palisade_testkit::process::ChildProcess;
use palisade_testkit::redis::{Persistence, RedisOptions, RedisServer};
use tokio::time::Instant;

use crate::common;
use common::{calls, client, client_with, options, unique_prefix};

fn name(text: &str) -> LockName {
    LockName::new(text).expect("valid lock name")
}

/// Waits (bounded) until `condition` holds. For state that has no event to
/// wait on from outside the process that changes it (a Redis key written by
/// a background task).
async fn eventually(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn text(server: &RedisServer, args: &[&str]) -> String {
    server.command(args).expect("redis command")
}

fn number(server: &RedisServer, args: &[&str]) -> i64 {
    text(server, args).parse().expect("integer reply")
}

// ---------------------------------------------------------------------------
// Mutual exclusion and owner safety.

/// 3 clients (3 connections) x 8 tasks on one lock for 3 seconds: nobody is
/// ever inside together, and generations strictly increase in grant order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_exclusion_three_connections_eight_tasks() {
    common::trace();
    let server = RedisServer::start();
    let prefix = unique_prefix("mutex");
    let lock_name = name("contended");
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(Mutex::new(Vec::new()));
    let run_until = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client =
            client_with(RedisConfig::new(server.url()).with_key_prefix(prefix.clone())).await;
        for _ in 0..8 {
            let session = client.session(options(Duration::from_secs(5))).unwrap();
            let (lock_name, inside, overlaps, granted) = (
                lock_name.clone(),
                inside.clone(),
                overlaps.clone(),
                granted.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut mine = 0;
                while Instant::now() < run_until {
                    let guard = session
                        .acquire_timeout(&lock_name, Mode::Exclusive, Duration::from_secs(20))
                        .await
                        .expect("granted");
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    granted
                        .lock()
                        .unwrap()
                        .push(guard.sequencer().unwrap().generation());
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.expect("release by the owner");
                    mine += 1;
                }
                mine
            }));
        }
    }
    let mut per_task = Vec::new();
    for task in tasks {
        per_task.push(task.await.unwrap());
    }
    let granted = granted.lock().unwrap().clone();
    println!("{} grants in 3 s; per task {per_task:?}", granted.len());
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two holders inside at once"
    );
    assert!(
        granted.windows(2).all(|pair| pair[0] < pair[1]),
        "generations not strictly increasing in grant order"
    );
    assert!(
        per_task.iter().all(|count| *count > 0),
        "a task was never granted: {per_task:?}"
    );
}

/// A holder whose lease lapsed can neither release nor extend the hold of
/// the client that took over; the new holder keeps its lock.
#[tokio::test]
async fn a_lapsed_holder_cannot_release_or_extend_the_new_holders_lock() {
    let server = RedisServer::start();
    let prefix = unique_prefix("owner");
    let config = RedisConfig::new(server.url()).with_key_prefix(prefix);
    let (client_a, client_b) = (client_with(config.clone()).await, client_with(config).await);
    let lock_name = name("owned");
    let session_a = client_a
        .session(options(Duration::from_secs(1)))
        .unwrap()
        .without_watchdog();
    let session_b = client_b.session(options(Duration::from_secs(5))).unwrap();

    let stale = session_a
        .acquire(&lock_name, Mode::Exclusive)
        .await
        .unwrap();
    // B queues and is granted when A's key expires in Redis.
    let current = session_b
        .acquire_timeout(&lock_name, Mode::Exclusive, Duration::from_secs(5))
        .await
        .expect("B is granted after A's TTL");
    assert!(current.generation() > stale.generation());
    let value_before = text(&server, &["GET", client_b.keys(&lock_name).lock()]);
    assert!(value_before.contains(current.lease_id()));

    match stale.extend().await {
        Err(LockError::NotOwner { .. }) => {}
        other => panic!("A extended B's lock: {other:?}"),
    }
    match stale.release().await {
        Err(LockError::NotOwner { .. }) => {}
        other => panic!("A released B's lock: {other:?}"),
    }
    assert_eq!(
        text(&server, &["GET", client_b.keys(&lock_name).lock()]),
        value_before,
        "B's hold changed"
    );
    assert!(current.is_valid());
    assert_eq!(
        client_b
            .live_check()
            .check(&current.sequencer().unwrap())
            .await
            .unwrap(),
        Liveness::Held
    );
    current.extend().await.expect("B extends its own hold");
    current.release().await.expect("B releases its own hold");
}

// ---------------------------------------------------------------------------
// The seeds' failure sequences.

const CHILD_ENV: &str = "PALISADE_REDIS_TEST_CHILD";

/// "Crash between SET and EXPIRE" cannot happen: the lock key is written
/// with its expiry by one script. A holder process killed with SIGKILL
/// right after being granted leaves a key that has a TTL, which lapses by
/// itself, and the next holder gets a higher generation.
#[tokio::test]
async fn a_killed_holder_process_leaves_a_lock_that_expires() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        // Child role: acquire, report, and wait to be killed.
        let mut parts = spec.split('|');
        let (url, prefix, lock) = (
            parts.next().unwrap().to_owned(),
            parts.next().unwrap().to_owned(),
            parts.next().unwrap().to_owned(),
        );
        let client = client_with(RedisConfig::new(url).with_key_prefix(prefix)).await;
        let session = client.session(options(Duration::from_secs(2))).unwrap();
        let guard = session
            .acquire(&name(&lock), Mode::Exclusive)
            .await
            .unwrap();
        println!("PALISADE-CHILD granted {}", guard.generation());
        tokio::time::sleep(Duration::from_secs(60)).await;
        return;
    }
    let server = RedisServer::start();
    let prefix = unique_prefix("crash");
    let lock_name = name("crash");
    let set_before = calls(&server, "set");
    let pexpire_before = calls(&server, "pexpire");

    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "redis_lock::a_killed_holder_process_leaves_a_lock_that_expires",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{}|{prefix}|crash", server.url()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = ChildProcess::spawn("holder", &mut command, None).unwrap();
    let stdout = child.child_mut().stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            // The harness prints "test <name> ... " on the same line.
            .find_map(|line| {
                line.split_once("PALISADE-CHILD granted ")
                    .map(|(_, generation)| generation.trim().to_owned())
            })
    })
    .await
    .unwrap()
    .expect("the child reports its grant");
    let child_generation: u64 = line.parse().unwrap();
    child.kill().unwrap();

    let observer = client_with(RedisConfig::new(server.url()).with_key_prefix(prefix)).await;
    let lock_key = observer.keys(&lock_name).lock().to_owned();
    let pttl = number(&server, &["PTTL", &lock_key]);
    assert!(
        pttl > 0 && pttl <= 2000,
        "the dead holder's key must carry its TTL, PTTL = {pttl}"
    );
    // The key was written by SET ... PX inside the script: no separate
    // expiry command exists that a crash could have skipped.
    assert!(calls(&server, "set") > set_before);
    assert_eq!(
        calls(&server, "pexpire"),
        pexpire_before,
        "an expiry was set apart from the SET"
    );

    let session = observer.session(options(Duration::from_secs(2))).unwrap();
    let next = session
        .acquire_timeout(&lock_name, Mode::Exclusive, Duration::from_secs(6))
        .await
        .expect("the lock frees itself after the dead holder's TTL");
    assert!(next.generation().get() > child_generation);
    next.release().await.unwrap();
}

/// Without the watchdog, a holder that outlives its TTL is told: the lease
/// watch fires (before Redis drops the key, by the safety margin),
/// `sequencer()` refuses, and the next holder gets a higher generation.
#[tokio::test]
async fn without_the_watchdog_a_holder_outliving_its_ttl_is_signalled_lease_lost() {
    let server = RedisServer::start();
    let client = client(&server.url(), "nowatchdog").await;
    let lock_name = name("slow");
    let session = client
        .session(
            palisade_core::SessionOptions::default()
                .with_ttl(Duration::from_secs(2))
                .with_safety_margin(Duration::from_secs(1))
                .with_keepalive_interval(Duration::from_millis(500)),
        )
        .unwrap()
        .without_watchdog();
    let granted_at = Instant::now();
    let guard = session.acquire(&lock_name, Mode::Exclusive).await.unwrap();
    let mut lease = guard.lease();
    let state = tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("lease lost within the TTL");
    let lost_after = granted_at.elapsed();
    assert_eq!(state, LeaseState::Lost(LostReason::Expired));
    assert!(
        lost_after < Duration::from_secs(2),
        "signalled after the TTL: {lost_after:?}"
    );
    // Signalled early: Redis still has the key (the margin is 1 s).
    let pttl = number(&server, &["PTTL", client.keys(&lock_name).lock()]);
    println!("lease lost after {lost_after:?}; Redis still had {pttl} ms");
    assert!(matches!(
        guard.sequencer(),
        Err(LockError::LeaseLost { .. })
    ));

    let other = client.session(options(Duration::from_secs(2))).unwrap();
    let next = other
        .acquire_timeout(&lock_name, Mode::Exclusive, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(next.generation() > guard.generation());
    next.release().await.unwrap();
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotOwner { .. })
    ));
}

/// With the watchdog, a holder working 3x its TTL keeps the lock: nobody
/// else gets it, the lease stays valid, the generation does not change.
#[tokio::test]
async fn with_the_watchdog_a_holder_working_three_ttls_keeps_the_lock() {
    let server = RedisServer::start();
    let client = client(&server.url(), "watchdog").await;
    let lock_name = name("long-job");
    let ttl = Duration::from_secs(1);
    let holder = client.session(options(ttl)).unwrap();
    let prober = client.session(options(ttl)).unwrap();
    let guard = holder.acquire(&lock_name, Mode::Exclusive).await.unwrap();
    let issued = guard.sequencer().unwrap();
    let extends_before = client.stats().extend_calls;
    let work_until = Instant::now() + ttl * 3 + Duration::from_millis(500);
    let mut probes = 0;
    while Instant::now() < work_until {
        assert!(
            prober
                .try_acquire(&lock_name, Mode::Exclusive)
                .await
                .unwrap()
                .is_none(),
            "another session got the lock while the holder worked"
        );
        assert!(guard.is_valid(), "the lease lapsed while the watchdog ran");
        probes += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(probes >= 10);
    assert_eq!(guard.sequencer().unwrap(), issued);
    let extends = client.stats().extend_calls - extends_before;
    assert!(extends >= 6, "only {extends} extensions in 3.5 TTLs");
    guard.release().await.unwrap();
}

/// An extension the server refuses (the key vanished: a clock jump on the
/// Redis host, an operator's DEL, data loss) signals lease lost at once,
/// long before the local deadline.
#[tokio::test]
async fn a_refused_extension_signals_lease_lost_at_once() {
    let server = RedisServer::start();
    let client = client(&server.url(), "refused").await;
    let lock_name = name("vanishing");
    let session = client
        .session(
            palisade_core::SessionOptions::default()
                .with_ttl(Duration::from_secs(30))
                .with_keepalive_interval(Duration::from_millis(200)),
        )
        .unwrap();
    let guard = session.acquire(&lock_name, Mode::Exclusive).await.unwrap();
    let mut lease = guard.lease();
    let deleted_at = Instant::now();
    assert_eq!(number(&server, &["DEL", client.keys(&lock_name).lock()]), 1);
    let state = tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("lease lost soon after the key vanished");
    assert_eq!(state, LeaseState::Lost(LostReason::KeyDeleted));
    println!(
        "lease lost {:?} after the key was deleted",
        deleted_at.elapsed()
    );
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotOwner { .. })
    ));
}

/// An acquire whose reply never came (Redis paused past the response
/// timeout) may have been granted later; the client gives it back by owner
/// token, so the lock is free long before its 30 s TTL.
#[tokio::test]
async fn an_ambiguous_acquire_is_cleaned_up_by_owner_token() {
    let server = RedisServer::spawn(RedisOptions::default());
    let prefix = unique_prefix("ambiguous");
    let config = RedisConfig::new(server.url())
        .with_key_prefix(prefix)
        .with_response_timeout(Duration::from_millis(300));
    let client = client_with(config.clone()).await;
    let lock_name = name("maybe");
    let session = client.session(options(Duration::from_secs(30))).unwrap();

    server.pause().unwrap();
    let started = Instant::now();
    let outcome = session.try_acquire(&lock_name, Mode::Exclusive).await;
    let waited = started.elapsed();
    server.resume().unwrap();
    match outcome {
        Err(LockError::BackendTimeout { .. } | LockError::Unavailable { .. }) => {}
        other => panic!("expected a timeout while Redis was paused, got {other:?}"),
    }
    println!("acquire gave up after {waited:?}");

    // Redis ran the buffered acquire after SIGCONT (a phantom holder); the
    // cleanup releases it.
    let other = client_with(config).await;
    let contender = other.session(options(Duration::from_secs(30))).unwrap();
    let next = contender
        .acquire_timeout(&lock_name, Mode::Exclusive, Duration::from_secs(5))
        .await
        .expect("no phantom holder until the TTL");
    next.release().await.unwrap();
}

// ---------------------------------------------------------------------------
// Waiting: wake-up, the bound, cancellation.

/// A waiter is granted by the holder's release, with no polling: per
/// hand-off Redis sees exactly one script call (the release, which grants
/// and publishes) and one PUBLISH, and the waiter makes no call at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release_without_polling() {
    let server = RedisServer::start();
    let prefix = unique_prefix("wakeup");
    // Re-checks every 30 s at most: any polling would show in the counts.
    let config = RedisConfig::new(server.url())
        .with_key_prefix(prefix)
        .with_waiter_recheck(Duration::from_secs(30));
    let (holder_client, waiter_client) =
        (client_with(config.clone()).await, client_with(config).await);
    let ttl = Duration::from_secs(30);
    let holder = holder_client
        .session(palisade_core::SessionOptions::default().with_ttl(ttl))
        .unwrap();
    let waiter = Arc::new(
        waiter_client
            .session(palisade_core::SessionOptions::default().with_ttl(ttl))
            .unwrap(),
    );
    let lock_name = name("handoff");
    let queue_key = holder_client.keys(&lock_name).queue().to_owned();
    let mut latencies = Vec::new();
    const HANDOFFS: usize = 20;
    for _ in 0..HANDOFFS {
        let held = holder.acquire(&lock_name, Mode::Exclusive).await.unwrap();
        let waiting = {
            let (waiter, lock_name) = (waiter.clone(), lock_name.clone());
            tokio::spawn(async move {
                let guard = waiter.acquire(&lock_name, Mode::Exclusive).await.unwrap();
                (Instant::now(), guard)
            })
        };
        eventually("the waiter is queued", Duration::from_secs(5), || {
            number(&server, &["LLEN", &queue_key]) == 1
        })
        .await;
        let (evalsha_before, publish_before) =
            (calls(&server, "evalsha"), calls(&server, "publish"));
        let released_at = Instant::now();
        held.release().await.unwrap();
        let (granted_at, guard) = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("woken long before the 30 s re-check")
            .unwrap();
        assert_eq!(
            calls(&server, "evalsha") - evalsha_before,
            1,
            "script calls per hand-off"
        );
        assert_eq!(
            calls(&server, "publish") - publish_before,
            1,
            "notifications per hand-off"
        );
        latencies.push(granted_at - released_at);
        guard.release().await.unwrap();
    }
    let stats = waiter_client.stats();
    assert_eq!(stats.handoffs, HANDOFFS as u64);
    assert_eq!(stats.rechecks, 0, "the waiter polled");
    assert_eq!(
        stats.acquire_calls, HANDOFFS as u64,
        "one acquire call per acquisition"
    );
    latencies.sort();
    println!(
        "release -> waiter granted: p50 {:?}, max {:?}",
        latencies[HANDOFFS / 2],
        latencies[HANDOFFS - 1]
    );
}

/// A grant notice is acted on only if it proves the waiter's secret owner
/// token: a message published to the waiter's inbox with its (public)
/// lease id and a made-up proof grants nothing, and the real hand-off that
/// follows does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_grant_notice_is_not_acted_on() {
    let server = RedisServer::start();
    let prefix = unique_prefix("forged");
    let config = RedisConfig::new(server.url()).with_key_prefix(prefix);
    let (holder_client, waiter_client) =
        (client_with(config.clone()).await, client_with(config).await);
    let ttl = Duration::from_secs(30);
    let holder = holder_client.session(options(ttl)).unwrap();
    let waiter = waiter_client.session(options(ttl)).unwrap();
    let lock_name = name("forged");
    let keys = holder_client.keys(&lock_name);
    let held = holder.acquire(&lock_name, Mode::Exclusive).await.unwrap();
    let held_generation = held.issued().generation().get();
    let mut waiting = {
        let lock_name = lock_name.clone();
        tokio::spawn(async move { waiter.acquire(&lock_name, Mode::Exclusive).await })
    };
    eventually("the waiter is queued", Duration::from_secs(5), || {
        number(&server, &["LLEN", keys.queue()]) == 1
    })
    .await;
    // The entry: "<deadline> x <ttl> <delay> <lease id> <holder id> <inbox>".
    let entry = text(&server, &["HVALS", keys.waiters()]);
    let fields: Vec<&str> = entry.split_whitespace().collect();
    let (lease, channel) = (fields[4], fields[6]);
    let forged_generation = held_generation + 1;
    let forged = format!("{lease} granted {forged_generation} 1 {}", "0".repeat(40));
    assert_eq!(
        number(&server, &["PUBLISH", channel, &forged]),
        1,
        "the inbox hears it"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut waiting)
            .await
            .is_err(),
        "the waiter acted on a forged grant"
    );
    held.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("granted by the real hand-off")
        .unwrap()
        .unwrap();
    assert!(guard.issued().generation().get() > held_generation);
    assert_eq!(waiter_client.stats().handoffs, 1);
    guard.release().await.unwrap();
}

/// The per-process waiter bound fails fast with `Busy`, counts only
/// waiters, and frees a place when a waiter gives up.
#[tokio::test]
async fn the_waiter_bound_fails_fast_with_busy() {
    let server = RedisServer::start();
    let client = client(&server.url(), "busy").await;
    let lock_name = name("popular");
    let bounded = options(Duration::from_secs(5)).with_max_waiters(2);
    let holder = client.session(bounded.clone()).unwrap();
    let held = holder.acquire(&lock_name, Mode::Exclusive).await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let session = client.session(bounded.clone()).unwrap();
        let lock_name = lock_name.clone();
        waiters.push(tokio::spawn(async move {
            session.acquire(&lock_name, Mode::Exclusive).await
        }));
    }
    let queue_key = client.keys(&lock_name).queue().to_owned();
    eventually("two waiters queued", Duration::from_secs(5), || {
        number(&server, &["LLEN", &queue_key]) == 2
    })
    .await;
    let third = client.session(bounded.clone()).unwrap();
    let started = Instant::now();
    match third.acquire(&lock_name, Mode::Exclusive).await {
        Err(LockError::Busy { waiters: 2, .. }) => {}
        other => panic!("expected Busy, got {other:?}"),
    }
    println!("Busy after {:?}", started.elapsed());
    // try_acquire does not wait, so the bound does not apply.
    assert!(
        third
            .try_acquire(&lock_name, Mode::Exclusive)
            .await
            .unwrap()
            .is_none()
    );

    // One waiter gives up: there is room again.
    waiters.pop().unwrap().abort();
    eventually(
        "the abandoned waiter leaves the queue",
        Duration::from_secs(5),
        || number(&server, &["LLEN", &queue_key]) == 1,
    )
    .await;
    match third
        .acquire_timeout(&lock_name, Mode::Exclusive, Duration::from_millis(300))
        .await
    {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("expected a Timeout (queued, then gave up), got {other:?}"),
    }
    held.release().await.unwrap();
    let first = waiters.pop().unwrap().await.unwrap().unwrap();
    first.release().await.unwrap();
}

/// Settles `client` and asserts no waiter of `keys`' lock is left.
async fn settled_with_nobody_queued(
    client: &RedisLockClient,
    server: &RedisServer,
    keys: &LockKeys,
    what: &str,
) {
    client.settle().await;
    let queued = (
        number(server, &["LLEN", keys.queue()]),
        number(server, &["HLEN", keys.waiters()]),
    );
    assert_eq!(queued, (0, 0), "{what}: settled with an entry still there");
}

/// `settle` waits for a clean-up that cannot finish yet: a waiter dropped
/// while Redis is stopped leaves its entry until Redis answers again, and
/// `settle` returns only after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_waits_for_a_cleanup_redis_has_not_answered() {
    let server = RedisServer::start();
    let client = client(&server.url(), "settle").await;
    let (lock, sessions) = (name("settled"), options(Duration::from_secs(30)));
    let held = client
        .session(sessions.clone())
        .unwrap()
        .acquire(&lock, Mode::Exclusive)
        .await
        .unwrap();
    let quitter = client.session(sessions).unwrap();
    let queue = client.keys(&lock).queue().to_owned();
    let waiting = {
        let lock = lock.clone();
        tokio::spawn(async move { quitter.acquire(&lock, Mode::Exclusive).await })
    };
    eventually("queued", Duration::from_secs(5), || {
        number(&server, &["LLEN", &queue]) == 1
    })
    .await;
    server.pause().unwrap();
    waiting.abort();
    let _ = waiting.await;
    assert!(
        tokio::time::timeout(Duration::from_millis(500), client.settle())
            .await
            .is_err(),
        "settled while the dropped waiter's entry could not be removed"
    );
    server.resume().unwrap();
    client.settle().await;
    assert_eq!(
        number(&server, &["LLEN", &queue]),
        0,
        "settled with the entry still queued"
    );
    held.release().await.unwrap();
}

/// A waiter that gives up (timeout, dropped future) leaves nothing in
/// Redis; a waiter dropped while the lock is being handed to it gives the
/// grant back, so the lock never sits with a waiter that is gone. Both
/// happen in the background, and `settle` returns once they are done (a
/// process that settles before it exits leaves nothing behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_leaves_no_entry_and_no_grant_behind() {
    let server = RedisServer::start();
    let client = client(&server.url(), "cancel").await;
    let lock_name = name("cancelled");
    let keys = client.keys(&lock_name);
    let ttl = Duration::from_secs(30);
    let holder = client.session(options(ttl)).unwrap();
    let quitter = client.session(options(ttl)).unwrap();
    let newcomer = client.session(options(ttl)).unwrap();

    let held = holder.acquire(&lock_name, Mode::Exclusive).await.unwrap();
    match quitter
        .acquire_timeout(&lock_name, Mode::Exclusive, Duration::from_millis(300))
        .await
    {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("expected Timeout, got {other:?}"),
    }
    // The entry is removed in the background; `settle` waits for it.
    settled_with_nobody_queued(&client, &server, &keys, "the timed-out waiter").await;
    let publish_before = calls(&server, "publish");
    held.release().await.unwrap();
    assert_eq!(
        calls(&server, "publish"),
        publish_before,
        "a grant went to a waiter that is gone"
    );
    let taken = newcomer
        .try_acquire(&lock_name, Mode::Exclusive)
        .await
        .unwrap();
    taken
        .expect("free right after the release")
        .release()
        .await
        .unwrap();

    // Races between a hand-off and the waiter going away.
    for round in 0..20 {
        let held = holder.acquire(&lock_name, Mode::Exclusive).await.unwrap();
        let waiting = {
            let (quitter, lock_name) = (quitter.clone(), lock_name.clone());
            tokio::spawn(async move { quitter.acquire(&lock_name, Mode::Exclusive).await })
        };
        eventually("the waiter is queued", Duration::from_secs(5), || {
            number(&server, &["LLEN", keys.queue()]) == 1
        })
        .await;
        let release = held.release();
        if round % 2 == 0 {
            waiting.abort();
            release.await.unwrap();
        } else {
            release.await.unwrap();
            waiting.abort();
        }
        let _ = waiting.await;
        settled_with_nobody_queued(&client, &server, &keys, &format!("round {round}")).await;
        // Whether or not the grant reached the waiter before it went away,
        // the lock is free again well before the 30 s TTL.
        let next = newcomer
            .acquire_timeout(&lock_name, Mode::Exclusive, Duration::from_secs(5))
            .await
            .unwrap_or_else(|error| {
                panic!("round {round}: the lock stayed with a gone waiter: {error}")
            });
        next.release().await.unwrap();
    }
    assert_eq!(number(&server, &["LLEN", keys.queue()]), 0);
}

// ---------------------------------------------------------------------------
// Re-entry, shared mode, lock-delay.

/// Re-entry is counted in the session: no Redis call, the same hold and
/// generation, one release on Redis after the last guard.
#[tokio::test]
async fn reentry_is_local_and_keeps_one_hold() {
    let server = RedisServer::start();
    let client = client(&server.url(), "reentry").await;
    let lock_name = name("nested");
    let session = client.session(options(Duration::from_secs(5))).unwrap();
    let outer = session.acquire(&lock_name, Mode::Exclusive).await.unwrap();
    let value = text(&server, &["GET", client.keys(&lock_name).lock()]);
    let evalsha_before = calls(&server, "evalsha");
    let inner = session.acquire(&lock_name, Mode::Exclusive).await.unwrap();
    let tried = session
        .try_acquire(&lock_name, Mode::Exclusive)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        calls(&server, "evalsha"),
        evalsha_before,
        "re-entry went to Redis"
    );
    assert_eq!(inner.sequencer().unwrap(), outer.sequencer().unwrap());
    assert_eq!(tried.generation(), outer.generation());
    assert!(matches!(
        session.acquire(&lock_name, Mode::Shared).await,
        Err(LockError::ModeConflict {
            held: Mode::Exclusive,
            requested: Mode::Shared,
            ..
        })
    ));
    outer.release().await.unwrap();
    tried.release().await.unwrap();
    assert_eq!(
        text(&server, &["GET", client.keys(&lock_name).lock()]),
        value
    );
    inner.release().await.unwrap();
    assert_eq!(text(&server, &["GET", client.keys(&lock_name).lock()]), "");
}

/// Shared holders each get their own generation; a writer queued behind
/// them gets one above all of theirs; a shared holder that expires with a
/// lock-delay keeps the writer out for that delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_holders_have_their_own_generations_and_delay_writers() {
    let server = RedisServer::start();
    let client = client(&server.url(), "shared").await;
    let lock_name = name("catalog");
    let ttl = Duration::from_secs(1);
    let reader_one = client.session(options(ttl)).unwrap();
    let reader_two = client
        .session(options(ttl).with_lock_delay(Duration::from_millis(1500)))
        .unwrap()
        .without_watchdog();
    let writer = client.session(options(ttl)).unwrap();

    let one = reader_one.acquire(&lock_name, Mode::Shared).await.unwrap();
    let two = reader_two.acquire(&lock_name, Mode::Shared).await.unwrap();
    assert_ne!(one.generation(), two.generation());
    assert_eq!(
        number(&server, &["ZCARD", client.keys(&lock_name).readers()]),
        2
    );
    let started = Instant::now();
    let waiting = {
        let (writer, lock_name) = (writer.clone(), lock_name.clone());
        tokio::spawn(async move {
            writer
                .acquire_timeout(&lock_name, Mode::Exclusive, Duration::from_secs(10))
                .await
        })
    };
    // Reader one leaves cleanly; reader two's lease (no watchdog) runs out
    // after 1 s and its 1.5 s lock-delay follows.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let one_generation = one.generation();
    one.release().await.unwrap();
    let written = waiting
        .await
        .unwrap()
        .expect("the writer is granted after the delay");
    let waited = started.elapsed();
    println!("writer granted after {waited:?}");
    assert!(
        waited >= Duration::from_millis(2300),
        "the writer did not wait out the reader's TTL and lock-delay: {waited:?}"
    );
    assert!(written.generation() > one_generation && written.generation() > two.generation());
    written.release().await.unwrap();
}

/// Lock-delay across clients without any help from the lost holder: its
/// key expires in Redis (no release, no expire script) and the companion
/// shadow key keeps the next client out for the delay.
#[tokio::test]
async fn lock_delay_applies_after_a_natural_expiry() {
    let server = RedisServer::start();
    let prefix = unique_prefix("delay");
    let config = RedisConfig::new(server.url()).with_key_prefix(prefix);
    let (lost_client, next_client) = (client_with(config.clone()).await, client_with(config).await);
    let lock_name = name("delayed");
    let delay = Duration::from_millis(1500);
    let lost = lost_client
        .session(options(Duration::from_secs(1)).with_lock_delay(delay))
        .unwrap()
        .without_watchdog();
    let next = next_client
        .session(options(Duration::from_secs(1)))
        .unwrap();
    let granted_at = Instant::now();
    let guard = lost.acquire(&lock_name, Mode::Exclusive).await.unwrap();
    let taken = next
        .acquire_timeout(&lock_name, Mode::Exclusive, Duration::from_secs(10))
        .await
        .unwrap();
    let waited = granted_at.elapsed();
    println!("granted {waited:?} after the lost holder's grant (TTL 1 s + delay 1.5 s)");
    assert!(
        waited >= Duration::from_millis(2400),
        "lock-delay not applied: {waited:?}"
    );
    assert!(taken.generation() > guard.generation());
    taken.release().await.unwrap();
}

// ---------------------------------------------------------------------------
// Generations after Redis lost its data.

async fn grant_generations(session: &RedisLock, lock_name: &LockName, count: usize) -> u64 {
    let mut last = 0;
    for _ in 0..count {
        let guard = session.acquire(lock_name, Mode::Exclusive).await.unwrap();
        assert!(guard.generation().get() > last);
        last = guard.generation().get();
        guard.release().await.unwrap();
    }
    last
}

/// Redis restarted without persistence loses the counter; with the default
/// server-clock scheme the next generations are still above every one
/// issued before, for the old client and for a fresh one.
#[tokio::test]
async fn after_a_restart_without_persistence_generations_keep_increasing() {
    let mut server = RedisServer::spawn(RedisOptions::persistence(Persistence::None));
    let prefix = unique_prefix("restart");
    let config = RedisConfig::new(server.url()).with_key_prefix(prefix);
    let old_client = client_with(config.clone()).await;
    let lock_name = name("survivor");
    let session = old_client.session(options(Duration::from_secs(5))).unwrap();
    let before = grant_generations(&session, &lock_name, 5).await;

    server.kill().unwrap();
    server.restart().unwrap();
    let mut counter = old_client.generation_counter(&lock_name).await;
    for _ in 0..50 {
        match &counter {
            Err(error) if error.is_transient() => {
                // The client reconnects in the background.
                tokio::time::sleep(Duration::from_millis(100)).await;
                counter = old_client.generation_counter(&lock_name).await;
            }
            _ => break,
        }
    }
    assert_eq!(counter.unwrap(), None, "the counter was lost");

    let fresh = client_with(config).await;
    let fresh_session = fresh.session(options(Duration::from_secs(5))).unwrap();
    let after_fresh = grant_generations(&fresh_session, &lock_name, 2).await;
    assert!(
        after_fresh > before,
        "fresh client: {after_fresh} <= {before}"
    );
    // The old client reconnects by itself.
    let mut after_old = 0;
    for _ in 0..50 {
        match session.acquire(&lock_name, Mode::Exclusive).await {
            Ok(guard) => {
                after_old = guard.generation().get();
                guard.release().await.unwrap();
                break;
            }
            Err(error) => {
                assert!(
                    error.is_transient(),
                    "unexpected error after the restart: {error}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert!(
        after_old > after_fresh,
        "old client: {after_old} <= {after_fresh}"
    );
}

/// With the plain counter scheme a restart without persistence sends the
/// counter back to 1. A client that saw higher generations refuses the
/// regression (and lifts the counter), and for a client that did not, the
/// recovery path is `raise_floor` with the resource server's mark.
#[tokio::test]
async fn a_counter_lost_with_redis_is_refused_and_recovered_with_raise_floor() {
    let mut server = RedisServer::spawn(RedisOptions::persistence(Persistence::None));
    let prefix = unique_prefix("counter");
    let config = RedisConfig::new(server.url())
        .with_key_prefix(prefix)
        .with_generation_scheme(GenerationScheme::Counter);
    let client = client_with(config.clone()).await;
    let lock_name = name("counted");
    let session = client.session(options(Duration::from_secs(5))).unwrap();
    let mark = grant_generations(&session, &lock_name, 5).await;
    assert_eq!(mark, 5, "the counter scheme counts from 1");

    server.kill().unwrap();
    server.restart().unwrap();
    let regression = loop {
        match session.acquire(&lock_name, Mode::Exclusive).await {
            Err(error) if error.is_transient() => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            other => break other,
        }
    };
    match regression {
        Err(LockError::GenerationRegression {
            offered: 1,
            floor: 5,
            ..
        }) => {}
        other => panic!("expected GenerationRegression {{ offered: 1, floor: 5 }}, got {other:?}"),
    }
    let after = session.acquire(&lock_name, Mode::Exclusive).await.unwrap();
    assert!(after.generation().get() > mark);
    let mark = after.generation().get();
    after.release().await.unwrap();

    // A client with no memory of the old generations cannot tell; the
    // resource server refuses its generation 1 with its mark, and
    // raise_floor makes the lock usable again.
    server.kill().unwrap();
    server.restart().unwrap();
    let fresh = client_with(config).await;
    let fresh_session = fresh.session(options(Duration::from_secs(5))).unwrap();
    let low = fresh_session
        .acquire(&lock_name, Mode::Exclusive)
        .await
        .unwrap();
    assert_eq!(
        low.generation().get(),
        1,
        "below the mark: a resource server refuses it"
    );
    low.release().await.unwrap();
    assert_eq!(fresh.raise_floor(&lock_name, mark).await.unwrap(), mark);
    assert_eq!(
        fresh.raise_floor(&lock_name, 2).await.unwrap(),
        mark,
        "raise_floor lowered the counter"
    );
    let recovered = fresh_session
        .acquire(&lock_name, Mode::Exclusive)
        .await
        .unwrap();
    assert_eq!(recovered.generation().get(), mark + 1);
    recovered.release().await.unwrap();
    assert!(
        fresh.raise_floor(&lock_name, u64::MAX).await.is_err(),
        "a forged mark was accepted"
    );
}

/// With AOF `appendfsync always` the counter survives `kill -9`.
#[tokio::test]
async fn with_aof_always_the_counter_survives_kill_9() {
    let mut server = RedisServer::spawn(RedisOptions::persistence(Persistence::AofAlways));
    let prefix = unique_prefix("aof");
    let config = RedisConfig::new(server.url())
        .with_key_prefix(prefix)
        .with_generation_scheme(GenerationScheme::Counter);
    let lock_name = name("durable");
    {
        let client = client_with(config.clone()).await;
        let session = client.session(options(Duration::from_secs(5))).unwrap();
        assert_eq!(grant_generations(&session, &lock_name, 5).await, 5);
    }
    server.kill().unwrap();
    server.restart().unwrap();
    let client = client_with(config).await;
    assert_eq!(
        client.generation_counter(&lock_name).await.unwrap(),
        Some(5)
    );
    let session = client.session(options(Duration::from_secs(5))).unwrap();
    assert_eq!(grant_generations(&session, &lock_name, 1).await, 6);
}

// ---------------------------------------------------------------------------
// Live check, scripts, configuration.

/// The live check says `Held` exactly for the current hold.
#[tokio::test]
async fn the_live_check_recognises_exactly_the_current_hold() {
    let mut server = RedisServer::spawn(RedisOptions::default());
    let client = client(&server.url(), "live").await;
    let check = client.live_check();
    let lock_name = name("checked");
    let session = client.session(options(Duration::from_secs(5))).unwrap();
    let guard = session.acquire(&lock_name, Mode::Exclusive).await.unwrap();
    let current = guard.sequencer().unwrap();
    assert_eq!(check.check(&current).await.unwrap(), Liveness::Held);
    assert_eq!(current.issuer(), Some(client.issuer()));
    assert!(current.holder().is_some() && current.lease().is_some());

    let older = Sequencer::new(
        lock_name.clone(),
        Mode::Exclusive,
        palisade_core::Generation::new(current.generation().get() - 1).unwrap(),
    )
    .with_issuer(client.issuer())
    .unwrap();
    assert_eq!(check.check(&older).await.unwrap(), Liveness::NotHeld);
    let foreign = Sequencer::new(lock_name.clone(), Mode::Exclusive, current.generation())
        .with_issuer("another-deployment")
        .unwrap();
    assert_eq!(check.check(&foreign).await.unwrap(), Liveness::NotHeld);
    let wrong_lease = Sequencer::new(lock_name.clone(), Mode::Exclusive, current.generation())
        .with_lease("0000000000000000")
        .unwrap();
    assert_eq!(check.check(&wrong_lease).await.unwrap(), Liveness::NotHeld);
    let as_shared = Sequencer::new(lock_name.clone(), Mode::Shared, current.generation());
    assert_eq!(check.check(&as_shared).await.unwrap(), Liveness::NotHeld);
    guard.release().await.unwrap();
    assert_eq!(check.check(&current).await.unwrap(), Liveness::NotHeld);

    let reader = session.acquire(&lock_name, Mode::Shared).await.unwrap();
    let shared = reader.sequencer().unwrap();
    assert_eq!(check.check(&shared).await.unwrap(), Liveness::Held);
    reader.release().await.unwrap();
    assert_eq!(check.check(&shared).await.unwrap(), Liveness::NotHeld);

    // A Redis that cannot be asked is an error, never "not held".
    server.kill().unwrap();
    assert!(check.check(&shared).await.is_err());
}

/// An empty script cache (restart, failover, SCRIPT FLUSH) costs one EVAL
/// per script, not a failure.
#[tokio::test]
async fn an_empty_script_cache_falls_back_to_eval() {
    let server = RedisServer::start();
    let client = client(&server.url(), "noscript").await;
    let lock_name = name("flushed");
    let session = client.session(options(Duration::from_secs(5))).unwrap();
    assert_eq!(text(&server, &["SCRIPT", "FLUSH"]), "OK");
    let eval_before = calls(&server, "eval");
    let guard = session.acquire(&lock_name, Mode::Exclusive).await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(
        calls(&server, "eval") - eval_before,
        2,
        "one EVAL for acquire, one for release"
    );
    let evalsha_before = calls(&server, "evalsha");
    let guard = session.acquire(&lock_name, Mode::Exclusive).await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(
        calls(&server, "evalsha") - evalsha_before,
        2,
        "cached again after the EVAL"
    );
    assert_eq!(calls(&server, "eval") - eval_before, 2);
}

/// Bad configuration is refused before connecting; an unreachable Redis is
/// a typed error, not a panic.
#[tokio::test]
async fn bad_configuration_and_unreachable_redis_are_typed_errors() {
    let port = palisade_testkit::process::free_port();
    let unreachable = RedisLockClient::connect(
        RedisConfig::new(format!("redis://127.0.0.1:{port}"))
            .with_connect_timeout(Duration::from_millis(500)),
    )
    .await;
    assert!(
        matches!(
            unreachable,
            Err(palisade_lock_redis::RedisLockError::Lock(
                LockError::Unavailable { .. } | LockError::BackendTimeout { .. }
            ))
        ),
        "{unreachable:?}"
    );
    assert!(matches!(
        RedisLockClient::connect(RedisConfig::new("redis://x").with_key_prefix("a{b}")).await,
        Err(palisade_lock_redis::RedisLockError::InvalidConfig { .. })
    ));
    assert!(matches!(
        RedisLockClient::connect(RedisConfig::new("not a url")).await,
        Err(palisade_lock_redis::RedisLockError::InvalidUrl { .. })
    ));
    let server = RedisServer::start();
    let client = client(&server.url(), "config").await;
    assert!(matches!(
        client.session(
            palisade_core::SessionOptions::default()
                .with_ttl(Duration::from_secs(1))
                .with_safety_margin(Duration::from_secs(2))
        ),
        Err(palisade_lock_redis::RedisLockError::InvalidConfig { .. })
    ));
}

/// Consecutive shared waiters are granted together by one release; the
/// grants reach one client in any order, and none is mistaken for a
/// generation regression.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_of_shared_grants_to_one_client_is_not_a_regression() {
    let server = RedisServer::start();
    let client = client(&server.url(), "batch").await;
    let lock_name = name("batch");
    let writer = client.session(options(Duration::from_secs(5))).unwrap();
    for round in 0..5 {
        let held = writer.acquire(&lock_name, Mode::Exclusive).await.unwrap();
        let mut readers = Vec::new();
        for _ in 0..6 {
            let session = client.session(options(Duration::from_secs(5))).unwrap();
            let lock_name = lock_name.clone();
            readers.push(tokio::spawn(async move {
                session.acquire(&lock_name, Mode::Shared).await
            }));
        }
        eventually("six readers queued", Duration::from_secs(5), || {
            number(&server, &["LLEN", client.keys(&lock_name).queue()]) == 6
        })
        .await;
        let writer_generation = held.generation();
        held.release().await.unwrap();
        let mut generations = Vec::new();
        for reader in readers {
            let guard = reader
                .await
                .unwrap()
                .unwrap_or_else(|error| panic!("round {round}: a reader failed: {error}"));
            generations.push(guard.generation());
            guard.release().await.unwrap();
        }
        generations.sort();
        generations.dedup();
        assert_eq!(generations.len(), 6, "each reader has its own generation");
        assert!(generations[0] > writer_generation);
    }
}
