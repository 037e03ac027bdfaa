//! The storage engine conformance suite.
//!
//! Every [`Engine`] of `palisade-store` runs the same cases through one
//! call, the way every lock backend runs [`lock_suite`](crate::lock_suite):
//!
//! ```text
//! #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
//! async fn conformance() {
//!     let factory = MyFactory::start().await; // e.g. spawns a real database
//!     palisade_testkit::engine_suite::test_all(factory).await;
//! }
//! ```
//!
//! The suite calls the engine directly (`Arc<dyn Engine>`), not through
//! `Store`: what the store validates before an engine sees a request
//! (limits, empty keys, a shared sequencer on a write, a read for another
//! lock) is tested in the store crate. So the suite only sends what the
//! store would pass on: writes under exclusive sequencers, non-empty keys,
//! reads whose sequencer names the lock read.
//!
//! An engine is done when the suite passes. Each case is also a
//! `pub async fn` of its own, so an engine can run one case while it is
//! being debugged.
//!
//! # Cases
//!
//! The numbers are those of the "To ensure correctness" list on
//! `palisade_store::Engine`.
//!
//! | case | checks |
//! | --- | --- |
//! | [`health_and_info`] | `health` is `Ok`; `info` names the engine and its durability |
//! | [`unseen_lock_has_marks_zero`] | marks 0 for a lock never seen, and a plain read keeps them 0 (2, 7) |
//! | [`rule_table`] | every row of `palisade_core::marks::RULE_CASES` through `admit`, `write` and fenced `read`; a refusal carries the marks it was decided against (1, 2, 3, 7) |
//! | [`marks_never_go_down`] | a random mix of writes, reads and admits against the `Marks::admit` model (2, 3) |
//! | [`locks_are_isolated`] | keys, marks and idempotency ids of `a`, `a/b`, `ab` never mix (1, 5) |
//! | [`refusal_changes_nothing`] | stale write, stale read, stale admit, CAS mismatch, reused id: data, marks and idempotency records unchanged, and every record where the engine can list them (`Engine::dump`) (3, 5) |
//! | [`batches_are_all_or_nothing`] | a batch failing at its last op leaves no op and no mark behind; an empty batch only raises the mark (1, 3, 6) |
//! | [`compare_and_swap`] | absent/present expectations, delete via CAS, CAS against earlier ops of the same request, per-op results (6) |
//! | [`idempotent_replay`] | a retry returns the original outcome with `replayed` and the same `commit_seq`, even after a newer holder; another fingerprint is refused (5, 8) |
//! | [`idempotency_window`] | the last `window` ids of a lock replay; an older one either replays exactly or applies anew; other locks do not evict (5) |
//! | [`concurrent_retries_apply_once`] | the same request sent by many tasks at once is applied once, every other answer is its replay (1, 5) |
//! | [`fenced_reads`] | a shared read raises `H_shared` and fences older writers; an exclusive read raises `H_excl`; a plain read changes nothing (7) |
//! | [`admit_fences_without_data`] | exclusive and shared admits raise the marks, refuse stale sequencers, touch no data (2, 3, 7) |
//! | [`commit_seq_increases`] | strictly increasing across locks for writes acknowledged one after another; unique (8) |
//! | [`concurrent_writers`] | tasks with random generations on one lock (and readers): accepted writes in `commit_seq` order never go down in generation, the last one holds the value, every accepted write is visible and no refused one is (1, 2, 3, 8) |
//! | [`over_limit_is_refused_whole`] | a batch beyond the engine's own [`Engine::limits`] is `TooLarge` and writes nothing (9) |
//! | [`raise_cap`] | a capped write at its cap is accepted, one above it refused with `RaiseTooLarge` and the marks of the step, by the count on a counter mark (the higher mark decides) and by the clock on a clock mark or none; the refusal changes nothing; a retry of a recorded write is answered before the cap (3, 5, 10) |
//! | [`durable_across_reopen`] | everything acknowledged (data, both marks, idempotency records) is there after [`EngineFactory::reopen`]; stale holders stay refused; `commit_seq` keeps increasing (4, 5, 8) |
//!
//! # Time
//!
//! Every engine call is bounded by [`CALL_BOUND`], generous for a loaded
//! 2-core CI machine, so a hang fails the case instead of the whole run.
//! Nothing in the suite sleeps.
//!
//! Lock names start with a random per-run prefix, so reruns against the same
//! database never collide. The random cases print their seed. Every failure
//! message starts with `engine suite [<engine>] <case>:`.

use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use palisade_core::marks::RULE_CASES;
use palisade_core::{Generation, LockName, Mode, RaiseCap, Sequencer};
use palisade_store::{
    Applied, Engine, Marks, Op, OpResult, RaiseLimit, Read, ReadRequest, Refused, RequestId,
    StoreError, StoredRecord, WriteRequest,
};
use tokio::time::Instant;

/// How the suite opens an engine.
///
/// `open` may give every engine fresh storage or let them share one
/// database: the suite's lock names never collide.
pub trait EngineFactory: Send + Sync + 'static {
    /// What the factory needs to reopen an engine's storage: sled's
    /// directory, or `()` where the factory's database is the storage.
    type Storage: Send + Sync + 'static;

    /// A short name for messages (`sled`, `postgres`, `etcd`).
    fn name(&self) -> &'static str;

    /// Opens an engine configured with `options`.
    fn open(
        &self,
        options: EngineOptions,
    ) -> impl Future<Output = (Arc<dyn Engine>, Self::Storage)> + Send;

    /// Crashes `engine` the hardest way the engine allows and opens a new
    /// one over the same storage, with the same options: sled drops the
    /// engine and reopens its directory; a database engine `kill -9`s the
    /// database server, restarts it and connects a new engine. The suite
    /// holds no other reference to `engine`.
    fn reopen(
        &self,
        engine: Arc<dyn Engine>,
        storage: &mut Self::Storage,
    ) -> impl Future<Output = Arc<dyn Engine>> + Send;
}

/// What the suite asks of an engine it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOptions {
    /// How many idempotency ids each lock must remember
    /// (`StoreConfig::idempotency_window`).
    pub idempotency_window: u32,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            idempotency_window: 1024,
        }
    }
}

/// The bound on one engine call: long enough for any loaded machine (an
/// fsync queue, a database checkpoint), short enough that a hang fails the
/// case rather than the whole test run.
pub const CALL_BOUND: Duration = Duration::from_secs(60);

/// Runs each named case against `factory`, in order.
macro_rules! run_cases {
    ($factory:expr; $($case:ident),* $(,)?) => {
        $( run($factory, stringify!($case), $case($factory)).await; )*
    };
}

/// Runs every case, in order, printing each case's name before it runs.
///
/// Panics with a message naming the engine and the case at the first
/// violation.
pub async fn test_all<F: EngineFactory>(factory: F) {
    let started = Instant::now();
    let factory = &factory;
    run_cases!(
        factory;
        health_and_info,
        unseen_lock_has_marks_zero,
        rule_table,
        marks_never_go_down,
        locks_are_isolated,
        refusal_changes_nothing,
        batches_are_all_or_nothing,
        compare_and_swap,
        idempotent_replay,
        idempotency_window,
        concurrent_retries_apply_once,
        fenced_reads,
        admit_fences_without_data,
        commit_seq_increases,
        concurrent_writers,
        over_limit_is_refused_whole,
        raise_cap,
        durable_across_reopen,
    );
    println!(
        "engine suite [{}]: all cases passed in {:.1?}",
        factory.name(),
        started.elapsed()
    );
}

async fn run<F: EngineFactory>(factory: &F, case: &str, body: impl Future<Output = ()>) {
    println!("engine suite [{}] {case}: running", factory.name());
    let started = Instant::now();
    body.await;
    println!(
        "engine suite [{}] {case}: ok ({:.1?})",
        factory.name(),
        started.elapsed()
    );
}

/// The engine answers `health` and describes itself.
pub async fn health_and_info<F: EngineFactory>(factory: &F) {
    let case = Case::open(factory, "health_and_info").await;
    case.bounded(case.engine.health(), "health")
        .await
        .unwrap_or_else(|error| case.fail(format_args!("health failed: {error}")));
    let info = case.engine.info();
    if info.name.is_empty() || info.durability.is_empty() || info.location.is_empty() {
        case.fail(format_args!(
            "info() leaves a field empty: {info:?} (name, durability and location are all shown to operators)"
        ));
    }
}

