//! Atomic file replacement beneath a directory fd.
//!
//! The new content goes to an *unnamed* `O_TMPFILE` file in the target's directory and
//! is fsynced; only then is it given a name: straight the target's when it must not
//! replace anything (`linkat` fails on an existing name), else a temp name that is
//! renamed over the target at once. The directory is fsynced last. A `kill -9` (or a
//! power cut) at any moment leaves either the old file or the new one, never a mix, and
//! a killed writer leaves nothing behind: an unnamed file vanishes with its last fd.
//! Only the microseconds between link and rename have a named temp file.
//!
//! Filesystems without `O_TMPFILE` (and processes without `/proc`) fall back to a named
//! temp file written, fsynced and renamed the same way; a failure removes it, and a
//! `kill -9` mid-write leaves it (hidden, `.NAME.toolvisor-PID-N.tmp`) only until the
//! next edit worker starts: every temp name is recorded first in the worker's journal
//! ([`super::temps`]), which the next worker sweeps. `TOOLVISOR_EDIT_NAMED_TEMPS=1` in
//! the environment forces the fallback (for filesystems whose `O_TMPFILE` misbehaves,
//! and to test this path where it does not).
//!
//! Working beneath the parent's fd means a concurrent rename of a parent cannot
//! redirect the write elsewhere.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, CWD, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use super::temps::{self, Recorded};

/// Whether the rename may replace an existing file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replace {
    /// Replace whatever regular file is there.
    Allowed,
    /// Fail with `EEXIST` if the name exists by the time of the rename (closes the race
    /// between "the file does not exist" and the write).
    Never,
}

/// Permission bits a new file gets before the umask, like `open(2)` callers expect.
const NEW_FILE_MODE: u32 = 0o666;

/// Temp names are unique per process and call; the counter avoids collisions between
/// writes of one worker, the pid between workers.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Longest part of the target's name kept in a temp name (NAME_MAX is 255).
const NAME_KEEP: usize = 200;

/// Write `content` to `dir/name` atomically.
///
/// `mode` is the permission bits to keep (an existing file's, masked to 0o777 so set-id
/// bits never survive a rewrite); `None` creates the file with 0o666 minus the umask.
pub fn write_atomic(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    content: &[u8],
    mode: Option<u32>,
    replace: Replace,
) -> Result<(), Errno> {
    if named_temps_forced() || !write_unnamed(dir, name, content, mode, replace)? {
        write_named(dir, name, content, mode, replace)?;
    }
    rustix::fs::fsync(dir)
}

/// The environment variable that forces named temp files.
pub const NAMED_TEMPS_VAR: &str = "TOOLVISOR_EDIT_NAMED_TEMPS";

/// Whether `TOOLVISOR_EDIT_NAMED_TEMPS=1` (read once).
fn named_temps_forced() -> bool {
    static FORCED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| std::env::var_os(NAMED_TEMPS_VAR).is_some_and(|v| v == "1"))
}

/// The `O_TMPFILE` way; `Ok(false)` when this filesystem or process cannot do it
/// (nothing was written then).
fn write_unnamed(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    content: &[u8],
    mode: Option<u32>,
    replace: Replace,
) -> Result<bool, Errno> {
    let fd = match open_unnamed(dir, mode) {
        Err(e) if tmpfile_unsupported(e) => return Ok(false),
        r => r?,
    };
    fill(&fd, content)?;
    let linked = match replace {
        // No temp name at all: the link itself refuses an existing name.
        Replace::Never => link_fd(&fd, dir, name).map(|()| None),
        Replace::Allowed => TempName::link(dir, &fd, name).map(Some),
    };
    let temp = match linked {
        Err(e) if link_unavailable(e) => return Ok(false),
        r => r?,
    };
    if let Some(temp) = temp {
        temp.rename_to(name, Replace::Allowed)?;
    }
    Ok(true)
}

/// The fallback: a named temp file, renamed over the target.
fn write_named(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    content: &[u8],
    mode: Option<u32>,
    replace: Replace,
) -> Result<(), Errno> {
    let (temp, fd) = TempName::create(dir, name, mode)?;
    fill(&fd, content)?;
    temp.rename_to(name, replace)
}

/// An unnamed regular file in `dir` (`O_TMPFILE`), with the permissions it will keep.
fn open_unnamed(dir: BorrowedFd<'_>, mode: Option<u32>) -> Result<OwnedFd, Errno> {
    let flags = OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC;
    let perm = permissions(mode);
    let fd = rustix::fs::openat(dir, ".", flags, perm)?;
    keep_mode(&fd, mode)?;
    Ok(fd)
}

/// How a filesystem (or an old kernel, which sees `O_DIRECTORY|O_WRONLY`) refuses
/// `O_TMPFILE`.
fn tmpfile_unsupported(e: Errno) -> bool {
    matches!(e, Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL)
}

/// How naming an unnamed file fails when `/proc` is not mounted and the process lacks
/// `CAP_DAC_READ_SEARCH` for `AT_EMPTY_PATH`. A directory removed meanwhile fails the
/// same way; the fallback then reports it.
fn link_unavailable(e: Errno) -> bool {
    matches!(e, Errno::NOENT | Errno::PERM | Errno::ACCESS)
}

