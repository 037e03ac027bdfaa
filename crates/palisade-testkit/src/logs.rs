//! Every log line a test's own thread writes, for tests that must show a
//! secret never reaches one (a password in a URL, a token).
//!
//! ```no_run
//! use palisade_testkit::logs::Logs;
//!
//! let logs = Logs::capture(); // every level, until `logs` drops
//! tracing::warn!("connecting to postgres://app:***@db/p");
//! assert!(!logs.text().contains("hunter2"));
//! ```
//!
//! The capture is the thread's default subscriber: run the test on one
//! thread (`#[tokio::test]`'s default current-thread runtime), so every
//! task the code under test spawns logs into it.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// The log lines written on this thread while it lives, at every level.
pub struct Logs {
    lines: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl Logs {
    /// Starts capturing this thread's logs, at every level (`TRACE`).
    pub fn capture() -> Logs {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Sink(Arc::clone(&sink)))
            .finish();
        Logs {
            lines,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.lines.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
