//! `palisade elect NAME --value V -- command`: a hot standby. Campaign in
//! the election `NAME`, and once elected run the command with the term's
//! sequencer, as `palisade lock` runs its command under a lock: the marks
//! are raised to the term on `--server` before the command starts, and the
//! command is stopped (SIGTERM, SIGKILL after `--grace`) the moment the
//! leadership is lost. Run one on every machine that could lead; the
//! others wait in the campaign and the next one elected takes over.
//!
//! `palisade leader NAME [--watch]`: who leads, read without taking a lock.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;
use futures::StreamExt as _;
use nix::sys::signal::Signal;
use palisade_core::{LockName, format_duration as human, parse_duration};
use palisade_lock_any::{AnyInspector, BackendArgs, lock_error_text};
use palisade_recipes::{Election, Leader, RecipeError};

use crate::child::Signals;
use crate::exit::{self, Failure};
use crate::fence::FenceArgs;
use crate::lock::{Ending, Run, close, run_held};

/// Arguments of `palisade elect`.
#[derive(Debug, Args)]
#[command(after_help = ELECT_EXAMPLES)]
pub(crate) struct ElectArgs {
    /// The election, e.g. `scheduler`.
    name: String,

    /// The value to publish while leading (an address, an id): what
    /// `palisade leader` shows.
    #[arg(long)]
    value: String,

    /// When the leadership is lost, how long the command has between
    /// SIGTERM and SIGKILL.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    grace: Duration,

    /// Run the command in this process's process group instead of a new one.
    #[arg(long)]
    no_process_group: bool,

    /// No progress lines (campaigning, elected); errors are still printed.
    #[arg(short, long)]
    quiet: bool,

    #[command(flatten)]
    backend: crate::service::SessionArgs,

    #[command(flatten)]
    fence: FenceArgs,

    /// The command to run while leading, and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

const ELECT_EXAMPLES: &str = "\
The command gets PALISADE_SEQUENCER (the term's sequencer), PALISADE_LOCK,
PALISADE_GENERATION (the term), PALISADE_LEADER_VALUE and, with one --server,
PALISADE_SERVER in its environment.

Examples:
  palisade elect --backend etcd --etcd-endpoints 127.0.0.1:2379 \\
      --server http://127.0.0.1:7411 --value \"$(hostname)\" scheduler -- ./scheduler

Exit codes: the command's own; 7 if the leadership was lost while it ran;
4, 5 or 1 if fencing the term failed (the command did not run); 1 on other
errors; 128+N if interrupted by signal N while campaigning.";

/// Runs `palisade elect`; returns the exit code.
pub(crate) async fn elect(args: ElectArgs) -> anyhow::Result<u8> {
    let name = LockName::new(args.name.clone())
        .map_err(|error| anyhow::anyhow!("invalid election name `{}`: {error}", args.name))?;
    let election = Election::new(name.clone());
    let mut signals = Signals::install()?;
    let lock = tokio::select! {
        lock = args.backend.connect() => lock?,
        signal = signals.recv() => return Err(interrupted(signal, &name).into()),
    };
    if !args.quiet {
        say!(
            "palisade: campaigning in election `{name}` as {:?}",
            args.value
        );
    }
    let campaign = tokio::select! {
        campaign = election.campaign(&lock, &args.value) => campaign,
        signal = signals.recv() => {
            close(lock, true).await;
            return Err(interrupted(signal, &name).into());
        }
    };
    let leadership = match campaign {
        Ok(leadership) => leadership,
        Err(error) => {
            close(lock, true).await;
            return Err(campaign_failed(error, &name));
        }
    };
    let generation = leadership.generation();
    let term = match leadership.term() {
        Ok(term) => term,
        Err(error) => {
            say!(
                "palisade: {}; the command did not run",
                lock_error_text(&error)
            );
            close(lock, false).await;
            return Ok(exit::LEASE_LOST);
        }
    };
    tracing::info!(election = %name, term = generation.get(), "elected");
    if !args.quiet {
        say!("palisade: elected in `{name}`, term {generation}, sequencer {term}");
    }
    // The term fences on election: older leaders are refused from now on.
    let fenced = tokio::select! {
        fenced = args.fence.fence(&term, args.quiet) => fenced,
        signal = signals.recv() => Err(interrupted(signal, &name).into()),
    };
    if let Err(error) = fenced {
        let _ = leadership.resign().await;
        close(lock, false).await;
        return Err(error);
    }
    let mut env = vec![
        ("PALISADE_SEQUENCER", term.to_string()),
        ("PALISADE_LOCK", name.to_string()),
        ("PALISADE_GENERATION", generation.to_string()),
        ("PALISADE_LEADER_VALUE", args.value.clone()),
    ];
    if let Some(server) = args.fence.single_server() {
        env.push(("PALISADE_SERVER", server.to_owned()));
    }
    let run = Run {
        command: &args.command,
        env: &env,
        process_group: !args.no_process_group,
        grace: args.grace,
    };
    let holding = (generation, leadership.lease());
    run_held(run, holding, &name, lock, &mut signals, async |ending| match ending {
        Ending::GiveBack => {
            if let Err(error) = leadership.resign().await {
                say!("palisade: resigning from `{name}` failed: {error}; the term ends with its lease");
            }
        }
        Ending::LeaseLost => drop(leadership),
    })
    .await
}

fn interrupted(signal: Signal, name: &LockName) -> Failure {
    Failure::new(
        exit::by_signal(signal as i32),
        format!("interrupted by {signal} while campaigning in `{name}`; the command did not run"),
    )
}

fn campaign_failed(error: RecipeError, name: &LockName) -> anyhow::Error {
    match error {
        RecipeError::Lock(error) => {
            anyhow::anyhow!("cannot campaign in `{name}`: {}", lock_error_text(&error))
        }
        other => anyhow::anyhow!("cannot campaign in `{name}`: {other}"),
    }
}

/// Arguments of `palisade leader`.
#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    /// The election.
    name: String,

