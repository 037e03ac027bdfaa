//! Disks a scenario can break: an ext4 file system on a loop device and a
//! small tmpfs. Each is unmounted (and its loop device detached) on drop,
//! whether the test passed or panicked; leftovers of a test process that
//! was killed before its drops ran are cleaned up by the next run.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;
use palisade_testkit::process::{require_binary, require_root};
use tempfile::TempDir;

/// Every directory holding one of our mounts or images starts with this,
/// then the test process's PID and a dash: that is how leftovers are told
/// from the mounts of a run still alive.
const NAME_PREFIX: &str = "palisade-fdisk-";

/// Fails the test unless this process may mount file systems and attach
/// loop devices: the tools are installed (else an install hint) and it runs
/// as root (the README's test command runs as root, as CI does).
///
/// Also cleans up what a killed earlier run left behind.
pub(crate) fn require_mount() {
    for binary in ["mount", "umount", "losetup", "mkfs.ext4"] {
        require_binary(binary);
    }
    require_root("the disk fault scenarios (mount, losetup)");
    clean_leftovers();
}

/// Runs `program` with `args`; its standard output, or an error carrying
/// its standard error.
fn run(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    anyhow::ensure!(
        output.status.success(),
        "`{program} {}` failed ({}): {}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn path_str(path: &Path) -> anyhow::Result<&str> {
    path.to_str()
        .with_context(|| format!("{} is not UTF-8", path.display()))
}

/// A fresh temporary directory named for this process.
fn our_tempdir() -> anyhow::Result<TempDir> {
    Ok(tempfile::Builder::new()
        .prefix(&format!("{NAME_PREFIX}{}-", std::process::id()))
        .tempdir()?)
}

/// The PID in a path made by [`our_tempdir`], if the path has one.
fn owner_pid(path: &str) -> Option<u32> {
    let rest = &path[path.find(NAME_PREFIX)? + NAME_PREFIX.len()..];
    rest.split('-').next()?.parse().ok()
}

fn is_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Unmounts our mounts and detaches our loop devices whose test process is
/// gone (killed before its drops ran), then removes their directories.
/// Mounts of a process still alive, ours or a parallel run's, are left
/// alone.
fn clean_leftovers() {
    let mut dirs = Vec::new();
    if let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") {
        for line in mountinfo.lines() {
            // The fifth field is the mount point.
            let Some(mount_point) = line.split(' ').nth(4) else {
                continue;
            };
            if owner_pid(mount_point).is_some_and(|pid| !is_alive(pid)) {
                eprintln!("cleaning up a leftover mount at {mount_point}");
                if run("umount", &[mount_point]).is_err() {
                    let _ = run("umount", &["-l", mount_point]);
                }
                dirs.extend(Path::new(mount_point).parent().map(Path::to_path_buf));
            }
        }
    }
    if let Ok(devices) = run(
        "losetup",
        &["--list", "--noheadings", "--output", "NAME,BACK-FILE"],
    ) {
        for line in devices.lines() {
            let mut fields = line.split_whitespace();
            let (Some(device), Some(backing)) = (fields.next(), fields.next()) else {
                continue;
            };
            if owner_pid(backing).is_some_and(|pid| !is_alive(pid)) {
                eprintln!("detaching a leftover loop device {device} ({backing})");
                let _ = run("losetup", &["--detach", device]);
            }
        }
    }
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Unmounts `mount_point`, lazily if it is still busy (a process we could
/// not stop still has a file open there): a test must never leave a mount
/// behind.
fn unmount(mount_point: &Path) -> anyhow::Result<()> {
    let mount_point = path_str(mount_point)?;
    if let Err(error) = run("umount", &[mount_point]) {
        eprintln!("umount {mount_point} failed ({error}); unmounting lazily");
        run("umount", &["-l", mount_point])?;
    }
    Ok(())
}

/// An ext4 file system in an image file on a loop device, mounted in a
/// temporary directory: a real disk a scenario can kill
/// ([`LoopExt4::shut_down_without_journal_flush`]) and mount again.
#[derive(Debug)]
pub(crate) struct LoopExt4 {
    /// Holds the image and the mount point; removed last.
    _dir: TempDir,
    mount_point: PathBuf,
    /// `/dev/loopN`, once attached.
    device: Option<String>,
    mounted: bool,
    /// `mount -o` options, also used by [`LoopExt4::remount`].
    mount_options: Option<String>,
}

impl LoopExt4 {
    /// A new `size_mib` MiB ext4 file system, mounted.
    pub(crate) fn create(size_mib: u64) -> anyhow::Result<Self> {
        Self::create_with(size_mib, None)
    }

    /// [`LoopExt4::create`], mounted with `mount -o options` (every time).
    pub(crate) fn create_with_options(size_mib: u64, options: &str) -> anyhow::Result<Self> {
        Self::create_with(size_mib, Some(options))
    }

    fn create_with(size_mib: u64, options: Option<&str>) -> anyhow::Result<Self> {
        let dir = our_tempdir()?;
        let image = dir.path().join("disk.ext4");
        File::create(&image)?.set_len(size_mib * 1024 * 1024)?;
        run("mkfs.ext4", &["-q", "-F", path_str(&image)?])?;
        let mount_point = dir.path().join("mnt");
        std::fs::create_dir(&mount_point)?;
        let mut disk = LoopExt4 {
            _dir: dir,
            mount_point,
            device: None,
            mounted: false,
            mount_options: options.map(str::to_owned),
        };
        let device = run("losetup", &["--find", "--show", path_str(&image)?])?;
        disk.device = Some(device.trim().to_owned());
        disk.mount()?;
        Ok(disk)
    }

    fn mount(&mut self) -> anyhow::Result<()> {
        let device = self.device.clone().context("no loop device")?;
        let mut args = vec!["-t", "ext4"];
        if let Some(options) = &self.mount_options {
            args.extend(["-o", options.as_str()]);
        }
        args.extend([device.as_str(), path_str(&self.mount_point)?]);
        run("mount", &args)?;
        self.mounted = true;
        Ok(())
    }

    /// Where the file system is mounted.
    pub(crate) fn path(&self) -> &Path {
        &self.mount_point
    }

    /// "The disk died": the file system is shut down at once, *without*
    /// writing its journal out (`xfs_io -x -c shutdown`, no `-f`). Every
    /// later I/O fails with EIO, and whatever was not committed to the
    /// journal before (metadata, and the file lengths that make appended
    /// data readable) is gone when the file system is mounted again: the
    /// nearest thing to pulling the plug that a shared machine allows.
    pub(crate) fn shut_down_without_journal_flush(&self) -> anyhow::Result<()> {
        run(
            "xfs_io",
            &["-x", "-c", "shutdown", path_str(&self.mount_point)?],
        )?;
        Ok(())
    }

    /// Unmounts and mounts again (the journal is replayed): a machine
    /// coming back after its disk died. Nothing may have a file open there.
    pub(crate) fn remount(&mut self) -> anyhow::Result<()> {
        if self.mounted {
            run("umount", &[path_str(&self.mount_point)?])?;
            self.mounted = false;
        }
        self.mount()
    }
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        if self.mounted {
            if let Err(error) = unmount(&self.mount_point) {
                eprintln!("cannot unmount {}: {error}", self.mount_point.display());
            }
        }
        if let Some(device) = &self.device {
            if let Err(error) = run("losetup", &["--detach", device]) {
                eprintln!("cannot detach {device}: {error}");
            }
        }
    }
}

/// A tmpfs of a fixed size, mounted in a temporary directory: a disk a
/// scenario can fill to the last byte ([`Tmpfs::fill`]) and free again.
#[derive(Debug)]
pub(crate) struct Tmpfs {
    /// Holds the mount point; removed after the unmount.
    _dir: TempDir,
    mount_point: PathBuf,
    mounted: bool,
}

impl Tmpfs {
    /// A new tmpfs of `size_kib` KiB, mounted.
    pub(crate) fn create(size_kib: u64) -> anyhow::Result<Self> {
        let dir = our_tempdir()?;
        let mount_point = dir.path().join("mnt");
        std::fs::create_dir(&mount_point)?;
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size_kib}k"),
                "palisade-fdisk",
                path_str(&mount_point)?,
            ],
        )?;
        Ok(Tmpfs {
            _dir: dir,
            mount_point,
            mounted: true,
        })
    }

    /// Where the tmpfs is mounted.
    pub(crate) fn path(&self) -> &Path {
        &self.mount_point
    }

    fn filler(&self) -> PathBuf {
        self.mount_point.join("filler")
    }

    /// Fills the file system: appends to a filler file until the kernel
    /// says ENOSPC even for a single byte. Returns the bytes written. Call
    /// it again to take back space freed since.
    pub(crate) fn fill(&self) -> anyhow::Result<u64> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.filler())?;
        let mut written = 0u64;
        for chunk_size in [64 * 1024, 4096, 1] {
            let chunk = vec![0xA5u8; chunk_size];
            loop {
                match file.write(&chunk) {
                    Ok(0) => break,
                    Ok(n) => written += n as u64,
                    Err(error) if error.kind() == std::io::ErrorKind::StorageFull => break,
                    Err(error) => return Err(error.into()),
                }
            }
        }
        Ok(written)
    }

    /// Removes the filler: the space is back.
    pub(crate) fn free(&self) -> anyhow::Result<()> {
        std::fs::remove_file(self.filler())?;
        Ok(())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if self.mounted {
            if let Err(error) = unmount(&self.mount_point) {
                eprintln!("cannot unmount {}: {error}", self.mount_point.display());
            }
        }
    }
}
