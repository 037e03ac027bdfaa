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
//! The capture is a process-wide subscriber, installed once, that writes
//! each event into the sink of the thread that logged it, if that thread
//! is capturing: run the test on one thread (`#[tokio::test]`'s default
//! current-thread runtime), so every task the code under test spawns logs
//! into it. Not a thread-scoped default subscriber: with those, tracing
//! caches a call site's interest process-wide, and a call site first
//! reached on another test's thread while the scoped one was being set up
//! could stay disabled for good, leaving the capture empty under load.

use std::cell::RefCell;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;

type Lines = Arc<Mutex<Vec<u8>>>;

thread_local! {
    /// Where this thread's events go while it captures.
    static CAPTURING: RefCell<Option<Lines>> = const { RefCell::new(None) };
}

/// The log lines written on this thread while it lives, at every level.
pub struct Logs {
    lines: Lines,
    /// The scoped subscriber, when another global one was set first.
    _scoped: Option<tracing::subscriber::DefaultGuard>,
}

/// Installs the process-wide router once; `false` if the process already
/// had a global subscriber.
fn router_installed() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        // Dynamic: asked at every event. A plain `filter_fn` is asked once
        // per call site and its answer cached for the process, so a call
        // site first reached on a thread that was not capturing would stay
        // disabled for every capture after it.
        let capturing = tracing_subscriber::filter::dynamic_filter_fn(|_, _| {
            CAPTURING.with(|sink| sink.borrow().is_some())
        });
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(Sink::of_this_thread)
            .with_filter(capturing);
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer)).is_ok()
    })
}

impl Logs {
    /// Starts capturing this thread's logs, at every level (`TRACE`).
    pub fn capture() -> Logs {
        let lines: Lines = Arc::new(Mutex::new(Vec::new()));
        if router_installed() {
            CAPTURING.with(|sink| *sink.borrow_mut() = Some(Arc::clone(&lines)));
            return Logs {
                lines,
                _scoped: None,
            };
        }
        let sink = Arc::clone(&lines);
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Sink(Some(Arc::clone(&sink))))
            .finish();
        Logs {
            lines,
            _scoped: Some(tracing::subscriber::set_default(subscriber)),
        }
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.lines.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

impl Drop for Logs {
    fn drop(&mut self) {
        CAPTURING.with(|sink| {
            let mut sink = sink.borrow_mut();
            if sink
                .as_ref()
                .is_some_and(|lines| Arc::ptr_eq(lines, &self.lines))
            {
                *sink = None;
            }
        });
    }
}

/// Appends to its lines, if it has any (the router's sink for a thread
/// that is not capturing has none).
struct Sink(Option<Lines>);

impl Sink {
    /// The capturing thread's sink.
    fn of_this_thread() -> Sink {
        Sink(CAPTURING.with(|sink| sink.borrow().clone()))
    }
}

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if let Some(lines) = &self.0 {
            lines
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(n: u32) {
        tracing::info!(n, "one call site");
    }

    /// A call site first reached on a thread that is not capturing (another
    /// test's, under load) still reaches a capture started later: with a
    /// filter asked once per call site, the first answer ("no") stuck.
    #[test]
    fn a_call_site_first_reached_elsewhere_is_still_captured() {
        assert!(router_installed(), "the router is this binary's subscriber");
        std::thread::spawn(|| log(1)).join().unwrap();
        let logs = Logs::capture();
        log(2);
        let text = logs.text();
        assert!(text.contains("n=2"), "nothing captured: {text:?}");
        assert!(!text.contains("n=1"), "another thread's line: {text:?}");
    }
}
