//! The fencing rule is restated in SQL: `palisade_store_fence` (fenced
//! reads and admits), `palisade_store_write` (writes) and
//! `palisade_store_at_mark`, the check of the single-put fast path and of
//! its batches across locks. Core's table of cases (`palisade_core::marks::RULE_CASES`,
//! the one `Marks::admit` is checked against) runs against each of them
//! here, on a real PostgreSQL, so the SQL cannot drift from the rule; and
//! a copy of each function with its mark check broken must fail the
//! table, so the check can fail.

use std::sync::Arc;

use palisade_core::marks::{Marks, RULE_CASES, RuleCase};
use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_store::{Engine, Op, WriteRequest};
use palisade_store_postgres::{PostgresConfig, PostgresEngine};
use palisade_testkit::sql::SqlServer;
use sqlx::PgPool;

/// The exclusive rule's check in both functions, and what the broken
/// copies put in its place (the shared mark forgotten: a writer granted
/// before a reader that has read would pass).
const CHECK: &str = "greatest(palisade_store_u64(m_excl), palisade_store_u64(m_shared))";
const BROKEN_CHECK: &str = "palisade_store_u64(m_excl)";

/// The fast paths' check in `palisade_store_at_mark`, and its broken copy
/// (the shared mark forgotten, as above).
const AT_MARK_CHECK: &str = "palisade_store_u64(m_shared) <= palisade_store_u64(g)";
const BROKEN_AT_MARK_CHECK: &str = "true";

/// Which implementation of the rule a pass goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// `palisade_store_fence`, called directly.
    FenceFunction,
    /// `palisade_store_write` with one put, called directly.
    WriteFunction,
    /// `Engine::write` of one put without a request id, one case at a
    /// time: the single fast path first, the write function when it
    /// declines.
    EngineWrite,
    /// The same, every case at once, each on its own lock: the cases are
    /// batched across locks (`FAST_PUTS`), the write function deciding
    /// what a batch declines.
    EngineWritesTogether,
}

struct Db {
    _server: SqlServer,
    pool: PgPool,
    engine: Arc<PostgresEngine>,
}

impl Db {
    async fn start() -> Db {
        let server = SqlServer::postgres();
        let engine = PostgresEngine::open(PostgresConfig::new(server.url()))
            .await
            .expect("the engine opens and creates its functions");
        let pool = PgPool::connect(&server.url()).await.expect("a plain pool");
        Db {
            _server: server,
            pool,
            engine: Arc::new(engine),
        }
    }

    /// The committed marks of `lock` (0, 0 without a row).
    async fn marks(&self, lock: &str) -> Marks {
        let row: Option<(i64, i64)> = sqlx::query_as(
            "SELECT h_excl, h_shared FROM palisade_store_marks WHERE lock_name = $1",
        )
        .bind(lock)
        .fetch_optional(&self.pool)
        .await
        .unwrap();
        row.map_or(Marks::ZERO, |(exclusive, shared)| Marks {
            exclusive: exclusive as u64,
            shared: shared as u64,
        })
    }

    /// Runs every case of the table through `path`; returns the cases whose
    /// outcome or marks differ from the table, described.
    async fn mismatches(&self, path: Path, tag: &str) -> Vec<String> {
        let cases: Vec<(String, &RuleCase)> = RULE_CASES
            .iter()
            .enumerate()
            // Writes are exclusive.
            .filter(|(_, case)| path == Path::FenceFunction || case.mode != Mode::Shared)
            .map(|(index, case)| (format!("rule/{tag}/{path:?}/{index}"), case))
            .collect();
        for (lock, case) in &cases {
            if case.before != (0, 0) {
                sqlx::query(
                    "INSERT INTO palisade_store_marks (lock_name, h_excl, h_shared, id_count) \
                     VALUES ($1, $2, $3, 0)",
                )
                .bind(lock)
                .bind(case.before.0 as i64)
                .bind(case.before.1 as i64)
                .execute(&self.pool)
                .await
                .unwrap();
            }
        }
        let admitted: Vec<bool> = if path == Path::EngineWritesTogether {
            let batched = self.engine.batched_puts();
            let admitted = futures::future::join_all(
                cases.iter().map(|(lock, case)| self.run(path, lock, case)),
            )
            .await;
            let after = self.engine.batched_puts();
            assert!(
                after.puts - batched.puts > after.statements - batched.statements,
                "the cases were not batched: {batched:?} before, {after:?} after"
            );
            admitted
        } else {
            let mut admitted = Vec::new();
            for (lock, case) in &cases {
                admitted.push(self.run(path, lock, case).await);
            }
            admitted
        };
        let mut mismatches = Vec::new();
        for ((lock, case), admitted) in cases.iter().zip(admitted) {
            let after = self.marks(lock).await;
            let expected_after = case.expected_marks().unwrap_or(case.before_marks());
            if admitted != case.expected.is_some() || after != expected_after {
                mismatches.push(format!(
                    "{path:?} {case:?}: admitted {admitted}, marks after {after}, expected {expected_after}"
                ));
            }
        }
        mismatches
    }

