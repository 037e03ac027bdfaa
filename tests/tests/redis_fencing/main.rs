//! Fencing with the Redis backend where Redis itself is the hazard: a
//! holder whose TTL runs out without a watchdog, and a Redis restarted
//! without persistence, which loses the generation counter.

use std::time::Duration;

use palisade::client::Refused;
use palisade::redis::{GenerationScheme, RedisConfig, RedisLock, RedisLockClient};
use palisade::{Lock, LockGuard, LockName, Mode, SessionOptions};
use palisade_testkit::redis::{Persistence, RedisOptions, RedisServer};
use palisade_tests::ResourceServer;

const TTL: Duration = Duration::from_millis(1500);
/// Bound on any wait for a lease to end: many TTLs, for a loaded CI box.
const LEASE_WAIT: Duration = Duration::from_secs(30);

fn options() -> SessionOptions {
    SessionOptions::default()
        .with_ttl(TTL)
        .with_keepalive_interval(TTL / 4)
        .with_safety_margin(TTL / 5)
}

async fn client(url: &str, scheme: GenerationScheme) -> anyhow::Result<RedisLockClient> {
    Ok(RedisLockClient::connect(RedisConfig::new(url).with_generation_scheme(scheme)).await?)
}

/// The seeds' "expiry during work" failure: without a watchdog the holder
/// outlives its TTL. Its guard signals lease lost, and its late write is
/// refused once the next holder has written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_outliving_its_ttl_without_watchdog_is_fenced() -> anyhow::Result<()> {
    let redis = RedisServer::start();
    let server = ResourceServer::start().await?;
    let resource = server.client();
    let lock = LockName::new("redis-fencing/no-watchdog")?;

    let slow = RedisLock::connect(&redis.url(), options())
        .await?
        .without_watchdog();
    let guard_a = slow.acquire(&lock, Mode::Exclusive).await?;
    let sequencer_a = guard_a.sequencer()?;
    resource
        .put(&sequencer_a, b"report", "started", None)
        .await?
        .expect("first holder");

    // The work takes longer than the TTL; nobody extends the lease.
    let mut lease = guard_a.lease();
    tokio::time::timeout(LEASE_WAIT, lease.lost()).await?;
    assert!(
        guard_a.sequencer().is_err(),
        "a lapsed guard hands out nothing"
    );

    let other = RedisLock::connect(&redis.url(), options()).await?;
    let guard_b = other
        .acquire_timeout(&lock, Mode::Exclusive, LEASE_WAIT)
        .await?;
    assert!(guard_b.generation() > sequencer_a.generation());
    resource
        .put_with(&guard_b, b"report", "done-by-B", None)
        .await?
        .expect("newest holder");

    let refused = resource
        .put(&sequencer_a, b"report", "done-by-A", None)
        .await?
        .expect_err("A's generation is older than B's write");
    match refused {
        Refused::Stale {
            presented, marks, ..
        } => {
            assert_eq!(presented, sequencer_a.generation());
            assert_eq!(marks.exclusive, guard_b.generation().get());
        }
        other => panic!("expected stale, got {other:?}"),
    }
    let read = resource.get(&lock, b"report", None).await?.expect("read");
    assert_eq!(read.value.as_deref(), Some(&b"done-by-B"[..]));
    guard_b.release().await?;
    server.stop().await
}

/// Redis restarted without persistence with the plain counter scheme: the
/// counter restarts at 1, the resource server refuses every new holder
/// until the lock side raises its floor above the server's mark, and then
/// the lock is usable again. No write below the mark is ever accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_lost_in_a_restart_is_refused_then_recovered() -> anyhow::Result<()> {
    let mut redis = RedisServer::spawn(RedisOptions::persistence(Persistence::None));
    let server = ResourceServer::start().await?;
    let resource = server.client();
    let lock = LockName::new("redis-fencing/counter")?;

    // Several grants before the crash, so the mark is well above 1.
    let before = client(&redis.url(), GenerationScheme::Counter).await?;
    let session = before.session(options())?;
    let mut mark = 0;
    for round in 0..5 {
        let guard = session.acquire(&lock, Mode::Exclusive).await?;
        let written = resource
            .put_with(&guard, b"stock", format!("{round}"), None)
            .await?
            .expect("generations increase before the crash");
        mark = written.marks.exclusive;
        guard.release().await?;
    }
    assert!(mark >= 5, "mark {mark}");
    drop(session);
    drop(before);

    // Redis dies and comes back empty.
    redis.kill()?;
    redis.restart()?;

    // A fresh process gets a generation from the restarted counter: below
    // the mark, so the resource server refuses it and changes nothing.
    let after = client(&redis.url(), GenerationScheme::Counter).await?;
    let session = after.session(options())?;
    let guard = session.acquire(&lock, Mode::Exclusive).await?;
    assert!(
        guard.generation().get() < mark,
        "the counter went back to {} (mark {mark})",
        guard.generation()
    );
    let refused = resource
        .put_with(&guard, b"stock", "after-crash", None)
        .await?
        .expect_err("a generation below the mark must be refused");
    let current_mark = match refused {
        Refused::Stale { marks, .. } => marks.exclusive,
        other => panic!("expected stale, got {other:?}"),
    };
    assert_eq!(current_mark, mark);
    guard.release().await?;
    let read = resource.get(&lock, b"stock", None).await?.expect("read");
    assert_eq!(read.value.as_deref(), Some(&b"4"[..]), "nothing changed");

    // Recovery: raise the floor from the 409 body, then the lock works.
    after.raise_floor(&lock, current_mark).await?;
    let guard = session.acquire(&lock, Mode::Exclusive).await?;
    assert!(guard.generation().get() > mark);
    let written = resource
        .put_with(&guard, b"stock", "after-recovery", None)
        .await?
        .expect("above the mark after raising the floor");
    assert_eq!(written.marks.exclusive, guard.generation().get());
    guard.release().await?;
    server.stop().await
}

