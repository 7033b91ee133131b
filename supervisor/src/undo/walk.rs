//! The walk behind a snapshot: every journaled path under the roots, in path order,
//! each with its `lstat` stamp.
//!
//! Its cost is system calls, so it makes few and cheap ones. The `ignore` crate's
//! parallel walker lists the tree (it reads each directory once and looks for ignore
//! files among the names it read, without probing for them), on a few threads. The
//! paths are then put in order and each is `lstat`ed from its parent directory's
//! descriptor (`fstatat` of one name), not resolved again from `/` component by
//! component: the directories are opened one level at a time, without following a
//! symbolic link.

use std::cmp::Ordering;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::node::Stamp;

/// The most threads one walk takes.
const WALK_THREADS: usize = 4;

/// The journaled paths under every root (the roots themselves left out), in path
/// order, each once (a root may lie inside another), with the stamp of its `lstat`
/// when it had one.
pub fn list(roots: &[PathBuf], skip: &[PathBuf]) -> Vec<(PathBuf, Option<Stamp>)> {
    let mut all: Vec<_> = roots
        .iter()
        .flat_map(|root| {
            let mut paths = names(root, skip);
            paths.sort_unstable_by(|a, b| path_order(a, b));
            let mut dirs = Dirs::new(root);
            paths.into_iter().map(move |p| {
                let stamp = dirs.stamp(&p);
                (p, stamp)
            })
        })
        .collect();
    // One root: in order already, and this is one pass that checks it.
    all.sort_by(|a, b| path_order(&a.0, &b.0));
    all.dedup_by(|a, b| a.0 == b.0);
    all
}

/// The journaled paths under `root` (itself left out), in no order.
fn names(root: &Path, skip: &[PathBuf]) -> Vec<PathBuf> {
    let skip = skip.to_vec();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(WALK_THREADS));
    let found = std::sync::Mutex::new(Vec::new());
    ignore::WalkBuilder::new(root)
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .threads(threads)
        .filter_entry(move |e| !pruned(e, &skip))
        .build_parallel()
        .run(|| {
            let found = &found;
            Box::new(move |e| {
                if let Ok(e) = e
                    && e.depth() > 0
                {
                    toolvisor_os::sync::lock(found).push(e.into_path());
                }
                ignore::WalkState::Continue
            })
        });
    found.into_inner().unwrap_or_else(|p| p.into_inner())
}

/// Whether the walk leaves `e` and everything under it out: a skipped path or a git
/// object database. Below the root only the entry's own name can make it so (the walk
/// never enters what it left out), which spares a scan of every path.
fn pruned(e: &ignore::DirEntry, skip: &[PathBuf]) -> bool {
    let p = e.path();
    if e.depth() == 0 {
        return skip.iter().any(|s| p.starts_with(s)) || super::snapshot::in_object_store(p);
    }
    skip.iter().any(|s| p == s)
        || (e.file_name() == "objects" && super::snapshot::in_object_store(p))
}

/// The order of [`Path`]'s `Ord` for paths without `.`, `..`, repeated or trailing
/// separators (what a walk from a canonical root makes), read off the bytes at once:
/// a separator sorts before any other byte, as a component's end sorts before its
/// longer continuation.
pub fn path_order(a: &Path, b: &Path) -> Ordering {
    let (a, b) = (a.as_os_str().as_bytes(), b.as_os_str().as_bytes());
    let n = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let at = |s: &[u8]| {
        s.get(n)
            .map(|&c| if c == b'/' { 0 } else { u16::from(c) + 1 })
    };
    at(a).cmp(&at(b))
}

/// Whether `p` is `dir` or under it (paths as [`path_order`] takes them).
fn within(p: &Path, dir: &Path) -> bool {
    let (p, d) = (p.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    p.starts_with(d) && (p.len() == d.len() || p[d.len()] == b'/')
}

/// The directories above the path being stamped, root first, each opened when a
/// path inside it is first stamped. Paths come in path order, so a directory comes
/// just before what it holds and is done with once a path outside it comes.
struct Dirs {
    stack: Vec<(PathBuf, Option<OwnedFd>)>,
}

impl Dirs {
    fn new(root: &Path) -> Dirs {
        Dirs {
            stack: vec![(root.to_path_buf(), None)],
        }
    }

    /// The `lstat` stamp of `p`; a directory is kept as the parent of what follows.
    fn stamp(&mut self, p: &Path) -> Option<Stamp> {
        let (parent, name) = (p.parent()?, p.file_name()?);
        while self.stack.len() > 1 && self.stack.last().is_some_and(|(d, _)| !within(parent, d)) {
            self.stack.pop();
        }
        let st = match self.open(parent) {
            Some(fd) => rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW).ok()?,
            // Its parent could not be opened (gone, or not a directory any more): the
            // path as a whole, as a last resort.
            None => return std::fs::symlink_metadata(p).ok().map(|m| Stamp::of(&m)),
        };
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            self.stack.push((p.to_path_buf(), None));
        }
        Some(Stamp::of_stat(&st))
    }

    /// The descriptor of `dir`, when it is the innermost directory kept (opened from
    /// the one above it, without following a symlink).
    fn open(&mut self, dir: &Path) -> Option<&OwnedFd> {
        let n = self.stack.len();
        if self.stack[n - 1].0 != dir {
            return None;
        }
        if self.stack[n - 1].1.is_none() {
            let fd = match n {
                1 => open_dir(rustix::fs::CWD, dir.as_os_str()),
                _ => open_dir(self.stack[n - 2].1.as_ref()?, dir.file_name()?),
            };
            self.stack[n - 1].1 = Some(fd?);
        }
        self.stack[n - 1].1.as_ref()
    }
}

/// `name` under `at`, opened as a directory to look up names in (never a symlink).
fn open_dir(at: impl std::os::fd::AsFd, name: &OsStr) -> Option<OwnedFd> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(at, name, flags, Mode::empty()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_order_of_paths_is_their_component_order() {
        let names = [
            "/w",
            "/w/a",
            "/w/a/b",
            "/w/a.b",
            "/w/a-b/c",
            "/w/a/b/c",
            "/w/ab",
            "/w/a0",
            "/w/a/.git",
            "/w/A",
            "/w/\u{e9}",
            "/w/a b",
            "/x",
            "/w!",
        ];
        let paths: Vec<PathBuf> = names.iter().map(PathBuf::from).collect();
        for a in &paths {
            for b in &paths {
                assert_eq!(path_order(a, b), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn every_path_is_stamped_as_its_own_lstat_says() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().join("w");
        for p in ["a/b/c", "a/d", "a.b/e", "f"] {
            std::fs::create_dir_all(w.join(p).parent().unwrap()).unwrap();
            std::fs::write(w.join(p), p).unwrap();
        }
        std::os::unix::fs::symlink("a", w.join("link")).unwrap();
        let listed = list(std::slice::from_ref(&w), &[]);
        assert_eq!(listed.len(), 8, "{listed:?}");
        for (p, stamp) in listed {
            let m = std::fs::symlink_metadata(&p).unwrap();
            assert_eq!(stamp, Some(Stamp::of(&m)), "{p:?}");
        }
    }
}
