//! `--redis-fence`: `put`, `get`, `del`, `fence`, `incr` and `raise-floor`
//! on data kept in Redis, fenced by `palisade-fence-redis` instead of the
//! resource server.
//!
//! The key `KEY` of lock `LOCK` is the Redis key `{<LOCK>}:KEY` (the
//! lock's hash tag, so it shares a Redis Cluster slot with the lock's
//! marks record), which is where `RedisFence::data_key` puts it: a program
//! using the crate and a shell using this command meet on the same keys.
//! Outcomes and exit codes are the resource server's: a stale sequencer is
//! refused with 4, and nothing is written.

use std::time::Duration;

use clap::Args;
use palisade_client::{Read, Written};
use palisade_core::marks::Marks;
use palisade_core::redact::{redact_url, scrub};
use palisade_core::{LockName, OpResult, Refused, Sequencer};
use palisade_fence_redis::redis;
use palisade_fence_redis::{FenceOptions, RedisFence, RedisFenceError};

use crate::data::Change;
use crate::exit::{self, Failure};

/// Where the fenced data lives, when it is in Redis.
#[derive(Debug, Default, Args)]
pub(crate) struct RedisFenceArg {
    /// Keep the key in this Redis (redis://[user:password@]host:port, or
    /// rediss://), fenced by Palisade's Redis function, instead of on the
    /// resource server. KEY is the Redis key `{<LOCK>}:KEY`, in the lock's
    /// hash slot. Prefer the environment variable when the URL holds a
    /// password: a flag shows in the process list.
    #[arg(
        long,
        env = "PALISADE_REDIS_FENCE",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub(crate) redis_fence: Option<String>,
}

/// A fence on the Redis at `url`, its library loaded or checked, every
/// call bounded by `timeout`.
pub(crate) struct Fenced {
    fence: RedisFence,
    /// For plain reads, which the fence does not make.
    connection: redis::aio::ConnectionManager,
    /// `url` with its password hidden, for messages.
    shown: String,
}

impl Fenced {
    pub(crate) async fn connect(url: &str, timeout: Duration) -> anyhow::Result<Fenced> {
        let shown = redact_url(url);
        let failed = |error: redis::RedisError| {
            anyhow::anyhow!(
                "cannot connect to Redis at {shown}: {}",
                scrub(&error.to_string(), url)
            )
        };
        let client = redis::Client::open(url).map_err(failed)?;
        let connection = tokio::time::timeout(timeout, client.get_connection_manager())
            .await
            .map_err(|_| {
                anyhow::anyhow!("cannot connect to Redis at {shown}: no answer within {timeout:?}")
            })?
            .map_err(failed)?;
        let options = FenceOptions::default().with_call_timeout(timeout);
        let fence = RedisFence::with_options(connection.clone(), options)
            .await
            .map_err(|error| {
                anyhow::anyhow!("Redis at {shown}: {}", scrub(&error.to_string(), url))
            })?;
        Ok(Fenced {
            fence,
            connection,
            shown,
        })
    }

    /// The Redis key of `key` under `lock`: `{<segment>}:key`.
    fn data_key(&self, lock: &LockName, key: &[u8]) -> Vec<u8> {
        let mut data_key = self.fence.keys(lock).tag().as_bytes().to_vec();
        data_key.push(b':');
        data_key.extend_from_slice(key);
        data_key
    }

    /// A failed call as one line; an unknown outcome says so.
    fn error(&self, error: RedisFenceError) -> anyhow::Error {
        let doubt = if error.is_unknown_outcome() {
            " (the write may or may not have been applied)"
        } else {
            ""
        };
        anyhow::anyhow!("Redis at {}: {error}{doubt}", self.shown)
    }

    /// `SET` (a put) or `DEL` (a delete) under `sequencer`.
    pub(crate) async fn write(
        &self,
        sequencer: &Sequencer,
        key: &[u8],
        change: Change,
    ) -> anyhow::Result<Written> {
        let key = self.data_key(sequencer.lock(), key);
        let outcome = match change {
            Change::Put(value) => self.fence.set(sequencer, key, value).await,
            Change::Delete => self.fence.del(sequencer, key).await,
        };
        let written = outcome
            .map_err(|error| self.error(error))?
            .map_err(|refused| crate::data::refusal(&refused, sequencer.lock()))?;
        Ok(applied(written.value, written.marks, written.seq))
    }

    /// A fenced `GET` with a sequencer (raising the marks, as on the
    /// resource server), a plain one without.
    pub(crate) async fn get(
        &self,
        lock: &LockName,
        key: &[u8],
        sequencer: Option<&Sequencer>,
    ) -> anyhow::Result<Read> {
        let data_key = self.data_key(lock, key);
        if let Some(sequencer) = sequencer {
            return self
                .fence
                .get(sequencer, data_key)
                .await
                .map_err(|error| self.error(error))?
                .map_err(|refused| crate::data::refusal(&refused, lock));
        }
        let mut connection = self.connection.clone();
        let value: Option<Vec<u8>> = redis::cmd("GET")
            .arg(data_key)
            .query_async(&mut connection)
            .await
            .map_err(|error| anyhow::anyhow!("Redis at {}: GET: {error}", self.shown))?;
        Ok(Read {
            value: value.map(Into::into),
            marks: self.marks(lock).await?,
        })
    }

