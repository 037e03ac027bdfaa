//! Unit tests of the embedded backend, through its public API.
//!
//! Where time is the subject (TTLs, lock-delay) the tests run on tokio's
//! paused clock: the runtime jumps to the next timer whenever every task is
//! idle, so a lease expires at exactly its deadline and the assertions on
//! instants are exact. Where a test needs a request to be queued first, it
//! waits for [`EmbeddedLockClient::waiters`] to show it, yielding to the
//! spawned task in between (no sleeps).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use palisade_core::{
    LeaseState, LiveCheck, Liveness, Lock, LockError, LockGuard, LockName, LostReason, Mode,
    Sequencer, SessionOptions,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::{EmbeddedError, EmbeddedGuard, EmbeddedLock, EmbeddedLockClient};

const TTL: Duration = Duration::from_secs(3);
const MARGIN: Duration = Duration::from_millis(500);
const KEEPALIVE: Duration = Duration::from_secs(1);

fn name(text: &str) -> LockName {
    LockName::new(text).expect("valid test lock name")
}

fn options() -> SessionOptions {
    SessionOptions::default()
        .with_ttl(TTL)
        .with_safety_margin(MARGIN)
        .with_keepalive_interval(KEEPALIVE)
}

fn session(service: &EmbeddedLockClient, options: SessionOptions) -> EmbeddedLock {
    service.session(options).expect("valid session options")
}

/// `N` sessions of `service`, each with [`options`].
fn sessions<const N: usize>(service: &EmbeddedLockClient) -> [EmbeddedLock; N] {
    std::array::from_fn(|_| session(service, options()))
}

/// How long a test waits for something that must happen. On the paused
/// clock a wait this long costs nothing, and turns a hang into a failure.
const PATIENCE: Duration = Duration::from_secs(60);

async fn must_acquire(session: &EmbeddedLock, lock: &LockName, mode: Mode) -> EmbeddedGuard {
    match tokio::time::timeout(PATIENCE, session.acquire(lock, mode)).await {
        Ok(Ok(guard)) => guard,
        Ok(Err(error)) => panic!("acquire {lock} {mode}: {error}"),
        Err(_) => panic!("acquire {lock} {mode}: not granted within {PATIENCE:?}"),
    }
}

/// The answer of a spawned `acquire`, which must come within [`PATIENCE`].
async fn answer(
    task: JoinHandle<Result<EmbeddedGuard, LockError>>,
    what: &str,
) -> Result<EmbeddedGuard, LockError> {
    match tokio::time::timeout(PATIENCE, task).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(error)) => panic!("{what}: the task failed: {error}"),
        Err(_) => panic!("{what}: no answer within {PATIENCE:?}"),
    }
}

/// The final state of a lease, which must end within [`PATIENCE`].
async fn lease_end(guard: &EmbeddedGuard) -> LeaseState {
    tokio::time::timeout(PATIENCE, guard.lease().lost())
        .await
        .unwrap_or_else(|_| panic!("the lease of {guard:?} did not end within {PATIENCE:?}"))
}

async fn granted(task: JoinHandle<Result<EmbeddedGuard, LockError>>, what: &str) -> EmbeddedGuard {
    answer(task, what)
        .await
        .unwrap_or_else(|error| panic!("{what}: acquire failed: {error}"))
}

async fn must_try(session: &EmbeddedLock, lock: &LockName, mode: Mode) -> Option<EmbeddedGuard> {
    session
        .try_acquire(lock, mode)
        .await
        .unwrap_or_else(|error| panic!("try_acquire {lock} {mode}: {error}"))
}

/// Spawns `session.acquire(lock, mode)` and waits until the service shows
/// it queued (the queue then has `position` entries).
/// A new service and two sessions of it with the default options.
fn two_sessions() -> (EmbeddedLockClient, EmbeddedLock, EmbeddedLock) {
    let service = EmbeddedLockClient::new();
    let (a, b) = (session(&service, options()), session(&service, options()));
    (service, a, b)
}

async fn spawn_queued(
    service: &EmbeddedLockClient,
    session: &EmbeddedLock,
    lock: &LockName,
    mode: Mode,
    position: usize,
) -> JoinHandle<Result<EmbeddedGuard, LockError>> {
    let session = session.clone();
    let task_lock = lock.clone();
    let task = tokio::spawn(async move { session.acquire(&task_lock, mode).await });
    wait_for_waiters(service, lock, position).await;
    task
}