/// A lock never seen has marks 0, and a plain read of it changes nothing.
pub async fn unseen_lock_has_marks_zero<F: EngineFactory>(factory: &F) {
    let case = Case::open(factory, "unseen_lock_has_marks_zero").await;
    let lock = case.lock("never-seen");
    case.expect_marks(&lock, Marks::ZERO, "a lock never seen")
        .await;
    let read = case.read_ok(&lock, b"k", None, "a plain read").await;
    if read.value.is_some() || read.marks != Marks::ZERO {
        case.fail(format_args!(
            "a plain read of a lock never seen answered value {:?} and {}; expected nothing and marks 0",
            read.value.as_deref(),
            read.marks
        ));
    }
    case.expect_marks(&lock, Marks::ZERO, "after a plain read")
        .await;
}

/// Every row of the shared rule table, through each entry point that fences.
pub async fn rule_table<F: EngineFactory>(factory: &F) {
    let case = Case::open(factory, "rule_table").await;
    for (index, rule) in RULE_CASES.iter().enumerate() {
        let before = rule.before_marks();
        let vias: &[&str] = match rule.mode {
            Mode::Exclusive => &["admit", "write", "read"],
            Mode::Shared => &["admit", "read"],
        };
        for via in vias {
            let lock = case.lock(&format!("rule-{index}-{via}"));
            case.raise_to(&lock, before).await;
            let sequencer = Sequencer::new(lock.clone(), rule.mode, rule.generation());
            let what = format!("rule {rule:?} through {via}");
            let outcome: Result<Marks, Refused> = match *via {
                "admit" => case.admit(&sequencer, &what).await,
                "write" => case
                    .write(&sequencer, vec![put("k", "v")], None, &what)
                    .await
                    .map(|applied| applied.marks),
                _ => case
                    .read(&lock, b"k", Some(&sequencer), &what)
                    .await
                    .map(|read| read.marks),
            };
            match (rule.expected_marks(), outcome) {
                (Some(after), Ok(marks)) if marks == after => {}
                (None, Err(Refused::Stale { marks, .. })) if marks == before => {}
                (expected, outcome) => case.fail(format_args!(
                    "{what}: expected {}, got {outcome:?}",
                    match expected {
                        Some(after) => format!("acceptance with {after}"),
                        None => format!("a stale refusal carrying {before}"),
                    }
                )),
            }
            let after = rule.expected_marks().unwrap_or(before);
            case.expect_marks(&lock, after, &what).await;
            let written = case.value(&lock, "k").await;
            let wrote = *via == "write" && rule.expected_marks().is_some();
            if written.is_some() != wrote {
                case.fail(format_args!(
                    "{what}: key `k` is {written:?} afterwards; expected it {}",
                    if wrote { "written" } else { "absent" }
                ));
            }
        }
    }
}

/// A random mix of requests on a few locks, each checked against the
/// [`Marks::admit`] model: accepted iff the model accepts, marks exactly the
/// model's, never lower than before.
pub async fn marks_never_go_down<F: EngineFactory>(factory: &F) {
    let case = Case::open(factory, "marks_never_go_down").await;
    let mut random = Random::new(&case);
    let locks: Vec<LockName> = (0..3).map(|i| case.lock(&format!("l{i}"))).collect();
    let mut model = vec![Marks::ZERO; locks.len()];
    for step in 0..120 {
        let which = random.below(locks.len() as u64) as usize;
        let lock = &locks[which];
        let generation = generation(1 + random.below(30));
        let kind = random.below(4);
        let mode = if kind == 3 {
            Mode::Shared
        } else {
            Mode::Exclusive
        };
        let sequencer = Sequencer::new(lock.clone(), mode, generation);
        let what = format!(
            "step {step}: {sequencer} ({})",
            ["write", "read", "admit", "shared read"][kind as usize]
        );
        let outcome = match kind {
            0 => case
                .write(&sequencer, vec![put("k", &step.to_string())], None, &what)
                .await
                .map(|applied| applied.marks),
            2 => case.admit(&sequencer, &what).await,
            _ => case
                .read(lock, b"k", Some(&sequencer), &what)
                .await
                .map(|read| read.marks),
        };
        let before = model[which];
        match (before.admit(mode, generation), outcome) {
            (Some(after), Ok(marks)) if marks == after => model[which] = after,
            (None, Err(Refused::Stale { marks, .. })) if marks == before => {}
            (expected, outcome) => case.fail(format_args!(
                "{what} (seed {}): marks before {before}, the model says {expected:?}, the engine {outcome:?}",
                random.seed
            )),
        }
    }
    for (lock, expected) in locks.iter().zip(&model) {
        case.expect_marks(lock, *expected, "after the random mix")
            .await;
    }
}

/// Locks whose names share prefixes have separate keyspaces, marks and
/// idempotency ids.
pub async fn locks_are_isolated<F: EngineFactory>(factory: &F) {
    let case = Case::open(factory, "locks_are_isolated").await;
    let a = case.lock("a");
    let ab_slash = case.lock("a/b");
    let ab = case.lock("ab");
    case.write_ok(
        &excl(&a, 1),
        vec![put("b/c", "lock a, key b/c")],
        None,
        "write to a",
    )
    .await;
    case.write_ok(
        &excl(&ab_slash, 9),
        vec![put("c", "lock a/b, key c")],
        None,
        "write to a/b",
    )
    .await;
    case.write_ok(
        &excl(&ab, 5),
        vec![put("/c", "lock ab, key /c")],
        None,
        "write to ab",
    )
    .await;
    for (lock, key, expected) in [
        (&a, "b/c", Some("lock a, key b/c")),
        (&ab_slash, "c", Some("lock a/b, key c")),
        (&ab, "/c", Some("lock ab, key /c")),
        (&a, "c", None),
        (&a, "b", None),
        (&ab_slash, "b/c", None),
        (&ab, "c", None),
    ] {
        case.expect_value(lock, key, expected, "keyspaces are per lock")
            .await;
    }
    case.expect_marks(
        &a,
        marks(1, 0),
        "generation 9 on a/b and 5 on ab do not fence a",
    )
    .await;
    case.expect_marks(&ab_slash, marks(9, 0), "lock a/b").await;
    case.expect_marks(&ab, marks(5, 0), "lock ab").await;
    case.write_ok(&excl(&a, 2), vec![put("k", "v")], None, "a's next holder")
        .await;
    // The same id on another lock is another request.
    let id = request_id("shared-id");
    case.write_ok(&excl(&a, 2), vec![put("id", "a")], Some(&id), "id on a")
        .await;
    let other = case
        .write_ok(
            &excl(&ab, 5),
            vec![put("id", "ab")],
            Some(&id),
            "the same id on ab",
        )
        .await;
    if other.replayed {
        case.fail("the same request id on another lock was answered as a replay");
    }
    case.expect_value(&ab, "id", Some("ab"), "the same id on another lock applies")
        .await;
}

