//! The group log: in flushed mode, what makes a group durable before it is
//! answered, in place of a sled transaction and sled's flush.
//!
//! # Why a log of our own
//!
//! A sled transaction (and a sled batch) seals sled's in-memory log buffer
//! twice on commit (its `pin_log`), and every sealed buffer is handed to
//! sled's I/O thread pool, whose seven threads all wake for it. Measured
//! per durable write (docs/benchmarks.md, "CPU and wake-ups per durable
//! write"): 0.61 of the server's 1.1 wake-ups and 2.6 µs of CPU were those
//! threads', and replacing sled's flush by a sync of a file of our own left
//! them waking as often: the transactions themselves woke them.
//!
//! # The order that keeps every promise
//!
//! For each group the committer
//!
//! 1. decides every job on sled's state plus the group's own earlier
//!    effects ([`super::trees::Pending`]), writing nothing to sled;
//! 2. appends the group's effects (each key's final value, or its removal)
//!    to this log as one record and `fdatasync`s the log;
//! 3. takes the apply gate (readers outside the committer wait for it),
//!    answers, and applies the effects to sled with plain inserts: no
//!    reader sees half a group, nor misses a write whose answer went out
//!    (answering before the inserts lets the clients go on meanwhile).
//!
//! sled itself is made durable only by checkpoints (its flush and the
//! sync of its files, [`super::flush_durably`]). The log is a series of
//! segments; once a segment reaches [`SEGMENT_BYTES`] the committer starts
//! the next one and hands the full one to the checkpoint thread
//! (`checkpoint.rs`), which flushes sled (every group of the segment is
//! already applied to it) and only then removes the segment. The
//! committer does not wait for it: a checkpoint syncs tens of megabytes of
//! sled's files, which would stall every writer behind it.
//!
//! So sled never holds a group the log does not (a group reaches sled only
//! after its record is synced), and everything sled holds is durable:
//! in a checkpoint or in the log. After a crash sled recovers a prefix of
//! what it was given (its own log is written in order), which may end in
//! the middle of a group; replaying every record of the log in order over
//! it restores the state after the last synced group, since a record
//! holds final values and replaying a group sled already has changes
//! nothing. A record cut short or damaged at the end belongs to a group
//! whose sync never returned, so it was never acknowledged: replay stops
//! there, and so it does at a record whose number does not follow
//! the one before it.
//!
//! # Layout
//!
//! Segments `palisade-groups-<number>.log` in the engine's directory,
//! numbered in the order they were started. A record is the payload's
//! length (`u32`, little-endian), its CRC-32, and the payload: the
//! record's number (`u64`, consecutive from 1 in each run: a group that
//! wrote nothing has no record), the number of effects (`u32`), and each
//! effect as the tree (`0` data, `1` meta), the key's length (`u32`) and
//! key, and either `0` (removed) or `1`, the value's length (`u32`) and
//! value.
//!
//! # Zeros ahead of the records
//!
//! A segment is written with zeros ahead of its records
//! ([`ZEROS_AHEAD`] at a time), and records overwrite them. An
//! `fdatasync` after an append that grew the file must also write the
//! file's inode (its new length) and wait for that second write; over
//! zeros already on disk the length does not change, and the sync is one
//! write and the cache flush. The zeros reach the disk with the next
//! group's sync, once per [`ZEROS_AHEAD`] of log. Measured on the
//! durable-write benchmark: about 20 % more writes per second
//! (docs/benchmarks.md, "A lean way in"). So a segment ends with zeros: a
//! header of zeros is where its records end, in any segment, and replay
//! reads on only if everything after it is zero too.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
#[cfg(test)]
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::committer::sync_directory;
use super::trees::{Effects, Which};

/// Segment files are `<PREFIX><number, 20 digits><SUFFIX>`.
const PREFIX: &str = "palisade-groups-";
const SUFFIX: &str = ".log";

/// Log bytes after which the committer starts a new segment and the full
/// one is checkpointed: bounds the replay after a crash (about 250,000
/// writes of 100 bytes, replayed in about a quarter of a second) and how
/// much of sled's files a checkpoint syncs.
pub(crate) const SEGMENT_BYTES: u64 = 32 << 20;