async fn wait_for_waiters(service: &EmbeddedLockClient, lock: &LockName, expected: usize) {
    for _ in 0..10_000 {
        if service.waiters(lock) == expected {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!(
        "expected {expected} waiters on {lock}, found {}",
        service.waiters(lock)
    );
}

/// Lets every runnable task run, so that a waiter that *could* have been
/// granted would have been.
async fn settle() {
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_exclusion_under_many_contending_tasks() {
    const TASKS: usize = 8;
    const ROUNDS: usize = 50;
    let service = EmbeddedLockClient::new();
    let lock = name("contended");
    let inside = Arc::new(AtomicUsize::new(0));
    let granted_generations = Arc::new(Mutex::new(Vec::new()));
    let max_queue = Arc::new(AtomicUsize::new(0));

    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let session = session(&service, SessionOptions::default());
        let (service, lock) = (service.clone(), lock.clone());
        let (inside, granted_generations, max_queue) = (
            inside.clone(),
            granted_generations.clone(),
            max_queue.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = must_acquire(&session, &lock, Mode::Exclusive).await;
                let holders_before = inside.fetch_add(1, Ordering::SeqCst);
                assert_eq!(holders_before, 0, "two holders inside the critical section");
                granted_generations
                    .lock()
                    .unwrap()
                    .push(guard.generation().get());
                max_queue.fetch_max(service.waiters(&lock), Ordering::SeqCst);
                tokio::task::yield_now().await;
                assert_eq!(inside.fetch_sub(1, Ordering::SeqCst), 1);
                guard.release().await.expect("release by the owner");
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(PATIENCE, task)
            .await
            .expect("contending tasks finish")
            .expect("contending task");
    }

    let generations = granted_generations.lock().unwrap().clone();
    assert_eq!(generations.len(), TASKS * ROUNDS);
    assert!(
        generations.windows(2).all(|pair| pair[0] < pair[1]),
        "generations not strictly increasing in grant order: {generations:?}"
    );
    assert!(generations[0] >= 1);
    assert!(
        max_queue.load(Ordering::SeqCst) > 0,
        "the tasks never contended; the test proves nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn generations_strictly_increase_in_grant_order() {
    let service = EmbeddedLockClient::new();
    let lock = name("orders/42");
    let [a, b, c] = sessions(&service);
    let mut issued = Vec::new();

    let first = must_acquire(&a, &lock, Mode::Exclusive).await;
    issued.push((Mode::Exclusive, first.generation()));
    first.release().await.unwrap();

    let reader_b = must_acquire(&b, &lock, Mode::Shared).await;
    let reader_c = must_acquire(&c, &lock, Mode::Shared).await;
    issued.push((Mode::Shared, reader_b.generation()));
    issued.push((Mode::Shared, reader_c.generation()));
    drop((reader_b, reader_c));

    // The same session again: not holding → holding mints a new generation.
    for _ in 0..2 {
        let again = must_acquire(&a, &lock, Mode::Exclusive).await;
        issued.push((Mode::Exclusive, again.generation()));
        again.release().await.unwrap();
    }
    let last = must_acquire(&c, &lock, Mode::Exclusive).await;
    issued.push((Mode::Exclusive, last.generation()));

    assert!(issued.iter().all(|(_, generation)| generation.get() >= 1));
    for (index, (mode, generation)) in issued.iter().enumerate() {
        for (earlier_mode, earlier) in &issued[..index] {
            if *mode == Mode::Exclusive || *earlier_mode == Mode::Exclusive {
                assert!(
                    generation > earlier,
                    "{mode} grant {generation} is not above earlier {earlier_mode} grant {earlier}: {issued:?}"
                );
            }
        }
    }
    assert!(issued.windows(2).all(|pair| pair[0].1 < pair[1].1));
}

#[tokio::test(start_paused = true)]
async fn a_forgotten_name_never_reuses_a_generation() {
    let service = EmbeddedLockClient::new();
    let a = session(&service, options());
    let lock = name("short-lived");
    let first = must_acquire(&a, &lock, Mode::Exclusive).await.generation();
    // Released with nobody waiting: the service forgets the name's entry.
    let other = must_acquire(&a, &name("other"), Mode::Exclusive).await;
    drop(other);
    let second = must_acquire(&a, &lock, Mode::Exclusive).await.generation();
    assert!(second > first, "{second} after {first}");
}

#[tokio::test(start_paused = true)]
async fn waiters_are_granted_in_fifo_order() {
    let service = EmbeddedLockClient::new();
    let lock = name("queue");
    let holder = session(&service, options());
    let guard = must_acquire(&holder, &lock, Mode::Exclusive).await;

    let (order_sender, mut order) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for index in 0..4 {
        let waiter = session(&service, options());
        let (task_lock, order_sender) = (lock.clone(), order_sender.clone());
        tasks.push(tokio::spawn(async move {
            let guard = must_acquire(&waiter, &task_lock, Mode::Exclusive).await;
            order_sender.send((index, guard.generation())).unwrap();
            guard.release().await.unwrap();
        }));
        wait_for_waiters(&service, &lock, index + 1).await;
    }
    drop(order_sender);
    guard.release().await.unwrap();
    for task in tasks {
        tokio::time::timeout(PATIENCE, task)
            .await
            .expect("every waiter is granted")
            .unwrap();
    }

    let mut grants = Vec::new();
    while let Some(entry) = order.recv().await {
        grants.push(entry);
    }
    let indices: Vec<usize> = grants.iter().map(|(index, _)| *index).collect();
    assert_eq!(indices, vec![0, 1, 2, 3]);
    assert!(grants.windows(2).all(|pair| pair[0].1 < pair[1].1));
}

#[tokio::test(start_paused = true)]
async fn lease_expires_when_the_keepalive_stops() {
    let service = EmbeddedLockClient::new();
    let lock = name("gc-pause");
    let paused = session(&service, options());
    let other = session(&service, options());

    let guard = must_acquire(&paused, &lock, Mode::Exclusive).await;
    // With the keep-alive running, the hold outlives its TTL many times.
    tokio::time::sleep(TTL * 5).await;
    assert!(guard.is_valid(), "keep-alive did not keep the lease");
    assert!(must_try(&other, &lock, Mode::Exclusive).await.is_none());

    let stopped_at = Instant::now();
    paused.stop_keepalive();
    let waiter = spawn_queued(&service, &other, &lock, Mode::Exclusive, 1).await;

    let final_state = lease_end(&guard).await;
    let lost_after = stopped_at.elapsed();
    assert!(
        matches!(final_state, LeaseState::Lost(_)),
        "lease ended as {final_state:?}"
    );
    // The last renewal was at most one interval before the stop; the
    // signal fires a safety margin before the service's TTL.
    assert!(lost_after <= TTL - MARGIN, "lost only after {lost_after:?}");
    assert!(
        lost_after >= TTL - MARGIN - KEEPALIVE,
        "lost early: {lost_after:?}"
    );
    assert!(matches!(
        guard.sequencer(),
        Err(LockError::LeaseLost { .. })
    ));

    let next = granted(waiter, "the waiter, after the expiry").await;
    let granted_after = stopped_at.elapsed();
    assert!(granted_after <= TTL, "granted only after {granted_after:?}");
    assert!(
        granted_after >= TTL - KEEPALIVE,
        "granted before the TTL: {granted_after:?}"
    );
    assert!(
        granted_after > lost_after,
        "granted before the loss was signalled"
    );
    assert!(next.generation() > guard.generation());
    assert_eq!(
        guard.lease().state(),
        LeaseState::Lost(LostReason::Revoked),
        "the service's expiry is final"
    );

    // The old holder can release nothing, and its session is over.
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotOwner { .. })
    ));
    assert!(paused.is_closed());
    assert!(matches!(
        paused.try_acquire(&lock, Mode::Exclusive).await,
        Err(LockError::SessionClosed)
    ));
    assert!(next.is_valid());
}

#[tokio::test(start_paused = true)]
async fn an_idle_session_keeps_its_lease() {
    let service = EmbeddedLockClient::new();
    let a = session(&service, options());
    let lock = name("idle");
    must_acquire(&a, &lock, Mode::Exclusive)
        .await
        .release()
        .await
        .unwrap();
    tokio::time::sleep(TTL * 10).await;
    assert!(!a.is_closed());
    let guard = must_acquire(&a, &lock, Mode::Exclusive).await;
    assert!(guard.is_valid());
    assert!(guard.lease().remaining() > Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn try_acquire_timeout_and_cancel_leave_no_stale_waiter() {
    let service = EmbeddedLockClient::new();
    let lock = name("cancel");
    let holder = session(&service, options());
    let (impatient, later) = (session(&service, options()), session(&service, options()));
    let guard = must_acquire(&holder, &lock, Mode::Exclusive).await;

    assert!(must_try(&impatient, &lock, Mode::Exclusive).await.is_none());
    assert_eq!(service.waiters(&lock), 0, "try_acquire queued");

    let timed_out = impatient
        .acquire_timeout(&lock, Mode::Exclusive, Duration::from_secs(1))
        .await;
    assert!(
        matches!(timed_out, Err(LockError::Timeout { .. })),
        "{timed_out:?}"
    );
    assert_eq!(service.waiters(&lock), 0, "timed-out waiter left behind");

    let dropped = spawn_queued(&service, &impatient, &lock, Mode::Exclusive, 1).await;
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    assert_eq!(service.waiters(&lock), 0, "dropped waiter left behind");

    guard.release().await.unwrap();
    let next = must_try(&later, &lock, Mode::Exclusive).await;
    assert!(next.is_some(), "a stale waiter blocks the released lock");
}

#[tokio::test(start_paused = true)]
async fn a_grant_racing_with_a_dropped_acquire_is_released() {
    let service = EmbeddedLockClient::new();
    let lock = name("race");
    let [holder, dropped_session, later] = sessions(&service);
    let guard = must_acquire(&holder, &lock, Mode::Exclusive).await;
    let dropped = spawn_queued(&service, &dropped_session, &lock, Mode::Exclusive, 1).await;

    // The release grants the waiter at once; its task has not run since.
    guard.release().await.unwrap();
    assert_eq!(
        service.holders(&lock).len(),
        1,
        "the waiter was not granted"
    );
    dropped.abort();
    let outcome = dropped.await;
    assert!(
        outcome.as_ref().is_err_and(|error| error.is_cancelled()),
        "the task was not cancelled before taking its grant: {outcome:?}"
    );

    assert!(service.holders(&lock).is_empty(), "phantom holder remains");
    assert!(must_try(&later, &lock, Mode::Exclusive).await.is_some());
}

#[tokio::test(start_paused = true)]
async fn reentry_counts_keeps_the_generation_and_releases_at_zero() {
    let (service, a, b) = two_sessions();
    let lock = name("reentrant");

    let first = must_acquire(&a, &lock, Mode::Exclusive).await;
    let second = must_try(&a, &lock, Mode::Exclusive)
        .await
        .expect("re-entry is immediate");
    let third = must_acquire(&a.clone(), &lock, Mode::Exclusive).await;
    assert_eq!(first.generation(), second.generation());
    assert_eq!(first.generation(), third.generation());
    assert_eq!(service.holders(&lock).len(), 1);

    assert!(matches!(
        a.try_acquire(&lock, Mode::Shared).await,
        Err(LockError::ModeConflict {
            held: Mode::Exclusive,
            requested: Mode::Shared,
            ..
        })
    ));
    assert!(matches!(
        a.acquire(&lock, Mode::Shared).await,
        Err(LockError::ModeConflict { .. })
    ));

    first.release().await.unwrap();
    assert!(must_try(&b, &lock, Mode::Exclusive).await.is_none());
    drop(second);
    assert!(must_try(&b, &lock, Mode::Exclusive).await.is_none());
    assert!(third.is_valid());
    third.release().await.unwrap();
    let taken = must_try(&b, &lock, Mode::Exclusive)
        .await
        .expect("free after the last release");

    // Shared re-entry works the same way.
    let shared_lock = name("reentrant/shared");
    let one = must_acquire(&a, &shared_lock, Mode::Shared).await;
    let two = must_acquire(&a, &shared_lock, Mode::Shared).await;
    assert_eq!(one.generation(), two.generation());
    assert!(matches!(
        a.try_acquire(&shared_lock, Mode::Exclusive).await,
        Err(LockError::ModeConflict { .. })
    ));
    drop(taken);
}

#[tokio::test(start_paused = true)]
async fn shared_and_exclusive_interplay() {
    let service = EmbeddedLockClient::new();
    let lock = name("catalog");
    let sessions: Vec<EmbeddedLock> = (0..5).map(|_| session(&service, options())).collect();
    let [reader_one, reader_two, writer, late_reader, prober] = &sessions[..] else {
        unreachable!()
    };

    let shared_one = must_try(reader_one, &lock, Mode::Shared).await.unwrap();
    let shared_two = must_try(reader_two, &lock, Mode::Shared)
        .await
        .expect("two readers at once");
    assert!(must_try(prober, &lock, Mode::Exclusive).await.is_none());
    let reader_generations = [shared_one.generation(), shared_two.generation()];

    let writer_task = spawn_queued(&service, writer, &lock, Mode::Exclusive, 1).await;
    let reader_task = spawn_queued(&service, late_reader, &lock, Mode::Shared, 2).await;
    assert!(
        must_try(prober, &lock, Mode::Shared).await.is_none(),
        "a reader overtook a queued writer"
    );

    shared_one.release().await.unwrap();
    settle().await;
    assert!(
        !writer_task.is_finished(),
        "writer granted while a reader holds"
    );
    shared_two.release().await.unwrap();
    let written = granted(writer_task, "the writer").await;
    settle().await;
    assert!(
        !reader_task.is_finished(),
        "reader granted while the writer holds"
    );
    assert_eq!(service.waiters(&lock), 1);

    assert!(
        reader_generations
            .iter()
            .all(|reader| written.generation() > *reader)
    );
    let writer_generation = written.generation();
    written.release().await.unwrap();
    let read = granted(reader_task, "the late reader").await;
    assert!(read.generation() > writer_generation);
}

#[tokio::test(start_paused = true)]
async fn lock_delay_after_a_lost_lease_but_not_after_a_release() {
    const DELAY: Duration = Duration::from_secs(5);
    let service = EmbeddedLockClient::new();
    let lock = name("delayed");
    let delayed_options = options().with_lock_delay(DELAY);

    // Lost lease (killed): nobody gets the lock for DELAY.
    let crashed = session(&service, delayed_options.clone());
    let other = session(&service, options());
    let guard = must_acquire(&crashed, &lock, Mode::Exclusive).await;
    let killed_at = Instant::now();
    crashed.kill_lease();
    assert_eq!(guard.lease().state(), LeaseState::Lost(LostReason::Revoked));
    assert!(must_try(&other, &lock, Mode::Exclusive).await.is_none());
    tokio::time::sleep(DELAY - Duration::from_millis(100)).await;
    assert!(must_try(&other, &lock, Mode::Exclusive).await.is_none());
    let next = must_acquire(&other, &lock, Mode::Exclusive).await;
    assert_eq!(
        killed_at.elapsed(),
        DELAY,
        "granted at the end of the delay"
    );
    assert!(next.generation() > guard.generation());
    drop(next);

    // Lost lease (expired): the delay runs from the service's expiry.
    let paused = session(&service, delayed_options.clone());
    let guard = must_acquire(&paused, &lock, Mode::Exclusive).await;
    let stopped_at = Instant::now();
    paused.stop_keepalive();
    let next = must_acquire(&other, &lock, Mode::Exclusive).await;
    let waited = stopped_at.elapsed();
    assert!(
        waited >= TTL - KEEPALIVE + DELAY && waited <= TTL + DELAY,
        "{waited:?}"
    );
    assert!(next.generation() > guard.generation());
    drop(next);

    // Clean release: no delay.
    let careful = session(&service, delayed_options);
    let guard = must_acquire(&careful, &lock, Mode::Exclusive).await;
    guard.release().await.unwrap();
    assert!(
        must_try(&other, &lock, Mode::Exclusive).await.is_some(),
        "lock-delay after a clean release"
    );
}

#[tokio::test(start_paused = true)]
async fn the_waiter_bound_fails_fast_with_busy() {
    let service = EmbeddedLockClient::new();
    let lock = name("hot");
    let bounded = options().with_max_waiters(2);
    let holder = session(&service, bounded.clone());
    let guard = must_acquire(&holder, &lock, Mode::Exclusive).await;
    let mut queued = Vec::new();
    for position in 1..=2 {
        let waiter = session(&service, bounded.clone());
        queued.push(spawn_queued(&service, &waiter, &lock, Mode::Exclusive, position).await);
    }
    let first = queued.remove(0);

    let third = session(&service, bounded);
    let refused = third.acquire(&lock, Mode::Exclusive).await;
    assert!(
        matches!(refused, Err(LockError::Busy { waiters: 2, .. })),
        "{refused:?}"
    );
    assert_eq!(service.waiters(&lock), 2);

    first.abort();
    let _ = first.await;
    assert_eq!(service.waiters(&lock), 1);
    let _third = spawn_queued(&service, &third, &lock, Mode::Exclusive, 2).await;
    drop(guard);
}

#[tokio::test(start_paused = true)]
async fn live_check_is_true_then_false_after_the_lease_ends() {
    let service = EmbeddedLockClient::with_issuer("live-check-test").unwrap();
    let lock = name("checked");

    // Killed lease.
    let a = session(&service, options());
    let guard = must_acquire(&a, &lock, Mode::Exclusive).await;
    let sequencer = guard.sequencer().unwrap();
    assert_eq!(service.check(&sequencer).await.unwrap(), Liveness::Held);
    let older = Sequencer::new(
        lock.clone(),
        Mode::Exclusive,
        palisade_core::Generation::new(sequencer.generation().get() + 1).unwrap(),
    )
    .with_issuer("live-check-test")
    .unwrap();
    assert_eq!(service.check(&older).await.unwrap(), Liveness::NotHeld);
    let foreign = sequencer.clone().with_issuer("someone-else").unwrap();
    assert_eq!(service.check(&foreign).await.unwrap(), Liveness::NotHeld);
    let anonymous = Sequencer::new(lock.clone(), Mode::Exclusive, sequencer.generation());
    assert_eq!(service.check(&anonymous).await.unwrap(), Liveness::NotHeld);
    let wrong_holder = sequencer.clone().with_holder("session-999").unwrap();
    assert_eq!(
        service.check(&wrong_holder).await.unwrap(),
        Liveness::NotHeld
    );
    a.kill_lease();
    assert_eq!(service.check(&sequencer).await.unwrap(), Liveness::NotHeld);

    // Expired lease: held until the TTL passes without a renewal.
    let b = session(&service, options());
    let guard = must_acquire(&b, &lock, Mode::Exclusive).await;
    let sequencer = guard.sequencer().unwrap();
    b.stop_keepalive();
    tokio::time::sleep(TTL - KEEPALIVE - Duration::from_millis(1)).await;
    assert_eq!(service.check(&sequencer).await.unwrap(), Liveness::Held);
    tokio::time::sleep(KEEPALIVE + Duration::from_millis(1)).await;
    assert_eq!(service.check(&sequencer).await.unwrap(), Liveness::NotHeld);

    // Clean release.
    let c = session(&service, options());
    let guard = must_acquire(&c, &lock, Mode::Shared).await;
    let sequencer = guard.sequencer().unwrap();
    assert_eq!(service.check(&sequencer).await.unwrap(), Liveness::Held);
    let shared = service.shared_live_check();
    assert_eq!(shared.check_dyn(&sequencer).await.unwrap(), Liveness::Held);
    guard.release().await.unwrap();
    assert_eq!(service.check(&sequencer).await.unwrap(), Liveness::NotHeld);
    assert_eq!(
        shared.check_dyn(&sequencer).await.unwrap(),
        Liveness::NotHeld
    );
}

#[tokio::test(start_paused = true)]
async fn kill_lease_ends_the_session_and_its_waiters() {
    let service = EmbeddedLockClient::new();
    let (held, wanted) = (name("kill/held"), name("kill/wanted"));
    let (victim, other) = (session(&service, options()), session(&service, options()));
    let guard = must_acquire(&victim, &held, Mode::Exclusive).await;
    let blocker = must_acquire(&other, &wanted, Mode::Exclusive).await;
    let waiting = spawn_queued(&service, &victim, &wanted, Mode::Exclusive, 1).await;

    victim.kill_lease();
    assert_eq!(
        lease_end(&guard).await,
        LeaseState::Lost(LostReason::Revoked)
    );
    assert!(matches!(
        answer(waiting, "the killed session's waiter").await,
        Err(LockError::SessionClosed)
    ));
    assert_eq!(service.waiters(&wanted), 0);
    assert!(victim.is_closed());
    assert!(matches!(
        victim.acquire(&name("kill/new"), Mode::Shared).await,
        Err(LockError::SessionClosed)
    ));
    // Without a lock-delay the lost lock is free at once.
    assert!(must_try(&other, &held, Mode::Exclusive).await.is_some());
    assert!(blocker.is_valid());
}

#[tokio::test(start_paused = true)]
async fn dropping_a_guard_releases_it() {
    let (service, a, b) = two_sessions();
    let lock = name("dropped");
    let guard = must_acquire(&a, &lock, Mode::Exclusive).await;
    let lease = guard.lease();
    let waiter = spawn_queued(&service, &b, &lock, Mode::Exclusive, 1).await;
    drop(guard);
    assert_eq!(lease.state(), LeaseState::Released);
    let next = granted(waiter, "the waiter, after the drop").await;
    assert!(next.is_valid());
}

#[tokio::test(start_paused = true)]
async fn names_are_isolated() {
    let (service, a, b) = two_sessions();
    let held = name("a/b");
    let _guard = must_acquire(&a, &held, Mode::Exclusive).await;
    for other in ["a", "a/bc", "ab", "a/b/", "a%2Fb", "A/b"] {
        let guard = must_try(&b, &name(other), Mode::Exclusive).await;
        assert!(guard.is_some(), "holding `a/b` blocks `{other}`");
        // And the other way round: holding `other` does not block `a/b`
        // for a third party beyond `a`'s own hold.
        let probe = session(&service, options());
        assert!(must_try(&probe, &held, Mode::Exclusive).await.is_none());
        assert!(must_try(&probe, &name(other), Mode::Shared).await.is_none());
    }
}

#[tokio::test(start_paused = true)]
async fn sequencers_carry_the_hold() {
    let service = EmbeddedLockClient::new();
    assert!(service.issuer().starts_with("embedded-"));
    let a = session(&service, options());
    let lock = name("orders/7;x=1");
    let guard = must_acquire(&a, &lock, Mode::Shared).await;
    let sequencer = guard.sequencer().unwrap();
    assert_eq!(sequencer.lock(), &lock);
    assert_eq!(sequencer.mode(), Mode::Shared);
    assert_eq!(sequencer.generation(), guard.generation());
    assert_eq!(sequencer.issuer(), Some(service.issuer()));
    assert_eq!(sequencer.holder(), Some(a.holder_id()));
    assert_eq!(sequencer.lease(), Some(a.lease_id()));
    assert!(sequencer.expires_unix_ms().is_some());
    assert_eq!(&sequencer, guard.issued());
    let text = sequencer.to_string();
    assert_eq!(text.parse::<Sequencer>().unwrap(), sequencer);

    let b = session(&service, options());
    assert_ne!(a.holder_id(), b.holder_id());
    assert_ne!(a.lease_id(), b.lease_id());
    assert_ne!(
        EmbeddedLockClient::new().issuer(),
        service.issuer(),
        "two services share an issuer id"
    );
}

#[test]
fn bad_configuration_is_an_error() {
    assert!(matches!(
        EmbeddedLockClient::with_issuer(""),
        Err(EmbeddedError::InvalidIssuer { .. })
    ));
    assert!(matches!(
        EmbeddedLockClient::with_issuer("bad\nissuer"),
        Err(EmbeddedError::InvalidIssuer { .. })
    ));
    let service = EmbeddedLockClient::new();
    let too_small_ttl = SessionOptions::default().with_ttl(Duration::from_millis(100));
    assert!(matches!(
        service.session(too_small_ttl),
        Err(EmbeddedError::InvalidOptions { .. })
    ));
    assert!(matches!(
        service.session(SessionOptions::default().with_max_waiters(0)),
        Err(EmbeddedError::InvalidOptions { .. })
    ));
}
