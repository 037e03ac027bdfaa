//! The fault suite's network scenarios (issue 6: 5, 6, 7, 8), on real
//! etcd and Redis processes, a resource server and workload clients in
//! processes of their own, and the testkit's fault proxy between them.
//!
//! | scenario | fault | invariants |
//! | --- | --- | --- |
//! | [`s5_leader_kill`] | etcd leader `kill -9` and restart under traffic | I-TOKEN, I-MONO, I-STALE, I-DUR, I-ONCE, I-LIVE |
//! | [`s6_isolated_member`] | etcd member cut off from its peers, a client pinned to it | I-STALE, I-MONO, I-TOKEN, I-DUR, I-LIVE; the pinned client neither keeps nor gets the lock |
//! | [`s7_client_server_partition`] | client ↔ resource server (and lock server) partition past the lease; the late write arrives | I-STALE, I-MONO, I-LIVE; with fencing off the checker must fail |
//! | [`s8_lossy_links`] | 25 % loss and resets on every client path, concurrent clients retrying | I-MONO, I-STALE, I-DUR, I-ONCE, I-LIVE |
//! | [`s21_object_store`] | S3 (moto) killed and restarted, lossy links, a write held past its lease; with conditions stripped the checker must fail | I-MONO, I-STALE, I-DUR, I-ONCE, I-TOKEN, I-LIVE |
//!
//! The scenarios run one at a time (see [`serial`]): each one's time
//! bounds assume it has the machine's two cores to itself. Set
//! `PALISADE_FAULT_SOAK=1` for the long form, `PALISADE_FAULT_TABLE` to
//! collect the table rows, `PALISADE_FAULT_KEEP=1` to keep a run's
//! histories and logs.

mod s21_object_store;
mod s5_leader_kill;
mod s6_isolated_member;
mod s7_client_server_partition;
mod s8_lossy_links;

/// One scenario at a time in this binary: their bounds (leases, elections,
/// recovery) are sized for a machine that is not also running another
/// scenario's etcd cluster. A tokio mutex, since every test has a runtime
/// of its own and the guard is held across awaits.
pub(crate) async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

use std::collections::HashMap;
use std::time::Duration;

use palisade_tests::fault::{ClientLine, ClientProcess};
use palisade_tests::history::{Event, OpKind, Phase};

/// Waits until `client` reports an accepted write.
pub(crate) async fn wait_for_write(
    client: &mut ClientProcess,
    timeout: Duration,
) -> anyhow::Result<()> {
    client
        .wait_for(timeout, |line| {
            matches!(line, ClientLine::Wrote { .. }).then_some(())
        })
        .await
}

/// Waits until one of `clients` is granted a lock and writes under it,
/// both reported after this call began (lines already queued are drained
/// first). The checker's I-LIVE, over the histories, is the real verdict;
/// this only keeps the traffic going until there is something to judge.
pub(crate) async fn wait_for_fresh_hold(
    clients: &mut [ClientProcess],
    timeout: Duration,
) -> anyhow::Result<()> {
    for client in clients.iter_mut() {
        while client.next_line(Duration::from_millis(1)).await.is_ok() {}
    }
    let mut granted = vec![false; clients.len()];
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        for (index, client) in clients.iter_mut().enumerate() {
            // A short slice each, so one quiet client (waiting for a lock)
            // does not hide another's progress.
            match client.next_line(Duration::from_millis(100)).await {
                Ok(ClientLine::Granted { .. }) => granted[index] = true,
                Ok(ClientLine::Wrote { .. }) if granted[index] => return Ok(()),
                _ => {}
            }
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no client acquired and wrote within {timeout:?}"
        );
    }
}

/// How the clients retried their writes, from the merged history.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Retries {
    /// Write requests (request ids) sent more than once.
    pub(crate) retried_writes: usize,
    /// Acknowledgements the server gave from its idempotency record (a
    /// retry of a write it had already applied).
    pub(crate) replays: usize,
    /// Write attempts whose outcome the client could not know.
    pub(crate) unknown_outcomes: usize,
}

impl Retries {
    pub(crate) fn of(events: &[Event]) -> Retries {
        let mut attempts: HashMap<(&str, &str), usize> = HashMap::new();
        let mut retries = Retries::default();
        for event in events.iter().filter(|event| event.op == OpKind::Write) {
            match event.phase {
                Phase::Invoke => {
                    if let Some(request_id) = &event.request_id {
                        *attempts
                            .entry((event.lock.as_str(), request_id.as_str()))
                            .or_default() += 1;
                    }
                }
                Phase::Ok if event.detail.as_deref() == Some("replayed") => retries.replays += 1,
                Phase::Unknown => retries.unknown_outcomes += 1,
                _ => {}
            }
        }
        retries.retried_writes = attempts.values().filter(|count| **count > 1).count();
        retries
    }

    /// A note for the table row.
    pub(crate) fn note(&self) -> String {
        format!(
            "{} writes retried, {} answered from the idempotency record, {} outcomes unknown",
            self.retried_writes, self.replays, self.unknown_outcomes
        )
    }
}
