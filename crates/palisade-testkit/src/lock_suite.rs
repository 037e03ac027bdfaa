//! The lock backend conformance suite.
//!
//! Every backend runs the same cases through one call:
//!
//! ```text
//! #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
//! async fn conformance() {
//!     let backend = MyBackend::start().await; // e.g. spawns a real server
//!     palisade_testkit::lock_suite::test_all(backend).await;
//! }
//! ```
//!
//! (`crates/palisade-lock-embedded/tests/it/conformance.rs` is the shortest
//! real instance.)
//!
//! A backend is done when the suite passes. The cases check the obligations
//! listed on `palisade_core::Lock`; each is also a `pub async fn` of its own,
//! so a backend can run one case while it is being debugged.
//!
//! # Cases
//!
//! The numbers are those of the "To ensure correctness" list on
//! `palisade_core::Lock`.
//!
//! | case | checks |
//! | --- | --- |
//! | [`sequencer_carries_the_hold`] | lock, mode and generation in the sequencer; `v1` text round trip |
//! | [`exclusive_excludes`] | a second session's `try_acquire` is refused while held (2) |
//! | [`generations_increase`] | never 0, strictly increasing, shared vs exclusive ordering (1) |
//! | [`names_are_isolated`] | `a/b` vs `a`, `a/bc`, `ab`, escaped look-alikes (3) |
//! | [`reentrancy`] | same generation, count, release at zero, `ModeConflict` |
//! | [`shared_mode`] | readers together; writers wait for all; readers wait for queued writers |
//! | [`fifo_order`] | waiters granted in arrival order |
//! | [`no_stale_waiter`] | dropped `acquire`, timed-out `acquire_timeout`, refused `try_acquire` (5) |
//! | [`dropped_guard_releases`] | dropping a guard releases it |
//! | [`mutual_exclusion`] | contending sessions never overlap; generations follow grant order (1, 2) |
//! | [`owner_only_release`] | a lapsed holder's release fails and the new holder keeps the lock (4) |
//! | [`lease_lost_on_expiry`] | lease-lost fires, `sequencer()` refuses, next holder is newer (6) |
//! | [`lock_delay`] | no grant during the delay after a lost lease; none after a release (7) |
//! | [`inspection`] | `Inspect`: holder, mode, generation; waiters counted; released locks gone; prefix filter exact (`a/b` vs `ab`) |
//! | [`raise_floor`] | `RaiseFloor`: the next grant is above the mark; a lower mark lowers nothing; an impossible mark is refused and changes nothing |
//!
//! # How the suite treats time
//!
//! The suite runs against real servers on the real clock: no paused time.
//! Everything it waits for is bounded, with margins meant for a loaded
//! 2-core CI machine, and every bound is derived from
//! [`SuiteBackend::min_ttl`] (the TTL every session of the suite uses):
//!
//! - a *handoff* (a release reaching the next waiter) must happen within
//!   half a TTL, and never less than 500 ms;
//! - a lease killed with [`SuiteBackend::kill_lease`] must be reported lost
//!   within two TTLs plus 2 s;
//! - the lock-delay case uses a delay of one TTL (at least 1 s).
//!
//! Two things have no event the suite could wait for through the `Lock`
//! trait, so the suite gives them a fixed [`SETTLE`] time: a request
//! reaching the lock service before the next one is sent (to fix the queue
//! order), and a request that must *not* be granted staying ungranted (a
//! broken backend shows itself within that time).
//!
//! Beside the cases, [`secrets::assert_kept`] checks that a backend's
//! connection and error paths never show a password.
//!
//! Lock names start with a random per-run prefix, so reruns against the same
//! server never collide. Every failure message starts with
//! `lock suite [<backend>] <case>:` and says what was expected.

pub mod secrets;

use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use palisade_core::{
    Generation, Inspect, LeaseState, Lock, LockError, LockGuard, LockInfo, LockName, Mode,
    RaiseFloor, RaiseFloorError, Sequencer, SessionOptions,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How the suite drives a backend.
pub trait SuiteBackend: Send + Sync + 'static {
    /// The backend's session type.
    type Lock: Lock;

    /// A short name for messages (`embedded`, `etcd`, `redis`).
    fn name(&self) -> &'static str;

    /// Opens a new, independent session (its own lease and identity) with
    /// `options`.
    fn session(&self, options: SessionOptions) -> impl Future<Output = Self::Lock> + Send;

    /// Ends `session`'s lease on the lock service without releasing
    /// anything, the way a crash or a long pause would: its keep-alive stops
    /// and the service forgets the lease (a revoke, or a forced expiry).
    /// Returns once the service no longer treats the lease as valid.
    fn kill_lease(&self, session: &Self::Lock) -> impl Future<Output = ()> + Send;

    /// The shortest lease TTL the backend supports (etcd: 2 s). Cases that
    /// wait for an expiry use it, with generous margins.
    fn min_ttl(&self) -> Duration;
}

/// A backend with an inspection API ([`Inspect`]): [`test_all`] runs the
/// [`inspection`] case on it too.
pub trait SuiteInspect: SuiteBackend {
    /// The backend's inspection API, reading the same lock service as the
    /// sessions.
    type Inspector: Inspect;

    /// The inspector the [`inspection`] case reads with.
    fn inspector(&self) -> &Self::Inspector;

    /// Whether [`Inspect::list`] can answer on this deployment (a Redis
    /// Cluster refuses: one `SCAN` does not see every node).
    fn can_list(&self) -> bool {
        true
    }

    /// Whether the service can watch, so that [`Inspect::changes`] must
    /// push its hints rather than poll (etcd, ZooKeeper, the embedded
    /// service).
    fn watches(&self) -> bool {
        false
    }
}

/// A backend whose client raises generation floors ([`RaiseFloor`]):
/// [`test_all`] runs the [`raise_floor`] case on it too.
pub trait SuiteRaiseFloor: SuiteBackend {
    /// The backend's floor raiser, on the same lock service as the sessions.
    type Floor: RaiseFloor;

    /// The floor raiser the [`raise_floor`] case uses.
    fn floor(&self) -> &Self::Floor;

    /// How far above the last generation the case raises the floor: far
    /// enough that no clock-based generation (Redis's microseconds) passes
    /// it by itself during the case, and near enough for a backend that
    /// spends one write per step (etcd's revisions: override it).
    fn floor_gap(&self) -> u64 {
        1_000_000_000
    }
}

/// How long the suite gives a request to reach the lock service before the
/// next one is sent, and a request that must not be granted to show that it
/// is (wrongly) granted.
pub const SETTLE: Duration = Duration::from_millis(300);

/// The guard type of a backend.
type GuardOf<B> = <<B as SuiteBackend>::Lock as Lock>::Guard;

