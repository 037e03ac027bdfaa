//! The shared lock conformance suite, against a real PostgreSQL and a real
//! MariaDB.

use palisade_testkit::lock_suite::test_all;
use palisade_testkit::sql::SqlServer;

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_postgres() {
    common::trace();
    let server = SqlServer::postgres();
    let client = common::client(&server).await;
    test_all(common::SuiteSql {
        client,
        name: "sql/postgres",
        _server: server,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_mariadb() {
    common::trace();
    let server = SqlServer::mariadb();
    let client = common::client(&server).await;
    test_all(common::SuiteSql {
        client,
        name: "sql/mariadb",
        _server: server,
    })
    .await;
}
