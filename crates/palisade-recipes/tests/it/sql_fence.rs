//! The fencing stories through the SQL fence (`palisade-fence-sql`, the
//! check inside the application's own transaction), with a real pause: a
//! leader (or a permit holder) in another process is SIGSTOPped, so its
//! renewals stop; a new leader (holder) is elected on its own session,
//! fences and commits; the stopped process is continued and its late
//! transaction is refused by the fence, and changes nothing.
//!
//! The paused process is this test binary again, running the same test
//! with [`ROLE`] set. Checked by hand: with `begin_fenced` replaced by a
//! plain `pool.begin()` in `write`, the test fails: the paused leader's
//! late write is "accepted".

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use palisade_core::{LockName, Sequencer, SessionOptions};
use palisade_fence_sql::{FenceError, Refused};
use palisade_lock_any::{AnyClient, AnyInspector, AnyLock, LockSpec};
use palisade_recipes::{Election, Semaphore};
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Set in the paused process: `leader` or `permit`.
const ROLE: &str = "PALISADE_RECIPES_PAUSED_ROLE";
const URL: &str = "PALISADE_RECIPES_PAUSED_URL";
const NAME: &str = "PALISADE_RECIPES_PAUSED_NAME";
/// What the paused process prints before its answers.
const SAYS: &str = "paused-writer: ";
/// The lease every session takes.
const TTL: Duration = Duration::from_secs(1);
/// A campaign after a lease's end, a child's start, a late write: on a
/// loaded 2-core machine, with room to spare.
const LIMIT: Duration = Duration::from_secs(15);

fn options() -> SessionOptions {
    SessionOptions::default()
        .with_ttl(TTL)
        .with_safety_margin(TTL / 4)
        .with_keepalive_interval(TTL / 4)
}

/// A session, and its client, which must outlive it.
async fn session(spec: &LockSpec) -> (AnyClient, AnyLock) {
    let client = AnyClient::connect(spec)
        .await
        .expect("connect the lock backend");
    let lock = client.session(options()).await.expect("a lock session");
    (client, lock)
}

/// Writes `value` under `sequencer` in one fenced transaction.
async fn write(pool: &PgPool, sequencer: &Sequencer, value: &str) -> Result<(), FenceError> {
    let mut tx = palisade_fence_sql::begin_fenced(pool, sequencer).await?;
    sqlx::query(
        "INSERT INTO recipe_story (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = $2",
    )
    .bind(sequencer.lock().as_str())
    .bind(value)
    .execute(&mut *tx)
    .await
    .map_err(FenceError::from)?;
    tx.commit().await?;
    Ok(())
}

async fn read(pool: &PgPool, name: &LockName) -> Option<String> {
    sqlx::query_scalar("SELECT v FROM recipe_story WHERE k = $1")
        .bind(name.as_str())
        .fetch_optional(pool)
        .await
        .expect("read the story's row")
}

/// The paused process: takes the leadership or the permit, writes once,
/// says `ready`, and on `go` (after its pause) writes again with the same
/// sequencer; says `refused`, `accepted` or the error.
async fn paused_writer(role: &str) {
    let url = std::env::var(URL).expect("the URL");
    let name = LockName::new(std::env::var(NAME).expect("the name")).expect("a lock name");
    let spec = LockSpec::sql(url.clone()).expect("a PostgreSQL URL");
    let pool = PgPool::connect(&url)
        .await
        .expect("connect the fence's pool");
    let (_client, lock) = session(&spec).await;
    let (sequencer, _held): (Sequencer, Box<dyn std::any::Any + Send>) = match role {
        "leader" => {
            let leadership = Election::new(name)
                .campaign(&lock, "old")
                .await
                .expect("elected");
            (leadership.issued().clone(), Box::new(leadership))
        }
        _ => {
            let inspector = AnyInspector::connect(&spec).await.expect("an inspector");
            let permit = Semaphore::new(name, 1)
                .expect("a semaphore")
                .acquire(&lock, &inspector)
                .await
                .expect("the permit");
            (permit.issued().clone(), Box::new(permit))
        }
    };
    write(&pool, &sequencer, "old")
        .await
        .expect("the first write");
    println!("{SAYS}ready");
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let _go = stdin.next_line().await;
    match write(&pool, &sequencer, "late").await {
        Ok(()) => println!("{SAYS}accepted"),
        Err(FenceError::Refused(Refused::Stale { .. })) => println!("{SAYS}refused"),
        Err(error) => println!("{SAYS}{error}"),
    }
}