/// Runs each named case against `backend`, in order.
macro_rules! run_cases {
    ($backend:expr; $($case:ident),* $(,)?) => {
        $( run($backend, stringify!($case), $case($backend)).await; )*
    };
}

/// Runs every case, in order, printing each case's name before it runs.
///
/// Panics with a message naming the backend and the case at the first
/// violation.
pub async fn test_all<B: SuiteInspect + SuiteRaiseFloor>(backend: B) {
    let started = Instant::now();
    test_locking(&backend).await;
    run(&backend, "inspection", inspection(&backend)).await;
    run(&backend, "raise_floor", raise_floor(&backend)).await;
    println!(
        "lock suite [{}]: all cases passed in {:.1?}",
        backend.name(),
        started.elapsed()
    );
}

/// Every case but [`inspection`]: the whole suite of a backend that has no
/// inspection API (Redlock: its holders and generation are spread over the
/// masters, and no inspection reads them yet).
pub async fn test_locking<B: SuiteBackend>(backend: &B) {
    // The cases that wait for lease ends come last: they are the slow ones.
    run_cases!(
        backend;
        sequencer_carries_the_hold,
        exclusive_excludes,
        generations_increase,
        names_are_isolated,
        reentrancy,
        shared_mode,
        fifo_order,
        no_stale_waiter,
        dropped_guard_releases,
        mutual_exclusion,
        owner_only_release,
        lease_lost_on_expiry,
        lock_delay,
    );
}

async fn run<B: SuiteBackend>(backend: &B, case: &str, body: impl Future<Output = ()>) {
    println!("lock suite [{}] {case}: running", backend.name());
    let started = Instant::now();
    body.await;
    println!(
        "lock suite [{}] {case}: ok ({:.1?})",
        backend.name(),
        started.elapsed()
    );
}

/// The sequencer names the lock, mode and generation of the hold, round-
/// trips through its text form, and is handed out while the lease is valid.
pub async fn sequencer_carries_the_hold<B: SuiteBackend>(backend: &B) {
    let case = Case::new(backend, "sequencer_carries_the_hold");
    let (alice, bob) = (case.session().await, case.session().await);
    let mut holders = Vec::new();
    for (session, local, mode) in [
        (&alice, "exclusive", Mode::Exclusive),
        (&alice, "shared", Mode::Shared),
        (&bob, "by-bob", Mode::Exclusive),
    ] {
        let name = case.name(local);
        let guard = case
            .acquire(session, &name, mode, case.handoff(), "uncontended acquire")
            .await;
        let sequencer = match guard.sequencer() {
            Ok(sequencer) => sequencer,
            Err(error) => case.fail(format_args!(
                "sequencer() of a fresh {mode} hold of `{name}` failed: {error}"
            )),
        };
        if sequencer.lock() != &name || sequencer.mode() != mode {
            case.fail(format_args!(
                "sequencer `{sequencer}` does not name the hold: expected lock `{name}` in {mode} mode"
            ));
        }
        let issued = guard.issued();
        if (sequencer.lock(), sequencer.mode(), sequencer.generation())
            != (issued.lock(), issued.mode(), issued.generation())
            || sequencer.generation() != guard.generation()
        {
            case.fail(format_args!(
                "sequencer() `{sequencer}` names another hold than the issued `{issued}` (generation {})",
                guard.generation()
            ));
        }
        let text = sequencer.to_string();
        if !text.starts_with("v1;") || text.len() > Sequencer::MAX_TEXT_LEN {
            case.fail(format_args!(
                "sequencer text `{text}` is not a v1 header value"
            ));
        }
        match text.parse::<Sequencer>() {
            Ok(parsed) if parsed == sequencer => {}
            Ok(parsed) => case.fail(format_args!(
                "sequencer text `{text}` parses back as a different sequencer `{parsed}`"
            )),
            Err(error) => case.fail(format_args!(
                "sequencer text `{text}` does not parse back: {error}"
            )),
        }
        if !guard.is_valid() {
            case.fail("a fresh hold's lease is not valid");
        }
        holders.push(sequencer.holder().map(str::to_owned));
        case.release(guard, "release of an uncontended hold").await;
    }
    if let (Some(alice_holder), Some(bob_holder)) = (&holders[0], &holders[2]) {
        if alice_holder == bob_holder {
            case.fail(format_args!(
                "two sessions carry the same holder id `{alice_holder}`"
            ));
        }
    }
}

/// Exclusive mode excludes: while one session holds, another session's
/// `try_acquire` in either mode is refused; after the release it succeeds.
pub async fn exclusive_excludes<B: SuiteBackend>(backend: &B) {
    let case = Case::new(backend, "exclusive_excludes");
    let (alice, bob, carol) = (
        case.session().await,
        case.session().await,
        case.session().await,
    );
    let name = case.name("x");
    let held = case
        .acquire(
            &alice,
            &name,
            Mode::Exclusive,
            case.handoff(),
            "first acquire",
        )
        .await;
    case.refused(
        &bob,
        &name,
        Mode::Exclusive,
        "while another session holds it exclusively",
    )
    .await;
    case.refused(
        &bob,
        &name,
        Mode::Shared,
        "while another session holds it exclusively",
    )
    .await;
    case.release(held, "release by the holder").await;
    let taken = case
        .granted_now(
            &bob,
            &name,
            Mode::Exclusive,
            "right after the holder released it",
        )
        .await;
    case.refused(
        &carol,
        &name,
        Mode::Exclusive,
        "while the second session holds it",
    )
    .await;
    case.release(taken, "release by the second holder").await;
}

/// Generations are never 0 and strictly increase over successive grants:
/// an exclusive grant is above every earlier grant, a shared grant above
/// every earlier exclusive grant; a session that releases and acquires again
/// gets a new generation.
pub async fn generations_increase<B: SuiteBackend>(backend: &B) {
    let case = Case::new(backend, "generations_increase");
    let name = case.name("counter");
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(case.session().await);
    }
    let mut issued: Vec<(Mode, Generation, &'static str)> = Vec::new();

    for round in 0..2 {
        for session in &sessions {
            let guard = case
                .acquire(
                    session,
                    &name,
                    Mode::Exclusive,
                    case.handoff(),
                    "sequential acquire",
                )
                .await;
            issued.push((
                Mode::Exclusive,
                guard.generation(),
                if round == 0 {
                    "exclusive, first round"
                } else {
                    "exclusive, second round"
                },
            ));
            case.release(guard, "sequential release").await;
        }
    }
    let reader_one = case
        .acquire(
            &sessions[0],
            &name,
            Mode::Shared,
            case.handoff(),
            "first reader",
        )
        .await;
    let reader_two = case
        .acquire(
            &sessions[1],
            &name,
            Mode::Shared,
            case.handoff(),
            "second reader, while the first holds",
        )
        .await;
    issued.push((
        Mode::Shared,
        reader_one.generation(),
        "shared, first reader",
    ));
    issued.push((
        Mode::Shared,
        reader_two.generation(),
        "shared, second reader",
    ));
    case.release(reader_one, "reader release").await;
    case.release(reader_two, "reader release").await;
    for label in ["exclusive after readers", "same session again"] {
        let guard = case
            .acquire(&sessions[2], &name, Mode::Exclusive, case.handoff(), label)
            .await;
        issued.push((Mode::Exclusive, guard.generation(), label));
        case.release(guard, label).await;
    }

    for (index, (mode, generation, label)) in issued.iter().enumerate() {
        for (earlier_mode, earlier, earlier_label) in &issued[..index] {
            let must_exceed = *mode == Mode::Exclusive || *earlier_mode == Mode::Exclusive;
            if must_exceed && generation <= earlier {
                case.fail(format_args!(
                    "generation {generation} ({label}) is not above generation {earlier} ({earlier_label}); grants in order: {issued:?}"
                ));
            }
        }
    }
}

