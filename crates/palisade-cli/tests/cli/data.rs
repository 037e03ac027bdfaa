//! `put`, `get`, `del`, `marks` against a real resource server, with
//! hand-made sequencers (the server checks generations, not who minted
//! them), so no lock service is needed here.

use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::fixtures::{code, palisade, run, serve};

fn sequencer(lock: &str, generation: u64) -> String {
    format!("v1;lock={lock};mode=exclusive;gen={generation}")
}

/// Runs `palisade <args>` with `input` on standard input.
async fn run_with_stdin(args: &[&str], input: &[u8]) -> crate::fixtures::Finished {
    let mut command = palisade(args);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("palisade runs");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input).await.expect("write stdin");
    drop(stdin);
    let output = child.wait_with_output().await.expect("palisade finishes");
    crate::fixtures::Finished {
        status: output.status,
        stdout: output.stdout,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_in_and_out_with_json_and_deletes() {
    let served = serve().await;
    let server = served.url.as_str();
    let seq = sequencer("data/bytes", 5);
    // Not UTF-8, with a newline: exactly these bytes come back.
    let value = [0xff, 0x00, b'\n', 0x80, b'x'];

    let put = run_with_stdin(
        &[
            "put",
            "--server",
            server,
            "--sequencer",
            &seq,
            "--json",
            "data/bytes",
            "blob",
            "-",
        ],
        &value,
    )
    .await;
    put.assert_code(code::OK);
    let mut answer: Value = serde_json::from_slice(&put.stdout).expect("JSON");
    let commit_seq = answer["commit_seq"].take();
    assert!(commit_seq.as_u64().is_some_and(|n| n > 0), "{commit_seq}");
    assert_eq!(
        answer,
        json!({"lock": "data/bytes", "key": "blob", "result": "created",
               "marks": {"exclusive": 5, "shared": 0}, "commit_seq": null, "replayed": false})
    );

    let get = run(["get", "--server", server, "data/bytes", "blob"]).await;
    assert_eq!(get.assert_code(code::OK).stdout, value);
    let get_json = run(["get", "--json", "--server", server, "data/bytes", "blob"]).await;
    let answer: Value = serde_json::from_slice(&get_json.stdout).expect("JSON");
    assert_eq!(answer["value"], json!({"base64": "/wAKgHg="}));
    assert_eq!(answer["marks"]["exclusive"], 5);

    // `--stdin` is the same as `-`, and a replaced value says so.
    let replaced = run_with_stdin(
        &[
            "put",
            "--server",
            server,
            "--sequencer",
            &seq,
            "--stdin",
            "data/bytes",
            "blob",
        ],
        b"second",
    )
    .await;
    replaced.assert_code(code::OK);
    assert_eq!(
        replaced.stdout_text().trim(),
        "replaced `blob` under lock `data/bytes` (marks: exclusive 5, shared 0)"
    );

    let deleted = run([
        "del",
        "--server",
        server,
        "--sequencer",
        &seq,
        "data/bytes",
        "blob",
    ])
    .await;
    assert!(
        deleted
            .assert_code(code::OK)
            .stdout_text()
            .starts_with("deleted `blob`"),
        "{}",
        deleted.stdout_text()
    );
    let again = run([
        "del",
        "--server",
        server,
        "--sequencer",
        &seq,
        "data/bytes",
        "blob",
    ])
    .await;
    assert!(
        again
            .assert_code(code::OK)
            .stdout_text()
            .starts_with("absent `blob`"),
        "{}",
        again.stdout_text()
    );

    let missing = run(["get", "--server", server, "data/bytes", "blob"]).await;
    let line = missing.one_line_error(code::NOT_FOUND);
    assert_eq!(
        line,
        "palisade: key `blob` not found under lock `data/bytes` (marks: exclusive 5, shared 0)"
    );
    assert!(missing.stdout.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_have_their_codes_and_change_nothing() {
    let served = serve().await;
    let server = served.url.as_str();
    let newer = sequencer("data/refusals", 9);
    let older = sequencer("data/refusals", 8);

    let put = |seq: String, value: &'static str, key: Option<&'static str>| {
        let mut args = vec![
            "put".to_owned(),
            "--server".into(),
            server.to_owned(),
            "--sequencer".into(),
            seq,
        ];
        if let Some(key) = key {
            args.extend(["--idempotency-key".to_owned(), key.to_owned()]);
        }
        args.extend(["data/refusals".to_owned(), "k".into(), value.into()]);
        run(args)
    };

    put(newer.clone(), "nine", Some("write-1"))
        .await
        .assert_code(code::OK);
    // The same request again is answered from the idempotency record.
    let replay = put(newer.clone(), "nine", Some("write-1")).await;
    assert!(
        replay
            .assert_code(code::OK)
            .stdout_text()
            .contains("replayed"),
        "{}",
        replay.stdout_text()
    );
    // The same key for another request is refused: 5.
    let reused = put(newer.clone(), "other", Some("write-1")).await;
    let line = reused.one_line_error(code::REFUSED);
    assert!(line.contains("422 idempotency_key_reused"), "{line}");

    // An older generation is stale: 4, with both generations and the marks.
    let stale = put(older, "eight", None).await;
    let line = stale.one_line_error(code::STALE);
    assert_eq!(
        line,
        "palisade: refused (409 stale): the sequencer for lock `data/refusals` is stale: \
         exclusive generation 8 is below the required 9 (marks: exclusive 9, shared 0); \
         either a newer holder has been honoured, or the lock service's generations are \
         behind the server's marks (lost counter, wiped or restored data; if no newer holder \
         exists, recover with `palisade raise-floor data/refusals`); nothing was changed"
    );

    let value = run(["get", "--server", server, "data/refusals", "k"]).await;
    assert_eq!(value.assert_code(code::OK).stdout, b"nine");
    let marks = run(["marks", "--server", server, "data/refusals"]).await;
    assert_eq!(
        marks.assert_code(code::OK).stdout_text(),
        "lock `data/refusals`: exclusive 9, shared 0\n"
    );
}

/// `PALISADE_SEQUENCER` is the sequencer of the lock `palisade lock` took:
/// it applies to that lock only. A read of another lock is a plain read,
/// `--no-sequencer` may be given alongside it, and a write to another lock
/// says which lock the sequencer in the environment is for. An explicit
/// `--sequencer` for the wrong lock is still an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequencer_from_the_environment_applies_to_its_own_lock_only() {
    let served = serve().await;
    let server = served.url.as_str();
    // Lock `env/b` has a value written at generation 9; the command runs
    // under lock `env/a` at generation 3.
    run([
        "put",
        "--server",
        server,
        "--sequencer",
        &sequencer("env/b", 9),
        "env/b",
        "k",
        "bee",
    ])
    .await
    .assert_code(code::OK);
    let under_a = |args: &[&str]| {
        let mut command = palisade(args);
        command
            .env("PALISADE_SEQUENCER", sequencer("env/a", 3))
            .env("PALISADE_SERVER", server);
        crate::fixtures::finish(command)
    };

    // The form docs/cli.md shows, and the plain one: both read `env/b`.
    for args in [
        &["get", "--no-sequencer", "env/b", "k"][..],
        &["get", "env/b", "k"][..],
    ] {
        let read = under_a(args).await;
        assert_eq!(read.assert_code(code::OK).stdout, b"bee", "{args:?}");
    }

    // A write to `env/b` needs `env/b`'s sequencer, and says so.
    let write = under_a(&["put", "env/b", "k", "from-a"]).await;
    let line = write.one_line_error(code::ERROR);
    assert_eq!(
        line,
        "palisade: a write needs a sequencer for lock `env/b`: PALISADE_SEQUENCER is for lock \
         `env/a`; pass --sequencer, or run under `palisade lock env/b -- ...`"
    );
    // The right one on the command line is used, not the environment's.
    let write = under_a(&[
        "put",
        "--sequencer",
        &sequencer("env/b", 9),
        "env/b",
        "k",
        "b2",
    ])
    .await;
    write.assert_code(code::OK);

    // An explicit sequencer for the wrong lock is refused before sending.
    let wrong = under_a(&["get", "--sequencer", &sequencer("env/a", 3), "env/b", "k"]).await;
    let line = wrong.one_line_error(code::ERROR);
    assert_eq!(
        line,
        "palisade: the sequencer is for lock `env/a`, not `env/b` (from --sequencer)"
    );

    // Its own lock: the read is fenced with it (the mark moves to 3)...
    under_a(&["put", "env/a", "k", "ay"])
        .await
        .assert_code(code::OK);
    let fenced = under_a(&["get", "--json", "env/a", "k"]).await;
    let answer: Value = serde_json::from_slice(&fenced.assert_code(code::OK).stdout).expect("JSON");
    assert_eq!(answer["marks"]["exclusive"], 3);
    // ...and `--no-sequencer` overrides it: a plain read still works once
    // a newer holder has written, where the fenced read is stale.
    run([
        "put",
        "--server",
        server,
        "--sequencer",
        &sequencer("env/a", 4),
        "env/a",
        "k",
        "ay4",
    ])
    .await
    .assert_code(code::OK);
    under_a(&["get", "env/a", "k"])
        .await
        .one_line_error(code::STALE);
    let plain = under_a(&["get", "--no-sequencer", "env/a", "k"]).await;
    assert_eq!(plain.assert_code(code::OK).stdout, b"ay4");
}
