//! The walk used where `openat2` is missing: one directory at a time with
//! `O_NOFOLLOW`, so no symlink is ever followed. Stricter than the kernel's
//! confinement (a symlink that stays inside the root is refused too), never looser.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

/// The fallback: open each directory with `O_NOFOLLOW`, so no symlink is ever followed
/// (a symlink anywhere on the path gives `ELOOP`, mapped to `PathOutsideWorkspace`).
pub(super) fn open_walk(dir: BorrowedFd<'_>, rel: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    let names: Vec<_> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let Some((last, parents)) = names.split_last() else {
        return rustix::fs::openat(dir, ".", flags, Mode::empty());
    };
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut cur: Option<OwnedFd> = None;
    for name in parents {
        let from = cur.as_ref().map_or(dir, |f| f.as_fd());
        let next = rustix::fs::openat(from, *name, dir_flags, Mode::empty())
            .map_err(|e| symlink_errno(e, from, name))?;
        cur = Some(next);
    }
    let from = cur.as_ref().map_or(dir, |f| f.as_fd());
    rustix::fs::openat(from, *last, flags | OFlags::NOFOLLOW, Mode::empty())
        .map_err(|e| symlink_errno(e, from, last))
}

/// `O_DIRECTORY|O_NOFOLLOW` on a symlink gives `ENOTDIR`: report it as `ELOOP`, the
/// errno that means "a symlink was refused" (only the message depends on this).
fn symlink_errno(e: Errno, dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> Errno {
    let is_link = || {
        rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink
        })
    };
    if e == Errno::NOTDIR && is_link() {
        Errno::LOOP
    } else {
        e
    }
}
