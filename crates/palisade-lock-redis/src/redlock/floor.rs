//! The quorum-minted generation: read a majority's floors, choose a higher
//! one, and keep it only if a majority accepted it with a compare-and-set.
//!
//! Why it is enough (checked exhaustively in `crates/palisade-redlock-model`):
//!
//! - **unique**: a master raises its floor to `g` only if the floor is below
//!   `g`, so it accepts each value at most once; two majorities share a
//!   master; so two attempts never both get a majority for the same `g`,
//!   whatever the interleaving, pauses or late messages.
//! - **ordered**: once an attempt got a majority for `g`, those masters'
//!   floors are at least `g` and never go down. An attempt that sends its
//!   reads after that reads a majority, which includes one of those
//!   masters, so it chooses above `g`.
//!
//! Both rest on masters keeping their floors; see `docs/backends/redis.md`
//! for what holds when one loses its data.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use futures::future::join_all;
use futures::stream::FuturesUnordered;
use palisade_core::{FloorRaised, LockError, LockName, RaiseFloorError};
use redis::Value;

use crate::RedisLockClient;
use crate::error::{BACKEND, bad_reply, from_redis};
use crate::scripts::MAX_GENERATION;

/// Raises the floor to ARGV[1] only if it is below it. Returns 1 if raised.
const COMPARE_AND_SET: &str = r"
local floor = tonumber(redis.call('GET', KEYS[1]) or '0')
local wanted = tonumber(ARGV[1])
if floor < wanted then
  redis.call('SET', KEYS[1], ARGV[1])
  return 1
end
return 0
";

/// The floor key of `name` under `prefix`, in the lock's hash tag.
pub(crate) fn floor_key(prefix: &str, name: &LockName) -> String {
    format!("{prefix}{{{}}}:redlock-gen", name.key_segment())
}

/// The floor of every reachable master (`None` for those that failed).
pub(crate) async fn read_floors(
    masters: &[Option<RedisLockClient>],
    name: &LockName,
) -> Vec<Option<u64>> {
    join_all(
        masters
            .iter()
            .map(|master| read_floor(master.as_ref(), name)),
    )
    .await
}

/// The floors of the first `majority` masters to answer (fewer if too many
/// fail): a master that is down or cut off does not hold the grant up.
async fn read_majority_floors(
    masters: &[Option<RedisLockClient>],
    majority: usize,
    name: &LockName,
) -> Vec<u64> {
    let mut reads: FuturesUnordered<_> = masters
        .iter()
        .map(|master| read_floor(master.as_ref(), name))
        .collect();
    let mut floors = Vec::with_capacity(majority);
    while let Some(answer) = reads.next().await {
        if let Some(floor) = answer {
            floors.push(floor);
            if floors.len() >= majority {
                break;
            }
        }
    }
    floors
}

async fn read_floor(master: Option<&RedisLockClient>, name: &LockName) -> Option<u64> {
    let get = |key: &str| {
        let mut get = redis::cmd("GET");
        get.arg(key);
        get
    };
    ask(
        master,
        name,
        "read generation floor",
        get,
        |reply| match reply {
            Value::Nil => Some(0),
            Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
            _ => None,
        },
    )
    .await
}

/// One master's answer to a command on `name`'s floor key, as `answer`
/// reads it; `None` when there is none: no master, no reply, or a reply
/// `answer` does not know (logged).
async fn ask<T>(
    master: Option<&RedisLockClient>,
    name: &LockName,
    operation: &'static str,
    command: impl FnOnce(&str) -> redis::Cmd,
    answer: impl FnOnce(&Value) -> Option<T>,
) -> Option<T> {
    let master = master?;
    let key = floor_key(master.config().key_prefix(), name);
    match query(master, &command(&key), operation).await {
        Ok(reply) => {
            let answered = answer(&reply);
            if answered.is_none() {
                tracing::warn!(backend = BACKEND, error = %bad_reply(operation, &reply), "unexpected floor reply");
            }
            answered
        }
        Err(error) => {
            tracing::debug!(backend = BACKEND, %error, operation, "floor request failed");
            None
        }
    }
}

/// Asks every master to raise its floor to `generation`; returns once a
/// majority accepted (or no longer can), with how many accepted. Requests
/// still on the wire may land later: late floor writes are harmless (the
/// model checks it).
async fn compare_and_set(
    masters: &[Option<RedisLockClient>],
    majority: usize,
    name: &LockName,
    generation: u64,
) -> usize {
    let mut writes: FuturesUnordered<_> =
        masters
            .iter()
            .map(|master| async move {
                set_floor(master.as_ref(), name, generation).await == Some(true)
            })
            .collect();
    let (mut accepted, mut refused) = (0, 0);
    while let Some(answer) = writes.next().await {
        if answer {
            accepted += 1;
        } else {
            refused += 1;
        }
        if accepted >= majority || refused > masters.len() - majority {
            break;
        }
    }
    accepted
}