/// A refused request leaves data, marks and idempotency records as they
/// were, whatever the reason.
pub async fn refusal_changes_nothing<F: EngineFactory>(factory: &F) {
    let case = Case::open(factory, "refusal_changes_nothing").await;
    let lock = case.lock("L");
    let recorded = request_id("recorded");
    let original = case
        .write_ok(
            &excl(&lock, 7),
            vec![put("k", "v")],
            Some(&recorded),
            "setup write",
        )
        .await;
    case.read_ok(
        &lock,
        b"k",
        Some(&shared_seq(&lock, 9)),
        "setup shared read",
    )
    .await;
    let before = marks(7, 9);
    case.expect_marks(&lock, before, "after setup").await;
    // Every record of the engine, where it can list them (`Engine::dump`).
    let snapshot = case.snapshot().await;

    let check_unchanged = |what: String| {
        let case = &case;
        let lock = &lock;
        let snapshot = &snapshot;
        async move {
            case.expect_marks(lock, before, &what).await;
            case.expect_value(lock, "k", Some("v"), &what).await;
            case.expect_value(lock, "new", None, &what).await;
            case.expect_unchanged(snapshot, &what).await;
        }
    };

    // Stale writes: below H_excl, and at H_excl but below H_shared.
    for generation in [6, 8] {
        let id = request_id(&format!("stale-{generation}"));
        let what = format!("stale write at generation {generation}");
        match case
            .write(
                &excl(&lock, generation),
                vec![put("k", "late"), put("new", "late")],
                Some(&id),
                &what,
            )
            .await
        {
            Err(Refused::Stale {
                lock: refused,
                mode: Mode::Exclusive,
                presented,
                marks,
                regression: false,
            }) if refused == lock && presented.get() == generation && marks == before => {}
            other => case.fail(format_args!(
                "{what}: expected a stale refusal naming the lock, the generation and {before}, got {other:?}"
            )),
        }
        check_unchanged(what).await;
    }
    // Stale read and stale admit, in both modes.
    for sequencer in [shared_seq(&lock, 6), excl(&lock, 8)] {
        let what = format!("stale read with {sequencer}");
        let outcome = case.read(&lock, b"k", Some(&sequencer), &what).await;
        if !matches!(outcome, Err(Refused::Stale { marks, .. }) if marks == before) {
            case.fail(format_args!(
                "{what}: expected a stale refusal, got {outcome:?}"
            ));
        }
        check_unchanged(what).await;
        let what = format!("stale admit with {sequencer}");
        let outcome = case.admit(&sequencer, &what).await;
        if !matches!(outcome, Err(Refused::Stale { marks, .. }) if marks == before) {
            case.fail(format_args!(
                "{what}: expected a stale refusal, got {outcome:?}"
            ));
        }
        check_unchanged(what).await;
    }
    // A CAS mismatch at a generation that would raise the mark.
    let cas_id = request_id("cas");
    let cas = vec![put("new", "x"), cas("k", Some("w"), Some("x"))];
    match case
        .write(&excl(&lock, 20), cas.clone(), Some(&cas_id), "failing CAS")
        .await
    {
        Err(Refused::CasMismatch {
            op_index: 1,
            current,
        }) if current.as_deref() == Some(&b"v"[..]) => {}
        other => case.fail(format_args!(
            "failing CAS: expected a mismatch at op 1 showing `v`, got {other:?}"
        )),
    }
    check_unchanged("failing CAS".to_owned()).await;
    // A reused id with another request: refused, and the record stays.
    let what = "a recorded id reused for other ops";
    match case
        .write(
            &excl(&lock, 30),
            vec![put("new", "y")],
            Some(&recorded),
            what,
        )
        .await
    {
        Err(Refused::IdempotencyKeyReused { request_id }) if request_id == recorded => {}
        other => case.fail(format_args!(
            "{what}: expected idempotency_key_reused, got {other:?}"
        )),
    }
    check_unchanged(what.to_owned()).await;
    let replay = case
        .write_ok(
            &excl(&lock, 7),
            vec![put("k", "v")],
            Some(&recorded),
            "the original retried",
        )
        .await;
    if !replay.replayed || replay.commit_seq != original.commit_seq {
        case.fail(format_args!(
            "after a refused reuse, the original's retry answered {replay:?}; expected the replay of {original:?}"
        ));
    }
    // Refused requests were not remembered: their ids are still free.
    case.write_ok(
        &excl(&lock, 9),
        vec![put("k", "w")],
        None,
        "make the CAS hold",
    )
    .await;
    let applied = case
        .write_ok(
            &excl(&lock, 20),
            cas,
            Some(&cas_id),
            "the CAS again, now holding",
        )
        .await;
    if applied.replayed {
        case.fail("a refused CAS's id was remembered: its retry was answered as a replay");
    }
    let fresh = case
        .write_ok(
            &excl(&lock, 20),
            vec![put("z", "1")],
            Some(&request_id("stale-6")),
            "a stale write's id reused",
        )
        .await;
    if fresh.replayed {
        case.fail(
            "a stale write's id was remembered: a new request with it was answered as a replay",
        );
    }
}

/// A batch that fails at its last op leaves nothing behind, not even the
/// mark; an empty batch only raises the mark.
pub async fn batches_are_all_or_nothing<F: EngineFactory>(factory: &F) {
    let case = Case::open(factory, "batches_are_all_or_nothing").await;
    let lock = case.lock("L");
    case.write_ok(&excl(&lock, 1), vec![put("c", "current")], None, "setup")
        .await;
    let ops = vec![
        put("a", "1"),
        delete("c"),
        put("b", "2"),
        // `c` was deleted by op 1.
        cas("c", Some("current"), Some("never")),
    ];
    let snapshot = case.snapshot().await;
    match case.write(&excl(&lock, 5), ops, None, "a batch failing at op 3").await {
        Err(Refused::CasMismatch {
            op_index: 3,
            current: None,
        }) => {}
        other => case.fail(format_args!(
            "a batch whose CAS at op 3 sees the key deleted by op 1: expected a mismatch at op 3 with the key absent, got {other:?}"
        )),
    }
    let what = "after the failed batch";
    case.expect_unchanged(&snapshot, what).await;
    case.expect_value(&lock, "a", None, what).await;
    case.expect_value(&lock, "b", None, what).await;
    case.expect_value(&lock, "c", Some("current"), what).await;
    case.expect_marks(&lock, marks(1, 0), what).await;
    case.write_ok(
        &excl(&lock, 2),
        vec![put("z", "ok")],
        None,
        "generation 2 after the failed batch at 5",
    )
    .await;

    let applied = case
        .write_ok(&excl(&lock, 8), Vec::new(), None, "an empty batch")
        .await;
    if !applied.results.is_empty() || applied.marks != marks(8, 0) {
        case.fail(format_args!(
            "an empty batch at generation 8 answered {applied:?}; expected no results and H_excl=8"
        ));
    }
    case.expect_value(&lock, "z", Some("ok"), "an empty batch")
        .await;
    let late = case
        .write(
            &excl(&lock, 7),
            vec![put("z", "late")],
            None,
            "generation 7 after an empty batch at 8",
        )
        .await;
    if !matches!(late, Err(Refused::Stale { .. })) {
        case.fail(format_args!(
            "generation 7 after an empty batch at 8: expected stale, got {late:?}"
        ));
    }
}

/// Compare-and-swap: against absent and present values, as a delete, and
/// against the earlier ops of the same request.
pub async fn compare_and_swap<F: EngineFactory>(factory: &F) {
    let case = Case::open(factory, "compare_and_swap").await;
    let lock = case.lock("L");
    let s = excl(&lock, 1);
    let steps: Vec<(&str, Vec<Op>, Expected)> = vec![
        (
            "delete of an absent key",
            vec![delete("k")],
            Ok(vec![OpResult::Absent]),
        ),
        (
            "CAS expecting absent, key absent",
            vec![cas("k", None, Some("v1"))],
            Ok(vec![OpResult::Swapped]),
        ),
        (
            "CAS expecting absent, key present",
            vec![cas("k", None, Some("v2"))],
            Err((0, Some("v1"))),
        ),
        (
            "CAS expecting the wrong value",
            vec![cas("k", Some("v0"), Some("v2"))],
            Err((0, Some("v1"))),
        ),
        (
            "CAS expecting the value",
            vec![cas("k", Some("v1"), Some("v2"))],
            Ok(vec![OpResult::Swapped]),
        ),
        (
            "CAS delete",
            vec![cas("k", Some("v2"), None)],
            Ok(vec![OpResult::Swapped]),
        ),
        (
            "CAS expecting a value, key absent",
            vec![cas("k", Some("v2"), Some("v3"))],
            Err((0, None)),
        ),
        ("put", vec![put("k", "x")], Ok(vec![OpResult::Created])),
        (
            "put again",
            vec![put("k", "y")],
            Ok(vec![OpResult::Replaced]),
        ),
        ("delete", vec![delete("k")], Ok(vec![OpResult::Deleted])),
        (
            "ops seeing earlier ops of the request",
            vec![
                put("a", "1"),
                cas("a", Some("1"), Some("2")),
                put("b", "x"),
                delete("b"),
                cas("b", None, Some("y")),
                cas("b", Some("y"), None),
                delete("b"),
            ],
            Ok(vec![
                OpResult::Created,
                OpResult::Swapped,
                OpResult::Created,
                OpResult::Deleted,
                OpResult::Swapped,
                OpResult::Swapped,
                OpResult::Absent,
            ]),
        ),
        (
            "puts of one key in one request",
            vec![put("c", "1"), put("c", "2"), delete("c"), put("c", "3")],
            Ok(vec![
                OpResult::Created,
                OpResult::Replaced,
                OpResult::Deleted,
                OpResult::Created,
            ]),
        ),
        (
            "a CAS against a put earlier in the request",
            vec![put("a", "3"), cas("a", Some("2"), Some("4"))],
            Err((1, Some("3"))),
        ),
    ];
    for (what, ops, expected) in steps {
        let outcome = case.write(&s, ops, None, what).await;
        let matches = match (&expected, &outcome) {
            (Ok(results), Ok(applied)) => &applied.results == results && !applied.replayed,
            (Err((index, value)), Err(Refused::CasMismatch { op_index, current })) => {
                op_index == index && current.as_deref() == value.map(str::as_bytes)
            }
            _ => false,
        };
        if !matches {
            case.fail(format_args!(
                "{what}: expected {expected:?}, got {outcome:?}"
            ));
        }
    }
    case.expect_value(&lock, "k", None, "after the CAS steps")
        .await;
    case.expect_value(&lock, "a", Some("2"), "after the CAS steps")
        .await;
    case.expect_value(&lock, "b", None, "after the CAS steps")
        .await;
}

