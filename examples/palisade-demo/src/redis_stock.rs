//! The flash sale's stock in the user's own Redis (`--store redis://...`).
//!
//! Each segment's stock is a counter under its lock's hash tag
//! (`{<lock>}:stock`, in the lock's slot, where `palisade_fence_redis`
//! keeps the lock's marks). Without fencing a buyer sells with a plain
//! `DECRBY` under its lock, as a service that trusts its lock would: a
//! holder that paused past its lease decrements after the next holder
//! has, and the stock goes below zero. With fencing the read is a fenced
//! `GET` and the sale a `RedisFence::decr_by_keeping` ("decrement only if
//! at least 0 stay") with the buyer's sequencer: the late buyer is refused
//! inside Redis and nothing is decremented.

use palisade_core::{Refused, Sequencer};
use palisade_fence_redis::redis::aio::ConnectionManager;
use palisade_fence_redis::redis::{self, AsyncCommands, Script};
use palisade_fence_redis::{FenceOptions, LockKeys, RedisFence};

use crate::DemoError;
use crate::storage::{Stale, WriteOutcome};

/// Beside each stock counter, the demo's own books on the unfenced sales
/// (`{<lock>}:books`): `newest`, the highest generation that sold, and
/// `stale`, sales by an older generation after it. They count, never
/// refuse: the decrement is a plain `DECRBY` whatever they say, as the
/// PostgreSQL variant's stock row counts its stale writes.
const BOOKS: &str = "books";

/// `DECRBY KEYS[1] 1`, then the books (`KEYS[2]`) on generation `ARGV[1]`.
const COUNTED_DECRBY: &str = r"
local left = redis.call('DECRBY', KEYS[1], 1)
local generation = tonumber(ARGV[1])
local newest = tonumber(redis.call('HGET', KEYS[2], 'newest') or '0')
if generation < newest then
  redis.call('HINCRBY', KEYS[2], 'stale', 1)
else
  redis.call('HSET', KEYS[2], 'newest', ARGV[1])
end
return left
";

/// A connection to the stock's Redis, fenced or not.
#[derive(Clone)]
pub(crate) struct RedisStock {
    connection: ConnectionManager,
    /// Set in the fenced run: every read and sale goes through it.
    fence: Option<RedisFence>,
}

impl std::fmt::Debug for RedisStock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStock")
            .field("fenced", &self.fence.is_some())
            .finish_non_exhaustive()
    }
}

impl RedisStock {
    /// Connects to `url`; fenced, loads (or checks) the fence's library.
    pub(crate) async fn connect(url: &str, fenced: bool) -> Result<RedisStock, DemoError> {
        let scrubbed = |error: redis::RedisError| {
            DemoError::story(format!(
                "the stock's Redis at {}: {}",
                palisade_core::redact::redact_url(url),
                palisade_core::redact::scrub(&error.to_string(), url)
            ))
        };
        let connection = redis::Client::open(url)
            .map_err(scrubbed)?
            .get_connection_manager()
            .await
            .map_err(scrubbed)?;
        let fence = match fenced {
            true => Some(RedisFence::new(connection.clone()).await?),
            false => None,
        };
        Ok(RedisStock { connection, fence })
    }

    pub(crate) fn is_fenced(&self) -> bool {
        self.fence.is_some()
    }

    /// The keys of `lock`: where its stock and its marks live.
    pub(crate) fn keys(lock: &palisade_core::LockName) -> LockKeys {
        LockKeys::new(FenceOptions::DEFAULT_KEY_PREFIX, lock)
    }

    /// Reads the stock under `key`. Fenced and with a sequencer, a fenced
    /// `GET` (which raises the lock's mark); otherwise a plain `GET`.
    pub(crate) async fn read(
        &self,
        keys: &LockKeys,
        key: &str,
        sequencer: Option<&Sequencer>,
    ) -> Result<Result<Option<String>, Stale>, DemoError> {
        let key = keys.data_key(key);
        let bytes = match (&self.fence, sequencer) {
            (Some(fence), Some(sequencer)) => match fence.get(sequencer, key).await? {
                Ok(read) => read.value.map(|bytes| bytes.to_vec()),
                Err(refused) => return Ok(Err(stale(refused)?)),
            },
            _ => {
                let mut connection = self.connection.clone();
                connection
                    .get::<_, Option<Vec<u8>>>(key)
                    .await
                    .map_err(|error| self.failed("GET", &error))?
            }
        };
        Ok(Ok(
            bytes.map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        ))
    }

