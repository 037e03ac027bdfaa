//! Opening the engine: the versioned schema, and the settings durability
//! rests on, against real PostgreSQL servers.

use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_store::{Engine, Op, RequestId, StoreError, WriteRequest};
use palisade_store_postgres::{OpenError, PostgresConfig, PostgresEngine, SCHEMA_VERSION};
use palisade_testkit::sql::SqlServer;

fn exclusive(lock: &str, generation: u64) -> Sequencer {
    Sequencer::new(
        LockName::new(lock).unwrap(),
        Mode::Exclusive,
        Generation::new(generation).unwrap(),
    )
}

#[tokio::test]
async fn a_newer_schema_is_refused_before_anything_is_created() {
    let server = SqlServer::postgres();
    let newer = SCHEMA_VERSION + 1;
    server
        .query(&format!(
            "CREATE TABLE palisade_store_schema (version BIGINT NOT NULL); \
             INSERT INTO palisade_store_schema VALUES ({newer})"
        ))
        .unwrap();
    match PostgresEngine::open(PostgresConfig::new(server.url())).await {
        Err(OpenError::SchemaTooNew { found, known }) => {
            assert_eq!((found, known), (newer, SCHEMA_VERSION));
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    // Nothing of this version's schema was created beside the newer one.
    assert_eq!(
        server
            .query("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'palisade_store_%'")
            .unwrap(),
        "1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_opening_a_fresh_database_at_once_create_one_schema() {
    let server = SqlServer::postgres();
    let opens: Vec<_> = (0..4)
        .map(|_| tokio::spawn(PostgresEngine::open(PostgresConfig::new(server.url()))))
        .collect();
    for open in opens {
        open.await.unwrap().expect("every replica opens");
    }
    assert_eq!(
        server
            .query("SELECT string_agg(version::text, ',') FROM palisade_store_schema")
            .unwrap(),
        SCHEMA_VERSION.to_string()
    );
}

#[tokio::test]
async fn a_server_with_fsync_off_is_refused_unless_allowed() {
    let server = SqlServer::postgres();
    server.query("ALTER SYSTEM SET fsync = off").unwrap();
    server.query("SELECT pg_reload_conf()").unwrap();
    // The reload reaches new sessions; wait for it rather than sleep.
    wait_for_setting(&server, "fsync", "off").await;
    match PostgresEngine::open(PostgresConfig::new(server.url())).await {
        Err(OpenError::FsyncOff) => {}
        other => panic!("expected FsyncOff, got {other:?}"),
    }
    let mut config = PostgresConfig::new(server.url());
    config.require_fsync = false;
    PostgresEngine::open(config)
        .await
        .expect("with require_fsync = false the engine opens");
}

#[tokio::test]
async fn synchronous_commit_is_on_whatever_the_server_and_role_say() {
    let server = SqlServer::postgres();
    server
        .query("ALTER SYSTEM SET synchronous_commit = off")
        .unwrap();
    server.query("SELECT pg_reload_conf()").unwrap();
    server
        .query("ALTER ROLE postgres SET synchronous_commit = off")
        .unwrap();
    wait_for_setting(&server, "synchronous_commit", "off").await;
    // `open` checks the setting on a session of its pool and refuses to
    // open without it.
    let engine = PostgresEngine::open(PostgresConfig::new(server.url()))
        .await
        .expect("the engine forces synchronous_commit = on for its sessions");
    let applied = engine
        .write(WriteRequest::new(
            exclusive("L", 1),
            vec![Op::put(b"k".to_vec(), b"v".to_vec())],
            None,
        ))
        .await
        .unwrap()
        .unwrap();
    assert!(applied.commit_seq > 0);
}

/// A COMMIT whose answer never comes (the session is terminated inside
/// it) is reported as in doubt, not as success or refusal; the retry with
/// the same request id then settles what happened.
#[tokio::test]
async fn a_commit_cut_off_is_in_doubt_and_the_retry_settles_it() {
    let server = SqlServer::postgres();
    let engine = PostgresEngine::open(PostgresConfig::new(server.url()))
        .await
        .unwrap();
    // A deferred trigger runs inside COMMIT; it kills its own session
    // when the key `cut-at-commit` is written.
    server
        .query(
            "CREATE FUNCTION cut_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN \
               IF NEW.key = 'cut-at-commit'::bytea THEN \
                 PERFORM pg_terminate_backend(pg_backend_pid()); \
                 PERFORM pg_sleep(5); \
               END IF; \
               RETURN NEW; \
             END $$; \
             CREATE CONSTRAINT TRIGGER cut_at_commit AFTER INSERT OR UPDATE \
               ON palisade_store_data DEFERRABLE INITIALLY DEFERRED \
               FOR EACH ROW EXECUTE FUNCTION cut_at_commit()",
        )
        .unwrap();
    let id = RequestId::new("in-doubt").unwrap();
    let request = || {
        WriteRequest::new(
            exclusive("L", 3),
            vec![Op::put(b"cut-at-commit".to_vec(), b"v".to_vec())],
            Some(id.clone()),
        )
    };
    match engine.write(request()).await {
        Err(StoreError::Storage { engine, message }) => {
            assert_eq!(engine, "postgres");
            assert!(message.contains("unknown"), "{message}");
        }
        other => panic!("expected an in-doubt storage error, got {other:?}"),
    }
    server
        .query("DROP TRIGGER cut_at_commit ON palisade_store_data")
        .unwrap();
    // The session died before its commit record: nothing was applied, so
    // the retry applies (once).
    let retry = engine.write(request()).await.unwrap().unwrap();
    assert!(!retry.replayed);
    let again = engine.write(request()).await.unwrap().unwrap();
    assert!(again.replayed);
    assert_eq!(again.commit_seq, retry.commit_seq);
}

/// Polls new sessions until `name` reads `expected` (a reload is
/// asynchronous), for at most 30 s.
async fn wait_for_setting(server: &SqlServer, name: &str, expected: &str) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut interval = tokio::time::interval(std::time::Duration::from_millis(50));
    loop {
        interval.tick().await;
        if server.query(&format!("SHOW {name}")).unwrap() == expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} did not become {expected} after a reload"
        );
    }
}