/// What a step of [`compare_and_swap`] expects: the op results, or a
/// mismatch at an op index showing the key's current value.
type Expected = Result<Vec<OpResult>, (usize, Option<&'static str>)>;

/// A retry with a recorded id gets the original outcome and applies
/// nothing; the id with another request is refused.
pub async fn idempotent_replay<F: EngineFactory>(factory: &F) {
    let case = Case::open(factory, "idempotent_replay").await;
    let lock = case.lock("L");
    let id = request_id("retry-1");
    let ops = vec![put("k", "first"), put("j", "first")];
    let first = case
        .write_ok(&excl(&lock, 4), ops.clone(), Some(&id), "the original")
        .await;
    if first.replayed {
        case.fail("a first request was answered as a replay");
    }
    case.write_ok(
        &excl(&lock, 4),
        vec![put("k", "second")],
        None,
        "the same holder writes again",
    )
    .await;
    let check_replay = |what: &'static str, replay: Applied| {
        if !replay.replayed
            || replay.results != first.results
            || replay.marks != first.marks
            || replay.commit_seq != first.commit_seq
        {
            case.fail(format_args!(
                "{what}: expected the original outcome {first:?} with replayed=true, got {replay:?}"
            ));
        }
    };
    let replay = case
        .write_ok(&excl(&lock, 4), ops.clone(), Some(&id), "the retry")
        .await;
    check_replay("the retry", replay);
    case.expect_value(&lock, "k", Some("second"), "a replay applies nothing")
        .await;
    // A newer holder writes; the retry of the accepted request is still
    // answered, not fenced, and still applies nothing.
    case.write_ok(
        &excl(&lock, 9),
        vec![put("k", "newer")],
        None,
        "a newer holder",
    )
    .await;
    let replay = case
        .write_ok(
            &excl(&lock, 4),
            ops.clone(),
            Some(&id),
            "the retry after a newer holder",
        )
        .await;
    check_replay("the retry after a newer holder", replay);
    case.expect_value(&lock, "k", Some("newer"), "a replay after a newer holder")
        .await;
    case.expect_marks(&lock, marks(9, 0), "a replay moves no mark")
        .await;
    // The same id for anything else is refused: other ops, other
    // generation.
    for (what, sequencer, ops) in [
        ("other ops", excl(&lock, 9), vec![put("k", "other")]),
        ("another generation", excl(&lock, 10), ops.clone()),
        ("no ops", excl(&lock, 9), Vec::new()),
    ] {
        match case.write(&sequencer, ops, Some(&id), what).await {
            Err(Refused::IdempotencyKeyReused { request_id }) if request_id == id => {}
            other => case.fail(format_args!(
                "the recorded id with {what}: expected idempotency_key_reused, got {other:?}"
            )),
        }
    }
    case.expect_value(&lock, "k", Some("newer"), "after the reuses")
        .await;
    case.expect_marks(&lock, marks(9, 0), "after the reuses")
        .await;
    // An empty request with an id is remembered too.
    let empty_id = request_id("empty");
    let empty = case
        .write_ok(
            &excl(&lock, 11),
            Vec::new(),
            Some(&empty_id),
            "an empty request with an id",
        )
        .await;
    let again = case
        .write_ok(&excl(&lock, 11), Vec::new(), Some(&empty_id), "its retry")
        .await;
    if !again.replayed || again.commit_seq != empty.commit_seq {
        case.fail(format_args!(
            "the retry of an empty request answered {again:?}; expected the replay of {empty:?}"
        ));
    }
}

/// Each lock remembers at least its last `window` ids. An older id may be
/// forgotten (then its retry is a new request) or remembered (then it
/// replays exactly); ids on other locks never push a lock's ids out.
pub async fn idempotency_window<F: EngineFactory>(factory: &F) {
    const WINDOW: u32 = 3;
    let case = Case::open_with(
        factory,
        "idempotency_window",
        EngineOptions {
            idempotency_window: WINDOW,
        },
    )
    .await;
    let lock = case.lock("L");
    let other = case.lock("M");
    let total = 3 * WINDOW as usize;
    let ops = |i: usize| vec![put(&format!("k{i}"), "v")];
    let mut originals = Vec::new();
    for i in 0..total {
        let id = request_id(&format!("id-{i}"));
        let applied = case
            .write_ok(&excl(&lock, 1), ops(i), Some(&id), "a write with an id")
            .await;
        originals.push((id, applied));
        // Another lock's ids must not evict this lock's.
        for j in 0..WINDOW {
            case.write_ok(
                &excl(&other, 1),
                vec![put("m", "v")],
                Some(&request_id(&format!("other-{i}-{j}"))),
                "a write with an id on another lock",
            )
            .await;
        }
    }
    for (i, (id, original)) in originals.iter().enumerate().rev() {
        // Make a fresh application visible: remove the key first.
        case.write_ok(
            &excl(&lock, 1),
            vec![delete(&format!("k{i}"))],
            None,
            "clear the key",
        )
        .await;
        let retry = case
            .write_ok(&excl(&lock, 1), ops(i), Some(id), "a retry")
            .await;
        let in_window = i >= total - WINDOW as usize;
        let key = case.value(&lock, &format!("k{i}")).await;
        if retry.replayed {
            if retry.commit_seq != original.commit_seq || retry.results != original.results {
                case.fail(format_args!(
                    "id {id}: the replay {retry:?} differs from the original {original:?}"
                ));
            }
            if key.is_some() {
                case.fail(format_args!("id {id}: a replay applied its ops again"));
            }
        } else {
            if in_window {
                case.fail(format_args!(
                    "id {id} is among the last {WINDOW} of its lock but was applied again ({retry:?}); the window must keep it"
                ));
            }
            if key.as_deref() != Some(&b"v"[..]) || retry.commit_seq <= original.commit_seq {
                case.fail(format_args!(
                    "id {id}: forgotten, so its retry must apply anew with a newer commit_seq; got {retry:?}, key {key:?}"
                ));
            }
        }
    }
}

