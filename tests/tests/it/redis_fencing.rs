//! Fencing with the Redis backend where Redis itself is the hazard: a
//! holder whose TTL runs out without a watchdog, and a Redis restarted
//! without persistence, which loses the generation counter. And the raise
//! cap as docs/SECURITY.md sets it up, against Redis's clock generations.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use palisade::client::Refused;
use palisade::redis::{GenerationScheme, RedisConfig, RedisGuard, RedisLock, RedisLockClient};
use palisade::{Generation, Lock, LockGuard, LockName, Mode, Sequencer, SessionOptions};
use palisade_testkit::redis::{Persistence, RedisOptions, RedisServer};
use palisade_tests::{ResourceServer, fence_on_acquire_refuses_a_silent_holder};

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
        .put(&guard_b, b"report", "done-by-B", None)
        .await?
        .expect("newest holder");

    let refused = resource
        .put(&sequencer_a, b"report", "done-by-A", None)
        .await?
        .expect_err("A's generation is older than B's write");
    crate::assert_stale(
        refused,
        sequencer_a.generation(),
        guard_b.generation().get(),
    );
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
            .put(&guard, b"stock", format!("{round}"), None)
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
        .put(&guard, b"stock", "after-crash", None)
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
        .put(&guard, b"stock", "after-recovery", None)
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
        .put(&guard, b"k", "before", None)
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
        .put(&guard, b"k", "after", None)
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
/// write lands unless B fenced on acquire; with `fence` it is
/// refused as stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_on_acquire_refuses_a_paused_holder_before_the_new_one_writes() -> anyhow::Result<()>
{
    let redis = RedisServer::start();
    let server = ResourceServer::start().await?;
    let outlive_the_ttl = async |_: &RedisLock, guard: &RedisGuard| {
        let mut lease = guard.lease();
        tokio::time::timeout(LEASE_WAIT, lease.lost()).await?;
        anyhow::Ok(())
    };
    let contender = RedisLock::connect(&redis.url(), options()).await?;
    fence_on_acquire_refuses_a_silent_holder(
        async || {
            anyhow::Ok(
                RedisLock::connect(&redis.url(), options())
                    .await?
                    .without_watchdog(),
            )
        },
        outlive_the_ttl,
        &contender,
        &server.client(),
        (
            &LockName::new("redis-fencing/fence-on-acquire")?,
            &LockName::new("redis-fencing/no-fence-on-acquire")?,
        ),
        LEASE_WAIT,
    )
    .await?;
    server.stop().await
}

/// The raise cap exactly as docs/SECURITY.md sets it up.
const DOCUMENTED_RAISE_CAP: [&str; 4] =
    ["--max-mark-raise", "10000", "--max-mark-raise-time", "1h"];

/// How long the lock sits idle between two holders: a few seconds, a few
/// million microseconds of Redis's clock, far beyond the count of 10000.
const IDLE: Duration = Duration::from_secs(3);

fn now_micros() -> u64 {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since_epoch.as_micros()).unwrap()
}

fn forged(lock: &LockName, mode: Mode, generation: u64) -> Sequencer {
    Sequencer::new(lock.clone(), mode, Generation::new(generation).unwrap())
}

/// With the documented cap, a lock on Redis's default (server-clock)
/// generations that sat idle for seconds is still writable: its next
/// generation is millions above the mark, and the clock rule, not the
/// count, judges it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_raise_cap_accepts_a_clock_generation_after_an_idle_lock()
-> anyhow::Result<()> {
    let redis = RedisServer::start();
    let server = ResourceServer::start_with_flags(&DOCUMENTED_RAISE_CAP).await?;
    let resource = server.client();
    let lock = LockName::new("redis-fencing/idle")?;
    let locks = client(&redis.url(), GenerationScheme::default()).await?;
    let session = locks.session(options())?;

    let first = session.acquire(&lock, Mode::Exclusive).await?;
    let mark = resource
        .put(&first, b"k", "first", None)
        .await?
        .expect("the first write")
        .marks
        .exclusive;
    first.release().await?;

    // Time is the subject here: the lock sits idle, nothing to wait for.
    tokio::time::sleep(IDLE).await;

    let second = session.acquire(&lock, Mode::Exclusive).await?;
    let gap = second.generation().get() - mark;
    assert!(
        gap > 10_000,
        "the idle gap ({gap}) must be beyond the count for this test to mean anything"
    );
    let written = resource
        .put(&second, b"k", "after-idle", None)
        .await?
        .expect("an honest clock generation after an idle spell is accepted");
    assert_eq!(written.marks.exclusive, second.generation().get());
    second.release().await?;
    server.stop().await
}

