//! Touching a workspace path without following a symbolic link anywhere on the way.
//!
//! The journal reads and writes as the daemon's user, outside every sandbox. A command
//! (a background job, still running) can swap a directory for a symlink at any moment;
//! if a snapshot read `d/x` through `d -> ~/.ssh`, the key would enter the journal and
//! an undo would write it back into the workspace for the agent to read; if an undo
//! removed `d/x` through `d -> ~`, it would delete a file of the person's. So every
//! path is reached from its workspace root one directory at a time, each opened with
//! `O_NOFOLLOW | O_DIRECTORY` (a symlink there fails), and the last component is only
//! ever used relative to that directory's descriptor (`*at` calls, `AT_SYMLINK_NOFOLLOW`,
//! `O_NOFOLLOW`). Each step is atomic, so no swap between steps can redirect it.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, Stat};

/// A path's last component, relative to its parent directory, opened safely.
pub struct At {
    dir: OwnedFd,
    name: OsString,
}

fn open_dir_at(dir: Option<&OwnedFd>, name: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match dir {
        Some(d) => rustix::fs::openat(d, name, flags, Mode::empty()),
        None => rustix::fs::openat(rustix::fs::CWD, name, flags, Mode::empty()),
    };
    fd.map_err(io::Error::from)
}

/// The root among `roots` that holds `path` (the deepest).
pub fn root_of<'a>(roots: &'a [PathBuf], path: &Path) -> Option<&'a PathBuf> {
    roots
        .iter()
        .filter(|r| path.starts_with(r) && path != r.as_path())
        .max_by_key(|r| r.components().count())
}

impl At {
    /// Reach `path` (strictly inside `root`) without following symlinks; with
    /// `make_parents`, missing directories on the way are made (mode 0755).
    pub fn reach(root: &Path, path: &Path, make_parents: bool) -> io::Result<At> {
        let rel = path
            .strip_prefix(root)
            .map_err(|_| io::Error::other("the path is outside its root"))?;
        let mut parts: Vec<&OsStr> = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => parts.push(n),
                _ => return Err(io::Error::other("the path is not plain")),
            }
        }
        let Some(name) = parts.pop() else {
            return Err(io::Error::other("the root itself"));
        };
        let mut dir = open_dir_at(None, root)?;
        for p in parts {
            dir = match open_dir_at(Some(&dir), Path::new(p)) {
                Err(e) if make_parents && e.kind() == io::ErrorKind::NotFound => {
                    rustix::fs::mkdirat(&dir, p, Mode::from_raw_mode(0o755))?;
                    open_dir_at(Some(&dir), Path::new(p))?
                }
                r => r?,
            };
        }
        Ok(At {
            dir,
            name: name.to_owned(),
        })
    }

    /// `lstat` of the last component.
    pub fn stat(&self) -> io::Result<Stat> {
        rustix::fs::statat(&self.dir, &self.name, AtFlags::SYMLINK_NOFOLLOW).map_err(Into::into)
    }

    /// Open the last component for reading: a regular file only (never a FIFO that
    /// would block, never through a symlink).
    pub fn open_file(&self) -> io::Result<(File, Stat)> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.dir, &self.name, flags, Mode::empty())?;
        let st = rustix::fs::fstat(&fd)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(io::Error::other("not a regular file"));
        }
        Ok((File::from(fd), st))
    }

    /// Where the last component (a symlink) points.
    pub fn readlink(&self) -> io::Result<PathBuf> {
        let t = rustix::fs::readlinkat(&self.dir, &self.name, Vec::new())?;
        let bytes: Vec<u8> = t.into_bytes();
        Ok(PathBuf::from(
            <OsString as std::os::unix::ffi::OsStringExt>::from_vec(bytes),
        ))
    }

    /// Remove the last component (a directory must be empty).
    pub fn remove(&self) -> io::Result<()> {
        let is_dir = self
            .stat()
            .map(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR)?;
        let flags = if is_dir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        rustix::fs::unlinkat(&self.dir, &self.name, flags).map_err(Into::into)
    }

    /// Make the last component a directory with `mode` (an existing one keeps its
    /// entries and gets the mode).
    pub fn make_dir(&self, mode: u32) -> io::Result<()> {
        match rustix::fs::mkdirat(&self.dir, &self.name, Mode::from_raw_mode(mode)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.dir, &self.name, flags, Mode::empty())?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(Into::into)
    }

    /// Replace the last component with a file of `src`'s content and `mode`, atomically
    /// (written under a temporary name beside it, then renamed over).
    pub fn replace_with_file(&self, src: &mut impl io::Read, mode: u32) -> io::Result<()> {
        let tmp = self.temp_name();
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.dir, &tmp, flags, Mode::from_raw_mode(0o600))?;
        let mut f = File::from(fd);
        let written = io::copy(src, &mut f)
            .and_then(|_| rustix::fs::fchmod(&f, Mode::from_raw_mode(mode)).map_err(Into::into))
            .and_then(|()| f.sync_data());
        drop(f);
        written
            .and_then(|()| self.rename_over(&tmp))
            .inspect_err(|_| {
                let _ = rustix::fs::unlinkat(&self.dir, &tmp, AtFlags::empty());
            })
    }

    /// Replace the last component with a symlink to `target`, atomically.
    pub fn replace_with_symlink(&self, target: &Path) -> io::Result<()> {
        let tmp = self.temp_name();
        rustix::fs::symlinkat(target, &self.dir, &tmp)?;
        self.rename_over(&tmp).inspect_err(|_| {
            let _ = rustix::fs::unlinkat(&self.dir, &tmp, AtFlags::empty());
        })
    }

    /// Rename `tmp` (in the same directory) over the last component; an empty
    /// directory in the way is removed first.
    fn rename_over(&self, tmp: &OsStr) -> io::Result<()> {
        if let Ok(st) = self.stat()
            && st.st_mode & libc::S_IFMT == libc::S_IFDIR
        {
            rustix::fs::unlinkat(&self.dir, &self.name, AtFlags::REMOVEDIR)?;
        }
        rustix::fs::renameat(&self.dir, tmp, &self.dir, &self.name).map_err(Into::into)
    }

    fn temp_name(&self) -> OsString {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        OsString::from(format!(".toolvisor-undo-{}-{n}", std::process::id()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlinked_directory_on_the_way_is_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("w");
        let outside = d.path().join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "key").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("d")).unwrap();
        let at = At::reach(&root, &root.join("d/secret"), false);
        assert!(at.is_err(), "reached through a symlink");
        assert!(At::reach(&root, &root.join("d/new"), true).is_err());
        assert!(outside.join("secret").exists());
        // The link itself is reachable as a link.
        let link = At::reach(&root, &root.join("d"), false).unwrap();
        assert_eq!(link.readlink().unwrap(), outside);
        assert!(link.open_file().is_err(), "a link is not opened as a file");
    }

    #[test]
    fn files_and_links_are_replaced_atomically_and_parents_made() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().to_path_buf();
        let at = At::reach(&root, &root.join("a/b/c"), true).unwrap();
        at.replace_with_file(&mut &b"hello"[..], 0o640).unwrap();
        let (mut f, st) = at.open_file().unwrap();
        let mut s = String::new();
        io::Read::read_to_string(&mut f, &mut s).unwrap();
        assert_eq!((s.as_str(), st.st_mode & 0o7777), ("hello", 0o640));
        at.replace_with_symlink(Path::new("/etc/passwd")).unwrap();
        assert_eq!(at.readlink().unwrap(), Path::new("/etc/passwd"));
        at.remove().unwrap();
        assert!(at.stat().is_err());
    }
}
