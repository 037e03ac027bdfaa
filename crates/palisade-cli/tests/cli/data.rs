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