/// A record's header: the payload's length and CRC-32.
const HEADER: usize = 8;

/// Bytes of zeros written ahead of the records when they reach the zeros'
/// end (see "Zeros ahead of the records").
pub(crate) const ZEROS_AHEAD: u64 = 256 << 10;

/// What the engine can change about the log from outside the committer.
#[derive(Debug, Default)]
pub(crate) struct LogSwitches {
    /// The fault suite's I-DUR mutation only: records are written but
    /// never synced, so a group is acknowledged before it is durable.
    pub(crate) skip_sync: AtomicBool,
    /// Test only: the next append's sync fails with this error (its record
    /// written), as a dying disk's would.
    #[cfg(test)]
    pub(crate) fail_next: Mutex<Option<io::ErrorKind>>,
}

/// The segment being written, owned by the committer.
#[derive(Debug)]
pub(crate) struct GroupLog {
    dir: PathBuf,
    file: File,
    /// The segment's number.
    number: u64,
    /// Bytes of records in the segment (where the next record goes).
    len: u64,
    /// The file's length: records, then zeros.
    zeroed: u64,
    /// The next record's number: consecutive from 1 across the segments of
    /// one run, so a replay can tell a record that does not belong.
    next_record: u64,
    switches: Arc<LogSwitches>,
    /// The record being encoded, kept to reuse its allocation.
    buffer: Vec<u8>,
}

/// A group read back from the log.
#[derive(Debug, PartialEq)]
pub(crate) struct LoggedGroup {
    pub(crate) number: u64,
    pub(crate) effects: Effects,
}

/// What an engine directory's log holds when the engine opens.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// Every group to replay, in order.
    pub(crate) groups: Vec<LoggedGroup>,
    /// The segments found, in order: removed once the replay is
    /// checkpointed.
    pub(crate) segments: Vec<PathBuf>,
    /// The number for the next segment.
    pub(crate) next_segment: u64,
}

/// The path of segment `number` in `dir`.
pub(crate) fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{PREFIX}{number:020}{SUFFIX}"))
}

/// Reads back every segment in `dir`, in order: every whole record up to
/// the first that is cut short, damaged or out of sequence, which is where
/// the last sync that never returned left off. That may only happen in
/// the last segment: an earlier one was complete when the next began, so
/// damage there is an error (the groups after it were acknowledged). Any
/// segment may end in zeros (written ahead of its records).
pub(crate) fn recover(dir: &Path) -> io::Result<Recovered> {
    let mut numbered = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(number) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.strip_suffix(SUFFIX))
            .and_then(|digits| digits.parse::<u64>().ok())
        {
            numbered.push(number);
        }
    }
    numbered.sort_unstable();
    let mut groups: Vec<LoggedGroup> = Vec::new();
    let segments: Vec<PathBuf> = numbered.iter().map(|n| segment_path(dir, *n)).collect();
    for (i, path) in segments.iter().enumerate() {
        let bytes = std::fs::read(path)?;
        let (read, whole) = decode_records(&bytes, groups.last().map(|g| g.number));
        groups.extend(read);
        if !whole && i + 1 < segments.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the group log segment {} is damaged before its end, and later segments hold acknowledged writes",
                    path.display()
                ),
            ));
        }
    }
    Ok(Recovered {
        groups,
        next_segment: numbered.last().map_or(1, |n| n + 1),
        segments,
    })
}

/// Removes `segments` (sled holds their groups durably) and makes the
/// removal durable.
pub(crate) fn remove_segments(dir: &Path, segments: &[PathBuf]) -> io::Result<()> {
    for segment in segments {
        match std::fs::remove_file(segment) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
    }
    sync_directory(dir)
}

