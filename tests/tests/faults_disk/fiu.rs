//! libfiu: fsync failures injected into the running resource server.
//!
//! The server runs under `fiu-run -x` (libfiu's POSIX preload: every
//! libc I/O call can be made to fail), with its control pipes in the run's
//! directory; `fiu-ctrl` switches a failure on and off while it runs. Only
//! the sync calls are failed (`posix/io/sync/*`: `fsync` and `fdatasync`),
//! so the server's sockets, logs and ordinary writes keep working and the
//! one thing that breaks is the promise that data reached the disk.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;
use palisade_testkit::process::require_binary;

/// The libfiu failure point of every sync call.
const SYNC_CALLS: &str = "posix/io/sync/*";

/// Controls the failures of a server started under [`Fiu::command_prefix`].
#[derive(Debug)]
pub(crate) struct Fiu {
    /// `fiu-run -f`: its pipes are `<prefix>-<pid>.in` / `.out`.
    prefix: PathBuf,
}

impl Fiu {
    /// Fails the test, with an install hint, unless `fiu-run` and
    /// `fiu-ctrl` are installed.
    pub(crate) fn require() {
        require_binary("fiu-run");
        require_binary("fiu-ctrl");
    }

    /// Control pipes in `dir`.
    pub(crate) fn new(dir: &Path) -> Self {
        Fiu {
            prefix: dir.join("fiu"),
        }
    }

    /// What to run the server under: `fiu-run -x -f <prefix>`, which sets
    /// up the preload and `exec`s the server (so the PID is the server's).
    pub(crate) fn command_prefix(&self) -> Vec<OsString> {
        vec![
            "fiu-run".into(),
            "-x".into(),
            "-f".into(),
            self.prefix.clone().into_os_string(),
        ]
    }

    /// From now on every `fsync`/`fdatasync` of process `pid` fails with
    /// `errno` (5 = EIO, 28 = ENOSPC).
    pub(crate) fn fail_syncs(&self, pid: u32, errno: i32) -> anyhow::Result<()> {
        self.control(pid, &format!("enable name={SYNC_CALLS},failinfo={errno}"))
    }

    /// Sync calls of process `pid` work again.
    pub(crate) fn heal_syncs(&self, pid: u32) -> anyhow::Result<()> {
        self.control(pid, &format!("disable name={SYNC_CALLS}"))
    }

    /// Sends one command. `fiu-ctrl` waits for the process's answer, so the
    /// failure is in force when this returns; it exits 0 even when it could
    /// not deliver, so its output is what tells.
    fn control(&self, pid: u32, command: &str) -> anyhow::Result<()> {
        let output = Command::new("fiu-ctrl")
            .arg("-f")
            .arg(&self.prefix)
            .arg("-c")
            .arg(command)
            .arg(pid.to_string())
            .output()
            .context("cannot run fiu-ctrl")?;
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        anyhow::ensure!(
            output.status.success() && !said.contains("rror"),
            "fiu-ctrl `{command}` for process {pid} failed ({}): {}",
            output.status,
            said.trim()
        );
        Ok(())
    }
}
