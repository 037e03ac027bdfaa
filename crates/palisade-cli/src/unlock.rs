//! `palisade unlock --force NAME`: ends the current holder's hold and
//! fences it.
//!
//! Ending a hold alone is not safe: the evicted holder may be paused (GC,
//! SIGSTOP, a slow network) and write when it wakes, with a generation the
//! resource servers still honour. So before reporting success, this
//! command takes the lock itself (a newer generation than every evicted
//! one), raises the lock's marks at every `--server` with an empty fenced
//! batch, and releases. From then on the evicted holder's writes are
//! refused (409 `stale`) there. Until then it could still write, as it
//! could have just before the eviction: no other holder writes in between,
//! because this command holds the lock until the fence is done (or, when
//! waiters were queued, a waiter holds it first with a generation that
//! also fences the evicted one as soon as it writes or fences).

use std::time::Duration;

use clap::Args;
use palisade_client::Refused;
use palisade_core::{
    ForceRelease as _, Generation, Inspect as _, Lock as _, LockGuard as _, LockName, Mode,
};

use crate::data::{ServerAuth, marks_text, server_error};
use crate::exit::{self, Failure};
use palisade_lock_any::{AnyGuard, AnyInspector, lock_error_text};

/// How long one server may take to answer the fence.
const FENCE_TIMEOUT: Duration = Duration::from_secs(10);

/// `palisade unlock` arguments.
#[derive(Debug, Args)]
pub(crate) struct UnlockArgs {
    /// The lock.
    name: String,

    /// Required: end someone else's hold. (A holder releases its own lock
    /// by ending `palisade lock`'s command.)
    #[arg(long, required = true)]
    force: bool,

    /// Evict only the hold with this generation (as `palisade locks show`
    /// printed it), so a holder that took the lock since is left alone.
    #[arg(long, value_name = "N")]
    generation: Option<u64>,

    /// A resource server to fence: its mark for the lock is raised past the
    /// evicted generation before this command returns. Repeat the flag (or
    /// separate URLs with commas) for several servers. Required unless
    /// `--no-fence` is given.
    #[arg(
        long = "server",
        env = "PALISADE_SERVER",
        value_name = "URL",
        value_delimiter = ','
    )]
    servers: Vec<String>,

    /// Do not fence. DANGEROUS: the evicted holder can still write to every
    /// resource server until a newer holder writes or fences there.
    #[arg(long)]
    no_fence: bool,

    /// How long to wait for the lock after the eviction (queued waiters are
    /// granted first) before giving up on fencing (exit code 6).
    #[arg(long, default_value = "30s", value_parser = palisade_core::parse_duration, value_name = "DURATION")]
    wait: Duration,

    #[command(flatten)]
    auth: ServerAuth,

    #[command(flatten)]
    backend: crate::service::SessionArgs,
}

impl UnlockArgs {
    fn servers(&self) -> Vec<&str> {
        self.servers
            .iter()
            .map(|url| url.trim())
            .filter(|url| !url.is_empty())
            .collect()
    }
}

/// Runs `palisade unlock --force`.
pub(crate) async fn run(args: UnlockArgs) -> anyhow::Result<()> {
    debug_assert!(args.force, "clap requires --force");
    let name = LockName::new(args.name.as_str())
        .map_err(|error| anyhow::anyhow!("invalid lock name {:?}: {error}", args.name))?;
    let servers = args.servers();
    if servers.is_empty() && !args.no_fence {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "unlock --force needs --server URL (the resource servers to fence, so the evicted holder of `{name}` cannot write when it wakes); --no-fence skips fencing"
            ),
        )
        .into());
    }
    if args.no_fence && !servers.is_empty() {
        return Err(Failure::new(
            exit::USAGE,
            "--no-fence and --server contradict each other: choose one",
        )
        .into());
    }

    let inspector = AnyInspector::connect(&crate::service::spec_of(&args.backend.backend)?).await?;
    let info = inspector.inspect(&name).await.map_err(|error| {
        anyhow::anyhow!("cannot inspect lock `{name}`: {}", lock_error_text(&error))
    })?;
    let targets: Vec<Generation> = info
        .holders
        .iter()
        .map(|holder| holder.generation)
        .filter(|generation| {
            args.generation
                .is_none_or(|wanted| generation.get() == wanted)
        })
        .collect();
    let mut evicted = Vec::new();
    for generation in targets {
        let ended = inspector
            .force_release(&name, generation)
            .await
            .map_err(|error| {
                anyhow::anyhow!(
                    "cannot end the hold of `{name}` with generation {generation}: {}",
                    lock_error_text(&error)
                )
            })?;
        if ended {
            say!("palisade: ended the hold of `{name}` with generation {generation}");
            evicted.push(generation);
        }
    }
    let Some(newest) = evicted.iter().copied().max() else {
        let which = args.generation.map_or_else(String::new, |generation| {
            format!(" with generation {generation}")
        });
        return Err(Failure::new(
            exit::NOT_FOUND,
            format!("lock `{name}` is not held{which}: nothing to unlock"),
        )
        .into());
    };

    if args.no_fence {
        say!(
            "palisade: WARNING: --no-fence: the evicted holder of `{name}` (generation {newest}) can still write to every resource server until a newer holder writes or fences there"
        );
        return Ok(());
    }
    fence_past(&args, &name, newest, &servers).await
}

