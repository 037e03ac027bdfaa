//! Core's rule table, run through the fence object and the log: the
//! decision is `Marks::admit`'s, and the store's conditions must not change
//! it. Against the in-memory store and against moto.

use std::sync::Arc;

use object_store::memory::InMemory;
use palisade_core::Refused;
use palisade_core::marks::{Marks, RULE_CASES, RuleCase};
use palisade_fence_object::{ObjectFence, Path};

use crate::common::{self, sequencer};

/// Seeds a lock's marks through the fence itself (exclusive then shared
/// fences), then applies `case`'s request.
async fn run_case(fence: &ObjectFence, lock: &str, case: &RuleCase) -> Result<Marks, Refused> {
    let (exclusive, shared) = case.before;
    if exclusive > 0 {
        fence
            .fence(&common::exclusive(lock, exclusive))
            .await
            .unwrap()
            .unwrap();
    }
    if shared > 0 {
        fence
            .fence(&sequencer(lock, palisade_core::Mode::Shared, shared))
            .await
            .unwrap()
            .unwrap();
    }
    fence
        .fence(&sequencer(lock, case.mode, case.generation))
        .await
        .unwrap()
}

async fn check_table(fence: &ObjectFence, run: &str) {
    for (index, case) in RULE_CASES.iter().enumerate() {
        let lock = format!("rules/{run}/{index}");
        let got = run_case(fence, &lock, case).await;
        match case.expected_marks() {
            Some(expected) => assert_eq!(got, Ok(expected), "{case:?}"),
            None => {
                let refused = got.expect_err("stale");
                assert_eq!(refused.marks(), Some(case.before_marks()), "{case:?}");
            }
        }
    }
}

/// The fence object follows core's rule table (in memory).
#[tokio::test]
async fn the_fence_object_follows_core_rule_table_in_memory() {
    let fence = ObjectFence::open(Arc::new(InMemory::new()), "memory")
        .await
        .unwrap();
    check_table(&fence, "memory").await;
}

/// The fence object follows core's rule table (moto).
#[tokio::test]
async fn the_fence_object_follows_core_rule_table_on_moto() {
    let moto = common::moto();
    let fence = common::fence(&moto.endpoint(), "rules").await;
    check_table(&fence, "moto").await;
}

/// A log's entries carry the marks, admitted by the same rule.
#[tokio::test]
async fn the_log_follows_core_rule_table() {
    let fence = Arc::new(
        ObjectFence::open(Arc::new(InMemory::new()), "memory")
            .await
            .unwrap(),
    );
    for (index, case) in RULE_CASES.iter().enumerate() {
        let lock = format!("rules/log/{index}");
        let log = fence.log(Path::from(format!("logs/{index}"))).unwrap();
        let (exclusive, shared) = case.before;
        if exclusive > 0 {
            log.fence(&common::exclusive(&lock, exclusive))
                .await
                .unwrap()
                .unwrap();
        }
        if shared > 0 {
            log.fence(&sequencer(&lock, palisade_core::Mode::Shared, shared))
                .await
                .unwrap()
                .unwrap();
        }
        let got = log
            .fence(&sequencer(&lock, case.mode, case.generation))
            .await
            .unwrap()
            .map(|appended| appended.marks);
        match case.expected_marks() {
            Some(expected) => assert_eq!(got, Ok(expected), "{case:?}"),
            None => assert_eq!(
                got.unwrap_err().marks(),
                Some(case.before_marks()),
                "{case:?}"
            ),
        }
    }
}
