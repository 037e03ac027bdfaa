//! Concurrent holders of one lock (each with its own generation, started
//! in a shuffled order, each with its own client) write one object and one
//! log at the same time: whatever lands, lands in generation order.

use std::sync::Arc;
use std::time::Duration;

use palisade_core::Refused;
use palisade_fence_object::{ObjectFence, Path};

use palisade_fence_object::testing::FaultyStore;

use crate::common;

const HOLDERS: u64 = 6;
const WRITES: u64 = 5;

/// Accepted writes of the object, in version (commit) order, never go back
/// in generation; versions are 1..=n with no gap; the log's slots likewise.
///
/// Checked to fail without its guards: with the object's writes sent
/// unconditionally (`PutMode::Overwrite` instead of `If-Match`) two writes
/// share a version; with the log's appends unconditional, slots hold
/// generations out of order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_holders_never_land_out_of_order() {
    let moto = common::moto();
    let object = Path::from("race.json");
    // Holders arrive in generation order, each newer one while the older
    // ones are still writing (it starts once its predecessor has landed a
    // write), as successive lock holders do when leases lapse under load.
    // Writes travel a slow link (a few ms each, longer for older holders),
    // which widens the window between a writer's check and its write
    // landing: there, only the object's condition keeps order.
    let mut tasks = Vec::new();
    let mut previous: Option<tokio::sync::oneshot::Receiver<()>> = None;
    for generation in 1..=HOLDERS {
        let store = common::config(&moto.endpoint(), "race")
            .build_store()
            .unwrap();
        let slow = Arc::new(FaultyStore::new(store));
        slow.set_delay(Duration::from_millis(5 + 25 * (HOLDERS - generation)));
        let fence = Arc::new(ObjectFence::open(slow, "moto").await.unwrap());
        let (ready, next) = tokio::sync::oneshot::channel();
        let wait_for = previous.replace(next);
        let object = object.clone();
        tasks.push(tokio::spawn(async move {
            if let Some(wait_for) = wait_for {
                let _ = wait_for.await;
            }
            let mut ready = Some(ready);
            let sequencer = common::exclusive("race", generation);
            let log = fence.log(Path::from("race-log")).unwrap();
            let mut landed = Vec::new();
            let mut appended = Vec::new();
            for write in 0..WRITES {
                let value = format!("{generation}-{write}");
                match fence.put(&sequencer, &object, value.clone()).await.unwrap() {
                    Ok(written) => landed.push((written.version, generation, value.clone())),
                    Err(refused) => assert!(matches!(refused, Refused::Stale { .. })),
                }
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
            }
            for write in 0..WRITES {
                let value = format!("{generation}-{write}");
                match log.append(&sequencer, value.clone()).await.unwrap() {
                    Ok(entry) => appended.push((entry.slot, generation, value)),
                    Err(refused) => assert!(matches!(refused, Refused::Stale { .. })),
                }
            }
            (landed, appended, Arc::clone(&fence))
        }));
    }
    let mut landed = Vec::new();
    let mut appended = Vec::new();
    let mut fence = None;
    for task in tasks {
        let (mut l, mut a, f) = task.await.unwrap();
        landed.append(&mut l);
        appended.append(&mut a);
        fence = Some(f);
    }
    let fence = fence.unwrap();
    landed.sort();
    appended.sort();
    assert!(!landed.is_empty() && !appended.is_empty());
    for (index, window) in landed.windows(2).enumerate() {
        assert!(
            window[0].1 <= window[1].1,
            "object out of order at {index}: {landed:?}"
        );
    }
    let versions: Vec<u64> = landed.iter().map(|(version, _, _)| *version).collect();
    assert_eq!(
        versions,
        (1..=landed.len() as u64).collect::<Vec<_>>(),
        "no version twice, no gap"
    );
    let last = landed.last().unwrap();
    assert_eq!(
        fence.get(&object).await.unwrap().unwrap().bytes,
        last.2.as_bytes()
    );

    for window in appended.windows(2) {
        assert!(window[0].1 <= window[1].1, "log out of order: {appended:?}");
    }
    let log = fence.log(Path::from("race-log")).unwrap();
    for (slot, generation, value) in &appended {
        let entry = log.read(*slot).await.unwrap().unwrap();
        assert_eq!(
            (entry.generation, entry.bytes.as_ref()),
            (*generation, value.as_bytes())
        );
    }
    // Every slot up to the last is written (appends are gapless), and every
    // entry's generation is at least the one before it.
    let mut previous = 0;
    for slot in 1..=log.last_slot().await.unwrap() {
        let entry = log.read(slot).await.unwrap().expect("no gap");
        assert!(entry.generation >= previous, "slot {slot}");
        previous = entry.generation;
    }
}
