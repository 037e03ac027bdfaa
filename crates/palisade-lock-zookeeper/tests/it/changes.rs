//! The inspector's hints (`Inspect::changes`) follow a persistent
//! recursive watch, which outlives a ZooKeeper restart.

use std::time::Duration;

use crate::fixtures::{options, session, started};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_survive_a_restart() {
    let (mut server, client) = started("changes").await;
    let restart = || {
        server.kill().expect("kill ZooKeeper");
        server.restart().expect("restart ZooKeeper");
    };
    let open = async || session(&client, options(Duration::from_secs(4))).await;
    palisade_testkit::changes_case::hints_survive_a_restart(&client, restart, open).await;
}
