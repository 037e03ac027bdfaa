//! Looking at the locks under the prefix ([`Inspect`]) and ending a hold
//! from outside ([`ForceRelease`]), for operators.
//!
//! One linearizable range read gives every contender and lock-delay marker
//! of the locks asked about; the queue rules of `queue.rs` say which
//! contenders hold and which wait, exactly as a waiter would decide. Lease
//! time left comes from one `LeaseTimeToLive` per lease shown (etcd answers
//! in whole seconds, rounded down).

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::{GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse};
use palisade_core::{
    Changes, ForceRelease, Generation, Holder, Inspect, LockError, LockInfo, LockName, Waiter,
};

use crate::client::{ClientInner, Resend};
use crate::keys::{self, KeyKind, LockKeys, lease_hex};
use crate::queue::{Contender, Marker, Snapshot, Turn};
use crate::{EtcdLockClient, txns};

impl Inspect for EtcdLockClient {
    async fn inspect(&self, name: &LockName) -> Result<LockInfo, LockError> {
        let keys = LockKeys::new(self.inner.config.prefix(), name);
        let kvs = range(&self.inner, keys.dir().to_owned()).await?;
        describe(&self.inner, name.clone(), &keys, &kvs).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockInfo>, LockError> {
        let root = format!("{}/", self.inner.config.prefix());
        // The encoding is byte by byte, so every name starting with
        // `prefix` has a directory starting with this, and no other does.
        let range_key = format!("{root}{}", LockName::key_segment_prefix(prefix));
        let kvs = range(&self.inner, range_key).await?;
        let mut by_name: BTreeMap<LockName, Vec<KeyValue>> = BTreeMap::new();
        for kv in kvs {
            let Some(rest) = kv.key().strip_prefix(root.as_bytes()) else {
                continue;
            };
            let Some(end) = rest.iter().position(|byte| *byte == b'/') else {
                continue; // not a lock directory (the revision floor key)
            };
            let Some(name) = std::str::from_utf8(&rest[..end])
                .ok()
                .and_then(LockName::from_key_segment)
            else {
                continue;
            };
            if palisade_core::name_has_prefix(&name, prefix) {
                by_name.entry(name).or_default().push(kv);
            }
        }
        let mut locks = Vec::with_capacity(by_name.len());
        for (name, kvs) in by_name {
            let keys = LockKeys::new(self.inner.config.prefix(), &name);
            let info = describe(&self.inner, name, &keys, &kvs).await?;
            if !info.is_idle() {
                locks.push(info);
            }
        }
        Ok(locks)
    }

    /// An etcd watch on the range of the locks `prefix` selects.
    async fn changes(&self, prefix: &str, every: Duration) -> Result<Changes, LockError> {
        let key = format!(
            "{}/{}",
            self.inner.config.prefix(),
            LockName::key_segment_prefix(prefix)
        );
        crate::changes::changes(self.inner.clone(), key, every).await
    }
}

impl ForceRelease for EtcdLockClient {
    /// Deletes the holder's contender key and its lock-delay marker, if
    /// the key still has `generation` as create-revision (so a newer
    /// holder is never touched). The holder's session lease lives on; its
    /// other locks are not affected.
    async fn force_release(
        &self,
        name: &LockName,
        generation: Generation,
    ) -> Result<bool, LockError> {
        let keys = LockKeys::new(self.inner.config.prefix(), name);
        let response = self
            .inner
            .txn("force release: read", txns::read(&keys))
            .await?;
        let snapshot = txns::snapshot(&keys, &response);
        let Ok(revision) = i64::try_from(generation.get()) else {
            return Ok(false);
        };
        let Some(holder) = snapshot.by_revision(revision) else {
            return Ok(false);
        };
        if snapshot.turn(holder) != Turn::Granted {
            return Ok(false);
        }
        let response = self
            .inner
            .txn_made("force release", Resend::OnlyUnsent, || {
                txns::remove(&keys, holder.lease, Some(revision), true)
            })
            .await?;
        tracing::warn!(lock = %name, generation = revision, lease = %lease_hex(holder.lease), released = response.succeeded(), "forced release");
        Ok(response.succeeded())
    }
}

/// Every key under `key` (a lock's directory, or the start of many), by
/// create-revision, from one linearizable read.
async fn range(inner: &ClientInner, key: String) -> Result<Vec<KeyValue>, LockError> {
    let read = Txn::new().and_then([TxnOp::get(
        key,
        Some(
            GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend),
        ),
    )]);
    let response = inner.txn("inspect", read).await?;
    Ok(response
        .op_responses()
        .into_iter()
        .find_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get.kvs().to_vec()),
            _ => None,
        })
        .unwrap_or_default())
}

/// The lock's state from its directory's keys.
async fn describe(
    inner: &ClientInner,
    name: LockName,
    keys: &LockKeys,
    kvs: &[KeyValue],
) -> Result<LockInfo, LockError> {
    let mut snapshot = Snapshot::default();
    let mut holder_ids = BTreeMap::new();
    for kv in kvs {
        match keys.classify(kv.key()) {
            Some(KeyKind::Contender(lease)) => {
                snapshot.contenders.push(Contender {
                    lease,
                    create_revision: kv.create_revision(),
                    mode: keys::mode_of(kv.value()),
                });
                holder_ids.insert(lease, holder_of(kv.value()));
            }
            Some(KeyKind::Marker(lease)) => snapshot.markers.push(Marker {
                lease,
                mode: keys::mode_of(kv.value()),
            }),
            None => {}
        }
    }
    snapshot.contenders.sort_by_key(|c| c.create_revision);
    let mut info = LockInfo::free(name);
    let mut waiters = Vec::new();
    for contender in &snapshot.contenders {
        let lease = Some(lease_hex(contender.lease));
        let holder = holder_ids.get(&contender.lease).cloned().flatten();
        if snapshot.turn(*contender) == Turn::Granted {
            let generation = u64::try_from(contender.create_revision)
                .ok()
                .and_then(Generation::new);
            let Some(generation) = generation else {
                continue;
            };
            info.holders.push(
                Holder::new(contender.mode, generation)
                    .with_lease_left(lease_left(inner, contender.lease).await?)
                    .with_lease(lease)
                    .with_holder(holder),
            );
        } else {
            waiters.push(Waiter::new(contender.mode, lease, holder));
        }
    }
    info.waiters = Some(waiters);
    // An orphaned marker (its session's key is gone) is a lock-delay in
    // force until its lease ends.
    for marker in &snapshot.markers {
        if snapshot.by_lease(marker.lease).is_none() {
            if let Some(left) = lease_left(inner, marker.lease).await? {
                info.lock_delay_left = Some(info.lock_delay_left.unwrap_or_default().max(left));
            }
        }
    }
    Ok(info)
}

/// The `holder=` part of a contender's value.
fn holder_of(value: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(value).ok()?;
    text.split(';')
        .find_map(|part| part.strip_prefix("holder="))
        .map(str::to_owned)
}

/// What etcd says is left of `lease` (whole seconds), `None` if it has
/// already ended.
async fn lease_left(inner: &ClientInner, lease: i64) -> Result<Option<Duration>, LockError> {
    let client = inner.client.lease_client();
    let response = inner
        .bounded("lease time to live", Resend::Always, || {
            let mut client = client.clone();
            async move { client.time_to_live(lease, None).await }
        })
        .await;
    match response {
        Ok(response) => Ok(u64::try_from(response.ttl()).ok().map(Duration::from_secs)),
        Err(LockError::SessionClosed) => Ok(None),
        Err(error) => Err(error),
    }
}