/// Names are compared whole: holding `a/b` blocks none of `a`, `a/bc`,
/// `ab` and their kin, and holding all of those does not block `a/b`.
pub async fn names_are_isolated<B: SuiteBackend>(backend: &B) {
    let case = Case::new(backend, "names_are_isolated");
    let (alice, bob, carol) = (
        case.session().await,
        case.session().await,
        case.session().await,
    );
    let held_name = case.name("a/b");
    let neighbours = ["a", "a/bc", "ab", "a/b/c", "a/", "a%2Fb", "a{b}", "A/b"];

    let held = case
        .acquire(
            &alice,
            &held_name,
            Mode::Exclusive,
            case.handoff(),
            "holding `a/b`",
        )
        .await;
    let mut neighbour_guards = Vec::new();
    for local in neighbours {
        let neighbour = case.name(local);
        let guard = case
            .try_acquire(
                &bob,
                &neighbour,
                Mode::Exclusive,
                "a neighbour of a held name",
            )
            .await;
        match guard {
            Some(guard) => neighbour_guards.push(guard),
            None => case.fail(format_args!(
                "holding `{held_name}` blocks `{neighbour}`: names must be compared whole"
            )),
        }
    }
    case.refused(
        &carol,
        &held_name,
        Mode::Exclusive,
        "while its holder still holds it",
    )
    .await;
    case.release(held, "release of `a/b`").await;
    if case
        .try_acquire(
            &carol,
            &held_name,
            Mode::Exclusive,
            "while only its neighbours are held",
        )
        .await
        .is_none()
    {
        case.fail(format_args!(
            "holding {neighbours:?} (under the run prefix) blocks `{held_name}`: names must be compared whole"
        ));
    }
    for guard in neighbour_guards {
        case.release(guard, "release of a neighbour").await;
    }
}

/// Re-entry per session: the same session re-acquires at once with the same
/// generation, the lock stays held until the last guard is released, and
/// re-entry in the other mode fails with `ModeConflict`.
pub async fn reentrancy<B: SuiteBackend>(backend: &B) {
    let case = Case::new(backend, "reentrancy");
    let (alice, bob) = (case.session().await, case.session().await);
    let name = case.name("reentrant");

    let first = case
        .acquire(
            &alice,
            &name,
            Mode::Exclusive,
            case.handoff(),
            "first acquire",
        )
        .await;
    let second = case
        .acquire(
            &alice,
            &name,
            Mode::Exclusive,
            case.handoff(),
            "re-entry by the holding session (acquire)",
        )
        .await;
    let third = match case
        .try_acquire(&alice, &name, Mode::Exclusive, "re-entry by the holding session")
        .await
    {
        Some(guard) => guard,
        None => case.fail("try_acquire by the session that holds the lock was refused; re-entry must succeed at once"),
    };
    for (label, guard) in [("acquire", &second), ("try_acquire", &third)] {
        if guard.generation() != first.generation() {
            case.fail(format_args!(
                "re-entry by {label} got generation {}, the hold has {}; re-entry keeps the generation",
                guard.generation(),
                first.generation()
            ));
        }
    }
    case.refused(
        &bob,
        &name,
        Mode::Exclusive,
        "while another session holds it re-entrantly",
    )
    .await;

    match case
        .call(alice.try_acquire(&name, Mode::Shared), "try_acquire in the other mode")
        .await
    {
        Err(LockError::ModeConflict { .. }) => {}
        other => case.fail(format_args!(
            "try_acquire in shared mode by the session holding it exclusively: expected ModeConflict, got {}",
            describe(&other)
        )),
    }
    match tokio::time::timeout(case.handoff(), alice.acquire(&name, Mode::Shared)).await {
        Ok(Err(LockError::ModeConflict { .. })) => {}
        Ok(other) => case.fail(format_args!(
            "acquire in shared mode by the session holding it exclusively: expected ModeConflict, got {}",
            describe(&other)
        )),
        Err(_elapsed) => case.fail(
            "acquire in shared mode by the session holding it exclusively waited instead of failing with ModeConflict",
        ),
    }

    case.release(first, "release of the first of three guards")
        .await;
    case.refused(
        &bob,
        &name,
        Mode::Exclusive,
        "while two of three re-entrant guards remain",
    )
    .await;
    case.release(second, "release of the second of three guards")
        .await;
    case.refused(
        &bob,
        &name,
        Mode::Exclusive,
        "while one of three re-entrant guards remains",
    )
    .await;
    if !third.is_valid() {
        case.fail(
            "the last re-entrant guard's lease is not valid after the other guards were released",
        );
    }
    case.release(third, "release of the last guard").await;
    let taken = case
        .granted_now(
            &bob,
            &name,
            Mode::Exclusive,
            "after the last re-entrant guard was released",
        )
        .await;
    case.release(taken, "release").await;

    // Shared re-entry.
    let shared_name = case.name("reentrant-shared");
    let one = case
        .acquire(
            &alice,
            &shared_name,
            Mode::Shared,
            case.handoff(),
            "shared acquire",
        )
        .await;
    let two = case
        .acquire(
            &alice,
            &shared_name,
            Mode::Shared,
            case.handoff(),
            "shared re-entry",
        )
        .await;
    if one.generation() != two.generation() {
        case.fail(format_args!(
            "shared re-entry got generation {}, the hold has {}",
            two.generation(),
            one.generation()
        ));
    }
    match case
        .call(alice.try_acquire(&shared_name, Mode::Exclusive), "try_acquire in the other mode")
        .await
    {
        Err(LockError::ModeConflict { .. }) => {}
        other => case.fail(format_args!(
            "try_acquire in exclusive mode by the session holding it shared: expected ModeConflict, got {}",
            describe(&other)
        )),
    }
    case.release(one, "shared release").await;
    case.release(two, "shared release").await;
}