    /// Fence on acquire: raises the lock's marks to `sequencer` without
    /// writing.
    pub(crate) async fn admit(&self, sequencer: &Sequencer) -> anyhow::Result<Marks> {
        self.fence
            .admit(sequencer)
            .await
            .map_err(|error| self.error(error))?
            .map_err(|refused| crate::data::refusal(&refused, sequencer.lock()))
    }

    /// `INCRBY key by`, or with `at_least` a decrement that leaves at least
    /// that many; the new value.
    pub(crate) async fn incr(
        &self,
        sequencer: &Sequencer,
        key: &[u8],
        by: i64,
        at_least: Option<i64>,
    ) -> anyhow::Result<i64> {
        let lock = sequencer.lock();
        let data_key = self.data_key(lock, key);
        let outcome = match at_least {
            Some(keep) => {
                self.fence
                    .decr_by_keeping(sequencer, data_key, by.saturating_neg(), keep)
                    .await
            }
            None => self.fence.incr_by(sequencer, data_key, by).await,
        };
        match outcome.map_err(|error| self.error(error))? {
            Ok(written) => Ok(written.value),
            Err(Refused::CasMismatch { current, .. }) => Err(Failure::new(
                exit::REFUSED,
                format!(
                    "refused: `{}` under lock `{lock}` is {}; a decrement of {} would leave fewer than {}; nothing was changed",
                    key.escape_ascii(),
                    current.map_or("absent".into(), |value| format!(
                        "{}",
                        value.escape_ascii()
                    )),
                    by.unsigned_abs(),
                    at_least.unwrap_or(0)
                ),
            )
            .into()),
            Err(refused) => Err(crate::data::refusal(&refused, lock)),
        }
    }

    /// The lock's marks as Redis holds them.
    pub(crate) async fn marks(&self, lock: &LockName) -> anyhow::Result<Marks> {
        let (marks, _) = self
            .fence
            .marks(lock)
            .await
            .map_err(|error| self.error(error))?;
        Ok(marks)
    }

    /// `H_excl = max(H_excl, floor)`: the marks after.
    pub(crate) async fn raise_floor(&self, lock: &LockName, floor: u64) -> anyhow::Result<Marks> {
        self.fence
            .raise_floor(lock, floor)
            .await
            .map_err(|error| self.error(error))
    }

    /// `redis://host:port` with the password hidden.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }
}

/// The fence's answer in the resource server's shape, so the output code
/// is shared; `commit_seq` is the lock's write sequence in Redis.
fn applied(result: OpResult, marks: Marks, seq: u64) -> Written {
    Written {
        results: vec![result],
        marks,
        commit_seq: seq,
        replayed: false,
    }
}

/// Arguments of `palisade incr`.
#[derive(Debug, Args)]
#[command(after_help = INCR_EXAMPLES)]
pub(crate) struct IncrArgs {
    /// The lock whose hash slot holds the counter.
    lock: String,
    /// The counter's key (the Redis key `{<LOCK>}:KEY`).
    key: std::ffi::OsString,
    /// What to add; negative to take away.
    #[arg(
        short = 'n',
        long = "by",
        default_value_t = 1,
        allow_negative_numbers = true,
        value_name = "N"
    )]
    by: i64,
    /// With a negative -n: take away only if at least this many stay
    /// (the stock case: `-n -1 --at-least 0` never goes below zero).
    /// Otherwise nothing changes and the command exits 5.
    #[arg(long, value_name = "K", allow_negative_numbers = true)]
    at_least: Option<i64>,
    #[command(flatten)]
    sequencer: crate::data::SequencerArg,
    /// The Redis holding the counter, fenced by Palisade's Redis function.
    #[arg(
        long,
        env = "PALISADE_REDIS_FENCE",
        hide_env_values = true,
        value_name = "URL"
    )]
    redis_fence: String,
    /// How long to wait for Redis's answer.
    #[arg(long, default_value = "30s", value_parser = palisade_core::parse_duration, value_name = "DURATION")]
    timeout: Duration,
}

const INCR_EXAMPLES: &str = "\
Adds N to a counter kept in Redis, fenced like `put --redis-fence`, and prints
the new value. A stale sequencer is refused and nothing changes.

Examples:
  palisade lock flash-sale/sku-42 -- palisade incr flash-sale/sku-42 stock -n -1 --at-least 0 --redis-fence redis://127.0.0.1:6379
  palisade lock orders/42 -- palisade incr orders/42 visits --redis-fence redis://127.0.0.1:6379

Exit codes: 0 changed; 4 refused, stale sequencer; 5 refused otherwise (fewer
than --at-least would stay, a shared sequencer); 1 other errors (not a
number, Redis unreachable).";

/// Runs `palisade incr`.
pub(crate) async fn incr(args: IncrArgs) -> anyhow::Result<()> {
    use std::os::unix::ffi::OsStrExt as _;
    let lock = crate::data::lock_name(&args.lock)?;
    if args.at_least.is_some() && args.by >= 0 {
        return Err(Failure::new(
            exit::USAGE,
            "--at-least goes with a decrement: give a negative -n (for example -n -1 --at-least 0)",
        )
        .into());
    }
    let sequencer = args.sequencer.required_for(&lock)?;
    let redis = Fenced::connect(&args.redis_fence, args.timeout).await?;
    let value = redis
        .incr(&sequencer, args.key.as_bytes(), args.by, args.at_least)
        .await?;
    println!("{value}");
    Ok(())
}
