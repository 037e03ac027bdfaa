//! `palisade object put|get|rm` against a real S3-compatible server (moto,
//! from the testkit), with hand-made sequencers: the fence checks
//! generations, not who minted them. Credentials come from the usual
//! environment variables, and the secret never shows in the output.
//!
//! Checked against a fence without its guard: through a proxy that strips
//! the conditional headers the probe refuses the store (exit 1) before
//! anything is written, so the late write cannot land there either.

use palisade_testkit::s3::{ConditionStrippingProxy, S3Server};

use crate::fixtures::{Finished, code, finish, palisade};

const SECRET: &str = "object-secret-0123456789";

fn sequencer(lock: &str, generation: u64) -> String {
    format!("v1;lock={lock};mode=exclusive;gen={generation}")
}

/// moto with a bucket `cli`.
fn moto() -> S3Server {
    let server = S3Server::start();
    server.create_bucket("cli").expect("create the bucket");
    server
}

/// `palisade object <args>` against `endpoint`, credentials from the
/// environment.
async fn object(endpoint: &str, args: &[&str]) -> Finished {
    let mut command = palisade(["object"]);
    command
        .args(args)
        .args(["--location", "s3://cli/tables", "--endpoint", endpoint])
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", SECRET);
    let finished = finish(command).await;
    assert!(
        !finished.stderr.contains(SECRET) && !finished.stdout_text().contains(SECRET),
        "the secret shows: {finished:?}"
    );
    finished
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_put_after_a_newer_holders_put_is_refused_with_4_and_writes_nothing() {
    let moto = moto();
    let endpoint = moto.endpoint();
    let lock = "tables/orders";
    let newer = sequencer(lock, 34);
    let older = sequencer(lock, 33);
    let put = object(
        &endpoint,
        &["put", "--sequencer", &newer, lock, "42.json", "new"],
    )
    .await;
    put.assert_code(code::OK);
    assert!(
        put.stdout_text().contains("at generation 34"),
        "{}",
        put.stdout_text()
    );

    let late = object(
        &endpoint,
        &["put", "--sequencer", &older, lock, "42.json", "late"],
    )
    .await;
    let line = late.one_line_error(code::STALE);
    assert!(line.contains("generation 33"), "{line}");
    assert!(line.contains("nothing was changed"), "{line}");
    let late_rm = object(&endpoint, &["rm", "--sequencer", &older, lock, "42.json"]).await;
    late_rm.one_line_error(code::STALE);

    let read = object(&endpoint, &["get", "42.json"]).await;
    read.assert_code(code::OK);
    assert_eq!(read.stdout, b"new");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_put_reads_back_with_get_and_rm_removes_it() {
    let moto = moto();
    let endpoint = moto.endpoint();
    let lock = "tables/items";
    let seq = sequencer(lock, 5);
    object(
        &endpoint,
        &[
            "put",
            "--sequencer",
            &seq,
            lock,
            "a/b.json",
            "{\"stock\": 7}",
        ],
    )
    .await
    .assert_code(code::OK);
    let read = object(&endpoint, &["get", "a/b.json"]).await;
    read.assert_code(code::OK);
    assert_eq!(read.stdout, b"{\"stock\": 7}");

    let removed = object(&endpoint, &["rm", "--sequencer", &seq, lock, "a/b.json"]).await;
    removed.assert_code(code::OK);
    let gone = object(&endpoint, &["get", "a/b.json"]).await;
    let line = gone.one_line_error(code::NOT_FOUND);
    assert!(line.contains("not found"), "{line}");

    // Without a sequencer a write is not sent at all.
    let unfenced = object(&endpoint, &["put", lock, "a/c.json", "x"]).await;
    let line = unfenced.one_line_error(code::ERROR);
    assert!(line.contains("needs a sequencer"), "{line}");
}

/// A store that ignores `If-Match` and `If-None-Match` (a proxy strips
/// them): the probe refuses it, naming the store, before anything is
/// written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_ignores_conditions_is_refused_before_any_write() {
    let moto = moto();
    let proxy = ConditionStrippingProxy::start(moto.address()).unwrap();
    let seq = sequencer("tables/x", 3);
    let put = object(
        &proxy.endpoint(),
        &["put", "--sequencer", &seq, "tables/x", "x.json", "x"],
    )
    .await;
    let line = put.one_line_error(code::ERROR);
    assert!(line.contains(&proxy.endpoint()), "names the store: {line}");
    let read = object(&moto.endpoint(), &["get", "x.json"]).await;
    read.one_line_error(code::NOT_FOUND);
}

/// Half a pair of credentials is refused before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_a_pair_of_credentials_is_refused() {
    let mut command = palisade([
        "object",
        "get",
        "--location",
        "s3://cli/tables",
        "--endpoint",
        "http://127.0.0.1:1",
        "x.json",
    ]);
    command.env("AWS_ACCESS_KEY_ID", "testing");
    let finished = finish(command).await;
    let line = finished.one_line_error(code::ERROR);
    assert!(line.contains("AWS_SECRET_ACCESS_KEY"), "{line}");
}
