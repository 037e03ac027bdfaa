//! Bad input and unreachable services: one readable line on standard
//! error, `palisade: ...`, and the documented exit code. Plus `--help`.

use crate::fixtures::{code, run};

/// A port nothing listens on, nor can while the tests run (the closed
/// port is kept for the life of the test process).
fn dead_address() -> String {
    let closed = Box::leak(Box::new(palisade_testkit::process::ClosedPort::new()));
    format!("127.0.0.1:{}", closed.port())
}

const SEQUENCER: &str = "v1;lock=x;mode=exclusive;gen=3";

#[tokio::test]
async fn malformed_or_missing_sequencers() {
    let malformed = run(["put", "--sequencer", "v2;lock=x", "x", "k", "v"]).await;
    let line = malformed.one_line_error(code::ERROR);
    assert!(line.contains("malformed sequencer"), "{line}");
    assert!(
        line.contains("unsupported sequencer version `v2`; expected `v1`"),
        "{line}"
    );

    let missing = run(["put", "x", "k", "v"]).await;
    let line = missing.one_line_error(code::ERROR);
    assert!(line.contains("a write needs a sequencer"), "{line}");

    let other_lock = run(["del", "--sequencer", SEQUENCER, "y", "k"]).await;
    let line = other_lock.one_line_error(code::ERROR);
    assert!(
        line.contains("the sequencer is for lock `x`, not `y`"),
        "{line}"
    );

    let bad_name = run(["marks", ""]).await;
    let line = bad_name.one_line_error(code::ERROR);
    assert!(line.contains("invalid lock name"), "{line}");
}

#[tokio::test]
async fn backends_that_cannot_be_used() {
    // clap refuses an unknown value: its usage error, code 2.
    let unknown = run(["lock", "--backend", "consul", "x", "--", "true"]).await;
    unknown.assert_code(code::USAGE);
    assert!(unknown.stderr.contains("consul"), "{}", unknown.stderr);

    let no_endpoint = run(["lock", "--backend", "etcd", "x", "--", "true"]).await;
    let line = no_endpoint.one_line_error(code::ERROR);
    assert_eq!(
        line,
        "palisade: --backend etcd needs --etcd-endpoints (or PALISADE_ETCD_ENDPOINTS)"
    );

    let nothing = run(["lock", "x", "--", "true"]).await;
    let line = nothing.one_line_error(code::ERROR);
    assert!(line.contains("no lock service configured"), "{line}");

    let embedded = run(["lock", "--backend", "embedded", "x", "--", "true"]).await;
    let line = embedded.one_line_error(code::ERROR);
    assert!(line.contains("inside one process"), "{line}");
    assert!(
        line.contains("use --backend etcd, redis, postgres or mariadb"),
        "{line}"
    );

    // The SQL backends: a URL is needed, of the database named, and no
    // prefix (the lock tables have none).
    let no_url = run(["lock", "--backend", "postgres", "x", "--", "true"]).await;
    assert_eq!(
        no_url.one_line_error(code::ERROR),
        "palisade: --backend postgres needs --database-url (or PALISADE_DATABASE_URL)"
    );
    let wrong_database = run([
        "lock",
        "--backend",
        "postgres",
        "--database-url",
        "mysql://root:secret@127.0.0.1:1/test",
        "x",
        "--",
        "true",
    ])
    .await;
    let line = wrong_database.one_line_error(code::ERROR);
    assert!(line.contains("with a mariadb database URL"), "{line}");
    assert!(!line.contains("secret"), "{line}");
    let prefixed = run([
        "lock",
        "--database-url",
        "postgres://postgres@127.0.0.1:1/postgres",
        "--prefix",
        "/team-a",
        "x",
        "--",
        "true",
    ])
    .await;
    let line = prefixed.one_line_error(code::ERROR);
    assert!(
        line.contains("--prefix \"/team-a\" does not apply to --backend postgres"),
        "{line}"
    );

    let bad_duration = run([
        "lock",
        "--backend",
        "redis",
        "--wait",
        "10parsecs",
        "x",
        "--",
        "true",
    ])
    .await;
    bad_duration.assert_code(code::USAGE);
}

#[tokio::test]
async fn unreachable_services() {
    let server = format!("http://{}", dead_address());
    let down = run([
        "put",
        "--server",
        &server,
        "--sequencer",
        SEQUENCER,
        "x",
        "k",
        "v",
    ])
    .await;
    let line = down.one_line_error(code::ERROR);
    assert!(
        line.starts_with(&format!(
            "palisade: cannot connect to the resource server at {server}: "
        )),
        "{line}"
    );

    let redis_url = format!("redis://{}", dead_address());
    let redis_down = run([
        "lock",
        "--backend",
        "redis",
        "--redis-url",
        &redis_url,
        "x",
        "--",
        "true",
    ])
    .await;
    let line = redis_down.one_line_error(code::ERROR);
    assert!(
        line.contains(&format!("cannot connect to Redis at {redis_url}")),
        "{line}"
    );

    let etcd_endpoint = dead_address();
    let etcd_down = run([
        "lock",
        "--backend",
        "etcd",
        "--etcd-endpoints",
        &etcd_endpoint,
        "x",
        "--",
        "true",
    ])
    .await;
    let line = etcd_down.one_line_error(code::ERROR);
    assert!(
        line.contains(&format!("cannot connect to etcd at {etcd_endpoint}")),
        "{line}"
    );
}

#[tokio::test]
async fn every_command_has_help_with_an_example() {
    let top = run(["--help"]).await;
    top.assert_code(code::OK);
    let text = top.stdout_text();
    assert!(text.contains("Exit codes:"), "{text}");
    assert!(text.contains("4    refused: stale sequencer"), "{text}");
    for command in ["lock", "put", "get", "del", "marks"] {
        let help = run([command, "--help"]).await;
        help.assert_code(code::OK);
        let text = help.stdout_text();
        assert!(text.contains("Example"), "{command}: {text}");
        assert!(
            text.contains(&format!("palisade {command}")),
            "{command}: {text}"
        );
    }
    // Secrets in the environment stay out of `--help`.
    let mut with_password = crate::fixtures::palisade(["lock", "--help"]);
    with_password.env("PALISADE_REDIS_URL", "redis://user:hunter2@127.0.0.1:6379");
    let lock_help = crate::fixtures::finish(with_password).await.stdout_text();
    assert!(!lock_help.contains("hunter2"), "{lock_help}");
    for needle in [
        "PALISADE_SEQUENCER",
        "--grace",
        "--wait",
        "PALISADE_BACKEND",
        "PALISADE_REDIS_URL",
    ] {
        assert!(lock_help.contains(needle), "{needle}: {lock_help}");
    }
}