/// The same cap still refuses absurd raises, and each refusal changes
/// nothing: a clock generation a day ahead of the server's clock, one at
/// `u64::MAX` (for reads too), one on a lock with no mark yet, and a
/// counter lock raised by more than the count. The honest holders write on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_raise_cap_refuses_absurd_raises() -> anyhow::Result<()> {
    const DAY_US: u64 = 86_400_000_000;
    let redis = RedisServer::start();
    let server = ResourceServer::start_with_flags(&DOCUMENTED_RAISE_CAP).await?;
    let resource = server.client();

    let clock_lock = LockName::new("redis-fencing/clock-runaway")?;
    let clock_locks = client(&redis.url(), GenerationScheme::ServerClock).await?;
    let clock_session = clock_locks.session(options())?;
    let guard = clock_session.acquire(&clock_lock, Mode::Exclusive).await?;
    resource
        .put(&guard, b"k", "honest", None)
        .await?
        .expect("the honest write");
    guard.release().await?;
    let before = resource.marks(&clock_lock).await?;

    for (mode, generation) in [
        (Mode::Exclusive, now_micros() + DAY_US),
        (Mode::Exclusive, u64::MAX),
    ] {
        let refused = resource
            .put(
                &forged(&clock_lock, mode, generation),
                b"k",
                "runaway",
                None,
            )
            .await?
            .expect_err("a generation a day ahead of the clock is absurd");
        assert!(
            matches!(refused, Refused::RaiseTooLarge { presented, .. } if presented.get() == generation),
            "{refused:?}"
        );
    }
    let refused = resource
        .get(
            &clock_lock,
            b"k",
            Some(&forged(&clock_lock, Mode::Shared, u64::MAX)),
        )
        .await?
        .expect_err("a shared read raises a mark too");
    assert!(
        matches!(refused, Refused::RaiseTooLarge { .. }),
        "{refused:?}"
    );
    assert_eq!(
        resource.marks(&clock_lock).await?,
        before,
        "refusals change nothing"
    );
    let read = resource.get(&clock_lock, b"k", None).await?.expect("read");
    assert_eq!(read.value.as_deref(), Some(&b"honest"[..]));

    // A lock with no mark yet has the clock as its reference point.
    let fresh = LockName::new("redis-fencing/fresh-runaway")?;
    let refused = resource
        .put(
            &forged(&fresh, Mode::Exclusive, u64::MAX),
            b"k",
            "runaway",
            None,
        )
        .await?
        .expect_err("no honest first generation is ahead of the clock");
    assert!(
        matches!(refused, Refused::RaiseTooLarge { .. }),
        "{refused:?}"
    );
    assert_eq!(resource.marks(&fresh).await?.exclusive, 0);

    // A counter lock is held to the count, whatever the clock says.
    let counter_lock = LockName::new("redis-fencing/counter-runaway")?;
    let counter_locks = client(&redis.url(), GenerationScheme::Counter).await?;
    let counter_session = counter_locks.session(options())?;
    let guard = counter_session
        .acquire(&counter_lock, Mode::Exclusive)
        .await?;
    let mark = resource
        .put(&guard, b"k", "honest", None)
        .await?
        .expect("the honest counter write")
        .marks
        .exclusive;
    guard.release().await?;
    for generation in [mark + 10_001, now_micros()] {
        let refused = resource
            .put(
                &forged(&counter_lock, Mode::Exclusive, generation),
                b"k",
                "runaway",
                None,
            )
            .await?
            .expect_err("beyond the count");
        assert!(
            matches!(
                refused,
                Refused::RaiseTooLarge {
                    max_raise: 10_000,
                    ..
                }
            ),
            "{refused:?}"
        );
    }
    assert_eq!(resource.marks(&counter_lock).await?.exclusive, mark);

    // The honest holders of both locks carry on.
    for (session, lock) in [
        (&clock_session, &clock_lock),
        (&counter_session, &counter_lock),
    ] {
        let guard = session.acquire(lock, Mode::Exclusive).await?;
        resource
            .put(&guard, b"k", "next", None)
            .await?
            .expect("the next honest holder writes");
        guard.release().await?;
    }
    server.stop().await
}
