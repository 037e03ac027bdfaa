//! The paused-holder story, shared by scenarios 1 and 2, the replica
//! scenarios 16 and 17 and the mutation check: a holder in its own process is stopped (SIGSTOP) at the moment
//! it has a sequencer in hand and a write ready to go; its lease lapses; a
//! contender takes the lock and writes; the holder resumes and its write,
//! now late, goes out.

use std::time::Duration;

use palisade_tests::fault::{
    ClientConfig, ClientLine, ClientProcess, FaultBinaries, FaultRun, Invariant,
    ResourceServerOptions, ResourceServerProcess, Scenario, scaled, stop_clients,
};

use crate::{EXIT, STEP, TTL, live_within};

/// Scenarios 1 and 2, on the lock service `client` connects to (given the
/// resource server's URL): several paused-holder rounds, then the checker.
/// Asserts I-MONO, I-STALE, I-DUR, I-ONCE, I-TOKEN, and I-LIVE within
/// TTL + 20 s, and that every late write was fenced or unanswered.
pub(crate) async fn paused_holder_is_fenced(
    tag: &str,
    scenario: Scenario,
    client: impl FnOnce(&str) -> ClientConfig,
) -> anyhow::Result<()> {
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new(tag)?;
    let server = ResourceServerProcess::start(&binaries, &run, ResourceServerOptions::default())?;
    let base = client(&server.base_url())
        .lock(format!("faults/{tag}"))
        .ttl(TTL);
    let rounds = scaled(2, 8);
    let late = paused_holder(&mut run, &binaries, &base, scaled(2, 4), rounds).await?;

    let report = run
        .verdict(
            &server.base_url(),
            &live_within(TTL + Duration::from_secs(20)),
            &scenario,
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    late.assert_fenced(rounds);
    assert!(report.fenced_writes >= late.fenced, "{report}");
    assert_eq!(report.faults, rounds);
    Ok(())
}

/// Scenarios 16 and 17: three resource servers over one shared store
/// (`store`, a `--store` value), the clients' writes spread over them, on
/// the lock service `client` connects to (given replica 0's URL). The
/// paused holder writes through replica 0, the newer holders through
/// replicas 1 and 2; then a second wave writes through every replica while
/// replica 2 is killed (SIGKILL) and restarted. The final state is read
/// through replica 1, which the holder never wrote to. Asserts I-MONO,
/// I-STALE, I-DUR, I-ONCE, I-TOKEN, I-LIVE within TTL + 20 s, and that
/// every late write was fenced or unanswered.
pub(crate) async fn replicas_fence_a_paused_holder(
    tag: &str,
    store: &str,
    scenario: Scenario,
    client: impl FnOnce(&str) -> ClientConfig,
) -> anyhow::Result<()> {
    let binaries = palisade_tests::fault_binaries!();
    let mut run = FaultRun::new(tag)?;
    let mut replicas = Vec::new();
    for index in 0..3 {
        let dir = run.dir().join(format!("replica-{index}"));
        std::fs::create_dir_all(&dir)?;
        replicas.push(ResourceServerProcess::start_at(
            &binaries.resource_server,
            &dir,
            ResourceServerOptions::default().store(store.to_owned()),
        )?);
    }
    let urls: Vec<String> = replicas.iter().map(|r| r.base_url()).collect();
    let base = client(&urls[0]).lock(format!("faults/{tag}")).ttl(TTL);

    // The paused holder's late write goes through replica 0, the newer
    // holder's writes through replica 1 or 2.
    let rounds = scaled(2, 6);
    let late = paused_holder_over(&mut run, &binaries, &base, 2, rounds, &urls).await?;

    // A second wave writing through every replica, one of which dies.
    let kill = "SIGKILL replica 2 while clients write through it, restart";
    let wave = base.clone().writes_per_hold(4);
    let mut writers = Vec::new();
    for (index, url) in urls.iter().enumerate() {
        let mut config = wave.clone();
        config.server = url.clone();
        writers.push(run.spawn_client(&binaries, &format!("w{index}"), &config)?);
    }
    // Someone wrote through replica 2 (client w2) before it dies.
    run.wait_any(STEP, |client, line| {
        (client == "w2" && matches!(line, ClientLine::Wrote { .. })).then_some(())
    })
    .await?;
    run.inject(kill)?;
    replicas[2].kill()?;
    // The others go on writing through replicas 0 and 1.
    run.wait_any(STEP, |client, line| {
        (client != "w2" && matches!(line, ClientLine::Wrote { .. })).then_some(())
    })
    .await?;
    replicas[2].restart()?;
    run.heal(kill)?;
    run.wait_recovered(STEP).await?;
    stop_clients(writers.iter_mut(), EXIT).await?;

    let report = run
        .verdict(
            &urls[1],
            &live_within(TTL + Duration::from_secs(20)),
            &scenario,
        )
        .await?;
    report.assert_safe();
    report.assert_holds(&[Invariant::Token, Invariant::Live]);
    late.assert_fenced(rounds);
    assert!(report.fenced_writes >= late.fenced, "{report}");
    assert_eq!(report.faults, rounds + 1);
    Ok(())
}

/// What happened to the late writes of the paused holder.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LateWrites {
    /// Refused with 409 stale: fenced.
    pub(crate) fenced: usize,
    /// Accepted: only possible with fencing off.
    pub(crate) accepted: usize,
    /// No definite answer (a timeout on a loaded machine): the checker
    /// still judges them, as writes that may have landed.
    pub(crate) unknown: usize,
}