/// Shared holders coexist; a writer waits for all of them; a reader that
/// arrives after a queued writer waits for the writer.
pub async fn shared_mode<B: SuiteBackend>(backend: &B) {
    let case = Case::new(backend, "shared_mode");
    let name = case.name("catalog");
    let (reader_one, reader_two, writer, late_reader, prober) = (
        case.session().await,
        case.session().await,
        case.session().await,
        case.session().await,
        case.session().await,
    );

    let shared_one = case
        .granted_now(&reader_one, &name, Mode::Shared, "first reader")
        .await;
    let shared_two = case
        .granted_now(
            &reader_two,
            &name,
            Mode::Shared,
            "second reader while the first holds",
        )
        .await;
    if !(shared_one.is_valid() && shared_two.is_valid()) {
        case.fail("two shared holders are not both valid at once");
    }
    case.refused(&prober, &name, Mode::Exclusive, "while two readers hold it")
        .await;

    let writer_wait = case.spawn_acquire(&writer, &name, Mode::Exclusive);
    case.settle().await;
    case.still_waiting(&writer_wait, "the writer, while two readers hold");
    let reader_wait = case.spawn_acquire(&late_reader, &name, Mode::Shared);
    case.settle().await;
    case.still_waiting(&reader_wait, "a reader that arrived after a queued writer");
    case.refused(&prober, &name, Mode::Shared, "while a writer is queued")
        .await;

    let reader_generations = [shared_one.generation(), shared_two.generation()];
    case.release(shared_one, "first reader's release").await;
    case.settle().await;
    case.still_waiting(
        &writer_wait,
        "the writer, while the second reader still holds",
    );
    case.release(shared_two, "second reader's release").await;
    let (written, _) = case
        .granted(
            writer_wait,
            case.handoff(),
            "the writer, after both readers released",
        )
        .await;
    case.settle().await;
    case.still_waiting(&reader_wait, "the late reader, while the writer holds");
    if let Some(reader) = reader_generations
        .iter()
        .find(|reader| written.generation() <= **reader)
    {
        case.fail(format_args!(
            "the writer's generation {} is not above the earlier reader's {reader}",
            written.generation()
        ));
    }
    let writer_generation = written.generation();
    case.release(written, "writer's release").await;
    let (read, _) = case
        .granted(
            reader_wait,
            case.handoff(),
            "the late reader, after the writer released",
        )
        .await;
    if read.generation() <= writer_generation {
        case.fail(format_args!(
            "the late reader's generation {} is not above the earlier writer's {writer_generation}",
            read.generation()
        ));
    }
    case.release(read, "late reader's release").await;
}

/// Three waiters queued in a known order are granted in that order, with
/// increasing generations.
pub async fn fifo_order<B: SuiteBackend>(backend: &B) {
    let case = Case::new(backend, "fifo_order");
    let name = case.name("queue");
    let holder = case.session().await;
    let held = case
        .acquire(
            &holder,
            &name,
            Mode::Exclusive,
            case.handoff(),
            "the holder",
        )
        .await;

    let (order_sender, mut order) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for index in 0..3usize {
        let session = case.session().await;
        let (task_name, order_sender) = (name.clone(), order_sender.clone());
        waiters.push(Aborting(tokio::spawn(async move {
            let guard = session.acquire(&task_name, Mode::Exclusive).await?;
            let _ = order_sender.send((index, guard.generation()));
            guard.release().await
        })));
        case.settle().await;
    }
    drop(order_sender);
    case.release(held, "the holder's release").await;

    let mut granted = Vec::new();
    for position in 0..3 {
        match tokio::time::timeout(case.handoff() * 2, order.recv()).await {
            Ok(Some(entry)) => granted.push(entry),
            Ok(None) | Err(_) => case.fail(format_args!(
                "only {position} of 3 queued waiters were granted (in order {granted:?}) within {:?} of each other",
                case.handoff() * 2
            )),
        }
    }
    let indices: Vec<usize> = granted.iter().map(|(index, _)| *index).collect();
    if indices != [0, 1, 2] {
        case.fail(format_args!(
            "waiters queued in order [0, 1, 2] were granted in order {indices:?}"
        ));
    }
    if !granted.windows(2).all(|pair| pair[0].1 < pair[1].1) {
        case.fail(format_args!(
            "generations not increasing in grant order: {granted:?}"
        ));
    }
    for waiter in waiters {
        match case
            .join(waiter, case.handoff(), "a FIFO waiter's release")
            .await
        {
            Ok(()) => {}
            Err(error) => case.fail(format_args!(
                "a FIFO waiter's acquire or release failed: {error}"
            )),
        }
    }
}

/// A dropped `acquire` future, an `acquire_timeout` that timed out and a
/// refused `try_acquire` leave nothing behind: after the holder releases, a
/// new contender is granted promptly. The sessions that gave up stay open
/// meanwhile, so a leftover entry could not vanish with its lease.
pub async fn no_stale_waiter<B: SuiteBackend>(backend: &B) {
    let case = Case::new(backend, "no_stale_waiter");
    let (holder, quitter, newcomer) = (
        case.session().await,
        case.session().await,
        case.session().await,
    );

    // A dropped acquire future.
    let name = case.name("dropped-future");
    let held = case
        .acquire(
            &holder,
            &name,
            Mode::Exclusive,
            case.handoff(),
            "the holder",
        )
        .await;
    let dropped = case.spawn_acquire(&quitter, &name, Mode::Exclusive);
    case.settle().await;
    case.still_waiting(&dropped, "the waiter about to be dropped");
    dropped.cancel().await;
    case.release(held, "the holder's release").await;
    let taken = case
        .acquire(
            &newcomer,
            &name,
            Mode::Exclusive,
            case.handoff(),
            "a new contender after a dropped acquire future (a stale waiter blocks it)",
        )
        .await;
    case.release(taken, "release").await;

    // acquire_timeout that timed out.
    let name = case.name("timed-out");
    let held = case
        .acquire(
            &holder,
            &name,
            Mode::Exclusive,
            case.handoff(),
            "the holder",
        )
        .await;
    let timed_out = case
        .call(
            quitter.acquire_timeout(&name, Mode::Exclusive, SETTLE),
            "acquire_timeout on a held lock",
        )
        .await;
    match timed_out {
        Err(LockError::Timeout { .. }) => {}
        other => case.fail(format_args!(
            "acquire_timeout on a lock held by another session: expected Timeout, got {}",
            describe(&other)
        )),
    }
    case.release(held, "the holder's release").await;
    let taken = case
        .acquire(
            &newcomer,
            &name,
            Mode::Exclusive,
            case.handoff(),
            "a new contender after acquire_timeout timed out (a stale waiter blocks it)",
        )
        .await;
    case.release(taken, "release").await;

    // Refused try_acquire.
    let name = case.name("tried");
    let held = case
        .acquire(
            &holder,
            &name,
            Mode::Exclusive,
            case.handoff(),
            "the holder",
        )
        .await;
    for _ in 0..3 {
        case.refused(&quitter, &name, Mode::Exclusive, "while held")
            .await;
    }
    case.release(held, "the holder's release").await;
    let taken = case
        .granted_now(
            &newcomer,
            &name,
            Mode::Exclusive,
            "after refused try_acquires and a release (try_acquire must never queue)",
        )
        .await;
    case.release(taken, "release").await;
}

