//! The fault suite's ZooKeeper scenarios (issue 26: 30, 31, 32), on real
//! ZooKeeper servers from the testkit (tickTime 500 ms), a resource server
//! and workload clients in processes of their own.
//!
//! | scenario | fault | invariants |
//! | --- | --- | --- |
//! | [`s30_leader_kill`] | the lock directory deleted and re-created, then the ensemble leader `kill -9` and restart under contending holders | I-TOKEN, I-MONO, I-STALE, I-DUR, I-ONCE, I-LIVE |
//! | [`s31_client_cut_off`] | a holder cut from ZooKeeper by the fault proxy past its session timeout | lease lost before the new grant; the holder stops writing (nothing of it fenced); I-MONO, I-STALE, I-TOKEN, I-LIVE |
//! | [`s32_wiped_ensemble`] | ZooKeeper's data wiped and the server restarted | I-TOKEN broken by design (regression), fenced; the floor raised from the 409 mark recovers (I-LIVE) |
//!
//! The mutation rows ([`mutation`]) play the backend's test-only flaws
//! (generations from the sequence suffix; the lease counted from the
//! disconnect notice) and show the checker failing.
//!
//! The scenarios run one at a time (see [`serial`]): their bounds assume
//! the JVMs and clients have the machine's two cores to themselves.

mod mutation;
mod s30_leader_kill;
mod s31_client_cut_off;
mod s32_wiped_ensemble;

use std::time::Duration;

use palisade::LockName;
use palisade_lock_zookeeper::{ZkConfig, lock_path};
use zookeeper_client as zk;

/// One scenario at a time in this binary.
pub(crate) async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

/// The bound on any one wait for a client's step (a session to expire and
/// a newer holder to write, an election, a restart): generous for a loaded
/// 2-core machine.
pub(crate) const STEP: Duration = Duration::from_secs(45);

/// Waits (on a watch, not by polling) until ZooKeeper has deleted the
/// directory of `lock`: an empty container node is reaped within a second
/// on the testkit's servers, and the next acquire creates it again.
pub(crate) async fn wait_directory_gone(
    connect: &str,
    lock: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let root = ZkConfig::parse(connect)?.root();
    let path = lock_path(&root, &LockName::new(lock)?);
    let client = zk::Client::connect(connect).await?;
    tokio::time::timeout(timeout, async {
        loop {
            let (stat, watcher) = client.check_and_watch_stat(&path).await?;
            if stat.is_none() {
                return anyhow::Ok(());
            }
            watcher.changed().await;
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("{path} still exists after {timeout:?}"))?
}