/// Give the unnamed file `fd` the name `dir/name` (`EEXIST` if taken). Through
/// `/proc/self/fd` (no privilege needed), else `AT_EMPTY_PATH` (needs
/// `CAP_DAC_READ_SEARCH`).
fn link_fd(fd: &OwnedFd, dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
    let magic = format!("/proc/self/fd/{}", fd.as_raw_fd());
    match rustix::fs::linkat(CWD, &magic, dir, name, AtFlags::SYMLINK_FOLLOW) {
        Err(e) if link_unavailable(e) => rustix::fs::linkat(fd, "", dir, name, AtFlags::EMPTY_PATH),
        r => r,
    }
}

/// Permission bits for a new file: the given ones (masked) or 0o666.
fn permissions(mode: Option<u32>) -> Mode {
    Mode::from_bits_truncate(mode.map_or(NEW_FILE_MODE, |m| m & 0o777))
}

/// The umask applied at creation; an existing file's mode is kept exactly.
fn keep_mode(fd: &OwnedFd, mode: Option<u32>) -> Result<(), Errno> {
    match mode {
        Some(_) => rustix::fs::fchmod(fd, permissions(mode)),
        None => Ok(()),
    }
}

/// Write everything and fsync, so the name publishes complete, durable content.
fn fill(fd: &OwnedFd, content: &[u8]) -> Result<(), Errno> {
    let mut file = std::fs::File::from(fd.try_clone().map_err(errno)?);
    file.write_all(content).map_err(errno)?;
    rustix::fs::fsync(fd)
}

/// A temp name in `dir` that is removed unless renamed into place.
struct TempName<'d> {
    dir: BorrowedFd<'d>,
    name: OsString,
    placed: std::cell::Cell<bool>,
    /// The journal entry, settled after Drop removed the name (fields drop last).
    _recorded: Option<Recorded>,
}

impl<'d> TempName<'d> {
    fn new(dir: BorrowedFd<'d>, name: OsString, recorded: Option<Recorded>) -> Self {
        TempName {
            dir,
            name,
            placed: std::cell::Cell::new(false),
            _recorded: recorded,
        }
    }