impl GroupLog {
    /// Starts segment `number` in `dir`: created, and its name made
    /// durable, before anything is logged in it.
    pub(crate) fn create(
        dir: &Path,
        number: u64,
        switches: Arc<LogSwitches>,
    ) -> io::Result<GroupLog> {
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(segment_path(dir, number))?;
        file.sync_all()?;
        sync_directory(dir)?;
        Ok(GroupLog {
            dir: dir.to_path_buf(),
            file,
            number,
            len: 0,
            zeroed: 0,
            next_record: 1,
            switches,
            buffer: Vec::new(),
        })
    }

    /// Appends one group's effects and syncs the segment: when this
    /// returns `Ok`, the group survives a crash.
    pub(crate) fn append(&mut self, effects: &Effects) -> io::Result<()> {
        self.buffer.clear();
        encode_record(&mut self.buffer, self.next_record, effects);
        self.next_record += 1;
        let end = self.len + self.buffer.len() as u64;
        if end > self.zeroed {
            let zeros = vec![0; ZEROS_AHEAD as usize];
            self.file.write_all_at(&zeros, end)?;
            self.zeroed = end + ZEROS_AHEAD;
        }
        self.file.write_all_at(&self.buffer, self.len)?;
        self.len = end;
        if self.switches.skip_sync.load(Ordering::Relaxed) {
            return Ok(());
        }
        #[cfg(test)]
        if let Some(kind) = self
            .switches
            .fail_next
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            return Err(io::Error::new(kind, "injected sync failure"));
        }
        self.file.sync_data()
    }

    /// Removes the current segment, once sled holds its groups durably
    /// (the store's last checkpoint).
    pub(crate) fn remove(self) -> io::Result<()> {
        remove_segments(&self.dir, &[self.path()])
    }

    /// Bytes in the current segment.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The current segment's file.
    pub(crate) fn path(&self) -> PathBuf {
        segment_path(&self.dir, self.number)
    }

    /// Starts the next segment; returns the finished one's path, to be
    /// removed once a checkpoint covers it (every group in it is applied
    /// to sled already).
    pub(crate) fn rotate(&mut self) -> io::Result<PathBuf> {
        let mut next = GroupLog::create(&self.dir, self.number + 1, Arc::clone(&self.switches))?;
        next.next_record = self.next_record;
        let finished = self.path();
        *self = next;
        Ok(finished)
    }
}

fn put_u32(buffer: &mut Vec<u8>, value: usize) {
    let value = u32::try_from(value).expect("keys, values and groups are bounded well below 4 GiB");
    buffer.extend_from_slice(&value.to_le_bytes());
}

/// Appends one record (header and payload) to `buffer`.
pub(crate) fn encode_record(buffer: &mut Vec<u8>, number: u64, effects: &Effects) {
    let start = buffer.len();
    buffer.extend_from_slice(&[0; HEADER]);
    buffer.extend_from_slice(&number.to_le_bytes());
    put_u32(buffer, effects.len());
    for (which, key, value) in effects.iter() {
        buffer.push(which as u8);
        put_u32(buffer, key.len());
        buffer.extend_from_slice(key);
        match value {
            None => buffer.push(0),
            Some(value) => {
                buffer.push(1);
                put_u32(buffer, value.len());
                buffer.extend_from_slice(value);
            }
        }
    }
    let payload = &buffer[start + HEADER..];
    let length = u32::try_from(payload.len()).expect("a group is bounded well below 4 GiB");
    let crc = crc32fast::hash(payload);
    buffer[start..start + 4].copy_from_slice(&length.to_le_bytes());
    buffer[start + 4..start + HEADER].copy_from_slice(&crc.to_le_bytes());
}

/// Every whole record of `bytes`, in order, up to the first that is cut
/// short, fails its CRC, does not parse, or does not follow the group
/// number before it (`after`: the last group read before these bytes).
/// The flag says whether the records end cleanly: every byte read, or
/// only zeros after the last record (the zeros written ahead).
pub(crate) fn decode_records(mut bytes: &[u8], mut after: Option<u64>) -> (Vec<LoggedGroup>, bool) {
    let mut groups = Vec::new();
    while let Some((header, rest)) = bytes.split_first_chunk::<HEADER>() {
        let length = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let Some(payload) = rest.get(..length) else {
            break;
        };
        if crc32fast::hash(payload) != crc {
            break;
        }
        let Some(group) = decode_payload(payload) else {
            break;
        };
        if after.is_some_and(|last| last.checked_add(1) != Some(group.number)) {
            break;
        }
        after = Some(group.number);
        groups.push(group);
        bytes = &rest[length..];
    }
    (groups, bytes.iter().all(|byte| *byte == 0))
}

