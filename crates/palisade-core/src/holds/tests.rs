//! The hold table against a toy lock service: pure, on tokio's paused clock
//! where time matters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::*;
use crate::{LeaseState, LockGuard};

/// What the toy service answers to a give-back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Compare-and-delete on the owner token, as a real service.
    Honest,
    /// "Could not tell": the service failed.
    Fail,
}

/// A session on a toy lock service that grants a free lock at once.
struct Toy {
    holds: HoldTable<u64>,
    /// The owner token of each held name, and the last generation.
    service: Arc<Mutex<(HashMap<LockName, u64>, u64)>>,
    answer: Mutex<Answer>,
    /// Give-backs wait for a permit when `blocked`.
    permits: Arc<Semaphore>,
    blocked: bool,
    give_backs: AtomicUsize,
    /// Whether each give-back came with the gate.
    gated: Mutex<Vec<bool>>,
    spawned: AtomicUsize,
}

impl HoldBackend for Toy {
    type Data = u64;

    fn holds(&self) -> &HoldTable<u64> {
        &self.holds
    }

    async fn give_back(&self, mut hold: GiveBack<u64>) -> Result<bool, LockError> {
        let gate = hold.take_gate();
        self.gated.lock().unwrap().push(gate.is_some());
        if self.blocked {
            self.permits.acquire().await.unwrap().forget();
        }
        self.give_backs.fetch_add(1, Ordering::SeqCst);
        if *self.answer.lock().unwrap() == Answer::Fail {
            return Err(LockError::SessionClosed);
        }
        let mut service = self.service.lock().unwrap();
        let ours = service.0.get(hold.name()) == Some(hold.data());
        if ours {
            service.0.remove(hold.name());
        }
        Ok(ours)
    }

    fn spawn(&self, task: Task) {
        self.spawned.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(task);
    }
}

const TTL: Duration = Duration::from_secs(10);

fn options() -> SessionOptions {
    SessionOptions::default().with_ttl(TTL).with_max_waiters(2)
}

fn toy_on(service: &Arc<Mutex<(HashMap<LockName, u64>, u64)>>, waiters: &Waiters) -> Arc<Toy> {
    Arc::new(Toy {
        holds: HoldTable::new("toy", &options(), waiters.clone()),
        service: service.clone(),
        answer: Mutex::new(Answer::Honest),
        permits: Arc::new(Semaphore::new(0)),
        blocked: false,
        give_backs: AtomicUsize::new(0),
        gated: Mutex::new(Vec::new()),
        spawned: AtomicUsize::new(0),
    })
}

fn toy() -> Arc<Toy> {
    toy_on(&Arc::default(), &Waiters::default())
}

fn blocked_toy() -> Arc<Toy> {
    let mut toy = Arc::into_inner(toy()).unwrap();
    toy.blocked = true;
    Arc::new(toy)
}

fn name(text: &str) -> LockName {
    LockName::new(text).unwrap()
}

/// Admits, and expects a turn.
async fn turn(toy: &Arc<Toy>, lock: &LockName, patience: Patience) -> Turn<Toy> {
    match HoldTable::admit(toy, lock, Mode::Exclusive, patience).await {
        Ok(Admission::Turn(turn)) => turn,
        other => panic!("expected a turn, got {other:?}"),
    }
}

/// Grants `turn` on the toy service (which must have the lock free).
fn grant(toy: &Arc<Toy>, turn: Turn<Toy>) -> HoldGuard<Toy> {
    let generation = {
        let mut service = toy.service.lock().unwrap();
        assert!(
            !service.0.contains_key(turn.name()),
            "the toy lock is taken"
        );
        service.1 += 1;
        let generation = service.1;
        service.0.insert(turn.name().clone(), generation);
        generation
    };
    let sequencer = Sequencer::new(
        turn.name().clone(),
        turn.mode(),
        Generation::new(generation).unwrap(),
    );
    let lease = Arc::new(LeaseTracker::new(Instant::now() + TTL));
    turn.grant(sequencer, lease, generation)
        .expect("grant recorded")
}