    /// `O_CREAT|O_EXCL|O_NOFOLLOW` on a fresh name: never opens something planted there.
    fn create(
        dir: BorrowedFd<'d>,
        target: &OsStr,
        mode: Option<u32>,
    ) -> Result<(Self, OwnedFd), Errno> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        loop {
            let name = temp_name(target);
            // Durably: this name holds fsynced content for the whole write.
            let recorded = temps::record(dir, &name, true);
            match rustix::fs::openat(dir, &name, flags, permissions(mode)) {
                Ok(fd) => {
                    let temp = TempName::new(dir, name, recorded);
                    keep_mode(&fd, mode)?;
                    return Ok((temp, fd));
                }
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Name the unnamed file `fd` with a fresh temp name, right before the rename.
    fn link(dir: BorrowedFd<'d>, fd: &OwnedFd, target: &OsStr) -> Result<Self, Errno> {
        loop {
            let name = temp_name(target);
            let recorded = temps::record(dir, &name, false);
            match link_fd(fd, dir, &name) {
                Ok(()) => return Ok(TempName::new(dir, name, recorded)),
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Rename over the target within the same directory fd.
    fn rename_to(&self, target: &OsStr, replace: Replace) -> Result<(), Errno> {
        let (dir, name) = (self.dir, self.name.as_os_str());
        let renamed = match replace {
            Replace::Allowed => rustix::fs::renameat(dir, name, dir, target),
            Replace::Never => {
                rustix::fs::renameat_with(dir, name, dir, target, RenameFlags::NOREPLACE)
            }
        };
        match renamed {
            Ok(()) => {
                self.placed.set(true);
                Ok(())
            }
            // A filesystem without RENAME_NOREPLACE: a hard link fails on an existing name
            // just the same; the temp name is then removed by Drop.
            Err(Errno::INVAL) if replace == Replace::Never => {
                rustix::fs::linkat(dir, name, dir, target, AtFlags::empty())
            }
            Err(e) => Err(e),
        }
    }
}

impl Drop for TempName<'_> {
    fn drop(&mut self) {
        if !self.placed.get() {
            // Best effort: after a successful rename the name no longer exists (ENOENT).
            let _ = rustix::fs::unlinkat(self.dir, &self.name, AtFlags::empty());
        }
    }
}

/// `.<name>.toolvisor-<pid>-<n>.tmp`: hidden, recognisable, unique.
pub fn temp_name(target: &OsStr) -> OsString {
    let bytes = target.as_bytes();
    let kept = &bytes[..bytes.len().min(NAME_KEEP)];
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut out = b".".to_vec();
    out.extend_from_slice(kept);
    out.extend_from_slice(format!(".toolvisor-{}-{n}.tmp", std::process::id()).as_bytes());
    OsString::from_vec(out)
}

fn errno(e: std::io::Error) -> Errno {
    Errno::from_io_error(&e).unwrap_or(Errno::IO)
}

/// Whether `dir` holds a temp file of ours (used by tests to check nothing is left over).
#[cfg(test)]
pub fn leftover_temps(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(".toolvisor-") && n.ends_with(".tmp"))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn open(dir: &std::path::Path) -> OwnedFd {
        rustix::fs::open(dir, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap()
    }

    #[test]
    fn replaces_content_and_leaves_no_temp() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("f"), "old").unwrap();
        let dir = open(ws.path());
        write_atomic(dir.as_fd(), OsStr::new("f"), b"new", None, Replace::Allowed).unwrap();
        assert_eq!(std::fs::read_to_string(ws.path().join("f")).unwrap(), "new");
        assert!(leftover_temps(ws.path()).is_empty());
    }

    #[test]
    fn keeps_the_given_mode_despite_the_umask() {
        let ws = tempfile::tempdir().unwrap();
        let dir = open(ws.path());
        write_atomic(
            dir.as_fd(),
            OsStr::new("x"),
            b"#!/bin/sh\n",
            Some(0o100755),
            Replace::Allowed,
        )
        .unwrap();
        let mode = std::fs::metadata(ws.path().join("x"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o755);
    }

    #[test]
    fn never_replace_fails_on_an_existing_name_and_cleans_up() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("f"), "old").unwrap();
        let dir = open(ws.path());
        let err = write_atomic(dir.as_fd(), OsStr::new("f"), b"new", None, Replace::Never);
        assert_eq!(err, Err(Errno::EXIST));
        assert_eq!(std::fs::read_to_string(ws.path().join("f")).unwrap(), "old");
        assert!(leftover_temps(ws.path()).is_empty());
    }

    #[test]
    fn never_replace_creates_a_new_file() {
        let ws = tempfile::tempdir().unwrap();
        let dir = open(ws.path());
        write_atomic(dir.as_fd(), OsStr::new("n"), b"hi", None, Replace::Never).unwrap();
        assert_eq!(std::fs::read_to_string(ws.path().join("n")).unwrap(), "hi");
        assert!(leftover_temps(ws.path()).is_empty());
    }

    #[test]
    fn rename_replaces_a_symlink_itself_not_its_target() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("real"), "keep").unwrap();
        symlink("real", ws.path().join("link")).unwrap();
        let dir = open(ws.path());
        write_atomic(
            dir.as_fd(),
            OsStr::new("link"),
            b"new",
            None,
            Replace::Allowed,
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.path().join("real")).unwrap(),
            "keep"
        );
    }

    #[test]
    fn the_data_is_written_without_a_name_in_the_directory() {
        let ws = tempfile::tempdir().unwrap();
        let dir = open(ws.path());
        let fd = match open_unnamed(dir.as_fd(), None) {
            // This filesystem has no O_TMPFILE: the fallback is tested below.
            Err(e) if tmpfile_unsupported(e) => return,
            r => r.unwrap(),
        };
        fill(&fd, b"data").unwrap();
        let names = std::fs::read_dir(ws.path()).unwrap().count();
        assert_eq!(names, 0, "an unnamed file shows no entry");
        link_fd(&fd, dir.as_fd(), OsStr::new("n")).unwrap();
        assert_eq!(std::fs::read(ws.path().join("n")).unwrap(), b"data");
        assert_eq!(
            link_fd(&fd, dir.as_fd(), OsStr::new("n")),
            Err(Errno::EXIST)
        );
    }

    #[test]
    fn the_named_fallback_replaces_and_cleans_up() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("f"), "old").unwrap();
        let dir = open(ws.path());
        let f = OsStr::new("f");
        let err = write_named(dir.as_fd(), f, b"new", None, Replace::Never);
        assert_eq!(err, Err(Errno::EXIST));
        assert!(leftover_temps(ws.path()).is_empty());
        write_named(dir.as_fd(), f, b"new", Some(0o600), Replace::Allowed).unwrap();
        assert_eq!(std::fs::read_to_string(ws.path().join("f")).unwrap(), "new");
        let mode = std::fs::metadata(ws.path().join("f"))
            .unwrap()
            .permissions();
        assert_eq!(mode.mode() & 0o7777, 0o600);
        assert!(leftover_temps(ws.path()).is_empty());
    }

    #[test]
    fn never_replace_refuses_a_dangling_symlink() {
        let ws = tempfile::tempdir().unwrap();
        symlink("nowhere", ws.path().join("l")).unwrap();
        let dir = open(ws.path());
        let err = write_atomic(dir.as_fd(), OsStr::new("l"), b"x", None, Replace::Never);
        assert_eq!(err, Err(Errno::EXIST));
        assert!(!ws.path().join("nowhere").exists());
        assert!(leftover_temps(ws.path()).is_empty());
    }

    #[test]
    fn temp_names_are_unique_and_bounded() {
        let long = "a".repeat(255);
        let a = temp_name(OsStr::new(&long));
        let b = temp_name(OsStr::new(&long));
        assert_ne!(a, b);
        assert!(a.len() <= 255, "{}", a.len());
        assert!(a.to_string_lossy().starts_with(".aaa"));
    }
}
