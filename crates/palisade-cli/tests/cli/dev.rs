//! `palisade dev`: a throw-away local etcd or Redis, stopped on the way
//! out.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::fixtures::{code, run};

/// The command runs with the environment set, takes a real lock through
/// it, and its exit code passes through; afterwards the service is gone.
async fn a_lock_is_taken_through_the_service(service: &str, variable: &str) {
    let script =
        format!("echo \"${variable}\"; \"$PALISADE_BIN\" lock dev/try --quiet -- sh -c 'exit 3'");
    let finished = run(["dev", "--service", service, "--", "sh", "-c", &script]).await;
    finished.assert_code(3);
    let shown = finished.stdout_text();
    let address = shown
        .trim()
        .trim_start_matches("redis://")
        .parse::<SocketAddr>()
        .unwrap_or_else(|error| panic!("{variable} = {shown:?}: {error}"));
    assert!(
        TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_err(),
        "{service} at {address} must be stopped when the command ends"
    );
}

#[tokio::test]
async fn dev_runs_a_command_against_a_fresh_etcd() {
    a_lock_is_taken_through_the_service("etcd", "PALISADE_ETCD_ENDPOINTS").await;
}

#[tokio::test]
async fn dev_runs_a_command_against_a_fresh_redis() {
    a_lock_is_taken_through_the_service("redis", "PALISADE_REDIS_URL").await;
}

/// A command that is not there: the usual exit code, and still no service
/// left behind (nothing to check but the code: the port was never shown).
#[tokio::test]
async fn dev_with_a_missing_command_says_so() {
    let finished = run(["dev", "--service", "redis", "--", "/nonexistent/command"]).await;
    assert_eq!(finished.code(), code::ERROR, "{}", finished.stderr);
    assert!(
        finished.stderr.contains("cannot run /nonexistent/command"),
        "{}",
        finished.stderr
    );
}