/// Raises the floor of `name` on every reachable master to at least
/// `mark` (the same compare-and-set, which only ever raises). Done once a
/// majority holds a floor at or above `mark`: every mint reads a majority,
/// which includes one of them, so it chooses above `mark`.
pub(crate) async fn raise(
    masters: &[Option<RedisLockClient>],
    majority: usize,
    name: &LockName,
    mark: u64,
) -> Result<FloorRaised, RaiseFloorError> {
    crate::scripts::refuse_unreachable_mark(mark)?;
    let before = read_floors(masters, name).await.into_iter().flatten().max();
    // Raised, or already at or above the mark: either way it holds it.
    let answers = join_all(
        masters
            .iter()
            .map(|master| set_floor(master.as_ref(), name, mark)),
    )
    .await;
    let at_or_above = answers.iter().flatten().count();
    if at_or_above < majority {
        return Err(RaiseFloorError::Lock(LockError::Unavailable {
            backend: BACKEND,
            source: format!(
                "lock `{name}`: only {at_or_above} masters confirmed a generation floor of at least {mark}, a majority is needed (run it again)"
            )
            .into(),
        }));
    }
    let before = before.unwrap_or(0);
    tracing::info!(backend = BACKEND, lock = %name, mark, before, masters = at_or_above, "redlock generation floor raised");
    Ok(FloorRaised::new(before, before.max(mark)))
}

/// One master's compare-and-set of `name`'s floor to `generation`:
/// `Some(true)` raised, `Some(false)` already at or above it, `None` no
/// answer.
async fn set_floor(
    master: Option<&RedisLockClient>,
    name: &LockName,
    generation: u64,
) -> Option<bool> {
    let compare_and_set = |key: &str| {
        let mut eval = redis::cmd("EVAL");
        eval.arg(COMPARE_AND_SET).arg(1).arg(key).arg(generation);
        eval
    };
    ask(
        master,
        name,
        "set generation floor",
        compare_and_set,
        |reply| match reply {
            Value::Int(answer @ (0 | 1)) => Some(*answer == 1),
            _ => None,
        },
    )
    .await
}

async fn query(
    master: &RedisLockClient,
    command: &redis::Cmd,
    operation: &'static str,
) -> Result<Value, LockError> {
    let timeout = master.config().response_timeout();
    tokio::time::timeout(timeout, master.inner.connection.query(command))
        .await
        .map_err(|_elapsed| LockError::BackendTimeout {
            backend: BACKEND,
            operation,
            after: timeout,
        })?
        .map_err(|error| from_redis(operation, timeout, error))
}

/// Why no generation was minted.
#[derive(Debug)]
pub(crate) enum MintError {
    /// Fewer than a majority of masters answered the reads.
    NoQuorum { answered: usize },
    /// Another attempt won the compare-and-set on enough masters (two
    /// shared holders minting at once, or a holder that had lost its lease).
    Contended { accepted: usize },
    /// The floors are at the top of the generation space.
    Exhausted { floor: u64 },
}

/// One minting round: a generation a majority accepted, above every floor
/// a majority reported.
pub(crate) async fn mint(
    masters: &[Option<RedisLockClient>],
    majority: usize,
    name: &LockName,
) -> Result<u64, MintError> {
    let answered = read_majority_floors(masters, majority, name).await;
    if answered.len() < majority {
        return Err(MintError::NoQuorum {
            answered: answered.len(),
        });
    }
    let floor = answered.into_iter().max().unwrap_or(0);
    // Above the floor; and, while clocks move forward, above generations a
    // master forgot with its data (microseconds since 1970, as the
    // single-master backend's default scheme).
    let generation = (floor + 1).max(clock_micros());
    if generation >= MAX_GENERATION {
        return Err(MintError::Exhausted { floor });
    }
    let accepted = compare_and_set(masters, majority, name, generation).await;
    if accepted < majority {
        return Err(MintError::Contended { accepted });
    }
    Ok(generation)
}

fn clock_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_micros()
        .try_into()
        .unwrap_or(u64::MAX)
}

impl MintError {
    pub(crate) fn into_lock_error(self, name: &LockName) -> LockError {
        match self {
            MintError::NoQuorum { answered } => LockError::Unavailable {
                backend: BACKEND,
                source: format!(
                    "lock `{name}`: only {answered} masters answered the generation floor read, a majority is needed"
                )
                .into(),
            },
            MintError::Contended { accepted } => LockError::Backend {
                backend: BACKEND,
                source: format!(
                    "lock `{name}`: only {accepted} masters accepted the new generation; another grant minted concurrently"
                )
                .into(),
            },
            MintError::Exhausted { floor } => LockError::Backend {
                backend: BACKEND,
                source: format!(
                    "lock `{name}`: generation floor {floor} is at the top of the generation space (2^53-1)"
                )
                .into(),
            },
        }
    }
}
