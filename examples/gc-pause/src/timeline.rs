//! A timestamped log of who did what, printed as the story unfolds.

use tokio::time::Instant;

/// Who an event belongs to: a lane in the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Client A: takes the lock first, then pauses.
    ClientA,
    /// Client B: takes the lock while A is paused.
    ClientB,
    /// The lock service, as the clients' guards see it.
    Lock,
    /// The resource server (or, in the unfenced run, the plain store).
    Storage,
}

impl Lane {
    fn label(self) -> &'static str {
        match self {
            Lane::ClientA => "client A",
            Lane::ClientB => "client B",
            Lane::Lock => "lock",
            Lane::Storage => "storage",
        }
    }
}

/// The clock and printer of one run.
#[derive(Clone, Copy)]
pub(crate) struct Timeline {
    started: Instant,
}

impl Timeline {
    pub(crate) fn new() -> Self {
        Timeline {
            started: Instant::now(),
        }
    }

    /// Prints one event with the time since the run started.
    pub(crate) fn record(&self, lane: Lane, text: impl AsRef<str>) {
        println!(
            "  {:>6} ms  {:<9} {}",
            self.started.elapsed().as_millis(),
            lane.label(),
            text.as_ref()
        );
    }
}