/// The same request sent by several tasks at once: exactly one applies, the
/// others are its replay.
pub async fn concurrent_retries_apply_once<F: EngineFactory>(factory: &F) {
    const TASKS: usize = 8;
    let case = Case::open(factory, "concurrent_retries_apply_once").await;
    for round in 0..5u64 {
        let lock = case.lock(&format!("L{round}"));
        let id = request_id("dup");
        let mut tasks = Vec::new();
        for _ in 0..TASKS {
            let engine = Arc::clone(&case.engine);
            let request = WriteRequest::new(
                excl(&lock, 1),
                vec![cas("counter", None, Some("1"))],
                Some(id.clone()),
            );
            tasks.push(tokio::spawn(async move {
                tokio::time::timeout(CALL_BOUND, engine.write(request)).await
            }));
        }
        let mut outcomes = Vec::new();
        for task in tasks {
            match task.await {
                Ok(Ok(Ok(Ok(applied)))) => outcomes.push(applied),
                Ok(Ok(outcome)) => case.fail(format_args!(
                    "round {round}: a concurrent retry answered {outcome:?}; expected the write or its replay"
                )),
                Ok(Err(_)) => case.fail(format_args!(
                    "round {round}: a concurrent retry did not answer within {CALL_BOUND:?}"
                )),
                Err(error) => case.fail(format_args!("round {round}: a task failed: {error}")),
            }
        }
        let fresh: Vec<&Applied> = outcomes.iter().filter(|a| !a.replayed).collect();
        if fresh.len() != 1 {
            case.fail(format_args!(
                "round {round}: {} of {TASKS} concurrent copies of one request were applied; expected exactly 1 ({outcomes:?})",
                fresh.len()
            ));
        }
        if outcomes
            .iter()
            .any(|a| a.commit_seq != fresh[0].commit_seq || a.results != fresh[0].results)
        {
            case.fail(format_args!(
                "round {round}: the replays differ from the write they replay: {outcomes:?}"
            ));
        }
        case.expect_value(&lock, "counter", Some("1"), "after concurrent retries")
            .await;
    }
}

/// Reads with a sequencer are fenced and raise the mark of their mode; a
/// read without one changes nothing.
pub async fn fenced_reads<F: EngineFactory>(factory: &F) {
    let case = Case::open(factory, "fenced_reads").await;
    let lock = case.lock("L");
    case.write_ok(&excl(&lock, 3), vec![put("k", "v3")], None, "setup")
        .await;
    let read = case
        .read_ok(
            &lock,
            b"k",
            Some(&shared_seq(&lock, 4)),
            "a shared read at 4",
        )
        .await;
    if read.value.as_deref() != Some(&b"v3"[..]) || read.marks != marks(3, 4) {
        case.fail(format_args!(
            "a shared read at 4 after a write at 3: expected `v3` and {}, got {read:?}",
            marks(3, 4)
        ));
    }
    // The writer at 3 was granted before that reader: fenced now.
    let late = case
        .write(
            &excl(&lock, 3),
            vec![put("k", "x")],
            None,
            "the writer at 3 after a reader at 4",
        )
        .await;
    if !matches!(late, Err(Refused::Stale { marks: m, .. }) if m == marks(3, 4)) {
        case.fail(format_args!(
            "the writer at 3 after a reader at 4: expected stale with {}, got {late:?}",
            marks(3, 4)
        ));
    }
    case.write_ok(&excl(&lock, 6), vec![put("k", "v6")], None, "a writer at 6")
        .await;
    let stale = case
        .read(
            &lock,
            b"k",
            Some(&shared_seq(&lock, 5)),
            "a shared read at 5 after a writer at 6",
        )
        .await;
    if !matches!(stale, Err(Refused::Stale { .. })) {
        case.fail(format_args!(
            "a shared read at 5 after a writer at 6: expected stale, got {stale:?}"
        ));
    }
    let read = case
        .read_ok(
            &lock,
            b"k",
            Some(&shared_seq(&lock, 6)),
            "a shared read at 6",
        )
        .await;
    if read.marks != marks(6, 6) || read.value.as_deref() != Some(&b"v6"[..]) {
        case.fail(format_args!(
            "a shared read at 6: expected `v6` and {}, got {read:?}",
            marks(6, 6)
        ));
    }
    // H_shared never goes down: an older (but admissible) reader.
    case.read_ok(
        &lock,
        b"k",
        Some(&shared_seq(&lock, 8)),
        "a shared read at 8",
    )
    .await;
    let read = case
        .read_ok(
            &lock,
            b"k",
            Some(&shared_seq(&lock, 7)),
            "a shared read at 7 after one at 8",
        )
        .await;
    if read.marks != marks(6, 8) {
        case.fail(format_args!(
            "a shared read at 7 after one at 8: expected {}, got {}",
            marks(6, 8),
            read.marks
        ));
    }
    let read = case
        .read_ok(
            &lock,
            b"absent",
            Some(&excl(&lock, 9)),
            "an exclusive read at 9 of an absent key",
        )
        .await;
    if read.value.is_some() || read.marks != marks(9, 8) {
        case.fail(format_args!(
            "an exclusive read at 9 of an absent key: expected nothing and {}, got {read:?}",
            marks(9, 8)
        ));
    }
    let read = case.read_ok(&lock, b"k", None, "a plain read").await;
    if read.marks != marks(9, 8) || read.value.as_deref() != Some(&b"v6"[..]) {
        case.fail(format_args!(
            "a plain read: expected `v6` and {}, got {read:?}",
            marks(9, 8)
        ));
    }
    case.expect_marks(&lock, marks(9, 8), "after the reads")
        .await;
}

/// `admit` is the fencing step alone: it raises marks and refuses stale
/// sequencers, and never touches data.
pub async fn admit_fences_without_data<F: EngineFactory>(factory: &F) {
    let case = Case::open(factory, "admit_fences_without_data").await;
    let lock = case.lock("L");
    case.write_ok(&excl(&lock, 2), vec![put("k", "v")], None, "setup")
        .await;
    for (sequencer, expected) in [
        (excl(&lock, 5), Ok(marks(5, 0))),
        (excl(&lock, 5), Ok(marks(5, 0))),
        (shared_seq(&lock, 7), Ok(marks(5, 7))),
        (shared_seq(&lock, 6), Ok(marks(5, 7))),
        (excl(&lock, 6), Err(marks(5, 7))),
        (shared_seq(&lock, 4), Err(marks(5, 7))),
        (excl(&lock, 7), Ok(marks(7, 7))),
    ] {
        let what = format!("admit {sequencer}");
        let outcome = case.admit(&sequencer, &what).await;
        let ok = match (&expected, &outcome) {
            (Ok(after), Ok(got)) => after == got,
            (Err(before), Err(Refused::Stale { marks: got, .. })) => before == got,
            _ => false,
        };
        if !ok {
            case.fail(format_args!(
                "{what}: expected {expected:?}, got {outcome:?}"
            ));
        }
        case.expect_value(&lock, "k", Some("v"), &what).await;
    }
    // An admit on a lock never seen starts it.
    let fresh = case.lock("fresh");
    let outcome = case
        .admit(&shared_seq(&fresh, 3), "a shared admit on a fresh lock")
        .await;
    if outcome != Ok(marks(0, 3)) {
        case.fail(format_args!(
            "a shared admit at 3 on a lock never seen: expected {}, got {outcome:?}",
            marks(0, 3)
        ));
    }
}

/// Writes acknowledged one after another get strictly increasing numbers,
/// whichever lock they write.
pub async fn commit_seq_increases<F: EngineFactory>(factory: &F) {
    let case = Case::open(factory, "commit_seq_increases").await;
    let locks = [case.lock("L"), case.lock("M"), case.lock("L/M")];
    let mut last = 0;
    for i in 0..30u64 {
        let lock = &locks[(i % 3) as usize];
        let applied = case
            .write_ok(
                &excl(lock, 1 + i / 3),
                vec![put("k", &i.to_string())],
                None,
                "a sequential write",
            )
            .await;
        if applied.commit_seq <= last {
            case.fail(format_args!(
                "write {i} on `{lock}` got commit_seq {} after {last}: not increasing",
                applied.commit_seq
            ));
        }
        last = applied.commit_seq;
    }
}