/// The default scheme needs no recovery: a counter recreated after the
/// restart starts from Redis's clock, above every generation issued before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_generations_stay_above_the_mark_after_a_restart() -> anyhow::Result<()> {
    let mut redis = RedisServer::spawn(RedisOptions::persistence(Persistence::None));
    let server = ResourceServer::start().await?;
    let resource = server.client();
    let lock = LockName::new("redis-fencing/clock")?;

    let before = client(&redis.url(), GenerationScheme::ServerClock).await?;
    let session = before.session(options())?;
    let guard = session.acquire(&lock, Mode::Exclusive).await?;
    let old_sequencer = guard.sequencer()?;
    let mark = resource
        .put_with(&guard, b"k", "before", None)
        .await?
        .expect("first write")
        .marks
        .exclusive;
    drop(guard);
    drop(session);
    drop(before);

    redis.kill()?;
    redis.restart()?;

    let after = client(&redis.url(), GenerationScheme::ServerClock).await?;
    let guard = after
        .session(options())?
        .acquire(&lock, Mode::Exclusive)
        .await?;
    assert!(guard.generation().get() > mark);
    resource
        .put_with(&guard, b"k", "after", None)
        .await?
        .expect("above the mark without any recovery step");
    let refused = resource
        .put(&old_sequencer, b"k", "stale", None)
        .await?
        .expect_err("the pre-crash holder is fenced");
    assert!(matches!(refused, Refused::Stale { .. }));
    guard.release().await?;
    server.stop().await
}

/// Holder A (no watchdog: a task that stopped renewing) outlives its TTL
/// with a write in hand; B takes the lock and writes nothing. A's late
/// write lands unless B fenced on acquire; with `fence_with` it is
/// refused as stale. Returns A's outcome.
async fn late_write_after_a_silent_new_holder(
    redis: &RedisServer,
    resource: &palisade::client::Client,
    lock: &LockName,
    fence: bool,
) -> anyhow::Result<Result<palisade::client::Written, Refused>> {
    let slow = RedisLock::connect(&redis.url(), options())
        .await?
        .without_watchdog();
    let guard_a = slow.acquire(lock, Mode::Exclusive).await?;
    let sequencer_a = guard_a.sequencer()?;
    let mut lease = guard_a.lease();
    tokio::time::timeout(LEASE_WAIT, lease.lost()).await?;

    let other = RedisLock::connect(&redis.url(), options()).await?;
    let guard_b = other
        .acquire_timeout(lock, Mode::Exclusive, LEASE_WAIT)
        .await?;
    if fence {
        let marks = resource
            .fence_with(&guard_b)
            .await?
            .expect("a new holder's fence is accepted");
        assert_eq!(marks.exclusive, guard_b.generation().get());
    }
    let late = resource.put(&sequencer_a, b"k", "from-A", None).await?;
    guard_b.release().await?;
    Ok(late)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_on_acquire_refuses_a_paused_holder_before_the_new_one_writes() -> anyhow::Result<()>
{
    let redis = RedisServer::start();
    let server = ResourceServer::start().await?;
    let resource = server.client();

    let fenced = LockName::new("redis-fencing/fence-on-acquire")?;
    let refused = late_write_after_a_silent_new_holder(&redis, &resource, &fenced, true)
        .await?
        .expect_err("the new holder fenced: A's late write is stale");
    assert!(matches!(refused, Refused::Stale { .. }), "{refused:?}");
    let read = resource.get(&fenced, b"k", None).await?.expect("read");
    assert_eq!(read.value, None, "nothing was written");

    // The window the fence closes: without it, A's late write lands.
    let unfenced = LockName::new("redis-fencing/no-fence-on-acquire")?;
    late_write_after_a_silent_new_holder(&redis, &resource, &unfenced, false)
        .await?
        .expect("without a fence nothing newer has reached the server");
    server.stop().await
}