/// `Engine::dump` lists every table's rows, so the suite's "a refusal
/// changed nothing" check compares everything the engine keeps.
#[tokio::test]
async fn dump_lists_the_rows_of_every_table() {
    let server = SqlServer::postgres();
    let engine = PostgresEngine::open(PostgresConfig::new(server.url()))
        .await
        .unwrap();
    engine
        .write(WriteRequest::new(
            exclusive("L", 2),
            vec![Op::put(b"k".to_vec(), b"v".to_vec())],
            Some(RequestId::new("r").unwrap()),
        ))
        .await
        .unwrap()
        .unwrap();
    let places: Vec<String> = engine
        .dump()
        .await
        .unwrap()
        .into_iter()
        .map(|record| record.place)
        .collect();
    assert_eq!(
        places,
        [
            "palisade_store_data",
            "palisade_store_marks",
            "palisade_store_requests",
            "palisade_store_schema"
        ]
    );
}

/// Marks are compared as `u64` through `palisade_store_u64`, which must be
/// inlined into the statements that call it: a `STRICT` SQL function with
/// a `CASE` body is not, and PostgreSQL then parsed and planned its body
/// on every call (13 % of its CPU on the single-put fast path). A database
/// made with the older, `STRICT` definition gets the inlinable one when
/// the engine opens.
#[tokio::test]
async fn the_u64_comparison_is_inlined_even_over_an_older_definition() {
    let server = SqlServer::postgres();
    server
        .query(
            "CREATE FUNCTION palisade_store_u64(v BIGINT) RETURNS NUMERIC \
             LANGUAGE sql IMMUTABLE STRICT AS \
             $$ SELECT CASE WHEN v < 0 THEN v::numeric + 18446744073709551616 \
             ELSE v::numeric END $$",
        )
        .unwrap();
    PostgresEngine::open(PostgresConfig::new(server.url()))
        .await
        .expect("the engine opens over the older definition");
    let plan = server
        .query(
            "EXPLAIN (VERBOSE, COSTS OFF) SELECT lock_name FROM palisade_store_marks \
             WHERE palisade_store_u64(h_shared) <= palisade_store_u64(h_excl)",
        )
        .unwrap();
    assert!(
        plan.contains("CASE WHEN") && !plan.contains("palisade_store_u64"),
        "the comparison calls the function instead of inlining it:\n{plan}"
    );
    // The fast paths' check, with the comparison inside it.
    let plan = server
        .query(
            "EXPLAIN (VERBOSE, COSTS OFF) SELECT lock_name FROM palisade_store_marks \
             WHERE palisade_store_at_mark(h_excl, h_shared, 7)",
        )
        .unwrap();
    assert!(
        plan.contains("CASE WHEN")
            && !plan.contains("palisade_store_at_mark")
            && !plan.contains("palisade_store_u64"),
        "the fast paths' check calls a function instead of inlining it:\n{plan}"
    );
}
