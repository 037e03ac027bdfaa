//! The inspector's hints (`Inspect::changes`) follow an etcd watch, set
//! again after etcd restarts.

use crate::fixtures::{connect, etcd, options, session, unique_prefix};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_survive_a_restart() {
    let mut etcd = etcd();
    let client = connect(&etcd.endpoints(), &unique_prefix("changes")).await;
    let restart = || {
        etcd.kill().expect("kill etcd");
        etcd.restart().expect("restart etcd");
    };
    let open = async || session(&client, options(5)).await;
    palisade_testkit::changes_case::hints_survive_a_restart(&client, restart, open).await;
}
