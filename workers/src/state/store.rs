//! The state worker's store: `<state_dir>/store/`, the only place it may write
//! (Landlock), holding `memory.json`, `todos.json` and the `lock` file.
//! `<state_dir>/memory.json` and `<state_dir>/todos.json` are symlinks into it, made
//! before the worker confines itself, so the documented paths show the data.
//!
//! Every change is a read-modify-write under an exclusive lock — a mutex for the
//! threads of this worker, `flock` on `store/lock` for other state workers (a reload
//! may run several) — and is written atomically and durably: a temp file, fsync,
//! rename, then fsync of the directory ([`crate::edit::atomic`]). A `kill -9` at any
//! moment leaves the old file or the new one. Files are opened beneath the store's
//! directory fd without following symlinks, and read only up to [`MAX_FILE`].

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rustix::fs::{FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use toolvisor_protocol::ErrorType;

use crate::ToolError;
use crate::edit::atomic::{Replace, write_atomic};

/// The store's directory inside the state directory.
pub const DIR: &str = "store";

/// The largest store file read (a bigger one is an error, never read into memory).
pub const MAX_FILE: u64 = 8 << 20;

/// `<state_dir>/store`.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join(DIR)
}

/// The open store.
#[derive(Debug)]
pub struct Store {
    dir: OwnedFd,
    lock_file: OwnedFd,
    threads: Mutex<()>,
    /// The error type of the tool using it (for messages about the store itself).
    display: PathBuf,
}

/// The store while its lock is held.
pub struct Locked<'a> {
    store: &'a Store,
    _threads: MutexGuard<'a, ()>,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(&self.store.lock_file, FlockOperation::Unlock);
    }
}

impl Store {
    /// Create `<state_dir>/store` (0700) and the documented symlinks if missing, and
    /// open it. Runs before the worker confines itself.
    pub fn prepare(state_dir: &Path, files: &[&str]) -> std::io::Result<Store> {
        let path = dir(state_dir);
        match rustix::fs::mkdir(&path, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let dir_fd = rustix::fs::open(&path, flags, Mode::empty())?;
        for name in files {
            let link = state_dir.join(name);
            match std::os::unix::fs::symlink(Path::new(DIR).join(name), &link) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => tracing::warn!("cannot link {}: {e}", link.display()),
            }
        }
        let lock_flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let lock_file =
            rustix::fs::openat(&dir_fd, "lock", lock_flags, Mode::from_raw_mode(0o600))?;
        Ok(Store {
            dir: dir_fd,
            lock_file,
            threads: Mutex::new(()),
            display: path,
        })
    }

    /// Hold the store for one read-modify-write.
    pub fn lock(&self, kind: ErrorType) -> Result<Locked<'_>, ToolError> {
        let threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        rustix::fs::flock(&self.lock_file, FlockOperation::LockExclusive)
            .map_err(|e| ToolError::new(kind, format!("cannot lock the store: {e}")))?;
        Ok(Locked {
            store: self,
            _threads: threads,
        })
    }

    /// Where the store is, for messages.
    pub fn path(&self) -> &Path {
        &self.display
    }
}

impl Locked<'_> {
    /// The content of `name`, or `None` when it does not exist yet.
    pub fn read(&self, name: &str, kind: ErrorType) -> Result<Option<Vec<u8>>, ToolError> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = match rustix::fs::openat(&self.store.dir, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(self.error(kind, name, &format!("cannot be opened: {e}"))),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| self.error(kind, name, &e.to_string()))?;
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(self.error(kind, name, "is not a regular file"));
        }
        let mut out = Vec::new();
        std::fs::File::from(fd)
            .take(MAX_FILE + 1)
            .read_to_end(&mut out)
            .map_err(|e| self.error(kind, name, &format!("cannot be read: {e}")))?;
        if out.len() as u64 > MAX_FILE {
            return Err(self.error(kind, name, &format!("is larger than {MAX_FILE} bytes")));
        }
        Ok(Some(out))
    }

    /// Replace `name` with `content`, atomically and durably.
    pub fn write(&self, name: &str, content: &[u8], kind: ErrorType) -> Result<(), ToolError> {
        // What could not be read back is never written: a store past the limit would
        // lock every session out of it until a person removed the file.
        if content.len() as u64 > MAX_FILE {
            let what = format!(
                "would be {} bytes, more than the {MAX_FILE} it may hold; nothing was changed \
                 (remove something first)",
                content.len()
            );
            return Err(self.error(kind, name, &what));
        }
        write_atomic(
            self.store.dir.as_fd(),
            OsStr::new(name),
            content,
            Some(0o600),
            Replace::Allowed,
        )
        .map_err(|e| self.error(kind, name, &format!("cannot be written: {e}")))
    }

    fn error(&self, kind: ErrorType, name: &str, what: &str) -> ToolError {
        ToolError::new(
            kind,
            format!("{} {what}", self.store.display.join(name).display()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepare_makes_the_store_and_the_documented_links() {
        let state = tempfile::tempdir().unwrap();
        let store = Store::prepare(state.path(), &["memory.json"]).unwrap();
        let locked = store.lock(ErrorType::MemoryError).unwrap();
        assert_eq!(
            locked.read("memory.json", ErrorType::MemoryError).unwrap(),
            None
        );
        locked
            .write("memory.json", b"{}", ErrorType::MemoryError)
            .unwrap();
        drop(locked);
        let via_link = std::fs::read_to_string(state.path().join("memory.json")).unwrap();
        assert_eq!(via_link, "{}");
        // Preparing again (a restart) keeps everything.
        let again = Store::prepare(state.path(), &["memory.json"]).unwrap();
        let l = again.lock(ErrorType::MemoryError).unwrap();
        assert_eq!(
            l.read("memory.json", ErrorType::MemoryError)
                .unwrap()
                .as_deref(),
            Some(&b"{}"[..])
        );
    }

    #[test]
    fn a_symlink_planted_in_the_store_is_not_followed() {
        let state = tempfile::tempdir().unwrap();
        let store = Store::prepare(state.path(), &[]).unwrap();
        let secret = state.path().join("secret");
        std::fs::write(&secret, "s").unwrap();
        std::os::unix::fs::symlink(&secret, dir(state.path()).join("todos.json")).unwrap();
        let l = store.lock(ErrorType::TodoError).unwrap();
        let e = l.read("todos.json", ErrorType::TodoError).unwrap_err();
        assert_eq!(e.kind, ErrorType::TodoError);
        // A write replaces the link itself, never the file it points to.
        l.write("todos.json", b"[]", ErrorType::TodoError).unwrap();
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "s");
    }
}