    /// Go on printing a line at each change (a new term, a new value,
    /// nobody), until interrupted.
    #[arg(long)]
    watch: bool,

    /// With --watch, how often a lock service that cannot watch (Redis,
    /// PostgreSQL, MariaDB) is read; etcd and ZooKeeper are read on their
    /// watches' events.
    #[arg(long, default_value = "200ms", value_parser = parse_duration, value_name = "DURATION")]
    every: Duration,

    #[command(flatten)]
    backend: BackendArgs,
}

/// Runs `palisade leader`: one line, `<term> <value>`, or `none`.
pub(crate) async fn leader(args: LeaderArgs) -> anyhow::Result<u8> {
    let name = LockName::new(args.name.clone())
        .map_err(|error| anyhow::anyhow!("invalid election name `{}`: {error}", args.name))?;
    if args.every.is_zero() {
        anyhow::bail!("--every {}: must be above zero", human(args.every));
    }
    let election = Election::new(name.clone()).with_poll_interval(args.every);
    let inspector = AnyInspector::connect(&crate::service::spec_of(&args.backend)?).await?;
    let failed = |error: RecipeError| anyhow::anyhow!("cannot read election `{name}`: {error}");
    if !args.watch {
        let leader = election.leader(&inspector).await.map_err(failed)?;
        println!("{}", line(leader.as_ref()));
        return Ok(if leader.is_some() {
            exit::OK
        } else {
            exit::NOT_FOUND
        });
    }
    let mut changes = Box::pin(election.observe(inspector));
    let mut signals = Signals::install()?;
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Ok(leader)) => println!("{}", line(leader.as_ref())),
                Some(Err(error)) => return Err(failed(error)),
                None => return Ok(exit::OK),
            },
            signal = signals.recv() => return Ok(exit::by_signal(signal as i32)),
        }
    }
}

/// `<term> <value>`, or `none`.
fn line(leader: Option<&Leader>) -> String {
    match leader {
        Some(leader) => format!("{} {}", leader.term, leader.value.as_deref().unwrap_or("")),
        None => "none".to_owned(),
    }
}