/// Tasks write one lock with random generations while readers read it; the
/// accepted history, in `commit_seq` order, never goes down in generation.
pub async fn concurrent_writers<F: EngineFactory>(factory: &F) {
    const WRITERS: u64 = 12;
    const READERS: u64 = 4;
    const STEPS: u64 = 12;
    let case = Case::open(factory, "concurrent_writers").await;
    let lock = case.lock("contended");
    let seed = Random::new(&case).seed;
    let mut tasks = Vec::new();
    // Every task sends its step-n request together: real contention on the
    // mark, step after step.
    let steps = Arc::new(tokio::sync::Barrier::new((WRITERS + READERS) as usize));
    for task in 0..WRITERS + READERS {
        let engine = Arc::clone(&case.engine);
        let lock = lock.clone();
        let steps = Arc::clone(&steps);
        tasks.push(tokio::spawn(async move {
            let mut random = Random::from_seed(seed ^ (task + 1).wrapping_mul(0x9e37_79b9));
            let mut seen = Vec::new();
            for step in 0..STEPS {
                steps.wait().await;
                // Rising with jitter: tasks overtake each other, so many
                // writes are accepted and many are stale.
                let generation = generation(1 + 2 * step + random.below(8));
                if task < WRITERS {
                    let tag = format!("{task}-{step}");
                    let request = WriteRequest::new(
                        excl(&lock, generation.get()),
                        vec![put("k", &tag), put(&format!("w/{tag}"), "1")],
                        None,
                    );
                    let outcome = tokio::time::timeout(CALL_BOUND, engine.write(request)).await;
                    seen.push(Seen::Write {
                        tag,
                        generation: generation.get(),
                        outcome,
                    });
                } else {
                    let sequencer = shared_seq(&lock, generation.get());
                    let outcome = tokio::time::timeout(
                        CALL_BOUND,
                        engine.read(ReadRequest::new(&lock, b"k", Some(&sequencer))),
                    )
                    .await;
                    seen.push(Seen::Read {
                        generation: generation.get(),
                        outcome,
                    });
                }
            }
            seen
        }));
    }
    let mut accepted: Vec<(u64, u64, String)> = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    let mut highest_shared = 0;
    for task in tasks {
        let seen = match task.await {
            Ok(seen) => seen,
            Err(error) => case.fail(format_args!("a task failed: {error}")),
        };
        for entry in seen {
            match entry {
                Seen::Write {
                    tag,
                    generation,
                    outcome,
                } => match outcome {
                    Ok(Ok(Ok(applied))) => {
                        if applied.marks.exclusive != generation {
                            case.fail(format_args!(
                                "write {tag} at {generation} was accepted with {} (seed {seed})",
                                applied.marks
                            ));
                        }
                        accepted.push((applied.commit_seq, generation, tag));
                    }
                    Ok(Ok(Err(Refused::Stale {
                        marks, presented, ..
                    }))) if presented.get() == generation
                        && generation < marks.required(Mode::Exclusive) =>
                    {
                        refused.push(tag)
                    }
                    other => case.fail(format_args!(
                        "write {tag} at {generation}: unexpected {other:?} (seed {seed})"
                    )),
                },
                Seen::Read {
                    generation,
                    outcome,
                } => match outcome {
                    Ok(Ok(Ok(read))) => {
                        if read.marks.shared < generation || read.marks.exclusive > generation {
                            case.fail(format_args!(
                                "a shared read at {generation} was accepted with {} (seed {seed})",
                                read.marks
                            ));
                        }
                        highest_shared = highest_shared.max(generation);
                    }
                    Ok(Ok(Err(Refused::Stale { marks, .. })))
                        if generation < marks.required(Mode::Shared) => {}
                    other => case.fail(format_args!(
                        "a shared read at {generation}: unexpected {other:?} (seed {seed})"
                    )),
                },
            }
        }
    }
    accepted.sort();
    let mut previous: Option<&(u64, u64, String)> = None;
    for write in &accepted {
        if let Some(before) = previous {
            if write.0 == before.0 {
                case.fail(format_args!(
                    "writes {} and {} share commit_seq {} (seed {seed})",
                    before.2, write.2, write.0
                ));
            }
            if write.1 < before.1 {
                case.fail(format_args!(
                    "write {} at generation {} committed at {}, after write {} at generation {} at {}: a stale write was accepted (seed {seed})",
                    write.2, write.1, write.0, before.2, before.1, before.0
                ));
            }
        }
        previous = Some(write);
    }
    let Some(last) = accepted.last() else {
        case.fail(format_args!("no write was accepted (seed {seed})"));
    };
    let final_marks = case.marks(&lock, "after the writers").await;
    let highest_accepted = accepted.iter().map(|w| w.1).max().unwrap_or(0);
    if final_marks.exclusive != highest_accepted || final_marks.shared != highest_shared {
        case.fail(format_args!(
            "final {final_marks}; expected H_excl={highest_accepted} (the highest accepted write) and H_shared={highest_shared} (the highest accepted read) (seed {seed})"
        ));
    }
    case.expect_value(
        &lock,
        "k",
        Some(&last.2),
        "the write with the highest commit_seq holds the value",
    )
    .await;
    for (_, _, tag) in &accepted {
        case.expect_value(&lock, &format!("w/{tag}"), Some("1"), "an accepted write")
            .await;
    }
    for tag in &refused {
        case.expect_value(&lock, &format!("w/{tag}"), None, "a refused write")
            .await;
    }
    println!(
        "engine suite [{}] concurrent_writers: {} accepted, {} refused (seed {seed})",
        factory.name(),
        accepted.len(),
        refused.len()
    );
}

/// What one task of [`concurrent_writers`] saw.
type Bounded<T> = Result<Result<Result<T, Refused>, StoreError>, tokio::time::error::Elapsed>;

enum Seen {
    Write {
        tag: String,
        generation: u64,
        outcome: Bounded<Applied>,
    },
    Read {
        generation: u64,
        outcome: Bounded<Read>,
    },
}

/// A batch beyond the engine's own limits is refused whole, before anything
/// is written. Engines without limits of their own (sled, PostgreSQL) pass
/// trivially: the store's limits are tested in the store crate.
pub async fn over_limit_is_refused_whole<F: EngineFactory>(factory: &F) {
    let case = Case::open(factory, "over_limit_is_refused_whole").await;
    let limits = case.engine.limits();
    let lock = case.lock("L");
    let mut oversized: Vec<(String, Vec<Op>)> = Vec::new();
    if let Some(ops) = limits
        .max_batch_ops
        .checked_add(1)
        .filter(|n| *n <= 100_000)
    {
        oversized.push((
            format!("{ops} ops (the engine allows {})", limits.max_batch_ops),
            (0..ops).map(|i| put(&format!("b{i}"), "v")).collect(),
        ));
    }
    if let Some(bytes) = limits
        .max_value_bytes
        .checked_add(1)
        .filter(|n| *n <= 64 << 20)
    {
        oversized.push((
            format!(
                "a value of {bytes} bytes (the engine allows {})",
                limits.max_value_bytes
            ),
            vec![
                put("small", "v"),
                Op::put(b"big".to_vec(), vec![b'x'; bytes]),
            ],
        ));
    }
    for (what, ops) in oversized {
        let snapshot = case.snapshot().await;
        let request = WriteRequest::new(excl(&lock, 5), ops, None);
        match case.bounded(case.engine.write(request), &what).await {
            Err(StoreError::TooLarge { .. }) => {}
            other => case.fail(format_args!("{what}: expected TooLarge, got {other:?}")),
        }
        case.expect_unchanged(&snapshot, &what).await;
        case.expect_marks(&lock, Marks::ZERO, &what).await;
        case.expect_value(&lock, "b0", None, &what).await;
        case.expect_value(&lock, "small", None, &what).await;
    }
}

