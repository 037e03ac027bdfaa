//! Raising the generation floor: moving etcd's revision past a resource
//! server's mark after etcd lost its history (data directory wiped, or a
//! snapshot restored without a revision bump).
//!
//! A generation here is a create-revision, and etcd 3.4 offers no way to
//! jump the revision (`etcdutl snapshot restore --bump-revision` is 3.5+).
//! What is left is to spend revisions: every put is exactly one revision
//! (a transaction is one revision whatever its op count, so batching does
//! not help), so the floor is raised by putting one dedicated key until
//! the store's revision reaches the target. Puts run with bounded
//! concurrency so raft can batch them. The key's history is left to the
//! cluster's auto-compaction: a compaction is cluster-wide and would cancel
//! watches (the lock queue's among them) started at older revisions.

use std::future::Future;
use std::time::{Duration, Instant};

use etcd_client::{GetOptions, KvClient, ResponseHeader};
use palisade_core::{FloorRaised, LockError, LockName, RaiseFloor, RaiseFloorError};
use tokio::task::JoinSet;

use crate::EtcdLockClient;
use crate::client::{Resend, within};
use crate::errors::BACKEND;

/// The key the floor is raised with, `<prefix>/.revision-floor`. Lock
/// directories all end in `/`, so no lock ever reads it.
const FLOOR_KEY: &str = ".revision-floor";

/// How a floor is raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaiseFloorOptions {
    /// The largest gap (target minus current revision) worth closing with
    /// puts; a larger one is refused with [`RaiseFloorError::GapTooLarge`]
    /// (see docs/backends/etcd.md for the alternatives) before anything is
    /// written.
    pub max_gap: u64,
    /// Puts in flight at once.
    pub concurrency: usize,
    /// How often progress is reported.
    pub progress_every: Duration,
}

impl RaiseFloorOptions {
    /// The default gap limit: one million revisions, minutes of puts at
    /// the rates measured in docs/backends/etcd.md.
    pub const DEFAULT_MAX_GAP: u64 = 1_000_000;
}

impl Default for RaiseFloorOptions {
    fn default() -> Self {
        RaiseFloorOptions {
            max_gap: Self::DEFAULT_MAX_GAP,
            concurrency: 64,
            progress_every: Duration::from_secs(1),
        }
    }
}

/// Where a floor raise stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloorProgress {
    /// The store revision before the first put.
    pub start: u64,
    /// The highest store revision seen so far.
    pub revision: u64,
    /// The revision to reach.
    pub target: u64,
    /// Puts acknowledged so far.
    pub puts: u64,
    /// Time since the first put.
    pub elapsed: Duration,
}

/// What a floor raise did, in full: [`FloorRaised`] with the puts it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RevisionRaised {
    /// The store revision before: the floor the next holder would have
    /// been granted above.
    pub before: u64,
    /// The store revision after; the next holder's generation is above it.
    pub after: u64,
    /// Puts made (0 when the revision was already high enough).
    pub puts: u64,
    /// How long it took.
    pub elapsed: Duration,
}

impl EtcdLockClient {
    /// The store's current revision (one linearizable read). The next
    /// holder's generation is above it.
    pub async fn revision(&self) -> Result<u64, LockError> {
        self.floor_request("read revision", |mut kv, key| async move {
            let count_only = GetOptions::new().with_count_only();
            let response = kv.get(key, Some(count_only)).await?;
            Ok(response.header().cloned())
        })
        .await
    }

