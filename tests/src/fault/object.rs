//! The object-store row of the fault suite: lock holders writing one
//! object through `palisade-fence-object` to moto's S3 (persistent: it
//! journals every acknowledged write), each through its own
//! [`FaultProxy`], while the S3 server is killed and restarted, the links
//! turn lossy, and one holder's write is held past its lease.
//!
//! Clients are tasks of the test process, each with its own lock session
//! (the in-process lock service, real leases), its own S3 client and its
//! own proxy; a paused task stands for a paused process. They record the
//! same histories as the fault suite's client processes. The commit order
//! the checker needs (I-MONO) comes from the store itself: the journal of
//! acknowledged writes, in the order moto applied them.
//!
//! The mutation run puts a [`ConditionStrippingProxy`] (a store that
//! ignores `If-Match` and `If-None-Match`) behind every client's proxy and
//! skips the start-up probe: the checker must then report the held write.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::checker::{CheckOptions, FinalState, Report, check};
use crate::history::{Event, OpKind, Phase, Recorder};
use anyhow::Context as _;
use palisade::embedded::EmbeddedLockClient;
use palisade::{Lock, LockGuard, LockName, Mode, SessionOptions};
use palisade_fence_object::testing::FaultyStore;
use palisade_fence_object::{FenceError, FenceStats, ObjectFence, Path, RetryBudget, S3Config};
use palisade_testkit::proxy::{Fault, FaultProxy, Loss};
use palisade_testkit::s3::{ConditionStrippingProxy, S3Options, S3Server};
use tokio::sync::watch;

use super::{FaultRun, Scenario, TableRow, append_row};

/// The lock every client takes, and the object it guards.
const LOCK: &str = "faults/s20";
const KEY: &str = "k";
const BUCKET: &str = "faults";
const CLIENTS: usize = 3;
/// Short leases, so the held write outlives its holder's lease quickly.
const TTL: Duration = Duration::from_millis(1500);
/// How long the held write waits between its check and the store: well
/// past the lease, long enough for another holder to acquire and write.
const HOLD: Duration = Duration::from_secs(5);
/// One request's deadline: past it, a write is in doubt and read back.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Any one wait of the scenario, generous for a loaded 2-core machine.
const STEP: Duration = Duration::from_secs(60);

/// What the held write came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Refused as stale (the fence).
    Refused,
    /// Landed (only without conditions).
    Landed,
    /// Anything else (a failure, a lost lease before sending).
    Other,
}

/// Shared between the scenario and its client tasks.
struct Shared {
    stop: AtomicBool,
    /// Set by the nemesis: the next write of client 0 is held.
    hold_next: AtomicBool,
    /// What the held write came to, once it has.
    held: watch::Sender<Option<Held>>,
    /// Writes acknowledged so far, all clients.
    acknowledged: watch::Sender<u64>,
}