/// Dropping a guard releases the hold (in the background, best effort): a
/// waiter is granted promptly.
pub async fn dropped_guard_releases<B: SuiteBackend>(backend: &B) {
    let case = Case::new(backend, "dropped_guard_releases");
    let (alice, bob) = (case.session().await, case.session().await);
    let name = case.name("dropped");
    let held = case
        .acquire(&alice, &name, Mode::Exclusive, case.handoff(), "the holder")
        .await;
    let waiting = case.spawn_acquire(&bob, &name, Mode::Exclusive);
    case.settle().await;
    case.still_waiting(&waiting, "the waiter, before the guard is dropped");
    drop(held);
    let (taken, _) = case
        .granted(
            waiting,
            case.handoff(),
            "the waiter, after the holder's guard was dropped",
        )
        .await;
    case.release(taken, "release").await;
}

/// Contending sessions never overlap in the critical section, and the
/// generations they see strictly increase in grant order.
pub async fn mutual_exclusion<B: SuiteBackend>(backend: &B) {
    const SESSIONS: usize = 6;
    const ROUNDS: usize = 4;
    let case = Case::new(backend, "mutual_exclusion");
    let name = case.name("contended");
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(Mutex::new(Vec::new()));
    let patience = case.handoff() * (SESSIONS * ROUNDS) as u32 + case.expiry();

    let mut tasks = Vec::new();
    for _ in 0..SESSIONS {
        let session = case.session().await;
        let (name, inside, overlaps, granted) = (
            name.clone(),
            inside.clone(),
            overlaps.clone(),
            granted.clone(),
        );
        tasks.push(Aborting(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = tokio::time::timeout(patience, session.acquire(&name, Mode::Exclusive))
                    .await
                    .map_err(|_| format!("not granted within {patience:?}"))?
                    .map_err(|error| format!("acquire failed: {error}"))?;
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                granted
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .push(guard.generation());
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard
                    .release()
                    .await
                    .map_err(|error| format!("release failed: {error}"))?;
            }
            Ok::<(), String>(())
        })));
    }
    for task in tasks {
        if let Err(message) = case
            .join(task, patience * ROUNDS as u32, "a contending session")
            .await
        {
            case.fail(format_args!("a contending session: {message}"));
        }
    }
    let overlaps = overlaps.load(Ordering::SeqCst);
    if overlaps != 0 {
        case.fail(format_args!(
            "{overlaps} grants found another holder inside the critical section"
        ));
    }
    let granted = granted
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone();
    if granted.len() != SESSIONS * ROUNDS || !granted.windows(2).all(|pair| pair[0] < pair[1]) {
        case.fail(format_args!(
            "generations not strictly increasing in grant order: {granted:?}"
        ));
    }
}

/// Only the owner releases: after session A's lease was killed and B took
/// the lock, A's `release()` fails and B still holds.
pub async fn owner_only_release<B: SuiteBackend>(backend: &B) {
    let case = Case::new(backend, "owner_only_release");
    let (alice, bob, carol) = (
        case.session().await,
        case.session().await,
        case.session().await,
    );
    let name = case.name("owned");
    let stale = case
        .acquire(
            &alice,
            &name,
            Mode::Exclusive,
            case.handoff(),
            "A's acquire",
        )
        .await;
    case.kill_lease(&alice).await;
    let current = case
        .acquire(
            &bob,
            &name,
            Mode::Exclusive,
            case.expiry(),
            "B's acquire after A's lease was killed",
        )
        .await;
    if current.generation() <= stale.generation() {
        case.fail(format_args!(
            "B's generation {} is not above A's {}",
            current.generation(),
            stale.generation()
        ));
    }
    let stale_generation = stale.generation();
    match case.call(stale.release(), "A's release after its lease was killed").await {
        Err(_) => {}
        Ok(()) => case.fail(format_args!(
            "A's release of generation {stale_generation} succeeded although B holds generation {}; release must be compare-and-delete by owner",
            current.generation()
        )),
    }
    if !current.is_valid() {
        case.fail("B's lease is not valid after A's stale release");
    }
    if let Err(error) = current.sequencer() {
        case.fail(format_args!(
            "B's sequencer() failed after A's stale release: {error}"
        ));
    }
    case.refused(
        &carol,
        &name,
        Mode::Exclusive,
        "after A's stale release (B must still hold it)",
    )
    .await;
    case.release(current, "B's release").await;
}

/// Killing a lease fires the guard's lease-lost signal, `sequencer()` then
/// fails with `LeaseLost`, and another session acquires with a higher
/// generation.
pub async fn lease_lost_on_expiry<B: SuiteBackend>(backend: &B) {
    let case = Case::new(backend, "lease_lost_on_expiry");
    let (alice, bob) = (case.session().await, case.session().await);
    let name = case.name("expiring");
    let lost = case
        .acquire(
            &alice,
            &name,
            Mode::Exclusive,
            case.handoff(),
            "A's acquire",
        )
        .await;
    let mut lease = lost.lease();
    if !lease.is_valid() {
        case.fail("a fresh hold's lease is not valid");
    }
    case.kill_lease(&alice).await;
    match tokio::time::timeout(case.expiry(), lease.lost()).await {
        Ok(LeaseState::Lost(_)) => {}
        Ok(other) => case.fail(format_args!(
            "the lease-lost signal of a killed lease ended as {other:?}, expected Lost"
        )),
        Err(_) => case.fail(format_args!(
            "the lease-lost signal did not fire within {:?} of the lease being killed",
            case.expiry()
        )),
    }
    if lost.is_valid() {
        case.fail("is_valid() is true after the lease-lost signal fired");
    }
    match lost.sequencer() {
        Err(LockError::LeaseLost { .. }) => {}
        Err(other) => case.fail(format_args!(
            "sequencer() after the lease was lost: expected LeaseLost, got {other}"
        )),
        Ok(sequencer) => case.fail(format_args!(
            "sequencer() still hands out `{sequencer}` after the lease was lost"
        )),
    }
    let next = case
        .acquire(
            &bob,
            &name,
            Mode::Exclusive,
            case.expiry(),
            "B's acquire after A's lease was lost",
        )
        .await;
    if next.generation() <= lost.generation() {
        case.fail(format_args!(
            "B's generation {} is not above the lost holder's {}",
            next.generation(),
            lost.generation()
        ));
    }
    case.release(next, "B's release").await;
    drop(lost);
}

