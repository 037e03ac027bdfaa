//! Operation histories, Jepsen style: every client process appends one JSON
//! line per event to its own file, and the test merges them after the run.
//!
//! An operation is an `invoke` event followed by exactly one completion:
//! `ok`, `fail` (definitely did not happen), or `unknown` (may or may not
//! have happened: a timeout, a dropped connection). Times are
//! `CLOCK_MONOTONIC` microseconds, one clock for every process on the
//! machine, and unaffected by a client whose wall clock is faked.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// What happened to an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The client is about to send it.
    Invoke,
    /// It happened (a 2xx, a granted lock).
    Ok,
    /// It definitely did not happen (a 4xx refusal, a lock not granted).
    Fail,
    /// It may or may not have happened (a timeout, a reset connection).
    Unknown,
}

/// The kind of operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// Acquire the lock; `generation` is set on `ok`.
    Acquire,
    /// A fenced write to the resource server with `generation`.
    Write,
    /// Release the lock.
    Release,
    /// The harness injected (`invoke`) or healed (`ok`) a fault; `detail`
    /// says which.
    Nemesis,
}

/// One line of a history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// `CLOCK_MONOTONIC` in microseconds when the event was recorded.
    pub mono_us: u64,
    /// Which client (or `nemesis`).
    pub client: String,
    /// Invoke or completion.
    pub phase: Phase,
    /// What kind of operation.
    pub op: OpKind,
    /// The lock the operation is about.
    pub lock: String,
    /// The generation granted (acquire `ok`) or presented (write).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// The write's idempotency key: a retry reuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The key written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The value written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The server's commit sequence number of an accepted write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_seq: Option<u64>,
    /// A refusal code, an error, or the nemesis's fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Event {
    /// An event stamped now.
    pub fn now(client: &str, phase: Phase, op: OpKind, lock: &str) -> Self {
        Event {
            mono_us: monotonic_us(),
            client: client.to_owned(),
            phase,
            op,
            lock: lock.to_owned(),
            generation: None,
            request_id: None,
            key: None,
            value: None,
            commit_seq: None,
            detail: None,
        }
    }

    /// Sets the generation.
    pub fn generation(mut self, generation: u64) -> Self {
        self.generation = Some(generation);
        self
    }

    /// Sets the request id, key and value of a write.
    pub fn write(mut self, request_id: &str, key: &str, value: &str) -> Self {
        self.request_id = Some(request_id.to_owned());
        self.key = Some(key.to_owned());
        self.value = Some(value.to_owned());
        self
    }

    /// Sets the commit sequence number.
    pub fn commit_seq(mut self, commit_seq: u64) -> Self {
        self.commit_seq = Some(commit_seq);
        self
    }

    /// Sets the detail.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

/// `CLOCK_MONOTONIC` in microseconds: the same clock in every process.
pub fn monotonic_us() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available on Linux");
    (now.tv_sec() as u64) * 1_000_000 + (now.tv_nsec() as u64) / 1_000
}

/// Appends events to a history file, one JSON line each, flushed per event
/// so a process killed with SIGKILL loses at most the event it was writing.
#[derive(Debug)]
pub struct Recorder {
    out: BufWriter<File>,
}

impl Recorder {
    /// Opens (creating or appending to) `path`.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Recorder {
            out: BufWriter::new(file),
        })
    }

    /// Appends `event`.
    pub fn record(&mut self, event: &Event) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, event)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }
}

/// Reads every event of every file, in `mono_us` order. A torn last line (a
/// process killed mid-write) is skipped; any other bad line is an error.
pub fn read_histories<P: AsRef<Path>>(
    paths: impl IntoIterator<Item = P>,
) -> std::io::Result<Vec<Event>> {
    let mut events = Vec::new();
    for path in paths {
        let lines: Vec<String> = BufReader::new(File::open(path.as_ref())?)
            .lines()
            .collect::<Result<_, _>>()?;
        let last = lines.len().saturating_sub(1);
        for (index, line) in lines.iter().enumerate() {
            match serde_json::from_str::<Event>(line) {
                Ok(event) => events.push(event),
                Err(_) if index == last => {}
                Err(error) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{}:{}: {error}", path.as_ref().display(), index + 1),
                    ));
                }
            }
        }
    }
    events.sort_by_key(|event| event.mono_us);
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_files_and_merge_in_time_order() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.jsonl");
        let b = dir.path().join("b.jsonl");
        let mut first = Event::now("a", Phase::Invoke, OpKind::Write, "L").write("r1", "k", "v");
        first.mono_us = 10;
        let mut second = Event::now("b", Phase::Ok, OpKind::Acquire, "L").generation(2);
        second.mono_us = 5;
        Recorder::open(&a).unwrap().record(&first).unwrap();
        Recorder::open(&b).unwrap().record(&second).unwrap();
        // A torn last line, as a SIGKILL leaves it.
        OpenOptions::new()
            .append(true)
            .open(&b)
            .unwrap()
            .write_all(b"{\"mono_us\":")
            .unwrap();
        let events = read_histories([&a, &b]).unwrap();
        assert_eq!(events, vec![second, first]);
    }

    #[test]
    fn a_bad_line_before_the_end_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.jsonl");
        std::fs::write(&a, "garbage\n{}\n").unwrap();
        assert!(read_histories([&a]).is_err());
    }

    #[test]
    fn the_monotonic_clock_moves_forward() {
        let before = monotonic_us();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(monotonic_us() >= before + 1_000);
    }
}