/// Runs the scenario and returns the checker's report and what the held
/// write came to. `strip_conditions`: the mutation run. The row's note
/// adds what the fences and proxies counted: writes whose answer was lost
/// and that were read back (each returned as landed or not, so the history
/// holds no write in doubt), 412s, 409s, chunks lost and resets.
pub async fn object_store_under_faults(
    name: &str,
    mut scenario: Scenario,
    strip_conditions: bool,
) -> anyhow::Result<(Report, Held)> {
    let mut run = FaultRun::new(name)?;
    let mut moto = S3Server::spawn(S3Options { persistent: true });
    moto.create_bucket(BUCKET)?;
    let stripping = if strip_conditions {
        Some(ConditionStrippingProxy::start(moto.address())?)
    } else {
        None
    };
    let upstream = stripping
        .as_ref()
        .map_or(moto.address(), ConditionStrippingProxy::address);
    let locks = EmbeddedLockClient::new();
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        hold_next: AtomicBool::new(false),
        held: watch::Sender::new(None),
        acknowledged: watch::Sender::new(0),
    });

    let mut proxies = Vec::new();
    let mut fences = Vec::new();
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let proxy = FaultProxy::start(&format!("client {client} to S3"), upstream)?;
        let store = S3Config::parse(&format!("s3://{BUCKET}/s20"))?
            .with_endpoint(proxy.url())
            .with_credentials("faults", "faults-secret")
            .with_timeout(REQUEST_TIMEOUT)
            .build_store()?;
        let faulty = Arc::new(FaultyStore::new(store));
        let fence = if strip_conditions {
            ObjectFence::without_probe_unsafe_for_mutation_tests(
                faulty.clone(),
                "moto, conditions stripped",
            )
        } else {
            ObjectFence::open(faulty.clone(), format!("moto via {}", proxy.url())).await?
        };
        let fence = Arc::new(fence.with_retry(RetryBudget {
            total: Duration::from_secs(20),
            ..RetryBudget::default()
        }));
        fences.push(Arc::clone(&fence));
        let recorder = Recorder::open(&run.history_path(&format!("c{client}")))?;
        tasks.push(tokio::spawn(client_loop(
            client,
            fence,
            faulty,
            locks.clone(),
            recorder,
            Arc::clone(&shared),
        )));
        proxies.push(proxy);
    }

    let mut acknowledged = shared.acknowledged.subscribe();
    let mut progress = async |more: u64| -> anyhow::Result<()> {
        let target = *acknowledged.borrow() + more;
        tokio::time::timeout(STEP, acknowledged.wait_for(|count| *count >= target)).await??;
        Ok(())
    };
    progress(5).await.context("no writes before the faults")?;

    // 1. Lossy links: late chunks and resets on every client's path.
    run.inject("lossy links: 20 % of chunks late, 2 % reset, on every client's path")?;
    for proxy in &proxies {
        proxy.set(Fault::Loss(Loss::new(0.2).with_resets(0.02)));
    }
    progress(6).await.context("no progress on lossy links")?;
    for proxy in &proxies {
        proxy.pass();
    }
    run.heal("lossy links")?;

    // 2. The S3 server killed (SIGKILL) mid-stream and started again on its
    // journal.
    run.inject("S3 server killed mid-stream")?;
    moto.kill()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    moto.restart()?;
    run.heal("S3 server restarted")?;
    progress(4).await.context("no progress after the restart")?;

    // 3. Client 0's next write is held between its check and the store,
    // past its lease; others take the lock and write meanwhile.
    run.inject("client 0's write held 5 s past its lease")?;
    shared.hold_next.store(true, Ordering::SeqCst);
    let mut held = shared.held.subscribe();
    tokio::time::timeout(STEP, held.wait_for(Option::is_some)).await??;
    run.heal("held write delivered")?;
    progress(3)
        .await
        .context("no progress after the held write")?;

    shared.stop.store(true, Ordering::SeqCst);
    for task in tasks {
        tokio::time::timeout(STEP, task).await???;
    }
    let held = shared.held.borrow().unwrap_or(Held::Other);

    // The verdict: commit order from the store's journal, the final value
    // read directly from the store.
    let mut events = run.events()?;
    let object_path = format!("/{BUCKET}/s20/{KEY}");
    let order: Vec<String> = moto
        .acknowledged_puts()?
        .into_iter()
        .filter(|(path, _)| *path == object_path)
        .map(|(_, body)| String::from_utf8_lossy(&body).into_owned())
        .collect();
    for event in &mut events {
        if event.op == OpKind::Write && event.phase == Phase::Ok {
            let value = event.value.clone().unwrap_or_default();
            event.commit_seq = order
                .iter()
                .position(|landed| *landed == value)
                .map(|index| index as u64 + 1);
        }
    }
    let direct = S3Config::parse(&format!("s3://{BUCKET}/s20"))?
        .with_endpoint(moto.endpoint())
        .with_credentials("faults", "faults-secret")
        .build_store()?;
    let reader = ObjectFence::without_probe_unsafe_for_mutation_tests(direct, "moto");
    let final_value = reader
        .get(&Path::from(KEY))
        .await?
        .map(|object| String::from_utf8_lossy(&object.bytes).into_owned());
    let mut final_state = FinalState::new();
    final_state.insert((LOCK.to_owned(), KEY.to_owned()), final_value);
    let options = CheckOptions {
        live_bound: Some(Duration::from_secs(30)),
    };
    let report = check(&events, &final_state, &options);
    let counted = |counter: fn(&FenceStats) -> &AtomicU64| -> u64 {
        fences
            .iter()
            .map(|fence| counter(fence.stats()).load(Ordering::Relaxed))
            .sum()
    };
    let lost: u64 = proxies.iter().map(|proxy| proxy.stats().chunks_lost).sum();
    let resets: u64 = proxies
        .iter()
        .map(|proxy| proxy.stats().connections_reset)
        .sum();
    let counts = format!(
        "{} writes in doubt read back, {} answered 412, {} answered 409; {lost} chunks lost and {resets} connections reset by the proxies",
        counted(|stats| &stats.in_doubt),
        counted(|stats| &stats.precondition_failed),
        counted(|stats| &stats.conflicts),
    );
    scenario.note = Some(match scenario.note.take() {
        Some(note) => format!("{note}; {counts}"),
        None => counts,
    });
    eprintln!(
        "[{name}] {} on {}: {report}",
        scenario.name, scenario.backend
    );
    for violation in report.violations.iter().take(20) {
        eprintln!("  {}: {}", violation.invariant.name(), violation.message);
    }
    append_row(&TableRow::from_report(&scenario, &report))?;
    Ok((report, held))
}

