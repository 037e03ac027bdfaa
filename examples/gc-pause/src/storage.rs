//! The account balance the clients update: once in a plain store that
//! trusts the lock, once behind Palisade's resource server.

use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use palisade::Sequencer;
use palisade::client::{Client, Refused};

/// The key the balance lives under, inside the lock's keyspace.
const BALANCE_KEY: &[u8] = b"balance";

/// What became of a write.
pub(crate) enum WriteOutcome {
    /// The storage applied it.
    Accepted,
    /// The resource server refused it: a newer generation has written.
    RefusedStale {
        /// The generation the write carried.
        presented: u64,
        /// The server's exclusive mark at the time.
        mark: u64,
    },
}

/// Where the balance is kept.
#[derive(Clone)]
pub(crate) enum Storage {
    /// A store that applies every write it gets, as most storage does: the
    /// lock alone is supposed to keep writers apart.
    Unfenced(Arc<Mutex<i64>>),
    /// Palisade's resource server: every request carries the holder's
    /// sequencer and a stale one is refused.
    Fenced(Client),
}

impl Storage {
    pub(crate) async fn read(&self, sequencer: &Sequencer) -> anyhow::Result<i64> {
        match self {
            Storage::Unfenced(balance) => Ok(*balance.lock().expect("never poisoned")),
            Storage::Fenced(client) => {
                let read = client
                    .get(sequencer.lock(), BALANCE_KEY, Some(sequencer))
                    .await?
                    .map_err(|refused| anyhow::anyhow!("read refused: {refused}"))?;
                let value = read.value.context("the balance was never written")?;
                Ok(std::str::from_utf8(&value)?.parse()?)
            }
        }
    }

    pub(crate) async fn write(
        &self,
        sequencer: &Sequencer,
        balance: i64,
    ) -> anyhow::Result<WriteOutcome> {
        match self {
            Storage::Unfenced(stored) => {
                *stored.lock().expect("never poisoned") = balance;
                Ok(WriteOutcome::Accepted)
            }
            Storage::Fenced(client) => {
                match client
                    .put(sequencer, BALANCE_KEY, balance.to_string(), None)
                    .await?
                {
                    Ok(_written) => Ok(WriteOutcome::Accepted),
                    Err(Refused::Stale {
                        presented, marks, ..
                    }) => Ok(WriteOutcome::RefusedStale {
                        presented: presented.get(),
                        mark: marks.exclusive,
                    }),
                    Err(other) => bail!("write refused: {other}"),
                }
            }
        }
    }
}
