//! Settings the backend cannot honour are refused, naming the setting
//! (#25).

use palisade_lock_sql::{SqlConfig, SqlLockClient, SqlLockError};
use palisade_testkit::sql::SqlServer;

/// A PostgreSQL running with `fsync = off` could lose a committed
/// generation bump in a crash and issue the generation again: refused at
/// connect, as the storage engine refuses it, before any table is made.
#[tokio::test]
async fn a_postgres_with_fsync_off_is_refused() {
    let server = SqlServer::postgres_with(&["fsync=off"]);
    assert_eq!(server.query("SHOW fsync").unwrap(), "off");
    match SqlLockClient::connect(SqlConfig::new(server.url())).await {
        Err(error @ SqlLockError::FsyncOff) => {
            assert!(error.to_string().contains("fsync = off"), "{error}");
        }
        other => panic!("expected FsyncOff, got {other:?}"),
    }
    assert_eq!(
        server
            .query("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'palisade_%'")
            .unwrap(),
        "0",
        "nothing was created"
    );
}
