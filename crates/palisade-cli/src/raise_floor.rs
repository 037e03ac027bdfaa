//! `palisade raise-floor`: the way out after a lock service lost its
//! counter (Redis restarted without persistence, etcd's data wiped or
//! restored from an old snapshot, a database restored from an old backup). New holders then get generations below
//! the resource servers' marks and every write is refused; this lifts the
//! lock service's generation floor above the highest mark, so the next
//! holder is accepted. Old holders stay refused: the marks do not move.
//!
//! With `--redis-fence` it is the other way round, for data kept in Redis
//! that lost the fence's marks (a restart without persistence, a failover
//! to a replica that missed a raise): the lock's marks in Redis are raised
//! to `--to GEN`, the lock side's newest generation, so every holder
//! granted before it is refused again.

use std::time::{Duration, Instant};

use clap::Args;
use palisade_core::LockName;

use crate::data::{DEFAULT_SERVER, ServerAuth, marks_text};
use crate::exit::{self, Failure};
use crate::redis_data::{Fenced, RedisFenceArg};
use palisade_lock_any::{BackendArgs, FloorOptions, FloorStep, cause_chain, raise_floor};

/// The default `--max-gap`: one million revisions (etcd only).
const DEFAULT_MAX_GAP: u64 = 1_000_000;

/// How often a long etcd raise reports progress on standard error.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Arguments of `palisade raise-floor`.
#[derive(Debug, Args)]
#[command(after_help = RAISE_FLOOR_EXAMPLES)]
pub(crate) struct RaiseFloorArgs {
    /// The lock whose generations went backwards.
    lock: String,

    /// Raise the floor above this generation instead of above the marks
    /// read from the resource server(s).
    #[arg(long, value_name = "GEN", conflicts_with = "redis_fence")]
    above: Option<u64>,

    /// With --redis-fence: raise the lock's exclusive mark in Redis to
    /// this generation (the lock side's newest); a mark never goes down.
    #[arg(long, value_name = "GEN", requires = "redis_fence")]
    to: Option<u64>,

    #[command(flatten)]
    redis: RedisFenceArg,

    /// The resource servers whose marks the floor must clear,
    /// comma-separated; every one must answer.
    #[arg(
        long,
        env = "PALISADE_SERVER",
        default_value = DEFAULT_SERVER,
        value_delimiter = ',',
        value_name = "URL[,URL...]"
    )]
    server: Vec<String>,

    /// How long to wait for each server's answer.
    #[arg(long, default_value = "30s", value_parser = palisade_core::parse_duration, value_name = "DURATION")]
    timeout: Duration,

    #[command(flatten)]
    auth: ServerAuth,

    /// etcd: refuse a raise of more than this many revisions (each is one
    /// put); see docs/backends/etcd.md for what a large gap costs.
    #[arg(long, default_value_t = DEFAULT_MAX_GAP, value_name = "REVISIONS")]
    max_gap: u64,

    #[command(flatten)]
    backend: BackendArgs,
}

const RAISE_FLOOR_EXAMPLES: &str = "\
After a lock service lost its counter, new holders are refused with
`409 stale` (regression). This reads the lock's marks from the resource
server(s) and lifts the lock service's generation floor above the highest, so
the next `palisade lock` is accepted. Holders from before stay refused.

Examples:
  palisade raise-floor orders/42 --backend redis --redis-url redis://127.0.0.1:6379
  palisade raise-floor orders/42 --server http://a:7411,http://b:7411 --backend etcd --etcd-endpoints 127.0.0.1:2379
  palisade raise-floor orders/42 --above 1234 --backend etcd --etcd-endpoints 127.0.0.1:2379
  palisade raise-floor orders/42 --backend postgres --database-url postgres://locks@127.0.0.1:5432/app

On etcd the floor is the store revision, raised one put per revision: a gap
over --max-gap is refused before anything is written. On PostgreSQL and
MariaDB (a database restored from an old backup) it is the lock row's
generation, raised in one transaction.

Data kept in Redis under `--redis-fence` whose marks Redis lost: raise them
to the lock side's newest generation instead (every older holder is refused
again, the newest one still passes):
  palisade raise-floor flash-sale/sku-42 --redis-fence redis://127.0.0.1:6379 --to 57";

/// Runs `palisade raise-floor`.
pub(crate) async fn run(args: RaiseFloorArgs) -> anyhow::Result<()> {
    let lock = LockName::new(&args.lock)
        .map_err(|error| anyhow::anyhow!("invalid lock name `{}`: {error}", args.lock))?;
    if let Some(url) = &args.redis.redis_fence {
        let Some(to) = args.to else {
            return Err(Failure::new(
                exit::USAGE,
                "--redis-fence raises the lock's marks in Redis: give --to GEN, the lock side's newest generation",
            )
            .into());
        };
        let redis = Fenced::connect(url, args.timeout).await?;
        let marks = redis.raise_floor(&lock, to).await?;
        say!(
            "palisade: lock `{lock}` on {}: exclusive mark at least {to} ({})",
            redis.shown(),
            marks_text(marks)
        );
        return Ok(());
    }
    let above = match args.above {
        Some(above) => above,
        None => highest_mark(&args, &lock).await?,
    };
    if above == 0 {
        say!("palisade: lock `{lock}` has no marks; nothing to raise");
        return Ok(());
    }
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut progress = |step: FloorStep| {
        if last_report.elapsed() >= PROGRESS_EVERY {
            last_report = Instant::now();
            say!(
                "palisade: raising the floor: revision {} of {} ({} puts, {:.0?})",
                step.revision,
                step.target,
                step.puts,
                started.elapsed()
            );
        }
    };
    let options = FloorOptions {
        max_gap: args.max_gap,
    };
    let spec = crate::service::spec_of(&args.backend)?;
    let raised = raise_floor(&spec, &lock, above, options, &mut progress).await?;
    if raised.before >= above {
        say!(
            "palisade: the generation floor of lock `{lock}` on {} is already {} (not below {above}); nothing changed",
            raised.backend,
            raised.before
        );
    } else {
        say!(
            "palisade: raised the generation floor of lock `{lock}` on {} from {} to {}: the next holder gets a generation above {above}",
            raised.backend,
            raised.before,
            raised.after
        );
    }
    Ok(())
}

/// The highest mark of `lock` over every server. A server that cannot be
/// asked is an error: a floor below a mark we could not read would leave
/// the lock stuck, and guessing is not an option.
async fn highest_mark(args: &RaiseFloorArgs, lock: &LockName) -> anyhow::Result<u64> {
    let mut highest = 0;
    for server in &args.server {
        let client = args.auth.client(server, args.timeout)?;
        let marks = client.marks(lock).await.map_err(|error| {
            anyhow::anyhow!(
                "cannot read the marks of lock `{lock}` from {server}: {} (pass --above GEN to raise without it)",
                cause_chain(&error)
            )
        })?;
        say!(
            "palisade: {server}: lock `{lock}` marks: exclusive {}, shared {}",
            marks.exclusive,
            marks.shared
        );
        highest = highest.max(marks.exclusive).max(marks.shared);
    }
    Ok(highest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recovery_command_quotes_what_a_shell_would_split() {
        let command = |name: &str| LockName::new(name).unwrap().raise_floor_command();
        assert_eq!(command("orders/42"), "palisade raise-floor orders/42");
        assert_eq!(command("a b"), "palisade raise-floor 'a b'");
        assert_eq!(command("it's"), "palisade raise-floor 'it'\\''s'");
        assert_eq!(command("-x"), "palisade raise-floor -- -x");
    }
}
