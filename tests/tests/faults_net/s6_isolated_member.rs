//! Scenario 6: an etcd member is cut off from its peers (its peer proxies
//! partitioned, both ways) while a client pinned to it holds a lock, and a
//! client on the majority side waits for that lock.
//!
//! The member isolated is the leader, the worst case: it was the one
//! serving the pinned client's grant. An isolated member still answers
//! serializable reads from its stale state (the testkit's own etcd test
//! shows it), so a lock library that decided ownership from one would let
//! the pinned client believe it still holds the lock. Palisade's etcd
//! backend decides only through linearizable requests, so:
//!
//! - the pinned client cannot keep the lock: the majority expires its
//!   lease and grants the lock to the other client, with a higher
//!   generation, while the isolated member is still running;
//! - the pinned client cannot acquire while isolated: no grant reaches it
//!   between the isolation and the heal, although it keeps trying;
//! - the write the pinned client sends with its old sequencer after the
//!   other client wrote is refused (409 stale).
//!
//! Invariants: I-STALE, I-MONO, I-TOKEN, I-DUR, I-ONCE, and I-LIVE after
//! the heal (the pinned client is granted again and writes).

use std::time::Duration;

use palisade_testkit::etcd::EtcdCluster;
use palisade_tests::fault::{
    CheckOptions, ClientConfig, ClientLine, FaultRun, Invariant, ResourceServerOptions,
    ResourceServerProcess, Scenario, scaled,
};
use palisade_tests::history::{OpKind, Phase, monotonic_us};

