//! The confined opens the tools use: every one starts from its root's directory fd,
//! goes through [`open_confined`] (so nothing on the way may leave the root), and is
//! checked against the protected paths before and after, by lexical path and by the
//! real path of what was opened.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::beneath::open_beneath_no_symlinks;
use super::protect::protected_error;
use super::{Resolved, Resolver, errno_error, map_errno, open_confined};
use crate::ToolError;

impl Resolver {
    /// Open a regular file for reading beneath its root.
    ///
    /// Protected paths are `PermissionError`; a directory is `InvalidParams`; other
    /// non-regular files (FIFOs, devices, sockets) are `InvalidParams` too, and are
    /// opened non-blocking so a FIFO cannot hang the worker.
    pub fn open_read(&self, r: &Resolved) -> Result<File, ToolError> {
        self.check_protected(r)?;
        let fd = self
            .open_beneath(r, read_flags())
            .map_err(|e| map_errno(e, r))?;
        self.check_protected_fd(&fd, r)?;
        regular_file(fd, &r.display)
    }

    /// [`Self::open_read`] and the file's size, for the files a walk found: one
    /// `openat2` that also refuses symlinks on the way (`RESOLVE_NO_SYMLINKS`), so what
    /// it opens is exactly the lexical path, and the lexical protected check is also
    /// the real-path check: no `/proc` readlink per file. With a symlink on the way (a
    /// walk of a symlinked directory, or a path changed since the walk) or without
    /// `openat2`, the full [`Self::open_read`], which checks the real path.
    pub fn open_walked(&self, r: &Resolved) -> Result<(File, u64), ToolError> {
        if self.openat2 {
            self.check_protected(r)?;
            match open_beneath_no_symlinks(self.root_fd(r.root), &r.rel, read_flags()) {
                Ok(fd) => return regular_file_len(fd, &r.display),
                Err(Errno::LOOP) => {}
                Err(e) => return Err(map_errno(e, r)),
            }
        }
        let file = self.open_read(r)?;
        let st = rustix::fs::fstat(&file).map_err(|e| errno_error(e, &r.display))?;
        Ok((file, st.st_size as u64))
    }

    /// The real path of `fd` relative to root `root` (None when it cannot be read or
    /// lies outside that root): what a search tool checks for `.git` after an open.
    pub fn real_rel(&self, root: usize, fd: &impl AsRawFd) -> Option<PathBuf> {
        let real = real_path(fd)?;
        real.strip_prefix(self.root_path(root))
            .ok()
            .map(Path::to_path_buf)
    }

    /// Open a directory beneath its root (O_DIRECTORY|O_PATH is not enough for openat: use O_RDONLY).
    ///
    /// A path that exists but is not a directory is `InvalidParams`.
    pub fn open_dir(&self, r: &Resolved) -> Result<OwnedFd, ToolError> {
        self.check_protected(r)?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = self.open_beneath(r, flags).map_err(|e| match e {
            Errno::NOTDIR => ToolError::invalid(format!("`{}` is not a directory", r.display)),
            e => map_errno(e, r),
        })?;
        self.check_protected_fd(&fd, r)?;
        Ok(fd)
    }

    /// Open the directory `r`, creating it and any missing parents beneath the root
    /// (mode 0777 & umask), for `write_file`'s parent directories.
    pub fn open_dir_create(&self, r: &Resolved) -> Result<OwnedFd, ToolError> {
        self.check_protected(r)?;
        let mut cur = rustix::io::dup(self.root_fd(r.root)).map_err(|e| map_errno(e, r))?;
        for comp in r.rel.components() {
            let Component::Normal(name) = comp else {
                return Err(ToolError::internal("unnormalised path in open_dir_create"));
            };
            cur = open_or_mkdir(&cur, name, self.openat2).map_err(|e| match e {
                Errno::NOTDIR | Errno::EXIST => {
                    ToolError::invalid(format!("`{}`: a parent is not a directory", r.display))
                }
                e => map_errno(e, r),
            })?;
        }
        self.check_protected_fd(&cur, r)?;
        Ok(cur)
    }

    /// The parent directory of `r` (created when `create`) and `r`'s final name, for
    /// tools that create or replace a file with `*at` calls (temp file + `renameat`).
    ///
    /// The root itself has no parent: `InvalidParams`. The real path of the parent is
    /// checked, so a symlinked directory cannot reach a protected file either.
    pub fn open_parent(
        &self,
        r: &Resolved,
        create: bool,
    ) -> Result<(OwnedFd, OsString), ToolError> {
        self.check_protected(r)?;
        let (Some(parent), Some(name)) = (r.rel.parent(), r.rel.file_name()) else {
            return Err(ToolError::invalid(format!(
                "`{}` is a root directory, not a file",
                r.display
            )));
        };
        let pr = self.make(r.root, parent.to_path_buf());
        let fd = if create {
            self.open_dir_create(&pr)?
        } else {
            self.open_dir(&pr)?
        };
        if let Some(real) = real_path(&fd)
            && self.is_protected(&real.join(name))
        {
            return Err(protected_error(r));
        }
        Ok((fd, name.to_os_string()))
    }

    /// Open `r.rel` from its root's fd, confined.
    fn open_beneath(&self, r: &Resolved, flags: OFlags) -> Result<OwnedFd, Errno> {
        open_confined(self.root_fd(r.root), &r.rel, flags, self.openat2)
    }
}

/// Open directory `name` inside `dir`, creating it when missing.
fn open_or_mkdir(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    use_openat2: bool,
) -> Result<OwnedFd, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    match open_confined(dir.as_fd(), Path::new(name), flags, use_openat2) {
        Err(Errno::NOENT) => {
            match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(e),
            }
            open_confined(dir.as_fd(), Path::new(name), flags, use_openat2)
        }
        r => r,
    }
}

/// The real path of an open fd, from `/proc/self/fd` (None without `/proc`, for a
/// deleted file or an object with no path).
pub fn real_path(fd: &impl AsRawFd) -> Option<PathBuf> {
    toolvisor_os::procfs::fd_path(fd.as_raw_fd())
}

/// Flags of every open for reading: non-blocking, so a FIFO cannot hang the worker
/// (`O_NONBLOCK` has no effect on regular files).
pub(super) fn read_flags() -> OFlags {
    OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY
}

/// `fd` as a `File` when it is a regular file; a directory or another kind of file
/// (FIFO, device, socket) is `InvalidParams`.
pub(super) fn regular_file(fd: OwnedFd, display: &str) -> Result<File, ToolError> {
    regular_file_len(fd, display).map(|(file, _)| file)
}

/// [`regular_file`] and the file's size, from the same `fstat`.
fn regular_file_len(fd: OwnedFd, display: &str) -> Result<(File, u64), ToolError> {
    let st = rustix::fs::fstat(&fd).map_err(|e| errno_error(e, display))?;
    match rustix::fs::FileType::from_raw_mode(st.st_mode) {
        rustix::fs::FileType::RegularFile => Ok((File::from(fd), st.st_size as u64)),
        rustix::fs::FileType::Directory => Err(ToolError::invalid(format!(
            "`{display}` is a directory, not a file"
        ))),
        _ => Err(ToolError::invalid(format!(
            "`{display}` is not a regular file"
        ))),
    }
}