    /// Sets the stock under `key` to `value` (the opening stock): a fenced
    /// `SET` in the fenced run, a plain one otherwise.
    pub(crate) async fn write(
        &self,
        keys: &LockKeys,
        key: &str,
        sequencer: Option<&Sequencer>,
        value: i64,
    ) -> Result<WriteOutcome, DemoError> {
        let key = keys.data_key(key);
        if let Some(fence) = &self.fence {
            let sequencer = fenced_needs(sequencer)?;
            return Ok(match fence.set(sequencer, key, value.to_string()).await? {
                Ok(written) => WriteOutcome::Accepted {
                    mark: Some(written.marks.exclusive),
                },
                Err(refused) => refusal(refused)?,
            });
        }
        let mut connection = self.connection.clone();
        connection
            .set::<_, _, ()>(key, value)
            .await
            .map_err(|error| self.failed("SET", &error))?;
        Ok(WriteOutcome::Accepted { mark: None })
    }

    /// Sells one item of the stock under `key`. Fenced: decrements only if
    /// the sequencer is not stale and at least 0 stay. Unfenced: a plain
    /// `DECRBY`, with the books kept when there is a generation.
    pub(crate) async fn sell(
        &self,
        keys: &LockKeys,
        key: &str,
        sequencer: Option<&Sequencer>,
    ) -> Result<WriteOutcome, DemoError> {
        let stock = keys.data_key(key);
        if let Some(fence) = &self.fence {
            let sequencer = fenced_needs(sequencer)?;
            return Ok(match fence.decr_by_keeping(sequencer, stock, 1, 0).await? {
                Ok(written) => WriteOutcome::Accepted {
                    mark: Some(written.marks.exclusive),
                },
                Err(refused) => refusal(refused)?,
            });
        }
        let mut connection = self.connection.clone();
        let result = match sequencer {
            Some(sequencer) => {
                Script::new(COUNTED_DECRBY)
                    .key(stock)
                    .key(keys.data_key(BOOKS))
                    .arg(sequencer.generation().get())
                    .invoke_async::<i64>(&mut connection)
                    .await
            }
            None => connection.decr::<_, _, i64>(stock, 1).await,
        };
        result.map_err(|error| self.failed("DECRBY", &error))?;
        Ok(WriteOutcome::Accepted { mark: None })
    }

    /// How many sales the books saw from a generation older than one that
    /// had already sold (the unfenced lock run's stale writes).
    pub(crate) async fn stale_writes(&self, keys: &LockKeys) -> Result<u64, DemoError> {
        let mut connection = self.connection.clone();
        let stale: Option<u64> = connection
            .hget(keys.data_key(BOOKS), "stale")
            .await
            .map_err(|error| self.failed("HGET", &error))?;
        Ok(stale.unwrap_or(0))
    }

    fn failed(&self, command: &str, error: &redis::RedisError) -> DemoError {
        // The connection's URL is not kept; the error carries no secret.
        DemoError::story(format!("the stock's Redis: {command}: {error}"))
    }
}

fn fenced_needs(sequencer: Option<&Sequencer>) -> Result<&Sequencer, DemoError> {
    sequencer.ok_or_else(|| DemoError::story("a fenced write to the stock needs a sequencer"))
}

/// A refused fenced write as the demo's outcome: stale is the story; the
/// "at least 0 stay" condition refusing a holder that read a positive
/// stock means another buyer sold in between without this one's
/// sequencer going stale, which fencing exists to rule out.
fn refusal(refused: Refused) -> Result<WriteOutcome, DemoError> {
    if let Refused::CasMismatch { current, .. } = &refused {
        return Err(DemoError::story(format!(
            "FENCING FAILED: the stock ran out ({} left) under a holder that was not refused as stale",
            current
                .as_ref()
                .map_or("none".into(), |bytes| String::from_utf8_lossy(bytes))
        )));
    }
    let Stale { presented, mark } = stale(refused)?;
    Ok(WriteOutcome::Refused { presented, mark })
}

fn stale(refused: Refused) -> Result<Stale, DemoError> {
    match refused {
        Refused::Stale {
            presented, marks, ..
        } => Ok(Stale {
            presented: presented.get(),
            mark: marks.exclusive,
        }),
        other => Err(DemoError::story(format!(
            "the stock's Redis fence refused: {other}"
        ))),
    }
}