/// The story, seen from the new leader or holder, on the PostgreSQL at
/// `url` (the lock backend and the application's database both).
async fn story(role: &str, url: &str) {
    let url = url.to_owned();
    let pool = PgPool::connect(&url)
        .await
        .expect("connect the fence's pool");
    palisade_fence_sql::migrate(&pool)
        .await
        .expect("the fence's schema");
    sqlx::query("CREATE TABLE IF NOT EXISTS recipe_story (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
        .execute(&pool)
        .await
        .expect("the story's table");
    let name = format!("sql-fence-{role}-{}", std::process::id());

    let mut child =
        tokio::process::Command::new(std::env::current_exe().expect("this test binary"))
            .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env(URL, &url)
            .env(NAME, &name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the paused writer starts");
    let mut said = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut next = async || loop {
        let line = tokio::time::timeout(LIMIT, said.next_line())
            .await
            .expect("the paused writer answers in time")
            .expect("its output")
            .expect("it has not ended");
        // The harness's own "test ... " may open the line.
        if let Some((_, answer)) = line.split_once(SAYS) {
            return answer.to_owned();
        }
    };
    assert_eq!(next().await, "ready");
    let pid = Pid::from_raw(i32::try_from(child.id().expect("it runs")).expect("a pid"));
    kill(pid, Signal::SIGSTOP).expect("SIGSTOP the writer");

    let spec = LockSpec::sql(url.clone()).expect("a PostgreSQL URL");
    let (_client, lock) = session(&spec).await;
    let lock_name = LockName::new(name.as_str()).expect("a lock name");
    let sequencer = match role {
        "leader" => {
            let new = tokio::time::timeout(LIMIT, Election::new(lock_name).campaign(&lock, "new"))
                .await
                .expect("elected within the limit")
                .expect("elected");
            new.term().expect("the new term")
        }
        _ => {
            let inspector = AnyInspector::connect(&spec).await.expect("an inspector");
            let semaphore = Semaphore::new(lock_name, 1).expect("a semaphore");
            let permit = tokio::time::timeout(LIMIT, semaphore.acquire(&lock, &inspector))
                .await
                .expect("the permit within the limit")
                .expect("the permit");
            permit.sequencer().expect("the new permit's sequencer")
        }
    };
    write(&pool, &sequencer, "new")
        .await
        .expect("the new holder's write");

    kill(pid, Signal::SIGCONT).expect("SIGCONT the writer");
    let stdin = child.stdin.as_mut().expect("stdin");
    tokio::io::AsyncWriteExt::write_all(stdin, b"go\n")
        .await
        .expect("say go");
    assert_eq!(next().await, "refused", "the paused {role}'s late write");
    assert_eq!(
        read(&pool, sequencer.lock()).await.as_deref(),
        Some("new"),
        "the refused transaction changed nothing"
    );
    let _ = child.kill().await;
    lock.close(false).await.expect("close the session");
}

/// This test's path, which the paused process runs with [`ROLE`] set.
const TEST: &str = "sql_fence::stopped_writers_refused_by_sql_fence";

/// Both stories on one PostgreSQL: a stopped leader, a stopped permit
/// holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_writers_refused_by_sql_fence() {
    if let Ok(role) = std::env::var(ROLE) {
        return paused_writer(&role).await;
    }
    let postgres = palisade_testkit::sql::SqlServer::postgres();
    story("leader", &postgres.url()).await;
    story("permit", &postgres.url()).await;
}
