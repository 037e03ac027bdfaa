//! `--redis-fence`: the data commands on keys kept in a real Redis (from
//! the testkit), fenced by Palisade's Redis function. Hand-made
//! sequencers, as in `data.rs`: the fence checks generations, not who
//! minted them. Each test also reads Redis itself, so "nothing was
//! written" is checked where the data lives, not through the command.
//!
//! Checked against a fence without its guard: with the function's mark
//! check removed (`local admitted = true`) every test below with a late
//! write or read fails (the late write is accepted).

use palisade_testkit::redis::RedisServer;

use crate::fixtures::{code, finish, palisade, printed_sequencer, run, unique_name};

fn sequencer(lock: &str, generation: u64) -> String {
    format!("v1;lock={lock};mode=exclusive;gen={generation}")
}

/// `palisade <command> --redis-fence <url> --sequencer <seq> <rest>`.
async fn fenced(
    redis: &RedisServer,
    command: &str,
    seq: Option<&str>,
    rest: &[&str],
) -> crate::fixtures::Finished {
    let url = redis.url();
    let mut args = vec![command, "--redis-fence", url.as_str()];
    if let Some(seq) = seq {
        args.extend(["--sequencer", seq]);
    }
    args.extend(rest);
    run(args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_put_after_a_newer_holders_put_is_refused_with_4_and_writes_nothing() {
    let redis = RedisServer::start();
    let lock = "orders/42";
    let newer = sequencer(lock, 34);
    let older = sequencer(lock, 33);
    let put = fenced(&redis, "put", Some(&newer), &[lock, "stock", "6"]).await;
    put.assert_code(code::OK);
    assert!(
        put.stdout_text().contains("marks: exclusive 34"),
        "{}",
        put.stdout_text()
    );

    let late = fenced(&redis, "put", Some(&older), &[lock, "stock", "7"]).await;
    let line = late.one_line_error(code::STALE);
    assert!(line.contains("409 stale"), "{line}");
    assert!(line.contains("generation 33"), "{line}");
    assert!(line.contains("nothing was changed"), "{line}");
    assert!(late.stdout.is_empty());
    // In Redis itself: the newer holder's value, the mark at 34.
    assert_eq!(redis.command(&["GET", "{orders%2F42}:stock"]).unwrap(), "6");
    let record = redis
        .command(&["GET", "palisade:{orders%2F42}:marks"])
        .unwrap();
    assert_eq!(record.split(' ').next(), Some("34"), "{record}");

    // A late delete and a late decrement: refused the same way.
    let del = fenced(&redis, "del", Some(&older), &[lock, "stock"]).await;
    del.one_line_error(code::STALE);
    let incr = fenced(&redis, "incr", Some(&older), &[lock, "stock", "-n", "-1"]).await;
    incr.one_line_error(code::STALE);
    assert_eq!(redis.command(&["GET", "{orders%2F42}:stock"]).unwrap(), "6");
}

/// Fence on acquire: the newer holder only fenced (wrote nothing); the
/// older one, not yet overwritten, is refused all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_newer_holder_only_fenced_the_late_put_is_refused() {
    let redis = RedisServer::start();
    let lock = "orders/7";
    let first = fenced(&redis, "put", Some(&sequencer(lock, 3)), &[lock, "k", "a"]).await;
    first.assert_code(code::OK);
    let fence = fenced(&redis, "fence", Some(&sequencer(lock, 4)), &[lock]).await;
    fence.assert_code(code::OK);
    assert!(
        fence
            .stdout_text()
            .contains("fenced lock `orders/7` at exclusive generation 4"),
        "{}",
        fence.stdout_text()
    );
    let late = fenced(&redis, "put", Some(&sequencer(lock, 3)), &[lock, "k", "b"]).await;
    late.one_line_error(code::STALE);
    assert_eq!(redis.command(&["GET", "{orders%2F7}:k"]).unwrap(), "a");
    let marks = fenced(&redis, "marks", None, &["--json", lock]).await;
    marks.assert_code(code::OK);
    let answer: serde_json::Value = serde_json::from_slice(&marks.stdout).expect("JSON");
    assert_eq!(answer["marks"]["exclusive"], 4, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_put_reads_back_with_get_and_del_removes_it() {
    let redis = RedisServer::start();
    let lock = "data/redis";
    let seq = sequencer(lock, 5);
    fenced(
        &redis,
        "put",
        Some(&seq),
        &[lock, "greeting", "hello world"],
    )
    .await
    .assert_code(code::OK);
    // A plain read, and a fenced one (which raises nothing past 5).
    let plain = fenced(&redis, "get", None, &[lock, "greeting"]).await;
    plain.assert_code(code::OK);
    assert_eq!(plain.stdout, b"hello world");
    let read = fenced(&redis, "get", Some(&seq), &["--json", lock, "greeting"]).await;
    read.assert_code(code::OK);
    let answer: serde_json::Value = serde_json::from_slice(&read.stdout).expect("JSON");
    assert_eq!(answer["value"], "hello world", "{answer}");
    assert_eq!(answer["marks"]["exclusive"], 5, "{answer}");
    // A stale reader reads nothing.
    let stale = fenced(
        &redis,
        "get",
        Some(&sequencer(lock, 4)),
        &[lock, "greeting"],
    )
    .await;
    stale.one_line_error(code::STALE);
    assert!(stale.stdout.is_empty());

    fenced(&redis, "del", Some(&seq), &[lock, "greeting"])
        .await
        .assert_code(code::OK);
    let gone = fenced(&redis, "get", None, &[lock, "greeting"]).await;
    let line = gone.one_line_error(code::NOT_FOUND);
    assert!(line.contains("not found"), "{line}");
    assert_eq!(
        redis
            .command(&["EXISTS", "{data%2Fredis}:greeting"])
            .unwrap(),
        "0"
    );
}

/// The stock case from the shell: never below `--at-least`; a sold-out
/// decrement exits 5 and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incr_at_least_never_goes_below_and_says_so() {
    let redis = RedisServer::start();
    let lock = "flash-sale/sku-42";
    let seq = sequencer(lock, 9);
    fenced(&redis, "put", Some(&seq), &[lock, "stock", "1"])
        .await
        .assert_code(code::OK);
    let sell = ["stock", "-n", "-1", "--at-least", "0"];
    let sold = fenced(&redis, "incr", Some(&seq), &[&[lock][..], &sell].concat()).await;
    sold.assert_code(code::OK);
    assert_eq!(sold.stdout_text(), "0\n");
    let sold_out = fenced(&redis, "incr", Some(&seq), &[&[lock][..], &sell].concat()).await;
    let line = sold_out.one_line_error(code::REFUSED);
    assert!(line.contains("fewer than 0"), "{line}");
    assert_eq!(
        redis
            .command(&["GET", "{flash-sale%2Fsku-42}:stock"])
            .unwrap(),
        "0"
    );
    let up = fenced(&redis, "incr", Some(&seq), &[lock, "stock", "-n", "5"]).await;
    up.assert_code(code::OK);
    assert_eq!(up.stdout_text(), "5\n");
    let misuse = fenced(
        &redis,
        "incr",
        Some(&seq),
        &[lock, "stock", "--at-least", "0"],
    )
    .await;
    misuse.one_line_error(code::USAGE);
}

/// Redis lost the marks (here: deleted behind the fence's back, as a
/// restart without persistence would): `raise-floor --redis-fence --to`
/// puts the floor back, older holders are refused again, the newest
/// passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raise_floor_puts_lost_marks_back() {
    let redis = RedisServer::start();
    let lock = "orders/9";
    fenced(
        &redis,
        "put",
        Some(&sequencer(lock, 20)),
        &[lock, "k", "v20"],
    )
    .await
    .assert_code(code::OK);
    redis
        .command(&["DEL", "palisade:{orders%2F9}:marks"])
        .unwrap();
    let raised = fenced(&redis, "raise-floor", None, &[lock, "--to", "20"]).await;
    raised.assert_code(code::OK);
    assert!(raised.stderr.contains("exclusive 20"), "{}", raised.stderr);
    fenced(
        &redis,
        "put",
        Some(&sequencer(lock, 19)),
        &[lock, "k", "v19"],
    )
    .await
    .one_line_error(code::STALE);
    fenced(
        &redis,
        "put",
        Some(&sequencer(lock, 20)),
        &[lock, "k", "v20b"],
    )
    .await
    .assert_code(code::OK);
    assert_eq!(redis.command(&["GET", "{orders%2F9}:k"]).unwrap(), "v20b");
    let without_to = fenced(&redis, "raise-floor", None, &[lock]).await;
    without_to.one_line_error(code::USAGE);
}

/// The whole path from the shell: `palisade lock` on the Redis lock
/// backend runs a script that fences and writes with the sequencer from
/// the environment (`PALISADE_REDIS_FENCE` names the data's Redis); a
/// second holder writes; the first holder's sequencer, used late, is
/// refused with 4 and Redis keeps the second holder's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_palisade_lock_the_sequencer_comes_from_the_environment() {
    let redis = RedisServer::start();
    let name = unique_name("redis", "fence");
    let holder = |value: &str| {
        let mut command = palisade(["lock", "--backend", "redis", "--redis-url"]);
        command
            .arg(redis.url())
            .arg(name.as_str())
            .args(["--", "sh", "-c"])
            .arg(format!(
                r#""$PALISADE_BIN" fence "$PALISADE_LOCK" && "$PALISADE_BIN" put "$PALISADE_LOCK" stock {value}"#
            ))
            .env("PALISADE_REDIS_FENCE", redis.url());
        finish(command)
    };
    let first = holder("1").await;
    first.assert_code(code::OK);
    let first_sequencer = printed_sequencer(&first.stderr);
    assert!(
        first.stdout_text().contains("fenced lock"),
        "{}",
        first.stdout_text()
    );
    let second = holder("2").await;
    second.assert_code(code::OK);
    assert!(printed_sequencer(&second.stderr).generation() > first_sequencer.generation());

    let late = fenced(
        &redis,
        "put",
        Some(&first_sequencer.to_string()),
        &[name.as_str(), "stock", "late"],
    )
    .await;
    late.one_line_error(code::STALE);
    let read = fenced(&redis, "get", None, &[name.as_str(), "stock"]).await;
    read.assert_code(code::OK);
    assert_eq!(read.stdout, b"2");
}
