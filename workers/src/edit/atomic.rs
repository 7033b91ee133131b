//! Atomic file replacement beneath a directory fd.
//!
//! The new content goes to a fresh temp file in the same directory, is fsynced, renamed
//! over the target with `renameat` inside that one directory fd, and the directory is
//! fsynced. A `kill -9` (or a power cut) at any moment leaves either the old file or the
//! new one, never a mix; a failure removes the temp file. Working beneath the parent's fd
//! means a concurrent rename of a parent cannot redirect the write elsewhere.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

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
    let temp = TempFile::create(dir, name, mode)?;
    temp.fill(content)?;
    temp.rename_to(name, replace)?;
    rustix::fs::fsync(dir)
}

/// A temp file that removes itself unless renamed into place.
struct TempFile<'d> {
    dir: BorrowedFd<'d>,
    name: OsString,
    fd: OwnedFd,
    placed: std::cell::Cell<bool>,
}

impl<'d> TempFile<'d> {
    /// `O_CREAT|O_EXCL|O_NOFOLLOW` on a fresh name: never opens something planted there.
    fn create(dir: BorrowedFd<'d>, target: &OsStr, mode: Option<u32>) -> Result<Self, Errno> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let perm = Mode::from_bits_truncate(mode.map_or(NEW_FILE_MODE, |m| m & 0o777));
        loop {
            let name = temp_name(target);
            match rustix::fs::openat(dir, &name, flags, perm) {
                Ok(fd) => {
                    let temp = TempFile {
                        dir,
                        name,
                        fd,
                        placed: std::cell::Cell::new(false),
                    };
                    // The umask applied at creation; an existing file's mode is kept exactly.
                    if mode.is_some() {
                        rustix::fs::fchmod(&temp.fd, perm)?;
                    }
                    return Ok(temp);
                }
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Write everything and fsync, so the rename publishes complete, durable content.
    fn fill(&self, content: &[u8]) -> Result<(), Errno> {
        let mut file = std::fs::File::from(self.fd.try_clone().map_err(errno)?);
        file.write_all(content).map_err(errno)?;
        rustix::fs::fsync(&self.fd)
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

impl Drop for TempFile<'_> {
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
    fn temp_names_are_unique_and_bounded() {
        let long = "a".repeat(255);
        let a = temp_name(OsStr::new(&long));
        let b = temp_name(OsStr::new(&long));
        assert_ne!(a, b);
        assert!(a.len() <= 255, "{}", a.len());
        assert!(a.to_string_lossy().starts_with(".aaa"));
    }
}