/// The raise cap, checked by the engine in the step that checks the
/// fencing rule (obligation 10). The cap's clock is the request's
/// ([`RaiseLimit`]), so the clock cases are exact.
pub async fn raise_cap<F: EngineFactory>(factory: &F) {
    const NOW_US: u64 = 1_800_000_000_000_000;
    const LEAD_US: u64 = 3_600_000_000;
    let case = Case::open(factory, "raise_cap").await;
    let cap = RaiseCap::new(10).with_clock_lead(Duration::from_micros(LEAD_US));
    let now = UNIX_EPOCH + Duration::from_micros(NOW_US);
    let limit = RaiseLimit::new(cap, now);

    // A counter lock: the higher of its marks, 105, allows up to 115. A
    // lock never seen is held to the clock: up to now + lead.
    let counter = case.lock("counter");
    case.raise_to(&counter, marks(100, 105)).await;
    let clock = case.lock("clock");
    let ceiling = NOW_US + LEAD_US;
    for (lock, generation, refusal, what) in [
        (
            &counter,
            116,
            Some((marks(100, 105), 115, false)),
            "one above the count",
        ),
        (&counter, 115, None, "at the count"),
        (
            &clock,
            ceiling + 1,
            Some((Marks::ZERO, ceiling, true)),
            "a first generation one above the clock's limit",
        ),
    ] {
        case.expect_capped(lock, generation, None, limit, refusal, what)
            .await;
    }
    case.expect_marks(&counter, marks(115, 105), "after a write at the cap")
        .await;
    let id = request_id("at-the-clock");
    let what = "a first generation at the clock's limit";
    let original = case
        .expect_capped(&clock, ceiling, Some(&id), limit, None, what)
        .await;
    // Its retry, judged by a clock an hour earlier whose limit it exceeds:
    // a recorded request gets its original outcome before any cap.
    let earlier = RaiseLimit::new(cap, now - Duration::from_micros(LEAD_US));
    let what = "the retry under an earlier clock";
    let ops = cap_ops(ceiling);
    let retry = case
        .write_capped(&excl(&clock, ceiling), ops, Some(&id), earlier, what)
        .await;
    match (&retry, original) {
        (Ok(replay), Some(original))
            if replay.replayed && replay.commit_seq == original.commit_seq => {}
        (other, original) => case.fail(format_args!(
            "{what}: a retry of a recorded write under a cap it now exceeds answered {other:?}; expected the replay of {original:?}"
        )),
    }
    // Now a clock mark: its holder writes again at it, and one above the
    // limit is refused with the marks of the step.
    for (generation, refusal, what) in [
        (ceiling, None, "the holder again, at its mark"),
        (
            ceiling + 1,
            Some((marks(ceiling, 0), ceiling, true)),
            "one above the clock's limit on a clock mark",
        ),
    ] {
        case.expect_capped(&clock, generation, None, limit, refusal, what)
            .await;
    }
}

/// The ops of a [`raise_cap`] write at `generation`.
fn cap_ops(generation: u64) -> Vec<Op> {
    vec![put("k", &format!("v{generation}"))]
}

/// Everything acknowledged before a crash is there after it: data, both
/// marks, idempotency records; stale holders stay refused and new commit
/// numbers are above the old ones.
pub async fn durable_across_reopen<F: EngineFactory>(factory: &F) {
    const TASKS: u64 = 8;
    const WRITES: u64 = 10;
    let case = Case::open(factory, "durable_across_reopen").await;
    let lock = case.lock("L");
    let id = request_id("before-crash");
    let original = case
        .write_ok(
            &excl(&lock, 5),
            vec![put("k", "v5")],
            Some(&id),
            "a write with an id",
        )
        .await;
    case.read_ok(
        &lock,
        b"k",
        Some(&shared_seq(&lock, 8)),
        "a shared read at 8",
    )
    .await;
    // Concurrent acknowledged writes on several locks just before the crash.
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let engine = Arc::clone(&case.engine);
        let lock = case.lock(&format!("burst-{task}"));
        tasks.push(tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            for i in 0..WRITES {
                let request = WriteRequest::new(
                    excl(&lock, i + 1),
                    vec![
                        put(&format!("k{i}"), &format!("v{i}")),
                        put("last", &i.to_string()),
                    ],
                    None,
                );
                match tokio::time::timeout(CALL_BOUND, engine.write(request)).await {
                    Ok(Ok(Ok(applied))) => acknowledged.push(applied.commit_seq),
                    other => return Err(format!("burst write {i} on `{lock}`: {other:?}")),
                }
            }
            Ok((lock, acknowledged))
        }));
    }
    let mut bursts = Vec::new();
    let mut highest = original.commit_seq;
    for task in tasks {
        match task.await {
            Ok(Ok((lock, seqs))) => {
                highest = highest.max(seqs.iter().copied().max().unwrap_or(0));
                bursts.push(lock);
            }
            Ok(Err(message)) => case.fail(message),
            Err(error) => case.fail(format_args!("a burst task failed: {error}")),
        }
    }

    let case = case.reopen().await;

    case.expect_marks(&lock, marks(5, 8), "after the reopen")
        .await;
    case.expect_value(&lock, "k", Some("v5"), "after the reopen")
        .await;
    for burst in &bursts {
        case.expect_marks(burst, marks(WRITES, 0), "a burst lock after the reopen")
            .await;
        for i in 0..WRITES {
            case.expect_value(
                burst,
                &format!("k{i}"),
                Some(&format!("v{i}")),
                "a burst write after the reopen",
            )
            .await;
        }
        case.expect_value(
            burst,
            "last",
            Some(&(WRITES - 1).to_string()),
            "a burst lock after the reopen",
        )
        .await;
    }
    let replay = case
        .write_ok(
            &excl(&lock, 5),
            vec![put("k", "v5")],
            Some(&id),
            "the retry after the reopen",
        )
        .await;
    if !replay.replayed || replay.commit_seq != original.commit_seq {
        case.fail(format_args!(
            "the retry after the reopen answered {replay:?}; expected the replay of {original:?}"
        ));
    }
    let stale = case
        .write(
            &excl(&lock, 7),
            vec![put("k", "late")],
            None,
            "a writer at 7 after the reopen",
        )
        .await;
    if !matches!(stale, Err(Refused::Stale { .. })) {
        case.fail(format_args!(
            "a writer at 7 after a reader at 8, across the reopen: expected stale, got {stale:?}"
        ));
    }
    let next = case
        .write_ok(
            &excl(&lock, 8),
            vec![put("k", "v8")],
            None,
            "a write after the reopen",
        )
        .await;
    if next.commit_seq <= highest {
        case.fail(format_args!(
            "the first write after the reopen got commit_seq {}, not above {highest} acknowledged before",
            next.commit_seq
        ));
    }
}

/// One case's context: the factory, the engine, the case name and the
/// lock-name prefix.
struct Case<'f, F: EngineFactory> {
    factory: &'f F,
    case: &'static str,
    prefix: String,
    engine: Arc<dyn Engine>,
    storage: F::Storage,
}

impl<'f, F: EngineFactory> Case<'f, F> {
    async fn open(factory: &'f F, case: &'static str) -> Self {
        Self::open_with(factory, case, EngineOptions::default()).await
    }

    async fn open_with(factory: &'f F, case: &'static str, options: EngineOptions) -> Self {
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("palisade-suite/{}-{call}/{case}", run_id());
        let Ok((engine, storage)) = tokio::time::timeout(CALL_BOUND, factory.open(options)).await
        else {
            panic!(
                "engine suite [{}] {case}: opening the engine took more than {CALL_BOUND:?}",
                factory.name()
            );
        };
        Case {
            factory,
            case,
            prefix,
            engine,
            storage,
        }
    }

    /// Crashes the engine and opens a new one over the same storage.
    async fn reopen(self) -> Self {
        let Case {
            factory,
            case,
            prefix,
            engine,
            mut storage,
        } = self;
        let bound = CALL_BOUND * 2;
        let Ok(engine) = tokio::time::timeout(bound, factory.reopen(engine, &mut storage)).await
        else {
            panic!(
                "engine suite [{}] {case}: reopening the engine took more than {bound:?}",
                factory.name()
            );
        };
        Case {
            factory,
            case,
            prefix,
            engine,
            storage,
        }
    }

    /// Stops the case with a message naming the engine and the case.
    fn fail(&self, message: impl fmt::Display) -> ! {
        panic!(
            "engine suite [{}] {}: {message}",
            self.factory.name(),
            self.case
        )
    }

    /// A lock name unique to this run and case.
    fn lock(&self, local: &str) -> LockName {
        let text = format!("{}/{local}", self.prefix);
        LockName::new(text.as_str())
            .unwrap_or_else(|error| self.fail(format_args!("bad lock name `{text}`: {error}")))
    }

