//! The resource server's stories, told against moto: a holder paused past
//! its lease writes late, after a newer holder wrote, or only fenced.

use std::time::Duration;

use object_store::ObjectStoreExt as _;
use palisade_core::{Lock, LockError, LockGuard, LockName, Mode, Refused, SessionOptions};
use palisade_fence_object::Path;
use palisade_lock_embedded::EmbeddedLockClient;

use crate::common;

/// Bound on waiting for a lease to lapse: many TTLs, for a loaded machine.
const LEASE_WAIT: Duration = Duration::from_secs(20);

fn short_lease() -> SessionOptions {
    SessionOptions::default()
        .with_ttl(Duration::from_millis(600))
        .with_keepalive_interval(Duration::from_millis(150))
        .with_safety_margin(Duration::from_millis(100))
}

/// A holds the lock and writes; then its task stops renewing (a pause past
/// the lease) while it keeps the sequencer it fetched before. B takes the
/// lock. Returns A's sequencer and B's guard.
async fn a_pauses_and_b_takes_over(
    locks: &EmbeddedLockClient,
    name: &LockName,
    fence: &palisade_fence_object::ObjectFence,
    object: &Path,
) -> (palisade_core::Sequencer, impl LockGuard) {
    let session_a = locks.session(short_lease()).unwrap();
    let guard_a = session_a.acquire(name, Mode::Exclusive).await.unwrap();
    let sequencer_a = guard_a.sequencer().unwrap();
    fence.fence(&guard_a).await.unwrap().unwrap();
    fence
        .put(&guard_a, object, "from A, on time")
        .await
        .unwrap()
        .unwrap();

    session_a.stop_keepalive();
    tokio::time::timeout(LEASE_WAIT, guard_a.lease().lost())
        .await
        .unwrap();
    assert!(matches!(
        guard_a.sequencer(),
        Err(LockError::LeaseLost { .. })
    ));
    // The guard refuses to hand out its sequencer, so a put through it
    // sends nothing at all.
    assert!(matches!(
        fence.put(&guard_a, object, "x").await,
        Err(palisade_fence_object::FenceError::Lock(_))
    ));

    let session_b = locks.session(short_lease()).unwrap();
    let guard_b = tokio::time::timeout(LEASE_WAIT, session_b.acquire(name, Mode::Exclusive))
        .await
        .unwrap()
        .unwrap();
    assert!(guard_b.generation() > sequencer_a.generation());
    std::mem::forget(session_b);
    (sequencer_a, guard_b)
}

/// After a newer holder wrote the object, the paused holder's late PUT is
/// refused by the fence and the object keeps the newer write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_put_is_refused_after_a_newer_holder_wrote() {
    let moto = common::moto();
    let fence = common::fence(&moto.endpoint(), "stories").await;
    let locks = EmbeddedLockClient::new();
    let name = LockName::new("orders/42").unwrap();
    let object = Path::from("orders/42.json");
    let (sequencer_a, guard_b) = a_pauses_and_b_takes_over(&locks, &name, &fence, &object).await;

    fence.fence(&guard_b).await.unwrap().unwrap();
    let written = fence
        .put(&guard_b, &object, "from B")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(written.version, 2);

    let refused = fence
        .put(&sequencer_a, &object, "from A, late")
        .await
        .unwrap()
        .expect_err("a newer holder wrote: A is stale");
    assert!(matches!(refused, Refused::Stale { .. }), "{refused:?}");
    let object = fence.get(&object).await.unwrap().unwrap();
    assert_eq!(object.bytes, "from B");
    assert_eq!(object.generation, Some(guard_b.generation().get()));
    assert_eq!(object.version, 2);
}

