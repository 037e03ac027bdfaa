//! `palisade lock` + `palisade put` with the sequencer, on etcd, Redis,
//! PostgreSQL and MariaDB.

use palisade_core::Sequencer;
use serde_json::Value;

use crate::fixtures::{
    Backend, code, finish, palisade, path_in, printed_sequencer, read, run, scratch, serve,
    unique_name,
};

/// The command under the lock writes with `$PALISADE_SEQUENCER`; the value
/// is readable afterwards and the marks show the lock's generation. A
/// second run gets a newer generation and passes its exit code through.
pub(crate) async fn lock_then_put(backend: Backend) {
    let served = serve().await;
    let name = unique_name(backend.name(), "put");
    let files = scratch();
    let env_file = path_in(files.path(), "env");

    let mut command = palisade(["lock"]);
    command
        .args(backend.flags())
        .arg(name.as_str())
        .args(["--", "sh", "-c"])
        .arg(
            r#""$PALISADE_BIN" put --sequencer "$PALISADE_SEQUENCER" "$PALISADE_LOCK" greeting hello &&
               printf '%s\n%s\n%s\n' "$PALISADE_SEQUENCER" "$PALISADE_GENERATION" "$PALISADE_MODE" > "$ENV_FILE""#,
        )
        .env("PALISADE_SERVER", &served.url)
        .env("ENV_FILE", &env_file);
    let locked = finish(command).await;
    locked.assert_code(code::OK);
    let printed = printed_sequencer(&locked.stderr);
    assert_eq!(printed.lock(), &name);

    // The command saw the sequencer that was printed, and its parts.
    let env = read(files.path(), "env").expect("the command wrote its environment");
    let env: Vec<&str> = env.lines().collect();
    let seen: Sequencer = env[0].parse().expect("PALISADE_SEQUENCER parses");
    assert_eq!(seen, printed);
    assert_eq!(env[1], printed.generation().to_string());
    assert_eq!(env[2], "exclusive");
    // `put` printed its result on the command's standard output, which
    // `palisade lock` leaves to the command.
    assert!(
        locked
            .stdout_text()
            .starts_with("created `greeting` under lock"),
        "{:?}",
        locked.stdout_text()
    );

    let read_back = run(["get", "--server", &served.url, name.as_str(), "greeting"]).await;
    read_back.assert_code(code::OK);
    assert_eq!(read_back.stdout, b"hello");

    let marks = run(["marks", "--server", &served.url, name.as_str()]).await;
    marks.assert_code(code::OK);
    let generation = printed.generation().get();
    assert_eq!(
        marks.stdout_text().trim(),
        format!("lock `{name}`: exclusive {generation}, shared 0")
    );
    let marks_json = run(["marks", "--json", "--server", &served.url, name.as_str()]).await;
    let marks_json: Value = serde_json::from_slice(&marks_json.stdout).expect("JSON");
    assert_eq!(marks_json["marks"]["exclusive"], generation);

    // Released after the first run: the second is granted with a newer
    // generation, and its exit code is `palisade lock`'s.
    let mut again = palisade(["lock"]);
    again
        .args(backend.flags())
        .args(["--wait", "20s", name.as_str(), "--", "sh", "-c"])
        .arg(r#"echo "$PALISADE_GENERATION" > "$ENV_FILE"; exit 42"#)
        .env("ENV_FILE", &env_file);
    finish(again).await.assert_code(42);
    let second: u64 = read(files.path(), "env")
        .expect("second run wrote")
        .trim()
        .parse()
        .expect("a generation");
    assert!(second > generation, "{second} > {generation}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_then_put_on_etcd() {
    let backend = Backend::etcd();
    lock_then_put(backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_then_put_on_redis() {
    let backend = Backend::redis();
    lock_then_put(backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_then_put_on_redlock() {
    let backend = Backend::redlock();
    lock_then_put(backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_then_put_on_postgres() {
    let backend = Backend::postgres();
    lock_then_put(backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_then_put_on_mariadb() {
    let backend = Backend::mariadb();
    lock_then_put(backend).await;
}

/// Holder 1 writes; holder 2 (newer generation) writes; holder 1's
/// sequencer, used late, is refused with exit code 4 and a message naming
/// both generations, and changes nothing.
pub(crate) async fn stale_sequencer_is_refused(backend: Backend) {
    let served = serve().await;
    let name = unique_name(backend.name(), "stale");

    let mut first = palisade(["lock"]);
    first
        .args(backend.flags())
        .arg(name.as_str())
        .args(["--", "sh", "-c"])
        .arg(r#""$PALISADE_BIN" put "$PALISADE_LOCK" stock 10"#)
        .env("PALISADE_SERVER", &served.url);
    let first = finish(first).await;
    first.assert_code(code::OK);
    let old = printed_sequencer(&first.stderr);

    // No `sh`, no flags: `palisade put` finds the sequencer in its
    // environment.
    let mut second = palisade(["lock"]);
    second
        .args(backend.flags())
        .args([
            "--wait",
            "20s",
            name.as_str(),
            "--",
            super::fixtures::PALISADE,
        ])
        .args(["put", name.as_str(), "stock", "7"])
        .env("PALISADE_SERVER", &served.url);
    let second = finish(second).await;
    second.assert_code(code::OK);
    let new = printed_sequencer(&second.stderr);
    assert!(new.generation() > old.generation());

    let late = run([
        "put",
        "--server",
        &served.url,
        "--sequencer",
        &old.to_string(),
        name.as_str(),
        "stock",
        "9",
    ])
    .await;
    let line = late.one_line_error(code::STALE);
    assert!(line.contains("409 stale"), "{line}");
    assert!(
        line.contains(&format!(
            "exclusive generation {} is below the required {}",
            old.generation(),
            new.generation()
        )),
        "{line}"
    );
    assert!(
        line.contains(&format!("marks: exclusive {}, shared 0", new.generation())),
        "{line}"
    );
    assert!(line.contains("nothing was changed"), "{line}");
    assert!(late.stdout.is_empty());

    // Nothing changed: the value and the marks are the newer holder's.
    let value = run(["get", "--server", &served.url, name.as_str(), "stock"]).await;
    assert_eq!(value.assert_code(code::OK).stdout, b"7");
    let marks = run(["marks", "--json", "--server", &served.url, name.as_str()]).await;
    let marks: Value = serde_json::from_slice(&marks.stdout).expect("JSON");
    assert_eq!(marks["marks"]["exclusive"], new.generation().get());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_sequencer_is_refused_on_etcd() {
    let backend = Backend::etcd();
    stale_sequencer_is_refused(backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_sequencer_is_refused_on_redlock() {
    let backend = Backend::redlock();
    stale_sequencer_is_refused(backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_sequencer_is_refused_on_redis() {
    let backend = Backend::redis();
    stale_sequencer_is_refused(backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_sequencer_is_refused_on_postgres() {
    let backend = Backend::postgres();
    stale_sequencer_is_refused(backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_sequencer_is_refused_on_mariadb() {
    let backend = Backend::mariadb();
    stale_sequencer_is_refused(backend).await;
}

/// A shared lock cannot write (the server says 403, `put` exits 5 and
/// `palisade lock` passes that on), but can read; a missing key is 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_holders_read_but_cannot_write() {
    let backend = Backend::redis();
    let served = serve().await;
    let name = unique_name(backend.name(), "shared");

    let mut write = palisade(["lock", "--mode", "shared"]);
    write
        .args(backend.flags())
        .args([
            name.as_str(),
            "--",
            super::fixtures::PALISADE,
            "put",
            name.as_str(),
            "k",
            "v",
        ])
        .env("PALISADE_SERVER", &served.url);
    let write = finish(write).await;
    write.assert_code(code::REFUSED);
    assert!(
        write.stderr.contains("refused (403 shared_on_write)"),
        "{}",
        write.stderr
    );
    assert_eq!(
        printed_sequencer(&write.stderr).mode(),
        palisade_core::Mode::Shared
    );

    let mut read = palisade(["lock", "--mode", "shared"]);
    read.args(backend.flags())
        .args([
            name.as_str(),
            "--",
            super::fixtures::PALISADE,
            "get",
            name.as_str(),
            "k",
        ])
        .env("PALISADE_SERVER", &served.url);
    let read = finish(read).await;
    read.assert_code(code::NOT_FOUND);
    assert!(read.stderr.contains("key `k` not found"), "{}", read.stderr);
}

/// A command that does not exist: 127, and the lock is released (the next
/// `--wait 0s` gets it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_command_is_127_and_releases_the_lock() {
    let backend = Backend::redis();
    let name = unique_name(backend.name(), "missing-command");
    let mut missing = palisade(["lock", "--quiet"]);
    missing
        .args(backend.flags())
        .args([name.as_str(), "--", "/nonexistent/palisade-test-command"]);
    let line = finish(missing)
        .await
        .one_line_error(code::COMMAND_NOT_FOUND);
    assert!(line.contains("command not found"), "{line}");

    let mut next = palisade(["lock", "--wait", "0s"]);
    next.args(backend.flags())
        .args([name.as_str(), "--", "true"]);
    finish(next).await.assert_code(code::OK);
}
