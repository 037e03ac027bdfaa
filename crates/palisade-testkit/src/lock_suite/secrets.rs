//! No secret in any output: the check each lock backend runs on its
//! connection and error paths with a marker password (an unreachable port,
//! a wrong user, a bad database name, a password in a query parameter).
//!
//! [`assert_kept`] runs one failing attempt with every `tracing` event of
//! the thread captured, at every level, and fails if the marker appears in
//! the error's `Display` or `Debug`, in any error of its source chain, or in
//! any captured log line. Run it on a current-thread runtime
//! (`#[tokio::test]`), so the backend's background tasks log on the
//! captured thread too.

use std::error::Error;
use std::fmt::Debug;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};

/// A password no real deployment uses, for the attempts to carry. Its
/// characters need no escaping in a URL.
pub const MARKER: &str = "palisadeMarkerS3cret";

/// Runs `attempt`, which must fail, and checks that `marker` shows nowhere:
/// not in the error (`Display`, `Debug`, every source), not in any log line
/// written during the attempt. Returns the error for further checks.
///
/// # Panics
///
/// If the attempt succeeds, or the marker shows, with the output that
/// showed it (the marker masked, so the panic message itself keeps it).
pub async fn assert_kept<T: Debug, E: Error>(
    what: &str,
    marker: &str,
    attempt: impl Future<Output = Result<T, E>>,
) -> E {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(logs.clone())
        .finish();
    let outcome = {
        let _default = tracing::subscriber::set_default(subscriber);
        attempt.await
    };
    let error = match outcome {
        Ok(value) => panic!("secrets [{what}]: the attempt was meant to fail, got {value:?}"),
        Err(error) => error,
    };
    let mut shown = vec![
        ("the error's Display", error.to_string()),
        ("the error's Debug", format!("{error:?}")),
    ];
    let mut source = error.source();
    while let Some(cause) = source {
        shown.push(("a source's Display", cause.to_string()));
        shown.push(("a source's Debug", format!("{cause:?}")));
        source = cause.source();
    }
    let logged = logs.text();
    shown.extend(logged.lines().map(|line| ("a log line", line.to_owned())));
    for (place, text) in &shown {
        if text.contains(marker) {
            panic!(
                "secrets [{what}]: the password shows in {place}: {}",
                text.replace(marker, "<MARKER>")
            );
        }
    }
    println!(
        "secrets [{what}]: kept out of the error and {} log lines: {error}",
        logged.lines().count()
    );
    error
}

/// Checks that `marker` does not show in `value`'s `Debug` (a config, a
/// client: what a user's log line would print).
///
/// # Panics
///
/// If it shows, with the dump (the marker masked).
pub fn assert_hidden(what: &str, marker: &str, value: &impl Debug) {
    let shown = format!("{value:?}");
    assert!(
        !shown.contains(marker),
        "secrets [{what}]: the password shows in its Debug: {}",
        shown.replace(marker, "<MARKER>")
    );
}

/// Log output, shared with the subscriber's writer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

impl io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}