/// Lock-delay: after a lease is lost without a release, nobody gets the
/// lock until the holder's `lock_delay` has passed; after a clean release
/// there is no delay.
pub async fn lock_delay<B: SuiteBackend>(backend: &B) {
    let case = Case::new(backend, "lock_delay");
    let delay = case.lock_delay();
    let delayed_options = case.options().with_lock_delay(delay);
    let tolerance = (delay / 20).min(Duration::from_millis(100));

    // A lost lease: the delay applies.
    let name = case.name("after-loss");
    let crashed = case.session_with(delayed_options.clone()).await;
    let (prober, next_holder) = (case.session().await, case.session().await);
    let lost = case
        .acquire(
            &crashed,
            &name,
            Mode::Exclusive,
            case.handoff(),
            "the holder with a lock-delay",
        )
        .await;
    let killed_at = Instant::now();
    case.kill_lease(&crashed).await;
    let mut probes = 0;
    while killed_at.elapsed() < delay * 6 / 10 {
        case.refused(
            &prober,
            &name,
            Mode::Exclusive,
            "during the lock-delay after a lost lease",
        )
        .await;
        probes += 1;
        tokio::time::sleep(delay / 10).await;
    }
    if probes == 0 {
        case.fail("killing the lease took most of the lock-delay; nothing was probed");
    }
    let patience = delay + case.expiry();
    let taken = case
        .acquire(
            &next_holder,
            &name,
            Mode::Exclusive,
            patience,
            "after the lock-delay",
        )
        .await;
    let waited = killed_at.elapsed();
    if waited + tolerance < delay {
        case.fail(format_args!(
            "granted {waited:?} after the lease was killed; the lock-delay is {delay:?}"
        ));
    }
    if taken.generation() <= lost.generation() {
        case.fail(format_args!(
            "the generation after the lock-delay {} is not above the lost holder's {}",
            taken.generation(),
            lost.generation()
        ));
    }
    case.release(taken, "release").await;
    drop(lost);

    // A clean release: no delay.
    let name = case.name("after-release");
    let careful = case.session_with(delayed_options).await;
    let released = case
        .acquire(
            &careful,
            &name,
            Mode::Exclusive,
            case.handoff(),
            "the holder with a lock-delay",
        )
        .await;
    case.release(released, "a clean release").await;
    let bound = (delay / 2).min(case.handoff());
    let released_at = Instant::now();
    let taken = case
        .acquire(
            &next_holder,
            &name,
            Mode::Exclusive,
            bound,
            "right after a clean release (no lock-delay applies)",
        )
        .await;
    if released_at.elapsed() >= delay {
        case.fail("a clean release was followed by a lock-delay");
    }
    case.release(taken, "release").await;
}