impl LateWrites {
    /// Asserts that no late write was accepted, at least one was fenced,
    /// and every one of the `rounds` was either fenced or unanswered.
    pub(crate) fn assert_fenced(&self, rounds: usize) {
        assert_eq!(self.accepted, 0, "no late write may be accepted: {self:?}");
        assert!(
            self.fenced >= 1,
            "late writes must be refused as stale: {self:?}"
        );
        assert_eq!(self.fenced + self.unknown, rounds, "{self:?}");
    }
}

/// Runs `rounds` pauses of holder `a` against `contenders` other clients on
/// the lock(s) of `base`, then stops every client once a grant and a write
/// have happened after the last heal.
pub(crate) async fn paused_holder(
    run: &mut FaultRun,
    binaries: &FaultBinaries,
    base: &ClientConfig,
    contenders: usize,
    rounds: usize,
) -> anyhow::Result<LateWrites> {
    paused_holder_over(run, binaries, base, contenders, rounds, &[]).await
}

/// [`paused_holder`] with the clients' writes spread over several resource
/// servers: the holder writes to `servers[0]`, contender `i` to
/// `servers[(i + 1) % len]`. Empty: every client uses `base`'s server.
pub(crate) async fn paused_holder_over(
    run: &mut FaultRun,
    binaries: &FaultBinaries,
    base: &ClientConfig,
    contenders: usize,
    rounds: usize,
    servers: &[String],
) -> anyhow::Result<LateWrites> {
    let on = |index: usize| {
        let mut config = base.clone();
        if !servers.is_empty() {
            config.server = servers[index % servers.len()].clone();
        }
        config
    };
    let mut holder = run.spawn_client(binaries, "a", &on(0).gate().writes_per_hold(2))?;
    let mut others: Vec<ClientProcess> = Vec::new();
    for index in 0..contenders {
        let id = format!("c{index}");
        others.push(run.spawn_client(binaries, &id, &on(index + 1).writes_per_hold(3))?);
    }

    let mut late = LateWrites::default();
    for round in 1..=rounds {
        // The holder has its sequencer and its write ready.
        let held = holder.wait_holding(STEP).await?;
        let fault = format!("round {round}: SIGSTOP holder a (generation {held})");
        holder.pause()?;
        run.inject(&fault)?;

        // Its lease lapses; a contender takes the lock and writes.
        let newer = run
            .wait_any(STEP, |client, line| match line {
                ClientLine::Wrote { generation, .. } if client != "a" && *generation > held => {
                    Some(*generation)
                }
                _ => None,
            })
            .await?;

        // The holder wakes up and its write goes out, late.
        holder.resume()?;
        late_write(&mut holder, held, newer, &mut late).await?;
        run.heal(&fault)?;
    }

    // The holder stops first: left running it would take the lock again
    // and sit at its gate. Then someone acquires and writes after the last
    // heal (I-LIVE), and the rest stop.
    holder.stop_and_wait(EXIT).await?;
    run.wait_recovered(STEP).await?;
    stop_clients(others.iter_mut(), EXIT).await?;
    Ok(late)
}