/// One client: rounds of acquire, fence, three writes, release, until
/// told to stop.
async fn client_loop(
    client: usize,
    fence: Arc<ObjectFence>,
    faulty: Arc<FaultyStore>,
    locks: EmbeddedLockClient,
    mut recorder: Recorder,
    shared: Arc<Shared>,
) -> anyhow::Result<()> {
    let id = format!("c{client}");
    let lock = LockName::new(LOCK)?;
    let object = Path::from(KEY);
    let options = SessionOptions::default()
        .with_ttl(TTL)
        .with_keepalive_interval(TTL / 4)
        .with_safety_margin(Duration::from_millis(300));
    let mut round = 0u64;
    while !shared.stop.load(Ordering::SeqCst) {
        round += 1;
        let session = locks.session(options.clone())?;
        recorder.record(&Event::now(&id, Phase::Invoke, OpKind::Acquire, LOCK))?;
        let guard = match session.acquire_timeout(&lock, Mode::Exclusive, STEP).await {
            Ok(guard) => guard,
            Err(error) => {
                recorder.record(
                    &Event::now(&id, Phase::Fail, OpKind::Acquire, LOCK).detail(error.to_string()),
                )?;
                continue;
            }
        };
        let generation = guard.generation().get();
        recorder
            .record(&Event::now(&id, Phase::Ok, OpKind::Acquire, LOCK).generation(generation))?;
        if !matches!(fence.fence(&guard).await, Ok(Ok(_))) {
            continue;
        }
        for write in 0..3 {
            let hold = client == 0 && shared.hold_next.swap(false, Ordering::SeqCst);
            if hold {
                // A pause between the fence's check and the store: the
                // write waits on a slow link while the lease runs out.
                faulty.set_delay(HOLD);
                session.stop_keepalive();
            }
            let value = format!("{id}-{round}-{write}-g{generation}");
            recorder.record(
                &Event::now(&id, Phase::Invoke, OpKind::Write, LOCK)
                    .generation(generation)
                    .write(&value, KEY, &value),
            )?;
            let outcome = fence.put(&guard, &object, value.clone()).await;
            let done = |phase| {
                Event::now(&id, phase, OpKind::Write, LOCK)
                    .generation(generation)
                    .write(&value, KEY, &value)
            };
            let (event, held) = match &outcome {
                Ok(Ok(_)) => {
                    shared.acknowledged.send_modify(|count| *count += 1);
                    (done(Phase::Ok), Held::Landed)
                }
                Ok(Err(refused)) => (done(Phase::Fail).detail(refused.reason()), Held::Refused),
                // The guard refused to hand out its sequencer: nothing sent.
                Err(FenceError::Lock(error)) => {
                    (done(Phase::Fail).detail(error.to_string()), Held::Other)
                }
                Err(error) => (done(Phase::Unknown).detail(error.to_string()), Held::Other),
            };
            recorder.record(&event)?;
            if hold {
                faulty.set_delay(Duration::ZERO);
                shared.held.send_replace(Some(held));
            }
            if !matches!(outcome, Ok(Ok(_))) {
                break;
            }
        }
        let _ = guard.release().await;
    }
    Ok(())
}
