//! A sled database of the caller's own, made durable the way the store
//! makes its own: sled's `flush()` followed by an fsync of sled's files.
//!
//! For services that keep their own data in sled next to Palisade (the
//! `guarded-service` example's inventory): sled 0.34's `flush()` alone ends
//! in `sync_file_range` on Linux, which survives a process crash but not a
//! power loss or a kernel crash (see `committer.rs`).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::StoreError;
use crate::engine::sled::{DurableFiles, flush_durably, io_error, open_with_retry};

/// A sled database whose [`DurableSled::flush`] reaches the disk.
///
/// Fail-stop like the store: after one failed flush every later
/// [`DurableSled::flush`] fails too (after a failed fsync the kernel may
/// have dropped the pages it could not write, so a later success proves
/// nothing about them), until the database is reopened and sled recovers
/// from its log.
///
/// ```
/// use palisade_store::DurableSled;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let sled = DurableSled::open(dir.path())?;
/// sled.db().insert("stock", "7")?;
/// sled.flush()?; // on disk now, as far as the disk honours fsync
/// assert_eq!(sled.syncs(), 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct DurableSled {
    db: sled::Db,
    files: Mutex<DurableFiles>,
    failure: OnceLock<String>,
    syncs: AtomicU64,
}

impl DurableSled {
    /// Opens (or creates) the sled database in `path`, with sled's own
    /// background flusher off (it would not sync), and makes what sled
    /// created durable.
    pub fn open(path: impl AsRef<Path>) -> Result<DurableSled, StoreError> {
        let path = path.as_ref();
        let db = open_with_retry(&sled::Config::new().path(path).flush_every_ms(None))?;
        let files = DurableFiles::open(path).map_err(io_error)?;
        Ok(DurableSled {
            db,
            files: Mutex::new(files),
            failure: OnceLock::new(),
            syncs: AtomicU64::new(0),
        })
    }

    /// The database: open trees, run transactions; call
    /// [`DurableSled::flush`] before acknowledging what they wrote.
    pub fn db(&self) -> &sled::Db {
        &self.db
    }

    /// Writes sled's log and fsyncs sled's files (blocking: call it off
    /// async worker threads). Everything committed before the call is on
    /// disk when it returns `Ok`.
    pub fn flush(&self) -> Result<(), StoreError> {
        if let Some(message) = self.failure.get() {
            return Err(StoreError::FlushFailed {
                message: message.clone(),
            });
        }
        match flush_durably(&self.db, &self.files) {
            Ok(()) => {
                self.syncs.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(message) => {
                tracing::error!(error = %message, "flush failed; the database refuses further flushes");
                let message = self.failure.get_or_init(|| message).clone();
                Err(StoreError::FlushFailed { message })
            }
        }
    }

    /// How many [`DurableSled::flush`] calls have reached the disk.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_sync_fails_every_later_flush_until_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let sled = DurableSled::open(dir.path()).unwrap();
        sled.db().insert("k", "v").unwrap();
        sled.flush().unwrap();

        sled.files.lock().unwrap().fail_next = Some(std::io::ErrorKind::Other);
        sled.db().insert("k", "w").unwrap();
        let failed = |result: Result<(), StoreError>| matches!(result, Err(StoreError::FlushFailed { message }) if message.contains("injected"));
        assert!(failed(sled.flush()));
        assert!(failed(sled.flush()), "the next flush fails too");
        assert_eq!(sled.syncs(), 1);
        drop(sled);

        let sled = DurableSled::open(dir.path()).unwrap();
        assert!(sled.db().get("k").unwrap().is_some());
        sled.flush().unwrap();
    }
}
