//! Scenario 11: the resource server is killed with SIGKILL in the middle of
//! a burst of writes, and restarted on the same data directory and port,
//! several times over.

use std::time::Duration;

use palisade_testkit::redis::RedisServer;
use palisade_tests::checker::CheckOptions;
use palisade_tests::fault::{
    ClientConfig, FaultRun, ResourceServerOptions, ResourceServerProcess, Scenario, scaled,
};

use crate::disk::{LoopExt4, require_mount};
use crate::probe::{Probe, doubt_and_replays};
use crate::{
    ASSERTED, LIVE_BOUND, TTL, assert_marks_survived, recover_and_stop, spawn_clients,
    wait_acknowledged,
};

const LOCKS: [&str; 2] = ["s11/a", "s11/b"];

/// Scenario 11: resource server `kill -9` mid-burst; restart; repeat.
///
/// Four clients (eight in the soak) hold Redis locks on two contended
/// locks and write in bursts (no pause between writes, every third write
/// to a key the lock's holders share) to a resource server whose data
/// lives on a loop-mounted ext4. Each round waits for 50 more
/// acknowledged writes (150 in the soak), kills the server with SIGKILL
/// while writes are in flight, and restarts it on the same directory and
/// port; 5 rounds (15 in the soak), more (up to three times as many) until
/// a write was in flight at a kill. Clients retry a write whose outcome
/// is unknown with the same idempotency key, across the restart.
///
/// Invariants, each asserted:
/// - I-DUR: every write acknowledged with a 2xx is in the final state;
/// - marks intact: right after every restart each lock's mark is at least
///   the highest generation acknowledged before the kill, and a write one
///   generation below it is refused (409 stale); once the clients stop,
///   the mark is the highest acknowledged generation or that of a write
///   still in doubt, never anything else;
/// - I-MONO: accepted generations never decrease in `commit_seq` order,
///   which stays monotonic across restarts;
/// - I-STALE: no write is accepted after a newer generation's write was
///   acknowledged;
/// - I-ONCE: a write retried after the restart is applied once (a replay
///   answers it when the first attempt had landed);
/// - I-LIVE: after the last restart a client acquires and writes within
///   30 s.
///
/// The run must also really have had writes in flight at a kill (some
/// outcome in doubt), or it would prove nothing about them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root to mount file systems: scripts/test.sh includes it when run as root, as CI does"]
async fn s11_resource_server_kill_9_mid_burst() -> anyhow::Result<()> {
    let redis = RedisServer::start();
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new("s11")?;

    // The data on a real ext4 of its own.
    require_mount();
    let disk = LoopExt4::create(256)?;
    let (data_dir, backend) = (disk.path().join("data"), "redis; ext4 on a loop device");
    let mut server = ResourceServerProcess::start(
        &binaries,
        &run,
        ResourceServerOptions::default().data_dir(&data_dir),
    )?;

    let n_clients = scaled(4, 8);
    let rounds = scaled(5, 15);
    let writes_per_round = scaled(50, 150);
    let base = ClientConfig::redis(&redis.url(), &server.base_url())
        .ttl(TTL)
        .writes_per_hold(4)
        .think(Duration::ZERO)
        .register_every(3)
        .write_timeout(Duration::from_secs(5))
        // Enough attempts, 100 ms apart, to outlast a restart on a loaded
        // machine: a write in flight at the kill is retried until the
        // restarted server answers it.
        .retries(100);
    let mut clients = spawn_clients(&run, &binaries, &base, &LOCKS, n_clients)?;
    let mut probe = Probe::new(&run, "probe", &server.base_url())?;

    // Whether a write is in flight at a kill is up to the schedule: kill
    // again (up to three times as often) until one was, so the run always
    // tests what it is about.
    let mut kills = 0;
    while kills < rounds || (doubt_and_replays(&run.events()?).0 == 0 && kills < 3 * rounds) {
        kills += 1;
        wait_acknowledged(&mut run, writes_per_round).await?;
        run.inject("kill -9 resource server")?;
        server.kill()?;
        // Everything acknowledged before the kill: the server is down, so
        // nothing more can be.
        let before = run.events()?;
        server.restart()?;
        run.heal("kill -9 resource server")?;
        assert_marks_survived(&mut probe, &before, &LOCKS).await?;
    }

    recover_and_stop(&mut run, &mut clients, &probe, &LOCKS).await?;
    let (in_doubt, replayed) = doubt_and_replays(&run.events()?);
    let scenario = Scenario::new("11 resource server kill -9 mid-burst", backend).note(format!(
        "{kills} kills; {in_doubt} writes in doubt at a kill, {replayed} retries answered by replay; marks and a stale probe checked after each restart"
    ));
    let report = run
        .verdict(
            &server.base_url(),
            &CheckOptions {
                live_bound: Some(LIVE_BOUND),
            },
            &scenario,
        )
        .await?;
    report.assert_holds(&ASSERTED);
    assert_eq!(report.faults, kills);
    assert!(report.accepted_writes >= kills * writes_per_round);
    assert!(
        in_doubt > 0,
        "no write was in flight at any kill: the run tested nothing about them"
    );
    Ok(())
}