    /// One case through `path`: whether it was admitted.
    async fn run(&self, path: Path, lock: &str, case: &RuleCase) -> bool {
        let generation = case.generation as i64;
        match path {
            Path::FenceFunction => {
                let (admitted,): (bool,) =
                    sqlx::query_as("SELECT o_admitted FROM palisade_store_fence($1, $2, $3, NULL)")
                        .bind(lock)
                        .bind(case.mode == Mode::Shared)
                        .bind(generation)
                        .fetch_one(&self.pool)
                        .await
                        .unwrap();
                admitted
            }
            Path::WriteFunction => {
                let call = sqlx::query(
                    "SELECT * FROM palisade_store_write($1, $2, ARRAY[1]::smallint[], \
                     ARRAY['\\x6b'::bytea], ARRAY['\\x76'::bytea], ARRAY[NULL::bytea], \
                     NULL, ''::bytea, 16, NULL::bigint, NULL::bigint, NULL::bigint)",
                )
                .bind(lock)
                .bind(generation)
                .execute(&self.pool)
                .await;
                match call {
                    Ok(_) => true,
                    Err(error) => {
                        let code = error.as_database_error().and_then(|db| db.code());
                        assert_eq!(code.as_deref(), Some("PS001"), "{error}");
                        false
                    }
                }
            }
            Path::EngineWrite | Path::EngineWritesTogether => {
                let sequencer = Sequencer::new(
                    LockName::new(lock).unwrap(),
                    Mode::Exclusive,
                    Generation::new(case.generation).unwrap(),
                );
                let request =
                    WriteRequest::new(sequencer, vec![Op::put(&b"k"[..], &b"v"[..])], None);
                self.engine.write(request).await.unwrap().is_ok()
            }
        }
    }

    /// Replaces `function`'s definition with one whose mark check,
    /// `check`, is `broken`.
    async fn break_mark_check(&self, function: &str, check: &str, broken: &str) {
        let definition: String = sqlx::query_scalar("SELECT pg_get_functiondef($1::regproc)")
            .bind(function)
            .fetch_one(&self.pool)
            .await
            .unwrap();
        assert!(
            definition.contains(check),
            "{function} no longer checks `{check}`: update this test with its check"
        );
        let broken = definition.replace(check, broken);
        sqlx::raw_sql(sqlx::AssertSqlSafe(broken))
            .execute(&self.pool)
            .await
            .unwrap();
    }
}

const PATHS: [Path; 4] = [
    Path::FenceFunction,
    Path::WriteFunction,
    Path::EngineWrite,
    Path::EngineWritesTogether,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_functions_follow_cores_rule_table() {
    let db = Db::start().await;
    for path in PATHS {
        let mismatches = db.mismatches(path, "sound").await;
        assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    }
}

/// The table catches a function whose mark check is broken: without this,
/// the test above could pass by checking nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_mark_check_fails_the_rule_table() {
    let db = Db::start().await;
    db.break_mark_check("palisade_store_fence", CHECK, BROKEN_CHECK)
        .await;
    db.break_mark_check("palisade_store_write", CHECK, BROKEN_CHECK)
        .await;
    for path in PATHS {
        let mismatches = db.mismatches(path, "broken").await;
        assert!(
            !mismatches.is_empty(),
            "the rule table passed through {path:?} with the shared mark left out of the check"
        );
    }
}

/// The fast paths' own check, broken alone (the functions sound): the
/// engine's writes, one at a time and batched, fail the table, so the
/// cases the fast paths decide are checked too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_fast_path_check_fails_the_rule_table() {
    let db = Db::start().await;
    db.break_mark_check(
        "palisade_store_at_mark",
        AT_MARK_CHECK,
        BROKEN_AT_MARK_CHECK,
    )
    .await;
    for path in [Path::EngineWrite, Path::EngineWritesTogether] {
        let mismatches = db.mismatches(path, "broken-fast").await;
        assert!(
            !mismatches.is_empty(),
            "the rule table passed through {path:?} with the fast path's shared mark left out"
        );
    }
}