/// After a newer holder only fenced (wrote no object), the paused holder's
/// late PUT, delete and copy are refused, and a log append too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_writes_are_refused_after_a_newer_holder_only_fenced() {
    let moto = common::moto();
    let fence = common::fence(&moto.endpoint(), "stories").await;
    let locks = EmbeddedLockClient::new();
    let name = LockName::new("orders/7").unwrap();
    let object = Path::from("orders/7.json");
    let log = fence.log(Path::from("wal/7")).unwrap();
    let (sequencer_a, guard_b) = a_pauses_and_b_takes_over(&locks, &name, &fence, &object).await;
    log.append(&sequencer_a, "A's entry, on time")
        .await
        .unwrap()
        .unwrap();

    let marks = fence.fence(&guard_b).await.unwrap().unwrap();
    assert_eq!(marks.exclusive, guard_b.generation().get());
    log.fence(&guard_b).await.unwrap().unwrap();

    for refused in [
        fence
            .put(&sequencer_a, &object, "from A, late")
            .await
            .unwrap(),
        fence.delete(&sequencer_a, &object).await.unwrap(),
        fence
            .copy(&sequencer_a, &object, &Path::from("copy.json"))
            .await
            .unwrap(),
    ] {
        assert!(matches!(refused, Err(Refused::Stale { .. })), "{refused:?}");
    }
    let late = log.append(&sequencer_a, "A's entry, late").await.unwrap();
    assert!(matches!(late, Err(Refused::Stale { .. })), "{late:?}");
    // Nothing changed: A's on-time write is still there, the copy absent.
    let kept = fence.get(&object).await.unwrap().unwrap();
    assert_eq!(kept.bytes, "from A, on time");
    assert!(fence.get(&Path::from("copy.json")).await.unwrap().is_none());
    assert_eq!(log.last_slot().await.unwrap(), 2, "A's entry and B's fence");
}

/// A log writer already past its own check when the newer holder fences
/// (its tail read, its append not yet sent: a pause inside the call, or a
/// request delayed in the network) is refused: the fence took the slot
/// its append targets. Without the fence entry the append would land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_append_already_past_its_check_is_refused_by_the_fence_entry() {
    let moto = common::moto();
    let fence = common::fence(&moto.endpoint(), "stories").await;
    let prefix = Path::from("wal/mid-call");
    let log_a = fence.log(prefix.clone()).unwrap();
    let a = common::exclusive("wal", 33);
    log_a.append(&a, "1").await.unwrap().unwrap();
    // B's handle: its own view of the log, as another process has.
    let log_b = fence.log(prefix.clone()).unwrap();
    log_b
        .fence(&common::exclusive("wal", 34))
        .await
        .unwrap()
        .unwrap();
    // A still thinks slot 1 is the last and sends its append for slot 2.
    let late = log_a.append(&a, "2, late").await.unwrap();
    assert!(matches!(late, Err(Refused::Stale { .. })), "{late:?}");
    let entry = log_b.read(2).await.unwrap().unwrap();
    assert!(entry.fence);
    assert_eq!(entry.generation, 34);
    assert!(log_b.read(3).await.unwrap().is_none());

    // The check is the fence entry's: with A alone, A's append lands.
    let alone = fence.log(Path::from("wal/alone")).unwrap();
    alone.append(&a, "1").await.unwrap().unwrap();
    assert_eq!(alone.append(&a, "2").await.unwrap().unwrap().slot, 2);
}

/// A fenced delete leaves a tombstone that keeps its generation: an older
/// holder cannot create the object again, and reads see it absent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_delete_keeps_older_holders_from_creating_the_object_again() {
    let moto = common::moto();
    let fence = common::fence(&moto.endpoint(), "stories").await;
    let object = Path::from("gone.json");
    let old = common::exclusive("gone", 3);
    let new = common::exclusive("gone", 4);
    fence.put(&old, &object, "v1").await.unwrap().unwrap();
    let deleted = fence.delete(&new, &object).await.unwrap().unwrap();
    assert_eq!(deleted.version, 2);
    assert!(fence.get(&object).await.unwrap().is_none());
    let again = fence.put(&old, &object, "back").await.unwrap();
    assert!(matches!(again, Err(Refused::Stale { .. })), "{again:?}");
    // The newer holder may write it again.
    assert_eq!(
        fence
            .put(&new, &object, "v3")
            .await
            .unwrap()
            .unwrap()
            .version,
        3
    );
    assert!(matches!(
        fence
            .put(&new, &Path::from(".palisade/fences/x"), "no")
            .await,
        Err(palisade_fence_object::FenceError::ReservedPath { .. })
    ));
}