async fn acquire(toy: &Arc<Toy>, lock: &LockName) -> HoldGuard<Toy> {
    match HoldTable::admit(toy, lock, Mode::Exclusive, Patience::Forever).await {
        Ok(Admission::Reentered(guard)) => guard,
        Ok(Admission::Turn(turn)) => grant(toy, turn),
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn reentry_shares_the_hold_and_the_last_guard_gives_it_back_once() {
    let toy = toy();
    let lock = name("a");
    let first = acquire(&toy, &lock).await;
    let second = acquire(&toy, &lock).await;
    assert_eq!(first.generation(), second.generation());
    assert!(Arc::ptr_eq(first.hold(), second.hold()));
    assert_eq!(first.hold().guards(), 2);

    let lease = first.lease();
    first.release().await.unwrap();
    assert_eq!(toy.give_backs.load(Ordering::SeqCst), 0, "one guard of two");
    assert!(lease.is_valid());
    second.release().await.unwrap();
    assert_eq!(toy.give_backs.load(Ordering::SeqCst), 1);
    assert_eq!(
        *toy.gated.lock().unwrap(),
        [true],
        "given back under the gate"
    );
    assert_eq!(lease.state(), LeaseState::Released);
    assert!(toy.holds.is_empty());
    assert!(toy.service.lock().unwrap().0.is_empty());
}

#[tokio::test(start_paused = true)]
async fn reentry_in_the_other_mode_is_refused() {
    let toy = toy();
    let lock = name("a");
    let _held = acquire(&toy, &lock).await;
    let refused = HoldTable::admit(&toy, &lock, Mode::Shared, Patience::Now).await;
    assert!(
        matches!(
            refused,
            Err(LockError::ModeConflict {
                held: Mode::Exclusive,
                requested: Mode::Shared,
                ..
            })
        ),
        "{refused:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lost_hold_is_forgotten_and_its_guards_give_it_back_without_the_gate() {
    let toy = toy();
    let lock = name("a");
    let old = acquire(&toy, &lock).await;
    toy.holds.lose_where(|_| true, LostReason::KeyDeleted);
    assert!(!old.is_valid());
    // The service ended the hold too (its lease lapsed there).
    toy.service.lock().unwrap().0.clear();

    let new = acquire(&toy, &lock).await;
    assert!(
        new.generation() > old.generation(),
        "a new grant, not a re-entry"
    );
    assert!(matches!(
        old.release().await,
        Err(LockError::NotOwner { .. })
    ));
    assert_eq!(*toy.gated.lock().unwrap(), [false]);
    assert!(
        new.is_valid(),
        "the old guard's release left the new hold alone"
    );
    assert!(toy.holds.hold(&lock).is_some());
}

#[tokio::test(start_paused = true)]
async fn the_waiter_bound_counts_waiting_turns_across_sessions() {
    let (service, waiters) = (Arc::default(), Waiters::default());
    let sessions: Vec<Arc<Toy>> = (0..3).map(|_| toy_on(&service, &waiters)).collect();
    let lock = name("hot");
    let first = turn(&sessions[0], &lock, Patience::Forever).await;
    let _second = turn(&sessions[1], &lock, Patience::Forever).await;
    let refused = HoldTable::admit(&sessions[2], &lock, Mode::Exclusive, Patience::Forever).await;
    assert!(
        matches!(refused, Err(LockError::Busy { waiters: 2, .. })),
        "{refused:?}"
    );
    // try-acquire does not wait, so the bound does not apply.
    let _now = turn(&sessions[2], &lock, Patience::Now).await;
    drop(first);
    assert_eq!(waiters.count(&lock), 1);
}

#[tokio::test(start_paused = true)]
async fn one_acquisition_of_a_name_per_session_at_a_time() {
    let toy = toy();
    let lock = name("a");
    let first = turn(&toy, &lock, Patience::Forever).await;

    assert!(matches!(
        HoldTable::admit(&toy, &lock, Mode::Exclusive, Patience::Now).await,
        Ok(Admission::InProgress)
    ));
    let started = Instant::now();
    let timed_out = HoldTable::admit(
        &toy,
        &lock,
        Mode::Exclusive,
        Patience::Until(started + Duration::from_secs(1)),
    )
    .await;
    assert!(
        matches!(timed_out, Err(LockError::Timeout { .. })),
        "{timed_out:?}"
    );
    assert_eq!(started.elapsed(), Duration::from_secs(1));

    // A waiting acquisition re-enters what the first one is granted.
    let second = tokio::spawn({
        let (toy, lock) = (toy.clone(), lock.clone());
        async move { acquire(&toy, &lock).await }
    });
    tokio::task::yield_now().await;
    let held = grant(&toy, first);
    let second = second.await.unwrap();
    assert_eq!(second.generation(), held.generation());
    assert_eq!(held.hold().guards(), 2);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_guard_gives_the_hold_back_in_the_background() {
    let toy = toy();
    let lock = name("a");
    let guard = acquire(&toy, &lock).await;
    let mut lease = guard.lease();
    drop(guard);
    assert_eq!(toy.spawned.load(Ordering::SeqCst), 1);
    assert_eq!(lease.lost().await, LeaseState::Released);
    assert!(toy.service.lock().unwrap().0.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_release_whose_future_is_dropped_finishes_in_the_background() {
    let toy = blocked_toy();
    let lock = name("a");
    let guard = acquire(&toy, &lock).await;
    let mut lease = guard.lease();
    let mut release = Box::pin(guard.release());
    // Polled until it waits on the lock service, then abandoned.
    tokio::select! {
        biased;
        _ = &mut release => panic!("the toy give-back is blocked"),
        () = tokio::task::yield_now() => {}
    }
    drop(release);
    assert_eq!(toy.spawned.load(Ordering::SeqCst), 1);
    assert!(lease.is_valid(), "not given back yet");
    toy.permits.add_permits(1);
    assert_eq!(lease.lost().await, LeaseState::Released);
    assert_eq!(toy.give_backs.load(Ordering::SeqCst), 1);
    assert!(toy.service.lock().unwrap().0.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_last_release_waiting_for_the_gate_yields_to_a_reentry() {
    let toy = toy();
    let lock = name("a");
    let guard = acquire(&toy, &lock).await;
    let generation = guard.generation();
    let gate = toy.holds.gate(&lock).lock_owned().await;
    let release = tokio::spawn(guard.release());
    tokio::task::yield_now().await;
    let again = acquire(&toy, &lock).await;
    assert_eq!(again.generation(), generation, "a re-entry");
    drop(gate);
    release.await.unwrap().unwrap();
    assert_eq!(toy.give_backs.load(Ordering::SeqCst), 0);
    assert!(again.is_valid());
    assert_eq!(again.hold().guards(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failed_give_back_loses_the_lease_and_returns_the_error() {
    let toy = toy();
    let guard = acquire(&toy, &name("a")).await;
    let lease = guard.lease();
    *toy.answer.lock().unwrap() = Answer::Fail;
    assert!(matches!(
        guard.release().await,
        Err(LockError::SessionClosed)
    ));
    assert_eq!(lease.state(), LeaseState::Lost(LostReason::KeepAliveFailed));
}

#[tokio::test(start_paused = true)]
async fn an_ended_table_loses_its_holds_and_records_no_grant() {
    let toy = toy();
    let held = acquire(&toy, &name("a")).await;
    let pending = turn(&toy, &name("b"), Patience::Now).await;
    assert!(toy.holds.end(LostReason::Revoked));
    assert!(!toy.holds.end(LostReason::Expired), "ended once");
    assert_eq!(held.lease().state(), LeaseState::Lost(LostReason::Revoked));

    let lease = Arc::new(LeaseTracker::new(Instant::now() + TTL));
    let sequencer = Sequencer::new(name("b"), Mode::Exclusive, Generation::MIN);
    assert!(matches!(
        pending.grant(sequencer, lease.clone(), 9),
        Err(LockError::SessionClosed)
    ));
    assert_eq!(lease.state(), LeaseState::Lost(LostReason::Revoked));
    assert!(matches!(
        HoldTable::admit(&toy, &name("c"), Mode::Exclusive, Patience::Now).await,
        Err(LockError::SessionClosed)
    ));
}

#[tokio::test(start_paused = true)]
async fn extend_where_moves_deadlines_forward_only_and_never_revives() {
    let toy = toy();
    let (a, b) = (
        acquire(&toy, &name("a")).await,
        acquire(&toy, &name("b")).await,
    );
    let start = Instant::now();
    toy.holds
        .extend_where(|hold| hold.name().as_str() == "a", start + TTL * 2);
    assert_eq!(a.lease().valid_until(), Some(start + TTL * 2));
    assert_eq!(b.lease().valid_until(), Some(start + TTL));
    toy.holds.extend_where(|_| true, start + TTL / 2);
    assert_eq!(a.lease().valid_until(), Some(start + TTL * 2), "never back");

    tokio::time::advance(TTL).await;
    toy.holds.extend_where(|_| true, Instant::now() + TTL);
    assert_eq!(b.lease().state(), LeaseState::Lost(LostReason::Expired));
}

#[tokio::test(start_paused = true)]
async fn drained_holds_are_released_as_forgotten() {
    let toy = toy();
    let guard = acquire(&toy, &name("a")).await;
    let drained = toy.holds.drain();
    assert_eq!(drained.len(), 1);
    assert!(toy.holds.is_empty());
    guard.release().await.unwrap();
    assert_eq!(*toy.gated.lock().unwrap(), [false]);
}
