//! The file an edit tool works on: resolved, checked against protected paths, and
//! reached only through directory fds beneath its root.
//!
//! Symlinks: a symlinked *parent* is followed only while it stays beneath the root
//! (`openat2(RESOLVE_BENEATH)`; leaving it is `PathOutsideWorkspace`). The file itself
//! being a symlink is refused (`O_NOFOLLOW`, `PermissionError`): writing through it
//! would edit a file the model never named, and replacing it would silently turn a link
//! into a copy. The model can edit the path the link points to instead.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use toolvisor_protocol::ErrorType;

use super::atomic::{self, Replace};
use super::dirs::{self, Beneath};
use crate::ToolError;
use crate::paths::{Resolved, Resolver};

/// Largest file the edit tools read (previews carry the whole new text in one frame).
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// A file's current state, as read before a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Existing {
    /// Its content.
    pub bytes: Vec<u8>,
    /// Permission bits, kept by the rewrite.
    pub mode: u32,
}

/// A file named by a call, located beneath its root.
pub struct Target<'r> {
    resolver: &'r Resolver,
    /// How messages and diffs name the file (workspace-relative, or `shared:/…`).
    pub display: String,
    root: Beneath<'r>,
    rel_dir: PathBuf,
    name: OsString,
    /// The parent directory; `None` while it does not exist.
    dir: Option<OwnedFd>,
}

impl<'r> Target<'r> {
    /// Resolve `path` and open its parent directory if it exists (creating nothing).
    pub fn locate(resolver: &'r Resolver, path: &str) -> Result<Self, ToolError> {
        let resolved = resolver.resolve(path)?;
        Self::from_resolved(resolver, resolved)
    }

    /// [`locate`](Self::locate) for an already resolved path.
    pub fn from_resolved(resolver: &'r Resolver, r: Resolved) -> Result<Self, ToolError> {
        let Some(name) = r.rel.file_name().map(OsString::from) else {
            return Err(ToolError::invalid(format!(
                "{} names a directory, not a file",
                shown(&r.display)
            )));
        };
        if resolver.is_protected(&r.host) {
            return Err(protected_error(&r.display));
        }
        if resolver.edit_refused(&r) {
            return Err(refused_error(&r.display));
        }
        if r.root >= resolver.roots.len() {
            return Err(ToolError::internal(format!(
                "no root #{} for {}",
                r.root, r.display
            )));
        }
        let root = Beneath {
            root: resolver.root_fd(r.root),
            openat2: resolver.has_openat2(),
        };
        let rel_dir = r.rel.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut target = Target {
            resolver,
            display: r.display,
            root,
            rel_dir,
            name,
            dir: None,
        };
        target.dir = target.open_dir(false)?;
        Ok(target)
    }

    /// Open (and with `create`, make) the parent, refusing a protected real location.
    fn open_dir(&self, create: bool) -> Result<Option<OwnedFd>, ToolError> {
        let protected =
            |p: &Path| self.resolver.is_protected(p) || self.resolver.edit_refused_host(p);
        let dir = dirs::open_parent(self.root, &self.rel_dir, create, &protected)?;
        if let Some(d) = &dir {
            dirs::refuse_protected(d, Path::new(&self.name), &protected)?;
        }
        Ok(dir)
    }

    /// The file's content and mode, or `None` when it does not exist.
    pub fn read(&self) -> Result<Option<Existing>, ToolError> {
        let Some(dir) = &self.dir else {
            return Ok(None);
        };
        // NONBLOCK: opening a FIFO must not hang the worker; it is refused below anyway.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = match rustix::fs::openat(dir, &self.name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(self.open_error(e)),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| self.io_error(e))?;
        self.check_regular(FileType::from_raw_mode(stat.st_mode), stat.st_size as u64)?;
        let mut bytes = Vec::with_capacity(stat.st_size.max(0) as usize);
        std::fs::File::from(fd)
            .take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| ToolError::internal(format!("cannot read {}: {e}", self.display)))?;
        self.check_size(bytes.len() as u64)?;
        Ok(Some(Existing {
            bytes,
            mode: stat.st_mode & 0o777,
        }))
    }

    /// Write `content` atomically, creating the parent directories first.
    pub fn write(
        &mut self,
        content: &[u8],
        mode: Option<u32>,
        replace: Replace,
    ) -> Result<(), ToolError> {
        if self.dir.is_none() {
            self.dir = self.open_dir(true)?;
        }
        let dir = self.dir.as_ref().ok_or_else(|| {
            ToolError::internal(format!("no parent directory for {}", self.display))
        })?;
        atomic::write_atomic(dir.as_fd(), &self.name, content, mode, replace).map_err(|e| match e {
            Errno::EXIST => ToolError::new(
                ErrorType::FileExistsError,
                format!("{} already exists", shown(&self.display)),
            ),
            e => self.io_error(e),
        })
    }

    fn check_regular(&self, kind: FileType, size: u64) -> Result<(), ToolError> {
        match kind {
            FileType::RegularFile => self.check_size(size),
            FileType::Directory => Err(ToolError::invalid(format!(
                "{} is a directory, not a file",
                shown(&self.display)
            ))),
            _ => Err(ToolError::new(
                ErrorType::PermissionError,
                format!(
                    "{} is not a regular file; edit tools only change regular files",
                    shown(&self.display)
                ),
            )),
        }
    }

    fn check_size(&self, size: u64) -> Result<(), ToolError> {
        if size > MAX_FILE_BYTES {
            return Err(ToolError::invalid(format!(
                "{} is too large to edit ({size} bytes; the limit is {MAX_FILE_BYTES})",
                shown(&self.display)
            )));
        }
        Ok(())
    }

    /// Errors of opening the file itself; `ELOOP` under `O_NOFOLLOW` means a symlink.
    fn open_error(&self, e: Errno) -> ToolError {
        match e {
            Errno::LOOP => ToolError::new(
                ErrorType::PermissionError,
                format!(
                    "{} is a symbolic link; edit tools do not write through links, name the file it points to",
                    shown(&self.display)
                ),
            ),
            e => self.io_error(e),
        }
    }

    fn io_error(&self, e: Errno) -> ToolError {
        let shown = shown(&self.display);
        match e {
            Errno::ACCESS | Errno::PERM | Errno::ROFS => ToolError::new(
                ErrorType::PermissionError,
                format!("cannot write {shown}: {e}"),
            ),
            Errno::ISDIR => ToolError::invalid(format!("{shown} is a directory, not a file")),
            Errno::NOENT => ToolError::new(
                ErrorType::FileNotFoundError,
                format!("{shown} does not exist"),
            ),
            e => ToolError::internal(format!("cannot write {shown}: {e}")),
        }
    }
}

/// The display path in messages (`.` for the workspace root itself).
fn shown(display: &str) -> &str {
    if display.is_empty() { "." } else { display }
}

/// `PermissionError` for a path under `.git` or a protected name.
pub fn refused_error(display: &str) -> ToolError {
    ToolError::new(
        ErrorType::PermissionError,
        format!(
            "{} is protected: edit tools never change anything under .git/, nor \
             .gitmodules, .mcp.json, .vscode/, .idea/, .envrc or workers.exec.protected \
             (tools run them outside any sandbox)",
            shown(display)
        ),
    )
}

/// The error for a write into toolvisor's own state or config.
pub fn protected_error(display: &str) -> ToolError {
    ToolError::new(
        ErrorType::PermissionError,
        format!(
            "{} is toolvisor's protected state or config; edit tools never write there",
            shown(display)
        ),
    )
}
