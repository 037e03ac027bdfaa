//! A run's timeline: who did what when, kept for the console and the SVG
//! picture.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Who an event belongs to: one swim lane of the picture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Client A: takes the lock first, then pauses.
    ClientA,
    /// Client B: takes the lock while A is paused.
    ClientB,
    /// The lock service: grants, expiries, releases.
    LockService,
    /// The storage: Palisade's resource server, or in the unfenced run the
    /// plain store that trusts the lock.
    ResourceServer,
}

impl Lane {
    /// Every lane, top to bottom.
    pub const ALL: [Lane; 4] = [
        Lane::ClientA,
        Lane::ClientB,
        Lane::LockService,
        Lane::ResourceServer,
    ];

    /// The label printed on the console and in the picture.
    pub fn label(self) -> &'static str {
        match self {
            Lane::ClientA => "client A",
            Lane::ClientB => "client B",
            Lane::LockService => "lock service",
            Lane::ResourceServer => "resource server",
        }
    }

    /// A stable identifier (`client-a`, ...), used as an SVG attribute.
    pub fn id(self) -> &'static str {
        match self {
            Lane::ClientA => "client-a",
            Lane::ClientB => "client-b",
            Lane::LockService => "lock-service",
            Lane::ResourceServer => "resource-server",
        }
    }
}

/// What kind of event: decides the marker's shape and colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// Anything else worth a line.
    Note,
    /// A client was granted the lock.
    Acquired,
    /// A read.
    Read,
    /// A client sent a write (what the storage made of it is the storage
    /// lane's event).
    WriteSent,
    /// A write the storage applied, from the newest holder.
    WriteAccepted,
    /// A write the storage applied although a newer generation had
    /// written: the anomaly of the unfenced run.
    StaleWriteAccepted,
    /// A write the resource server refused (409 stale).
    WriteRefused,
    /// A guard's lease-lost signal fired.
    LeaseLost,
    /// A stop-the-world pause began.
    PauseStart,
    /// The pause ended.
    PauseEnd,
    /// A lock was released (or a release was refused).
    Released,
}

impl EventKind {
    /// A stable identifier (`write-refused`, ...), used as an SVG attribute.
    pub fn id(self) -> &'static str {
        match self {
            EventKind::Note => "note",
            EventKind::Acquired => "acquired",
            EventKind::Read => "read",
            EventKind::WriteSent => "write-sent",
            EventKind::WriteAccepted => "write-accepted",
            EventKind::StaleWriteAccepted => "stale-write-accepted",
            EventKind::WriteRefused => "write-refused",
            EventKind::LeaseLost => "lease-lost",
            EventKind::PauseStart => "pause-start",
            EventKind::PauseEnd => "pause-end",
            EventKind::Released => "released",
        }
    }
}

/// One event of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Time since the run started.
    pub at: Duration,
    /// Whose event.
    pub lane: Lane,
    /// What kind.
    pub kind: EventKind,
    /// A few words for the picture.
    pub label: String,
    /// The full sentence, as printed.
    pub detail: String,
}

/// The clock and recorder of one run; clones share it.
#[derive(Debug, Clone)]
pub struct Timeline {
    started: Instant,
    events: Arc<Mutex<Vec<Event>>>,
    /// What the storage lane is called in this run.
    storage_label: &'static str,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline::new()
    }
}

impl Timeline {
    /// A timeline starting now.
    pub fn new() -> Self {
        Timeline {
            started: Instant::now(),
            events: Arc::default(),
            storage_label: Lane::ResourceServer.label(),
        }
    }

    /// Calls the storage lane `label` (the unfenced runs say `plain store`).
    pub fn with_storage_label(mut self, label: &'static str) -> Self {
        self.storage_label = label;
        self
    }

    /// The label of `lane` in this run.
    pub fn lane_label(&self, lane: Lane) -> &'static str {
        match lane {
            Lane::ResourceServer => self.storage_label,
            other => other.label(),
        }
    }

    /// Records an event: `label` for the picture, `detail` for the console.
    pub fn record(
        &self,
        lane: Lane,
        kind: EventKind,
        label: impl Into<String>,
        detail: impl Into<String>,
    ) {
        let event = Event {
            at: self.started.elapsed(),
            lane,
            kind,
            label: label.into(),
            detail: detail.into(),
        };
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event);
    }

    /// The events so far as console lines, one per event: time, lane,
    /// detail.
    pub fn render(&self) -> String {
        self.events()
            .iter()
            .map(|event| {
                format!(
                    "  {:>6} ms  {:<15}  {}\n",
                    event.at.as_millis(),
                    self.lane_label(event.lane),
                    event.detail
                )
            })
            .collect()
    }

    /// The events so far, in the order they were recorded.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
