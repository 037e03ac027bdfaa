//! The vertical slice: a lock from the embedded backend, its sequencer, the
//! HTTP resource server, sled, and a stale sequencer refused.

use std::time::Duration;

use palisade::client::{ClientError, Refused};
use palisade::embedded::EmbeddedLockClient;
use palisade::{Lock, LockError, LockGuard, LockName, Mode, SessionOptions};
use palisade_tests::ResourceServer;

/// Bound on waiting for a lease to lapse: many TTLs, for a loaded CI box.
const LEASE_WAIT: Duration = Duration::from_secs(20);

fn short_lease() -> SessionOptions {
    SessionOptions::default()
        .with_ttl(Duration::from_millis(600))
        .with_keepalive_interval(Duration::from_millis(150))
        .with_safety_margin(Duration::from_millis(100))
}

/// The GC-pause story: A pauses past its lease, B writes, A's late write is
/// refused with 409 and changes nothing.
#[tokio::test]
async fn late_write_of_a_paused_holder_is_refused() -> anyhow::Result<()> {
    let server = ResourceServer::start().await?;
    let client = server.client();
    let locks = EmbeddedLockClient::new();
    let name = LockName::new("accounts/alice")?;

    let client_a = locks.session(short_lease())?;
    let guard_a = client_a.acquire(&name, Mode::Exclusive).await?;
    let sequencer_a = guard_a.sequencer()?;
    assert!(
        client
            .put(&sequencer_a, b"balance", "100", None)
            .await?
            .is_ok()
    );

    // A stops the world: no more keep-alives. Its guard signals lease lost.
    client_a.stop_keepalive();
    let mut lease_a = guard_a.lease();
    tokio::time::timeout(LEASE_WAIT, lease_a.lost()).await?;
    assert!(matches!(
        guard_a.sequencer(),
        Err(LockError::LeaseLost { .. })
    ));

    // B gets the lock with a newer generation and writes.
    let client_b = locks.session(short_lease())?;
    let guard_b =
        tokio::time::timeout(LEASE_WAIT, client_b.acquire(&name, Mode::Exclusive)).await??;
    assert!(guard_b.generation() > sequencer_a.generation());
    let written = client
        .put(&guard_b, b"balance", "150", None)
        .await?
        .expect("B holds the newest generation");
    assert_eq!(written.marks.exclusive, guard_b.generation().get());

    // A wakes and writes with the sequencer it fetched before the pause.
    let refused = client
        .put(&sequencer_a, b"balance", "130", None)
        .await?
        .expect_err("a stale generation must be refused");
    crate::assert_stale(
        refused,
        sequencer_a.generation(),
        guard_b.generation().get(),
    );

    // Nothing changed: B's value and B's mark stand.
    let read = client
        .get(&name, b"balance", None)
        .await?
        .expect("a plain read is not fenced");
    assert_eq!(read.value.as_deref(), Some(&b"150"[..]));
    assert_eq!(
        client.marks(&name).await?.exclusive,
        guard_b.generation().get()
    );

    guard_b.release().await?;
    server.stop().await
}

/// A guard whose lease lapsed refuses to hand out its sequencer, so the
/// client sends nothing at all.
#[tokio::test]
async fn a_lapsed_guard_sends_nothing() -> anyhow::Result<()> {
    let server = ResourceServer::start().await?;
    let client = server.client();
    let locks = EmbeddedLockClient::new();
    let name = LockName::new("jobs/nightly")?;

    let session = locks.session(short_lease())?;
    let guard = session.acquire(&name, Mode::Exclusive).await?;
    session.stop_keepalive();
    let mut lease = guard.lease();
    tokio::time::timeout(LEASE_WAIT, lease.lost()).await?;

    let error = client
        .put(&guard, b"report", "done", None)
        .await
        .expect_err("a lapsed guard must not produce a sequencer");
    assert!(
        matches!(error, ClientError::Lock(LockError::LeaseLost { .. })),
        "{error:?}"
    );
    let marks = client.marks(&name).await?;
    assert_eq!(
        (marks.exclusive, marks.shared),
        (0, 0),
        "nothing reached the server"
    );
    server.stop().await
}

/// A reader with a newer shared generation fences an older writer, and a
/// shared sequencer can never write.
#[tokio::test]
async fn readers_fence_older_writers_and_cannot_write() -> anyhow::Result<()> {
    let server = ResourceServer::start().await?;
    let client = server.client();
    let locks = EmbeddedLockClient::new();
    let name = LockName::new("catalog")?;

    let writer = locks.session(short_lease())?;
    let write_guard = writer.acquire(&name, Mode::Exclusive).await?;
    let old_writer = write_guard.sequencer()?;
    client
        .put(&old_writer, b"k", "v1", None)
        .await?
        .expect("fresh lock");
    write_guard.release().await?;

    let reader = locks.session(short_lease())?;
    let read_guard = reader.acquire(&name, Mode::Shared).await?;
    let read = client
        .get_with(&read_guard, b"k")
        .await?
        .expect("newest reader");
    assert_eq!(read.value.as_deref(), Some(&b"v1"[..]));
    assert_eq!(read.marks.shared, read_guard.generation().get());

    let refused = client
        .put(&read_guard, b"k", "v2", None)
        .await?
        .expect_err("shared sequencers are read-only");
    assert!(
        matches!(refused, Refused::SharedOnWrite { .. }),
        "{refused:?}"
    );

    let refused = client
        .put(&old_writer, b"k", "late", None)
        .await?
        .expect_err("the reader's newer generation fences the old writer");
    assert!(matches!(refused, Refused::Stale { .. }), "{refused:?}");
    read_guard.release().await?;
    server.stop().await
}