/// The inspection API shows what the sessions did: a held lock shows its
/// holder with the guard's mode and generation, a waiter is counted, a
/// hand-off shows the new generation, a released lock shows no holder and
/// leaves the list, and the prefix filter is a plain string prefix of the
/// whole name (`a/b` selects `a/b` and `a/bc`, never `ab`).
pub async fn inspection<B: SuiteInspect>(backend: &B) {
    let owned_case = Case::new(backend, "inspection");
    let case = &owned_case;
    let inspector = backend.inspector();
    let (alice, bob) = (case.session().await, case.session().await);
    let (a_b, ab, a_bc) = (case.name("a/b"), case.name("ab"), case.name("a/bc"));
    let inspect = |name: LockName| async move {
        match case.call(inspector.inspect(&name), "inspect").await {
            Ok(info) => info,
            Err(error) => case.fail(format_args!("inspect `{name}` failed: {error}")),
        }
    };
    let free = inspect(a_b.clone()).await;
    if !free.holders.is_empty() || !free.is_idle() {
        case.fail(format_args!("a lock never taken shows {free:?}"));
    }

    let held = case
        .acquire(&alice, &a_b, Mode::Exclusive, case.handoff(), "acquire a/b")
        .await;
    let info = inspect(a_b.clone()).await;
    case.shows_only(&info, Mode::Exclusive, held.generation(), "a held lock");
    if info.holders[0]
        .lease_left
        .is_some_and(|left| left > case.ttl + Duration::from_secs(1))
    {
        case.fail(format_args!(
            "lease time left {:?} is more than the TTL {:?}",
            info.holders[0].lease_left, case.ttl
        ));
    }
    if info.lock_delay_left.is_some() {
        case.fail(format_args!("a held lock shows a lock-delay: {info:?}"));
    }

    // A waiter is counted once its request reached the service.
    let waiter = case.spawn_acquire(&bob, &a_b, Mode::Exclusive);
    let deadline = Instant::now() + case.handoff() + SETTLE * 4;
    loop {
        let info = inspect(a_b.clone()).await;
        match &info.waiters {
            Some(waiters) if waiters.len() == 1 && waiters[0].mode == Mode::Exclusive => break,
            Some(waiters) if waiters.len() > 1 => {
                case.fail(format_args!("one waiter shows as {waiters:?}"))
            }
            _ if Instant::now() >= deadline => case.fail(format_args!(
                "a queued acquire did not show as a waiter within {:?}: {info:?}",
                case.handoff() + SETTLE * 4
            )),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    case.release(held, "release a/b to the waiter").await;
    let (handed, _) = case.granted(waiter, case.handoff() * 4, "the waiter").await;
    let info = inspect(a_b.clone()).await;
    case.shows_only(
        &info,
        Mode::Exclusive,
        handed.generation(),
        "after the hand-off",
    );
    if info
        .waiters
        .as_ref()
        .is_some_and(|waiters| !waiters.is_empty())
    {
        case.fail(format_args!(
            "the granted waiter still shows as waiting: {info:?}"
        ));
    }

    let others = [
        case.acquire(&alice, &ab, Mode::Shared, case.handoff(), "acquire ab")
            .await,
        case.acquire(
            &alice,
            &a_bc,
            Mode::Exclusive,
            case.handoff(),
            "acquire a/bc",
        )
        .await,
    ];
    let shared = inspect(ab.clone()).await;
    case.shows_only(
        &shared,
        Mode::Shared,
        others[0].generation(),
        "a shared hold",
    );
    if backend.can_list() {
        let listed = |prefix: String| async move {
            match case.call(inspector.list(&prefix), "list").await {
                Ok(locks) => locks.into_iter().map(|info| info.name).collect::<Vec<_>>(),
                Err(error) => case.fail(format_args!("list `{prefix}` failed: {error}")),
            }
        };
        let root = case.prefix.clone();
        let expect = |got: Vec<LockName>, want: &[&LockName], prefix: &str| {
            let want: Vec<LockName> = want.iter().map(|name| (*name).clone()).collect();
            if got != want {
                case.fail(format_args!(
                    "list `{prefix}` gave {got:?}, expected {want:?} (sorted)"
                ));
            }
        };
        expect(
            listed(format!("{root}/a/")).await,
            &[&a_b, &a_bc],
            "<case>/a/",
        );
        expect(
            listed(format!("{root}/a/b")).await,
            &[&a_b, &a_bc],
            "<case>/a/b",
        );
        expect(listed(format!("{root}/ab")).await, &[&ab], "<case>/ab");
        expect(
            listed(format!("{root}/")).await,
            &[&a_b, &a_bc, &ab],
            "<case>/",
        );
        expect(listed(format!("{root}/a/bc/")).await, &[], "<case>/a/bc/");
    }

    case.release(handed, "release a/b").await;
    for guard in others {
        case.release(guard, "release").await;
    }
    let info = inspect(a_b.clone()).await;
    if !info.holders.is_empty() || !info.is_idle() {
        case.fail(format_args!("a released lock still shows {info:?}"));
    }
    if backend.can_list() {
        let prefix = format!("{}/", case.prefix);
        match case.call(inspector.list(&prefix), "list").await {
            Ok(locks) if locks.is_empty() => {}
            Ok(locks) => case.fail(format_args!("released locks are still listed: {locks:?}")),
            Err(error) => case.fail(format_args!("list failed: {error}")),
        }
    }
}

/// After `raise_floor(name, mark)` the next grant of `name` is above `mark`
/// (the recovery after the lock service lost its counter); raising to a
/// lower mark lowers nothing; a mark no generation can pass (`u64::MAX`)
/// is refused with `OutOfRange`, and the next grant is still an ordinary
/// one.
pub async fn raise_floor<B: SuiteRaiseFloor>(backend: &B) {
    let case = Case::new(backend, "raise_floor");
    let floor = backend.floor();
    let session = case.session().await;
    let name = case.name("floor");
    let take = |what: &'static str| {
        let (session, name, case) = (&session, &name, &case);
        async move {
            let guard = case
                .acquire(session, name, Mode::Exclusive, case.handoff(), what)
                .await;
            let generation = guard.generation().get();
            case.release(guard, what).await;
            generation
        }
    };
    let first = take("the first grant").await;

    let raise = |mark: u64| {
        let (name, case) = (&name, &case);
        async move {
            match case
                .call(floor.raise_floor(name, mark), "raise_floor")
                .await
            {
                Ok(raised) if raised.after >= raised.before => raised,
                Ok(raised) => case.fail(format_args!(
                    "raise_floor(`{name}`, {mark}) lowered the floor: {raised:?}"
                )),
                Err(error) => case.fail(format_args!(
                    "raise_floor(`{name}`, {mark}) failed: {error}"
                )),
            }
        }
    };
    let mark = first.saturating_add(backend.floor_gap());
    let raised = raise(mark).await;
    if raised.after < mark {
        case.fail(format_args!(
            "raise_floor(`{name}`, {mark}) reported {raised:?}: `after` must be at least the mark"
        ));
    }
    let second = take("the grant after the raise").await;
    if second <= mark {
        case.fail(format_args!(
            "the grant after raise_floor(`{name}`, {mark}) has generation {second}, not above the mark"
        ));
    }

    raise(first).await;
    let third = take("the grant after a lower mark").await;
    if third <= second {
        case.fail(format_args!(
            "a raise to the lower mark {first} took generations back: {third} after {second}"
        ));
    }

    match case
        .call(floor.raise_floor(&name, u64::MAX), "raise_floor")
        .await
    {
        Err(RaiseFloorError::OutOfRange { mark: u64::MAX, .. }) => {}
        other => case.fail(format_args!(
            "raise_floor(`{name}`, u64::MAX) must be refused as out of range, got {other:?}"
        )),
    }
    let fourth = take("the grant after a refused raise").await;
    if fourth <= third || fourth >= u64::MAX / 2 {
        case.fail(format_args!(
            "after a refused raise the next generation is {fourth}, after {third}: the refusal changed the floor"
        ));
    }
}

/// One case's context: the suite, the backend, the case name, the
/// lock-name prefix and the time bounds. The recipe suite runs its cases
/// in it too.
pub(crate) struct Case<'b, B: SuiteBackend> {
    suite: &'static str,
    pub(crate) backend: &'b B,
    case: &'static str,
    prefix: String,
    ttl: Duration,
}

impl<'b, B: SuiteBackend> Case<'b, B> {
    fn new(backend: &'b B, case: &'static str) -> Self {
        Case::in_suite("lock suite", backend, case)
    }

    /// A case of `suite` (the name its failure messages start with).
    pub(crate) fn in_suite(suite: &'static str, backend: &'b B, case: &'static str) -> Self {
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        Case {
            suite,
            backend,
            case,
            prefix: format!("palisade-suite/{}-{call}/{case}", run_id()),
            ttl: backend.min_ttl(),
        }
    }

    /// Stops the case with a message naming the suite, the backend and the
    /// case.
    pub(crate) fn fail(&self, message: impl fmt::Display) -> ! {
        panic!(
            "{} [{}] {}: {message}",
            self.suite,
            self.backend.name(),
            self.case
        )
    }

    /// `info` shows exactly one holder, in `mode` with `generation`.
    fn shows_only(&self, info: &LockInfo, mode: Mode, generation: Generation, what: &str) {
        match info.holders.as_slice() {
            [holder] if holder.mode == mode && holder.generation == generation => {}
            holders => self.fail(format_args!(
                "{what}: expected one {mode} holder with generation {generation}, inspection shows {holders:?}"
            )),
        }
    }

    /// A lock name unique to this run and case.
    pub(crate) fn name(&self, local: &str) -> LockName {
        let text = format!("{}/{local}", self.prefix);
        LockName::new(text.as_str())
            .unwrap_or_else(|error| self.fail(format_args!("bad lock name `{text}`: {error}")))
    }

    /// Session options with the backend's shortest TTL; a quarter of it as
    /// the safety margin and as the keep-alive interval, so two renewals can
    /// be late before validity is in danger.
    pub(crate) fn options(&self) -> SessionOptions {
        let options = SessionOptions::default()
            .with_ttl(self.ttl)
            .with_safety_margin(self.ttl / 4)
            .with_keepalive_interval(self.ttl / 4);
        if let Err(reason) = options.validate() {
            self.fail(format_args!(
                "min_ttl {:?} gives invalid session options: {reason}",
                self.ttl
            ));
        }
        options
    }

    /// How long a handoff may take: a release reaching the next waiter, an
    /// uncontended acquire.
    pub(crate) fn handoff(&self) -> Duration {
        (self.ttl / 2).max(Duration::from_millis(500))
    }