    /// Raises the generation floor so that every lock granted afterwards
    /// gets a generation above `above` (a resource server's mark): puts to
    /// `<prefix>/.revision-floor` until the store's revision is at least
    /// `above`. `progress` is called every `options.progress_every` while
    /// puts run. Idempotent; never lowers anything. Other writers to the
    /// cluster only help. [`RaiseFloor`] is this with the default options.
    pub async fn raise_floor(
        &self,
        above: u64,
        options: RaiseFloorOptions,
        mut progress: impl FnMut(&FloorProgress) + Send,
    ) -> Result<RevisionRaised, RaiseFloorError> {
        if i64::try_from(above).is_err() {
            return Err(RaiseFloorError::OutOfRange {
                mark: above,
                limit: i64::MAX as u64,
            });
        }
        let started = Instant::now();
        let start = self.revision().await?;
        if start >= above {
            return Ok(RevisionRaised {
                before: start,
                after: start,
                puts: 0,
                elapsed: started.elapsed(),
            });
        }
        let gap = above - start;
        if gap > options.max_gap {
            return Err(RaiseFloorError::GapTooLarge {
                from: start,
                to: above,
                gap,
                max_gap: options.max_gap,
            });
        }
        tracing::info!(
            backend = BACKEND,
            revision = start,
            target = above,
            gap,
            "raising the generation floor"
        );
        let mut state = FloorProgress {
            start,
            revision: start,
            target: above,
            puts: 0,
            elapsed: Duration::ZERO,
        };
        // Each put adds exactly one revision, so `gap` puts always reach
        // the target; writes by others may let it stop sooner.
        let mut issued = 0u64;
        let mut in_flight = JoinSet::new();
        let mut next_report = Instant::now() + options.progress_every;
        let value = format!("floor raised above {above}");
        loop {
            while state.revision < above
                && issued < gap
                && in_flight.len() < options.concurrency.max(1)
            {
                in_flight.spawn(self.put_floor_key(value.clone()));
                issued += 1;
            }
            let Some(joined) = in_flight.join_next().await else {
                break;
            };
            let revision = joined.map_err(|error| LockError::Backend {
                backend: BACKEND,
                source: error.into(),
            })??;
            state.puts += 1;
            state.revision = state.revision.max(revision);
            if Instant::now() >= next_report {
                state.elapsed = started.elapsed();
                tracing::info!(
                    backend = BACKEND,
                    revision = state.revision,
                    target = above,
                    puts = state.puts,
                    "raising the generation floor"
                );
                progress(&state);
                next_report = Instant::now() + options.progress_every;
            }
        }
        let raised = RevisionRaised {
            before: start,
            after: state.revision,
            puts: state.puts,
            elapsed: started.elapsed(),
        };
        tracing::info!(
            backend = BACKEND,
            before = raised.before,
            after = raised.after,
            puts = raised.puts,
            elapsed = ?raised.elapsed,
            "generation floor raised"
        );
        Ok(raised)
    }

    fn floor_key(&self) -> String {
        format!("{}/{FLOOR_KEY}", self.inner.config.prefix())
    }

    /// One put of the floor key; the store revision it created.
    fn put_floor_key(
        &self,
        value: String,
    ) -> impl std::future::Future<Output = Result<u64, LockError>> + Send + 'static {
        let connection = self.clone();
        async move {
            let put = move |mut kv: KvClient, key| {
                let value = value.clone();
                async move { Ok(kv.put(key, value, None).await?.header().cloned()) }
            };
            connection.floor_request("raise floor", put).await
        }
    }

    /// One request on the floor key, resent until answered within the
    /// request timeout: `request` sends it with a KV client and the key,
    /// and gives back the answer's header. The store revision it carries.
    async fn floor_request<F>(
        &self,
        operation: &'static str,
        request: impl Fn(KvClient, String) -> F,
    ) -> Result<u64, LockError>
    where
        F: Future<Output = Result<Option<ResponseHeader>, etcd_client::Error>>,
    {
        let kv = self.inner.client.kv_client();
        let key = self.floor_key();
        let header = within(
            operation,
            self.inner.request_timeout(),
            Resend::Always,
            || request(kv.clone(), key.clone()),
        )
        .await?;
        Ok(header.map_or(0, |header| header.revision()).max(0) as u64)
    }
}

/// The revision is global: raising it for one lock raises it for all.
impl RaiseFloor for EtcdLockClient {
    async fn raise_floor(
        &self,
        _name: &LockName,
        mark: u64,
    ) -> Result<FloorRaised, RaiseFloorError> {
        let raised =
            EtcdLockClient::raise_floor(self, mark, RaiseFloorOptions::default(), |_| {}).await?;
        Ok(FloorRaised::new(raised.before, raised.after))
    }
}