/// Takes the lock (its generation is above `evicted`), fences every
/// server with it, releases.
async fn fence_past(
    args: &UnlockArgs,
    name: &LockName,
    evicted: Generation,
    servers: &[&str],
) -> anyhow::Result<()> {
    let not_fenced = |why: String| {
        format!(
            "ended the hold of `{name}` (generation {evicted}) but did NOT fence it: {why}; until a newer holder writes or fences there, the evicted holder's writes may still be accepted"
        )
    };
    let session = args.backend.connect().await?;
    let guard = match session
        .acquire_timeout(name, Mode::Exclusive, args.wait)
        .await
    {
        Ok(guard) => guard,
        Err(palisade_core::LockError::Timeout { waited, .. }) => {
            let _ = session.close(true).await;
            return Err(Failure::new(
                exit::LOCK_NOT_ACQUIRED,
                not_fenced(format!(
                    "the lock was not granted to this command within {waited:?} (--wait)"
                )),
            )
            .into());
        }
        Err(error) => {
            let _ = session.close(true).await;
            return Err(anyhow::anyhow!(not_fenced(format!(
                "cannot acquire the lock: {}",
                lock_error_text(&error)
            ))));
        }
    };
    let result = fence_servers(args, &guard, evicted, servers, &not_fenced).await;
    let released = guard.release().await;
    let _ = session.close(false).await;
    result?;
    if let Err(error) = released {
        say!(
            "palisade: fenced, but releasing the lock again failed: {}",
            lock_error_text(&error)
        );
    }
    Ok(())
}

async fn fence_servers(
    args: &UnlockArgs,
    guard: &AnyGuard,
    evicted: Generation,
    servers: &[&str],
    not_fenced: &dyn Fn(String) -> String,
) -> anyhow::Result<()> {
    let sequencer = guard
        .sequencer()
        .map_err(|error| anyhow::anyhow!(not_fenced(lock_error_text(&error))))?;
    let (name, generation) = (sequencer.lock(), sequencer.generation());
    if generation <= evicted {
        // Generations only grow; a backend breaking that must not be
        // mistaken for a fence.
        return Err(anyhow::anyhow!(not_fenced(format!(
            "the lock service granted generation {generation}, not above the evicted {evicted}"
        ))));
    }
    for url in servers {
        let client = args.auth.client(url, FENCE_TIMEOUT).map_err(|error| {
            anyhow::anyhow!(not_fenced(format!("resource server `{url}`: {error}")))
        })?;
        let outcome = client.fence(&sequencer).await.map_err(|error| {
            anyhow::anyhow!(not_fenced(format!("{:#}", server_error(&error, url))))
        })?;
        match outcome {
            Ok(marks) => say!(
                "palisade: fenced `{name}` at {url} with generation {generation} ({}): generation {evicted} is refused there from now on",
                marks_text(marks)
            ),
            // The mark is already above this command's generation, so
            // above the evicted one too: fenced by a newer holder.
            Err(Refused::Stale { marks, .. }) => say!(
                "palisade: `{name}` at {url} is already fenced past generation {generation} ({}): generation {evicted} is refused there",
                marks_text(marks)
            ),
            Err(other) => {
                return Err(Failure::new(
                    exit::REFUSED,
                    not_fenced(format!(
                        "{url} refused the fence ({}): {other}",
                        other.reason()
                    )),
                )
                .into());
            }
        }
    }
    Ok(())
}