/// Opens the holder's gate and counts how its late write (generation
/// `held`, after a write of `newer`) ended.
pub(crate) async fn late_write(
    holder: &mut ClientProcess,
    held: u64,
    newer: u64,
    late: &mut LateWrites,
) -> anyhow::Result<()> {
    holder.go()?;
    let outcome = holder
        .wait_for(STEP, |line| match line {
            ClientLine::Refused {
                generation, detail, ..
            } if *generation == held => Some(Err(detail.clone())),
            ClientLine::Wrote { generation, .. } if *generation == held => Some(Ok(true)),
            ClientLine::GaveUp { generation, .. } if *generation == held => Some(Ok(false)),
            _ => None,
        })
        .await?;
    match outcome {
        Err(detail) if detail == "stale" => late.fenced += 1,
        Ok(true) => late.accepted += 1,
        Ok(false) => late.unknown += 1,
        Err(detail) => anyhow::bail!(
            "the late write of generation {held} (after {newer}) was refused with `{detail}`, not as stale"
        ),
    }
    Ok(())
}

/// Ends a hold early from outside the holder (scenario 10).
pub(crate) trait EarlyExpiry {
    /// What round `round` does, for the nemesis history.
    fn describe(&self, round: usize) -> String;

    /// Does it to the hold whose sequencer is `sequencer` (text form).
    async fn expire(&mut self, round: usize, sequencer: &str) -> anyhow::Result<()>;
}

/// Runs `rounds` early expiries of holder `a`'s lease while it works (it
/// is running, its write held at its gate), with `contenders` other
/// clients waiting for the lock, then stops every client.
pub(crate) async fn expired_holder(
    run: &mut FaultRun,
    binaries: &FaultBinaries,
    base: &ClientConfig,
    contenders: usize,
    rounds: usize,
    expiry: &mut impl EarlyExpiry,
) -> anyhow::Result<LateWrites> {
    let mut holder = run.spawn_client(binaries, "a", &base.clone().gate().writes_per_hold(2))?;
    let mut others: Vec<ClientProcess> = Vec::new();
    for index in 0..contenders {
        let id = format!("c{index}");
        others.push(run.spawn_client(binaries, &id, &base.clone().writes_per_hold(3))?);
    }

    let mut late = LateWrites::default();
    for round in 1..=rounds {
        let (granted, sequencer) = holder.wait_granted(STEP).await?;
        let held = holder.wait_holding(STEP).await?;
        anyhow::ensure!(granted == held, "holding {held} after a grant of {granted}");
        let fault = format!(
            "round {round}: {} (holder a, generation {held})",
            expiry.describe(round)
        );
        run.inject(&fault)?;
        expiry.expire(round, &sequencer).await?;

        // The lock is free early: a contender takes it and writes.
        let newer = run
            .wait_any(STEP, |client, line| match line {
                ClientLine::Wrote { generation, .. } if client != "a" && *generation > held => {
                    Some(*generation)
                }
                _ => None,
            })
            .await?;
        late_write(&mut holder, held, newer, &mut late).await?;
        run.heal(&fault)?;
    }

    holder.stop_and_wait(EXIT).await?;
    run.wait_recovered(STEP).await?;
    stop_clients(others.iter_mut(), EXIT).await?;
    Ok(late)
}