/// Lease TTL (etcd's minimum is 2 s).
const TTL: Duration = Duration::from_secs(2);
/// How long the isolation lasts after the majority's holder wrote. The
/// pinned client meanwhile releases (in vain) and tries to open a session
/// and take the lock again; an isolated member lets each of those requests
/// run into the client's 5 s request timeout, so this leaves room for at
/// least one refused attempt after the failed release.
const ISOLATED_AFTER_TAKEOVER: Duration = Duration::from_secs(12);
/// Process start-up, an election plus an expiring lease, an answer: wide
/// bounds for a loaded 2-core machine.
const STEP: Duration = Duration::from_secs(45);
/// I-LIVE: TTL + election (about 2 s) + catching up + margin.
const LIVE_BOUND: Duration = Duration::from_secs(25);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_isolated_etcd_member_cannot_keep_or_grant_the_lock() -> anyhow::Result<()> {
    let _serial = crate::serial().await;
    let binaries = palisade_tests::fault_binaries!();
    let mut cluster = EtcdCluster::start_with_peer_proxies();
    let mut run = FaultRun::new("s6-isolated-member")?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let isolated =
        tokio::task::block_in_place(|| cluster.wait_for_leader(Duration::from_secs(30)))?;
    let majority: Vec<String> = (0..EtcdCluster::SIZE)
        .filter(|index| *index != isolated)
        .map(|index| cluster.endpoint(index))
        .collect();
    let lock = "s6/isolated";
    let rounds = scaled(1, 3);

    // `a` is pinned to the member about to be isolated; every hold's first
    // write waits for the test's GO.
    let a_config = ClientConfig::etcd(&[cluster.endpoint(isolated)], &server.base_url())
        .lock(lock)
        .ttl(TTL)
        .gate()
        .writes_per_hold(2)
        .retries(0)
        .write_timeout(Duration::from_secs(5))
        .acquire_timeout(Duration::from_secs(3));
    let mut a = run.spawn_client(&binaries, "a", &a_config)?;
    // `b` is on the majority side and queues behind `a`.
    let b_config = ClientConfig::etcd(&majority, &server.base_url())
        .lock(lock)
        .ttl(TTL)
        .writes_per_hold(2)
        .think(Duration::from_millis(50))
        .acquire_timeout(Duration::from_secs(30));

    let mut b = None;
    let mut windows = Vec::new();
    for round in 0..rounds {
        let (old_generation, _) = a.wait_granted(STEP).await?;
        a.wait_for(STEP, |line| {
            matches!(line, ClientLine::Holding { .. }).then_some(())
        })
        .await?;
        let b = match &mut b {
            Some(b) => b,
            None => b.insert(run.spawn_client(&binaries, "b", &b_config)?),
        };

        // Cut the pinned client's member off from its peers.
        let fault = format!(
            "isolate etcd member m{} from its peers, a pinned to it (round {round})",
            isolated + 1
        );
        run.inject(&fault)?;
        let isolated_at = monotonic_us();
        cluster.isolate(isolated)?;

        // The majority takes the lock away from `a` and `b` writes.
        let new_generation = b
            .wait_for(STEP, |line| match line {
                ClientLine::Granted { generation, .. } if *generation > old_generation => {
                    Some(*generation)
                }
                _ => None,
            })
            .await?;
        b.wait_wrote_above(new_generation - 1, STEP).await?;

        // `a`'s write with its old sequencer, sent now, is fenced.
        a.go()?;
        let late = a
            .wait_for(STEP, |line| match line {
                ClientLine::Wrote { .. } | ClientLine::Refused { .. } => Some(line.clone()),
                _ => None,
            })
            .await?;
        match &late {
            ClientLine::Refused {
                generation, detail, ..
            } => {
                assert_eq!(*generation, old_generation);
                assert_eq!(detail, "stale", "{late:?}");
            }
            other => panic!("a's old sequencer was accepted after b's write: {other:?}"),
        }

        // `a` goes on trying to get the lock while isolated; the partition
        // lasts this long (time is the subject: a fault's length).
        tokio::time::sleep(ISOLATED_AFTER_TAKEOVER).await;
        cluster.heal_peers();
        let healed_at = monotonic_us();
        run.heal(&fault)?;
        windows.push((isolated_at, healed_at));

        // After the heal, `a` gets the lock again (behind `b`'s holds) and
        // its gated write goes through.
        let (generation, _) = a.wait_granted(STEP).await?;
        assert!(generation > new_generation);
        a.wait_for(STEP, |line| {
            matches!(line, ClientLine::Holding { .. }).then_some(())
        })
        .await?;
        a.go()?;
        a.wait_wrote_above(generation - 1, STEP).await?;
    }

    a.stop_and_wait(STEP).await?;
    if let Some(b) = &mut b {
        b.stop_and_wait(STEP).await?;
    }

    // No grant reached `a` while it was isolated, although it tried: an
    // acquire sent in the window, or a session it could not open (the
    // lease grant is a raft proposal, too).
    let events = run.events()?;
    let in_window = |mono_us: u64| {
        windows
            .iter()
            .any(|(from, to)| (*from..=*to).contains(&mono_us))
    };
    let grants_while_isolated: Vec<_> = events
        .iter()
        .filter(|event| {
            event.client == "a"
                && event.op == OpKind::Acquire
                && event.phase == Phase::Ok
                && in_window(event.mono_us)
        })
        .collect();
    assert!(
        grants_while_isolated.is_empty(),
        "the isolated member granted a lock: {grants_while_isolated:?}"
    );
    let acquires_tried = events
        .iter()
        .filter(|event| {
            event.client == "a"
                && event.op == OpKind::Acquire
                && event.phase == Phase::Invoke
                && in_window(event.mono_us)
        })
        .count();
    let sessions_refused = std::fs::read_to_string(a.log())?
        .matches("cannot open a session")
        .count();
    assert!(
        acquires_tried + sessions_refused > 0,
        "a never tried to take the lock while isolated"
    );

    let options = CheckOptions {
        live_bound: Some(LIVE_BOUND),
    };
    let report = run
        .verdict(
            &server.base_url(),
            &options,
            &Scenario::new(
                "6 etcd member isolated from its peers, client pinned to it",
                "etcd (3 members)",
            )
            .note(format!(
                "pinned client: {acquires_tried} acquires and {sessions_refused} sessions refused while isolated, 0 grants"
            )),
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    assert!(report.fenced_writes >= rounds, "{report}");
    assert_eq!(report.faults, rounds);
    Ok(())
}
