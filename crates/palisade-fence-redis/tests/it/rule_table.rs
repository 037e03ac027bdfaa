//! Core's rule table (`RULE_CASES`, the one the engine suite runs, shared
//! rows included) run against the module and the function, so neither
//! the module's use of `Marks::admit` nor the Lua rule can drift from it;
//! and a random walk compared with `Marks::admit` case by case.

use palisade_core::marks::{Marks, RULE_CASES};
use palisade_core::{Generation, LockName, Mode, Refused, Sequencer};
use palisade_fence_redis::{FenceOptions, LIBRARY_SOURCE, MARK_CHECK_LINE, RedisFence};
use palisade_testkit::redis::{RedisOptions, RedisServer};

use crate::common::{Via, exclusive, shared, single_via, unique_lock};

/// Raises a fresh lock's marks to `target` through the fence itself.
async fn raise_to(fence: &RedisFence, lock: &LockName, target: Marks) {
    if target.exclusive > 0 {
        fence
            .admit(&exclusive(lock, target.exclusive))
            .await
            .unwrap()
            .unwrap();
    }
    if target.shared > 0 {
        fence
            .admit(&shared(lock, target.shared))
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(fence.marks(lock).await.unwrap().0, target);
}

/// A fence over the same connection that sends no floor of marks seen
/// before, so the function alone decides.
pub(crate) async fn without_memory(fence: &RedisFence) -> RedisFence {
    RedisFence::with_options(
        fence.connection().clone(),
        FenceOptions::default().with_remembered_marks(false),
    )
    .await
    .unwrap()
}

/// Every row through `admit`, a write (exclusive rows) and a fenced read;
/// the mismatches, one line each (empty when the function agrees). Give it
/// a fence [`without_memory`].
pub(crate) async fn rule_table_mismatches(fence: &RedisFence, tag: &str) -> Vec<String> {
    let mut mismatches = Vec::new();
    for (index, rule) in RULE_CASES.iter().enumerate() {
        let before = rule.before_marks();
        let vias: &[&str] = match rule.mode {
            // `counter` takes the function's lean path for one counter op.
            Mode::Exclusive => &["admit", "write", "counter", "read"],
            Mode::Shared => &["admit", "read"],
        };
        for via in vias {
            let lock = unique_lock(&format!("{tag}-rule-{index}-{via}"));
            raise_to(fence, &lock, before).await;
            let key = fence.data_key(&lock, "k");
            let sequencer = Sequencer::new(lock.clone(), rule.mode, rule.generation());
            let outcome: Result<Marks, Refused> = match *via {
                "admit" => fence.admit(&sequencer).await.unwrap(),
                "write" => fence
                    .set(&sequencer, key.clone(), "v")
                    .await
                    .unwrap()
                    .map(|written| written.marks),
                "counter" => fence
                    .decr_by(&sequencer, key.clone(), 1)
                    .await
                    .unwrap()
                    .map(|written| written.marks),
                _ => fence
                    .get(&sequencer, key.clone())
                    .await
                    .unwrap()
                    .map(|read| read.marks),
            };
            let what = format!("rule {rule:?} through {via}");
            match (rule.expected_marks(), &outcome) {
                (Some(after), Ok(marks)) if *marks == after => {}
                (None, Err(Refused::Stale { marks, .. })) if *marks == before => {}
                (expected, outcome) => {
                    mismatches.push(format!("{what}: expected {expected:?}, got {outcome:?}"));
                    continue;
                }
            }
            let after = rule.expected_marks().unwrap_or(before);
            let stored = fence.marks(&lock).await.unwrap().0;
            if stored != after {
                mismatches.push(format!("{what}: Redis holds {stored}, expected {after}"));
            }
            let written = fence.get(&exclusive(&lock, u64::MAX), key).await.unwrap();
            let wrote = matches!(*via, "write" | "counter") && rule.expected_marks().is_some();
            if written.map(|read| read.value.is_some()) != Ok(wrote) {
                mismatches.push(format!("{what}: the key written: expected {wrote}"));
            }
        }
    }
    mismatches
}

async fn the_rule_table_holds(via: Via) {
    let (_redis, fence) = single_via(via).await;
    let mismatches = rule_table_mismatches(&without_memory(&fence).await, "single").await;
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// The module calls `Marks::admit` itself; the table still runs against
/// it, for what surrounds the call (the floors, the records, the writes).
/// Its mutation check was done by hand (a second build of the module only
/// for it would cost every test run a minute): with the refusal removed in
/// the module (`before.admit(..).or(Some(before))`), this test reported 16
/// mismatches, every stale row through every path.
#[tokio::test]
async fn the_shared_rule_table_of_core_holds_in_the_module() {
    the_rule_table_holds(Via::Module).await;
}

#[tokio::test]
async fn the_shared_rule_table_of_core_holds_in_the_function() {
    the_rule_table_holds(Via::Function).await;
}

#[tokio::test]
async fn generations_up_to_u64_max_compare_exactly_in_the_module() {
    generations_up_to_u64_max_compare_exactly(Via::Module).await;
}

#[tokio::test]
async fn generations_up_to_u64_max_compare_exactly_in_the_function() {
    generations_up_to_u64_max_compare_exactly(Via::Function).await;
}

/// Beyond what a signed SQL column holds: every u64 compares exactly
/// (decimal strings in the record; in Lua, where doubles would round).
async fn generations_up_to_u64_max_compare_exactly(via: Via) {
    let (_redis, fence) = single_via(via).await;
    let lock = unique_lock("u64");
    let top = u64::MAX;
    fence
        .admit(&exclusive(&lock, top - 1))
        .await
        .unwrap()
        .unwrap();
    // 2^64 - 1 and 2^64 - 2 are one double; the rule must still tell them apart.
    assert!(matches!(
        fence.admit(&shared(&lock, top - 2)).await.unwrap(),
        Err(Refused::Stale { .. })
    ));
    let marks = fence.admit(&exclusive(&lock, top)).await.unwrap().unwrap();
    assert_eq!(
        marks,
        Marks {
            exclusive: top,
            shared: 0
        }
    );
    assert!(
        fence
            .admit(&exclusive(&lock, top - 1))
            .await
            .unwrap()
            .is_err()
    );
    // Around 2^53, where doubles stop being exact.
    let lock = unique_lock("2^53");
    let edge = 1u64 << 53;
    fence
        .admit(&exclusive(&lock, edge + 1))
        .await
        .unwrap()
        .unwrap();
    assert!(fence.admit(&exclusive(&lock, edge)).await.unwrap().is_err());
}

#[tokio::test]
async fn random_requests_agree_with_marks_admit_in_the_module() {
    random_requests_agree_with_marks_admit(Via::Module).await;
}

#[tokio::test]
async fn random_requests_agree_with_marks_admit_in_the_function() {
    random_requests_agree_with_marks_admit(Via::Function).await;
}

/// A random walk over few locks, each answer compared with `Marks::admit`.
async fn random_requests_agree_with_marks_admit(via: Via) {
    let (_redis, fence) = single_via(via).await;
    let mut state: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    let seed = state;
    let mut next = |below: u64| {
        // xorshift64*: reproducible from the printed seed.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D) % below
    };
    let locks: Vec<LockName> = (0..3)
        .map(|index| unique_lock(&format!("walk-{index}")))
        .collect();
    let mut model = vec![Marks::ZERO; locks.len()];
    for step in 0..300 {
        let which = next(locks.len() as u64) as usize;
        let generation = Generation::new(1 + next(40)).unwrap();
        let mode = if next(3) == 0 {
            Mode::Shared
        } else {
            Mode::Exclusive
        };
        let sequencer = Sequencer::new(locks[which].clone(), mode, generation);
        let key = fence.data_key(&locks[which], "k");
        let outcome = match (mode, next(3)) {
            (Mode::Exclusive, 0) => fence
                .set(&sequencer, key, step.to_string())
                .await
                .unwrap()
                .map(|w| w.marks),
            (_, 1) => fence
                .get(&sequencer, key)
                .await
                .unwrap()
                .map(|read| read.marks),
            _ => fence.admit(&sequencer).await.unwrap(),
        };
        let before = model[which];
        match (before.admit(mode, generation), outcome) {
            (Some(after), Ok(marks)) if marks == after => model[which] = after,
            (None, Err(Refused::Stale { marks, .. })) if marks == before => {}
            (expected, outcome) => panic!(
                "step {step} (seed {seed}): {sequencer} on {before}: Marks::admit says {expected:?}, {via:?} {outcome:?}"
            ),
        }
    }
}

/// The mutation check: the library with its mark check removed (loaded
/// over the real one behind the fence's back) fails the table.
#[tokio::test]
async fn the_table_catches_a_function_without_the_mark_check() {
    // A server of its own: the mutated library must not reach other tests.
    let redis = RedisServer::spawn(RedisOptions::default());
    let fence = without_memory(&RedisFence::connect(&redis.url()).await.unwrap()).await;
    assert!(rule_table_mismatches(&fence, "before").await.is_empty());
    let mutated = LIBRARY_SOURCE.replace(MARK_CHECK_LINE, "local admitted = true");
    assert_ne!(
        mutated, LIBRARY_SOURCE,
        "the mark check line is in the source"
    );
    redis
        .command(&["FUNCTION", "LOAD", "REPLACE", &mutated])
        .unwrap();
    let mismatches = rule_table_mismatches(&fence, "mutated").await;
    assert!(
        mismatches.len() >= 5,
        "without the mark check every stale row must fail: {mismatches:#?}"
    );
    // And a new fence notices the library is not this crate's.
    let error = RedisFence::connect(&redis.url())
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("differs"), "{error}");
}
