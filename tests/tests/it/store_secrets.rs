//! No password reaches any output of `palisade serve --store` (#25): the
//! resource server (`resource-server`, which flattens the same
//! `ServerConfig` as `palisade serve`) is started with `--store` URLs
//! carrying marker passwords in the userinfo and in the `password` query
//! parameter, on every path that ends in an error at start: nothing
//! listening, no such database, a URL scheme that is no engine, a
//! parameter nobody honours. Its whole standard output and error, with
//! every log level on, must not hold a marker.

use std::process::{Command, Stdio};

use palisade_testkit::sql::SqlServer;

const MARKER: &str = "MARKER";

#[test]
fn no_password_in_the_output_of_serve_store() {
    let postgres = SqlServer::postgres();
    let closed = palisade_testkit::process::free_port();
    let stores = [
        format!("postgres://postgres:{MARKER}1@127.0.0.1:{closed}/postgres?password={MARKER}2"),
        format!(
            "postgres://postgres:{MARKER}1@127.0.0.1:{}/no_such_db?password={MARKER}2",
            postgres.port()
        ),
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?password={MARKER}2&passfile={MARKER}3",
            postgres.port()
        ),
        format!("mysql://root:{MARKER}1@127.0.0.1:{closed}/test?password={MARKER}2"),
    ];
    for store in stores {
        let output = Command::new(env!("CARGO_BIN_EXE_resource-server"))
            .args(["--listen", "127.0.0.1:0", "--store", &store])
            .env("RUST_LOG", "trace")
            .stdin(Stdio::null())
            .output()
            .expect("resource-server runs");
        let shown = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!output.status.success(), "it started: {shown}");
        assert!(
            shown.contains("--store"),
            "the error does not name the setting: {shown}"
        );
        assert!(
            !shown.contains(MARKER),
            "the output shows a password:\n{shown}"
        );
    }
}