    /// Runs an engine call, failing the case on an engine error or a hang.
    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
        what: &str,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(CALL_BOUND, call).await {
            Ok(outcome) => outcome,
            Err(_) => self.fail(format_args!(
                "{what}: the engine did not answer within {CALL_BOUND:?}"
            )),
        }
    }

    async fn call<T>(&self, call: impl Future<Output = Result<T, StoreError>>, what: &str) -> T {
        match self.bounded(call, what).await {
            Ok(value) => value,
            Err(error) => self.fail(format_args!("{what}: the engine failed: {error}")),
        }
    }

    async fn write(
        &self,
        sequencer: &Sequencer,
        ops: Vec<Op>,
        id: Option<&RequestId>,
        what: &str,
    ) -> Result<Applied, Refused> {
        let request = WriteRequest::new(sequencer.clone(), ops, id.cloned());
        self.call(self.engine.write(request), what).await
    }

    async fn write_capped(
        &self,
        sequencer: &Sequencer,
        ops: Vec<Op>,
        id: Option<&RequestId>,
        limit: RaiseLimit,
        what: &str,
    ) -> Result<Applied, Refused> {
        let request =
            WriteRequest::new(sequencer.clone(), ops, id.cloned()).with_raise_limit(limit);
        self.call(self.engine.write(request), what).await
    }

    /// A capped write at `generation` ([`cap_ops`]), expected accepted
    /// (`refusal` `None`: returns the outcome) or refused with
    /// `raise_too_large` on `(marks, allowed_up_to, by_clock)`, changing
    /// nothing.
    async fn expect_capped(
        &self,
        lock: &LockName,
        generation: u64,
        id: Option<&RequestId>,
        limit: RaiseLimit,
        refusal: Option<(Marks, u64, bool)>,
        what: &str,
    ) -> Option<Applied> {
        let snapshot = self.snapshot().await;
        let value = self.value(lock, "k").await;
        let outcome = self
            .write_capped(
                &excl(lock, generation),
                cap_ops(generation),
                id,
                limit,
                what,
            )
            .await;
        let Some((marks, allowed, clock)) = refusal else {
            return match outcome {
                Ok(applied) => Some(applied),
                Err(refused) => self.fail(format_args!(
                    "{what}: generation {generation} within the cap was refused: {refused:?}"
                )),
            };
        };
        match &outcome {
            Err(Refused::RaiseTooLarge {
                marks: refused_marks,
                allowed_up_to,
                by_clock,
                max_raise,
                ..
            }) if *refused_marks == marks
                && *allowed_up_to == allowed
                && *by_clock == clock
                && *max_raise == limit.cap().max_raise() => {}
            other => self.fail(format_args!(
                "{what}: generation {generation} on marks {marks}: expected raise_too_large allowing up to {allowed} (by the {}), got {other:?}",
                if clock { "clock" } else { "count" }
            )),
        }
        self.expect_unchanged(&snapshot, what).await;
        self.expect_marks(lock, marks, what).await;
        if self.value(lock, "k").await != value {
            self.fail(format_args!("{what}: the refused write changed key `k`"));
        }
        None
    }

    async fn write_ok(
        &self,
        sequencer: &Sequencer,
        ops: Vec<Op>,
        id: Option<&RequestId>,
        what: &str,
    ) -> Applied {
        match self.write(sequencer, ops, id, what).await {
            Ok(applied) => applied,
            Err(refused) => self.fail(format_args!(
                "{what}: write with {sequencer} was refused: {refused:?}"
            )),
        }
    }

    async fn read(
        &self,
        lock: &LockName,
        key: &[u8],
        sequencer: Option<&Sequencer>,
        what: &str,
    ) -> Result<Read, Refused> {
        let request = ReadRequest::new(lock, key, sequencer);
        self.call(self.engine.read(request), what).await
    }

    async fn read_ok(
        &self,
        lock: &LockName,
        key: &[u8],
        sequencer: Option<&Sequencer>,
        what: &str,
    ) -> Read {
        match self.read(lock, key, sequencer, what).await {
            Ok(read) => read,
            Err(refused) => self.fail(format_args!("{what}: read was refused: {refused:?}")),
        }
    }

    async fn admit(&self, sequencer: &Sequencer, what: &str) -> Result<Marks, Refused> {
        self.call(self.engine.admit(sequencer), what).await
    }

    async fn marks(&self, lock: &LockName, what: &str) -> Marks {
        self.call(self.engine.marks(lock), what).await
    }

    async fn expect_marks(&self, lock: &LockName, expected: Marks, what: &str) {
        let got = self.marks(lock, what).await;
        if got != expected {
            self.fail(format_args!(
                "{what}: marks of `{lock}` are {got}; expected {expected}"
            ));
        }
    }

    /// The value of `key` by a plain read (no sequencer).
    async fn value(&self, lock: &LockName, key: &str) -> Option<Vec<u8>> {
        let read = self
            .read_ok(lock, key.as_bytes(), None, "a plain read")
            .await;
        read.value.as_deref().map(<[u8]>::to_vec)
    }

    async fn expect_value(&self, lock: &LockName, key: &str, expected: Option<&str>, what: &str) {
        let got = self.value(lock, key).await;
        if got.as_deref() != expected.map(str::as_bytes) {
            self.fail(format_args!(
                "{what}: key `{key}` of `{lock}` is {:?}; expected {expected:?}",
                got.as_deref().map(String::from_utf8_lossy)
            ));
        }
    }

    /// Every record of the engine (`Engine::dump`), or `None` for an
    /// engine that cannot list them: the explicit checks of each case
    /// still run.
    async fn snapshot(&self) -> Option<Vec<StoredRecord>> {
        self.bounded(self.engine.dump(), "dump").await.ok()
    }

    /// The engine's records are exactly those of `snapshot`.
    async fn expect_unchanged(&self, snapshot: &Option<Vec<StoredRecord>>, what: &str) {
        let Some(before) = snapshot else {
            return;
        };
        let after = self.call(self.engine.dump(), "dump").await;
        if &after != before {
            let added: Vec<&StoredRecord> = after.iter().filter(|r| !before.contains(r)).collect();
            let removed: Vec<&StoredRecord> =
                before.iter().filter(|r| !after.contains(r)).collect();
            self.fail(format_args!(
                "{what}: a refusal changed the engine's records: added {added:?}, removed {removed:?}"
            ));
        }
    }

    /// Raises `lock`'s marks to `target` (from 0): an exclusive admit at
    /// `H_excl`, then a shared one at `H_shared`.
    async fn raise_to(&self, lock: &LockName, target: Marks) {
        if target.exclusive > 0 {
            self.admit(&excl(lock, target.exclusive), "raise H_excl")
                .await
                .unwrap_or_else(|refused| {
                    self.fail(format_args!("raise to {target}: {refused:?}"))
                });
        }
        if target.shared > 0 {
            self.admit(&shared_seq(lock, target.shared), "raise H_shared")
                .await
                .unwrap_or_else(|refused| {
                    self.fail(format_args!("raise to {target}: {refused:?}"))
                });
        }
        self.expect_marks(lock, target, "the raised marks").await;
    }
}

fn generation(n: u64) -> Generation {
    Generation::new(n).expect("the suite never presents generation 0")
}

fn excl(lock: &LockName, n: u64) -> Sequencer {
    Sequencer::new(lock.clone(), Mode::Exclusive, generation(n))
}

fn shared_seq(lock: &LockName, n: u64) -> Sequencer {
    Sequencer::new(lock.clone(), Mode::Shared, generation(n))
}

fn marks(exclusive: u64, shared: u64) -> Marks {
    Marks { exclusive, shared }
}

fn request_id(id: &str) -> RequestId {
    RequestId::new(id).expect("the suite's request ids are valid")
}

fn put(key: &str, value: &str) -> Op {
    Op::put(key.as_bytes().to_vec(), value.as_bytes().to_vec())
}

fn delete(key: &str) -> Op {
    Op::delete(key.as_bytes().to_vec())
}

fn cas(key: &str, expected: Option<&str>, new: Option<&str>) -> Op {
    Op::cas(
        key.as_bytes().to_vec(),
        expected.map(|v| v.as_bytes().to_vec().into()),
        new.map(|v| v.as_bytes().to_vec().into()),
    )
}

/// splitmix64: a small, seedable generator, so a failing random case can be
/// named by its seed.
struct Random {
    seed: u64,
    state: u64,
}

impl Random {
    fn new<F: EngineFactory>(case: &Case<'_, F>) -> Random {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write(case.prefix.as_bytes());
        Random::from_seed(hasher.finish())
    }

    fn from_seed(seed: u64) -> Random {
        Random { seed, state: seed }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`bound` > 0).
    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

/// A random id for this process's run, so lock names never collide with an
/// earlier run against the same database.
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