/// Reads what [`encode_record`] wrote.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let (taken, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(taken)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u32(&mut self) -> Option<usize> {
        let b = self.take(4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    fn u64(&mut self) -> Option<u64> {
        let b: [u8; 8] = self.take(8)?.try_into().ok()?;
        Some(u64::from_le_bytes(b))
    }
}

fn decode_payload(payload: &[u8]) -> Option<LoggedGroup> {
    let mut reader = Reader(payload);
    let number = reader.u64()?;
    let count = reader.u32()?;
    let mut effects = Effects::default();
    for _ in 0..count {
        let which = match reader.u8()? {
            0 => Which::Data,
            1 => Which::Meta,
            _ => return None,
        };
        let key_len = reader.u32()?;
        let key = reader.take(key_len)?.to_vec();
        let value = match reader.u8()? {
            0 => None,
            1 => {
                let value_len = reader.u32()?;
                Some(reader.take(value_len)?.into())
            }
            _ => return None,
        };
        effects.set(which, key, value);
    }
    reader
        .0
        .is_empty()
        .then_some(LoggedGroup { number, effects })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effects(entries: &[(Which, &str, Option<&str>)]) -> Effects {
        let mut effects = Effects::default();
        for (which, key, value) in entries {
            effects.set(
                *which,
                key.as_bytes().to_vec(),
                value.map(|v| v.as_bytes().into()),
            );
        }
        effects
    }

    fn log(groups: &[(u64, Effects)]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (number, effects) in groups {
            encode_record(&mut bytes, *number, effects);
        }
        bytes
    }

    #[test]
    fn records_read_back_as_written() {
        let first = effects(&[
            (Which::Data, "a", Some("1")),
            (Which::Meta, "s", Some("")),
            (Which::Data, "b", None),
        ]);
        let second = effects(&[(Which::Meta, "m", Some("x"))]);
        let (groups, whole) =
            decode_records(&log(&[(1, first.clone()), (2, second.clone())]), None);
        assert!(whole);
        assert_eq!(
            groups,
            vec![
                LoggedGroup {
                    number: 1,
                    effects: first
                },
                LoggedGroup {
                    number: 2,
                    effects: second
                },
            ]
        );
    }

    #[test]
    fn replay_stops_at_a_record_cut_short_damaged_or_out_of_sequence() {
        let one = effects(&[(Which::Data, "a", Some("1"))]);
        let bytes = log(&[(1, one.clone()), (2, one.clone())]);
        let first_len = bytes.len() / 2;
        // Every cut inside the second record keeps exactly the first.
        for cut in first_len + 1..bytes.len() {
            let (groups, whole) = decode_records(&bytes[..cut], None);
            assert_eq!((groups.len(), whole), (1, false), "cut at {cut}");
        }
        // A flipped bit anywhere in the second record drops it.
        for at in first_len..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            assert_eq!(
                decode_records(&damaged, None).0.len(),
                1,
                "bit flipped at {at}"
            );
        }
        // A record out of sequence, within the bytes or after the last
        // group of an earlier segment.
        let stale = log(&[(7, one.clone()), (3, one.clone())]);
        assert_eq!(decode_records(&stale, None).0.len(), 1);
        assert_eq!(decode_records(&bytes, Some(5)).0.len(), 0);
        assert_eq!(decode_records(&bytes, Some(0)).0.len(), 2);
        assert_eq!(decode_records(&[], None), (Vec::new(), true));
    }

    #[test]
    fn zeros_after_the_records_are_a_clean_end_and_nothing_else_is() {
        let one = effects(&[(Which::Data, "a", Some("1"))]);
        let bytes = log(&[(1, one.clone()), (2, one.clone())]);
        let with_zeros = [bytes.clone(), vec![0; 4096]].concat();
        let (groups, whole) = decode_records(&with_zeros, None);
        assert_eq!((groups.len(), whole), (2, true));
        // A record cut short before the zeros, or a stray byte among them,
        // is not a clean end.
        let cut = [&bytes[..bytes.len() - 1], &[0; 4096][..]].concat();
        assert!(!decode_records(&cut, None).1);
        let mut stray = with_zeros.clone();
        stray[bytes.len() + 100] = 1;
        let (groups, whole) = decode_records(&stray, None);
        assert_eq!((groups.len(), whole), (2, false));
    }

    #[test]
    fn a_segment_keeps_zeros_ahead_of_its_records() {
        let dir = tempfile::tempdir().unwrap();
        let switches = Arc::new(LogSwitches::default());
        let mut log = GroupLog::create(dir.path(), 1, switches).unwrap();
        let one = effects(&[(Which::Data, "a", Some("1"))]);
        let file_len = |log: &GroupLog| std::fs::metadata(log.path()).unwrap().len();
        log.append(&one).unwrap();
        let first = log.len();
        assert_eq!(file_len(&log), first + ZEROS_AHEAD);
        // Records go over the zeros without growing the file until they
        // reach the zeros' end.
        log.append(&one).unwrap();
        assert_eq!(file_len(&log), first + ZEROS_AHEAD);
        let big = effects(&[(Which::Data, "b", Some(&"x".repeat(ZEROS_AHEAD as usize)))]);
        log.append(&big).unwrap();
        assert_eq!(file_len(&log), log.len() + ZEROS_AHEAD);
        let recovered = recover(dir.path()).unwrap();
        let numbers: Vec<u64> = recovered.groups.iter().map(|g| g.number).collect();
        assert_eq!(numbers, [1, 2, 3]);
    }

    #[test]
    fn segments_are_read_in_order_and_only_the_last_may_end_torn() {
        let dir = tempfile::tempdir().unwrap();
        let switches = Arc::new(LogSwitches::default());
        let one = effects(&[(Which::Data, "a", Some("1"))]);
        let mut log = GroupLog::create(dir.path(), 1, Arc::clone(&switches)).unwrap();
        log.append(&one).unwrap();
        log.append(&one).unwrap();
        let first_records = log.len();
        let first = log.rotate().unwrap();
        log.append(&one).unwrap();
        let second_records = log.len();
        let second = log.path();
        drop(log);
        let recovered = recover(dir.path()).unwrap();
        let numbers: Vec<u64> = recovered.groups.iter().map(|g| g.number).collect();
        assert_eq!(numbers, [1, 2, 3]);
        assert_eq!(recovered.segments, [first.clone(), second.clone()]);
        assert_eq!(recovered.next_segment, 3);

        // A torn end of the last segment is a group never acknowledged,
        // whether the zeros after it were written or not.
        let mut bytes = std::fs::read(&second).unwrap();
        bytes[second_records as usize - 1] ^= 0x10;
        std::fs::write(&second, &bytes).unwrap();
        assert_eq!(recover(dir.path()).unwrap().groups.len(), 2);
        bytes.truncate(second_records as usize - 1);
        std::fs::write(&second, &bytes).unwrap();
        assert_eq!(recover(dir.path()).unwrap().groups.len(), 2);
        // Damage before the end of an earlier one is refused.
        let mut bytes = std::fs::read(&first).unwrap();
        bytes.truncate(first_records as usize - 1);
        std::fs::write(&first, &bytes).unwrap();
        let error = recover(dir.path()).unwrap_err();
        assert!(error.to_string().contains("damaged"), "{error}");

        remove_segments(dir.path(), &[first, second]).unwrap();
        let recovered = recover(dir.path()).unwrap();
        assert!(recovered.groups.is_empty() && recovered.segments.is_empty());
        assert_eq!(recovered.next_segment, 1);
    }
}