    /// How long a killed lease may take to be reported lost or to free its
    /// lock.
    pub(crate) fn expiry(&self) -> Duration {
        self.ttl * 2 + Duration::from_secs(2)
    }

    /// The lock-delay the lock-delay case uses.
    fn lock_delay(&self) -> Duration {
        self.ttl.max(Duration::from_secs(1))
    }

    /// The bound on a request that should answer at once (`try_acquire`,
    /// `release`): long enough for any loaded machine, short enough that a
    /// hang fails the case rather than the whole test run.
    fn call_bound(&self) -> Duration {
        self.expiry() + Duration::from_secs(5)
    }

    async fn session(&self) -> Arc<B::Lock> {
        self.session_with(self.options()).await
    }

    async fn session_with(&self, options: SessionOptions) -> Arc<B::Lock> {
        match tokio::time::timeout(self.call_bound(), self.backend.session(options)).await {
            Ok(session) => Arc::new(session),
            Err(_) => self.fail(format_args!(
                "opening a session took more than {:?}",
                self.call_bound()
            )),
        }
    }

    async fn kill_lease(&self, session: &B::Lock) {
        if tokio::time::timeout(self.call_bound(), self.backend.kill_lease(session))
            .await
            .is_err()
        {
            self.fail(format_args!(
                "kill_lease did not return within {:?}",
                self.call_bound()
            ));
        }
    }

    /// Runs a request that should answer at once.
    async fn call<T>(&self, request: impl Future<Output = T>, what: &str) -> T {
        match tokio::time::timeout(self.call_bound(), request).await {
            Ok(answer) => answer,
            Err(_) => self.fail(format_args!(
                "{what} did not answer within {:?}",
                self.call_bound()
            )),
        }
    }

    /// Acquires, failing the case unless granted within `within`.
    async fn acquire(
        &self,
        session: &B::Lock,
        name: &LockName,
        mode: Mode,
        within: Duration,
        what: &str,
    ) -> GuardOf<B> {
        match tokio::time::timeout(within, session.acquire(name, mode)).await {
            Ok(Ok(guard)) => guard,
            Ok(Err(error)) => self.fail(format_args!(
                "{what}: acquire of `{name}` in {mode} mode failed: {error}"
            )),
            Err(_) => self.fail(format_args!(
                "{what}: acquire of `{name}` in {mode} mode was not granted within {within:?}"
            )),
        }
    }

    async fn try_acquire(
        &self,
        session: &B::Lock,
        name: &LockName,
        mode: Mode,
        what: &str,
    ) -> Option<GuardOf<B>> {
        match self.call(session.try_acquire(name, mode), what).await {
            Ok(guard) => guard,
            Err(error) => self.fail(format_args!(
                "{what}: try_acquire of `{name}` in {mode} mode failed: {error}"
            )),
        }
    }

    /// `try_acquire` must succeed now.
    async fn granted_now(
        &self,
        session: &B::Lock,
        name: &LockName,
        mode: Mode,
        what: &str,
    ) -> GuardOf<B> {
        match self.try_acquire(session, name, mode, what).await {
            Some(guard) => guard,
            None => self.fail(format_args!(
                "{what}: try_acquire of `{name}` in {mode} mode was refused, expected a grant"
            )),
        }
    }

    /// `try_acquire` must be refused now.
    async fn refused(&self, session: &B::Lock, name: &LockName, mode: Mode, what: &str) {
        if let Some(guard) = self.try_acquire(session, name, mode, what).await {
            self.fail(format_args!(
                "{what}: try_acquire of `{name}` in {mode} mode was granted (generation {}), expected a refusal",
                guard.generation()
            ));
        }
    }

    async fn release(&self, guard: GuardOf<B>, what: &str) {
        let generation = guard.generation();
        if let Err(error) = self.call(guard.release(), what).await {
            self.fail(format_args!(
                "{what}: release of generation {generation} failed: {error}"
            ));
        }
    }

    /// Starts `acquire` in a task; the answer carries when it was granted.
    fn spawn_acquire(
        &self,
        session: &Arc<B::Lock>,
        name: &LockName,
        mode: Mode,
    ) -> Aborting<Result<(GuardOf<B>, Instant), LockError>> {
        let (session, name) = (Arc::clone(session), name.clone());
        Aborting(tokio::spawn(async move {
            let guard = session.acquire(&name, mode).await?;
            Ok((guard, Instant::now()))
        }))
    }

    async fn settle(&self) {
        tokio::time::sleep(SETTLE).await;
    }

    /// A spawned `acquire` must still be waiting.
    fn still_waiting<T>(&self, waiter: &Aborting<T>, what: &str) {
        if waiter.0.is_finished() {
            self.fail(format_args!(
                "{what}: expected to still be waiting, but its acquire already returned"
            ));
        }
    }

    /// A spawned `acquire` must be granted within `within`.
    async fn granted(
        &self,
        waiter: Aborting<Result<(GuardOf<B>, Instant), LockError>>,
        within: Duration,
        what: &str,
    ) -> (GuardOf<B>, Instant) {
        match self.join(waiter, within, what).await {
            Ok(granted) => granted,
            Err(error) => self.fail(format_args!("{what}: acquire failed: {error}")),
        }
    }

    /// Waits for a spawned task's result.
    async fn join<T>(&self, mut task: Aborting<T>, within: Duration, what: &str) -> T {
        match tokio::time::timeout(within, &mut task.0).await {
            Ok(Ok(value)) => value,
            Ok(Err(error)) => self.fail(format_args!("{what}: the task failed: {error}")),
            Err(_) => self.fail(format_args!("{what}: not done within {within:?}")),
        }
    }
}

/// A spawned task that is aborted when dropped, so a failing case leaves no
/// waiter running into the next one. Cancelling it drops its `acquire`
/// future: the suite's way to play a caller that gave up.
struct Aborting<T>(JoinHandle<T>);

impl<T> Aborting<T> {
    /// Drops the task's future and waits until it is gone.
    async fn cancel(self) {
        self.0.abort();
        let mut this = self;
        let _ = (&mut this.0).await;
    }
}

impl<T> Drop for Aborting<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A short description of an unexpected outcome.
fn describe<T, E: fmt::Display>(outcome: &Result<T, E>) -> String {
    match outcome {
        Ok(_) => "success".to_owned(),
        Err(error) => format!("error `{error}`"),
    }
}

/// A random id for this process's run, so lock names never collide with an
/// earlier run against the same server.
fn run_id() -> &'static str {
    static RUN_ID: OnceLock<String> = OnceLock::new();
    RUN_ID.get_or_init(|| {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u128(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|elapsed| elapsed.as_nanos())
                .unwrap_or_default(),
        );
        hasher.write_u32(std::process::id());
        format!("{:012x}", hasher.finish() & 0xffff_ffff_ffff)
    })
}