/// Two processes' fences, each reusing its reads of the lock's fence
/// object for `MARKS_REUSE`: A writes (its second put reads the fence
/// object afresh), B fences, and A's next put, of another object, sent as
/// soon as B's fence returned, is refused. What outlasts A's read is B's
/// wait after its raise: without it, A's put would be answered from a read
/// taken before the raise, and land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_fence_read_never_outlasts_a_newer_holders_fence() {
    let moto = common::moto();
    let fence_a = common::fence(&moto.endpoint(), "reuse").await;
    let fence_b = common::fence(&moto.endpoint(), "reuse").await;
    let (a, b) = (common::exclusive("reuse", 5), common::exclusive("reuse", 6));
    let one = Path::from("one.json");
    fence_a.put(&a, &one, "A").await.unwrap().unwrap();
    fence_a.put(&a, &one, "A again").await.unwrap().unwrap();

    let fenced_at = tokio::time::Instant::now();
    fence_b.fence(&b).await.unwrap().unwrap();
    let fence_took = fenced_at.elapsed();
    a_late_put_is_refused(&fence_a, &a, fence_took).await;
    assert!(
        fence_took >= palisade_fence_object::MARKS_REUSE,
        "a fence that raised the marks waits MARKS_REUSE before it returns"
    );
    // B marked its raise settled, so later readers go on without a wait.
    assert_settled(&fence_b, "reuse", 6).await;
    fence_b.put(&b, &one, "B").await.unwrap().unwrap();
}

/// Marks raised but not yet settled (the raiser's answer was lost, or it
/// stopped before settling; here written straight to the store) are
/// relied on only `MARKS_REUSE` after they were read: another process of
/// the newer generation waits before its put goes on, so A's put sent
/// right after that put returned, answered from A's earlier read, cannot
/// land. Without that wait it would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsettled_marks_are_relied_on_only_after_marks_reuse() {
    let moto = common::moto();
    let fence_a = common::fence(&moto.endpoint(), "unsettled").await;
    let fence_b = common::fence(&moto.endpoint(), "unsettled").await;
    let (a, b) = (
        common::exclusive("unsettled", 5),
        common::exclusive("unsettled", 6),
    );
    let one = Path::from("one.json");
    fence_a.put(&a, &one, "A").await.unwrap().unwrap();
    fence_a.put(&a, &one, "A again").await.unwrap().unwrap();
    // Generation 6's raise, landed and never settled.
    fence_a
        .store()
        .put(
            &Path::from(".palisade/fences/unsettled"),
            "palisade-fence v2\nlock=unsettled\nexclusive=6\nshared=0\nversion=90\nsettled=0\n"
                .into(),
        )
        .await
        .unwrap();

    let started = tokio::time::Instant::now();
    fence_b
        .put(&b, &Path::from("b.json"), "B")
        .await
        .unwrap()
        .unwrap();
    let b_took = started.elapsed();
    a_late_put_is_refused(&fence_a, &a, b_took).await;
    assert!(b_took >= palisade_fence_object::MARKS_REUSE, "{b_took:?}");
    // B settled the raise on the way, for the readers after it.
    assert_settled(&fence_b, "unsettled", 6).await;
}

/// The lock's fence object, read straight from the store, holds settled
/// marks at `exclusive`.
async fn assert_settled(fence: &palisade_fence_object::ObjectFence, lock: &str, exclusive: u64) {
    let path = Path::from(format!(".palisade/fences/{lock}"));
    let bytes = fence
        .store()
        .get(&path)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains(&format!("\nexclusive={exclusive}\n")) && text.contains("\nsettled=1\n"),
        "{text}"
    );
}

/// A's put of another object, sent as soon as the newer generation's call
/// returned (it took `newer_took`): refused, and nothing landed.
async fn a_late_put_is_refused(
    fence: &palisade_fence_object::ObjectFence,
    a: &palisade_core::Sequencer,
    newer_took: Duration,
) {
    let two = Path::from("two.json");
    let late = fence.put(a, &two, "A, late").await.unwrap();
    assert!(
        matches!(late, Err(Refused::Stale { .. })),
        "{late:?} (the newer generation's call took {newer_took:?})"
    );
    let landed = fence.get(&two).await.unwrap();
    assert!(landed.is_none(), "{landed:?}");
}
