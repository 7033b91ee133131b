//! Directories beneath a root, opened (and created) without a check-then-use race.
//!
//! Every lookup starts at the root's directory fd and goes through the resolver's
//! confined open (`openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, or where that is
//! unavailable a component walk with `O_NOFOLLOW` that refuses every symlink), so a
//! symlinked parent that leaves the root fails inside the kernel instead of after a
//! `canonicalize` that could be raced.
//!
//! Why not `Resolver::open_parent`: previews must tell "the parent does not exist yet"
//! (a new file) from real errors without creating anything, and `mkdir -p` here checks
//! each directory's real location against the protected paths *before* creating inside
//! it, so a symlink into the state directory cannot make us leave directories there.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use toolvisor_protocol::ErrorType;

use crate::ToolError;
use crate::paths::{open_confined, real_path};

/// Flags for a directory we only use as an `*at` anchor.
const DIR_FLAGS: OFlags = OFlags::DIRECTORY
    .union(OFlags::RDONLY)
    .union(OFlags::CLOEXEC);

/// How to reach directories beneath one root.
#[derive(Clone, Copy, Debug)]
pub struct Beneath<'a> {
    /// The root's directory fd: the trusted starting point of every lookup.
    pub root: BorrowedFd<'a>,
    /// Whether `openat2` works here (else the `O_NOFOLLOW` walk).
    pub openat2: bool,
}

impl Beneath<'_> {
    /// Open directory `rel` (relative, normalised) beneath the root; `""` is the root.
    pub fn open_dir(&self, rel: &Path) -> Result<OwnedFd, Errno> {
        open_confined(self.root, rel, DIR_FLAGS, self.openat2)
    }
}

/// Open the directory `rel` beneath `root`, creating missing directories when `create`.
///
/// `Ok(None)` means it does not exist (and `create` was false). `is_protected` is asked
/// about the real path of every directory before anything is created inside it, so a
/// symlink into the state directory cannot make us create directories there.
pub fn open_parent(
    root: Beneath<'_>,
    rel: &Path,
    create: bool,
    is_protected: &dyn Fn(&Path) -> bool,
) -> Result<Option<OwnedFd>, ToolError> {
    match root.open_dir(rel) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::NOENT) if create => create_dirs(root, rel, is_protected).map(Some),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(dir_error(e, rel)),
    }
}

/// `mkdir -p` beneath the root: each missing component is made with `mkdirat` in its
/// parent's fd, then reopened beneath the root (a racing swap for a symlink is caught).
fn create_dirs(
    root: Beneath<'_>,
    rel: &Path,
    is_protected: &dyn Fn(&Path) -> bool,
) -> Result<OwnedFd, ToolError> {
    let mut cur = root
        .open_dir(Path::new(""))
        .map_err(|e| dir_error(e, rel))?;
    let mut prefix = PathBuf::new();
    for comp in rel.components() {
        let Component::Normal(name) = comp else {
            continue;
        };
        prefix.push(name);
        cur = match root.open_dir(&prefix) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => {
                refuse_protected(&cur, name.as_ref(), is_protected)?;
                make_dir(&cur, name.as_ref(), &prefix)?;
                root.open_dir(&prefix).map_err(|e| dir_error(e, &prefix))?
            }
            Err(e) => return Err(dir_error(e, &prefix)),
        };
    }
    Ok(cur)
}

/// `mkdirat` that tolerates a directory made by someone else in the meantime.
fn make_dir(parent: &OwnedFd, name: &Path, shown: &Path) -> Result<(), ToolError> {
    match rustix::fs::mkdirat(parent, name, Mode::from_bits_truncate(0o777)) {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(dir_error(e, shown)),
    }
}

/// `PermissionError` when `dir/name` really (symlinks resolved) is a protected path.
pub fn refuse_protected(
    dir: &OwnedFd,
    name: &Path,
    is_protected: &dyn Fn(&Path) -> bool,
) -> Result<(), ToolError> {
    match real_path(dir) {
        Some(real) if is_protected(&real.join(name)) => Err(ToolError::new(
            ErrorType::PermissionError,
            format!(
                "{} is toolvisor's protected state or config; edit tools never write there",
                real.join(name).display()
            ),
        )),
        _ => Ok(()),
    }
}

/// The contract error for a failed directory lookup or creation.
pub fn dir_error(e: Errno, rel: &Path) -> ToolError {
    let shown = rel.display();
    match e {
        Errno::XDEV | Errno::LOOP => ToolError::new(
            ErrorType::PathOutsideWorkspace,
            format!("{shown} leads outside the workspace (through a symlink)"),
        ),
        Errno::NOTDIR => ToolError::new(
            ErrorType::FileExistsError,
            format!("a component of {shown} exists and is not a directory"),
        ),
        Errno::NOENT => ToolError::new(
            ErrorType::FileNotFoundError,
            format!("{shown} does not exist (a dangling symlink?)"),
        ),
        Errno::ACCESS | Errno::PERM | Errno::ROFS => ToolError::new(
            ErrorType::PermissionError,
            format!("cannot open or create directory {shown}: {e}"),
        ),
        _ => ToolError::internal(format!("cannot open or create directory {shown}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::symlink;

    fn never(_: &Path) -> bool {
        false
    }

    fn open_root(path: &Path) -> OwnedFd {
        rustix::fs::open(path, DIR_FLAGS, Mode::empty()).unwrap()
    }

    /// Both lookup modes: `openat2`, and the `O_NOFOLLOW` walk of kernels without it.
    fn modes(root: &OwnedFd) -> [Beneath<'_>; 2] {
        [true, false].map(|openat2| Beneath {
            root: root.as_fd(),
            openat2: openat2 && crate::paths::openat2_available(),
        })
    }

    #[test]
    fn creates_missing_parents() {
        let ws = tempfile::tempdir().unwrap();
        let root = open_root(ws.path());
        for (i, b) in modes(&root).into_iter().enumerate() {
            let rel = PathBuf::from(format!("m{i}/b/c"));
            let fd = open_parent(b, &rel, true, &never).unwrap();
            assert!(fd.is_some());
            assert!(ws.path().join(&rel).is_dir());
        }
    }

    #[test]
    fn missing_parent_without_create_is_none() {
        let ws = tempfile::tempdir().unwrap();
        let root = open_root(ws.path());
        for b in modes(&root) {
            let fd = open_parent(b, Path::new("x/y"), false, &never).unwrap();
            assert!(fd.is_none());
        }
        assert!(!ws.path().join("x").exists());
    }

    #[test]
    fn symlinked_parent_leaving_the_root_is_refused() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path(), ws.path().join("out")).unwrap();
        let root = open_root(ws.path());
        for b in modes(&root) {
            for create in [false, true] {
                let err = open_parent(b, Path::new("out/sub"), create, &never).unwrap_err();
                assert_eq!(err.kind, ErrorType::PathOutsideWorkspace, "{err}");
            }
        }
        assert!(!outside.path().join("sub").exists());
    }

    #[test]
    fn relative_symlink_inside_the_root_is_followed_with_openat2() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join("real")).unwrap();
        symlink("real", ws.path().join("alias")).unwrap();
        let root = open_root(ws.path());
        let [with, without] = modes(&root);
        if with.openat2 {
            let fd = open_parent(with, Path::new("alias/new"), true, &never).unwrap();
            assert!(fd.is_some());
            assert!(ws.path().join("real/new").is_dir());
        }
        // Without openat2 no symlink is followed at all: stricter, never looser.
        let err = open_parent(without, Path::new("alias/other"), true, &never).unwrap_err();
        assert_eq!(err.kind, ErrorType::PathOutsideWorkspace, "{err}");
    }

    #[test]
    fn file_in_the_way_is_file_exists() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("f"), "x").unwrap();
        let root = open_root(ws.path());
        for b in modes(&root) {
            let err = open_parent(b, Path::new("f/sub"), true, &never).unwrap_err();
            assert_eq!(err.kind, ErrorType::FileExistsError, "{err}");
        }
    }

    #[test]
    fn no_directory_is_created_inside_a_protected_one_through_a_symlink() {
        let ws = tempfile::tempdir().unwrap();
        let state = ws.path().join(".toolvisor");
        std::fs::create_dir(&state).unwrap();
        symlink(".toolvisor", ws.path().join("sneaky")).unwrap();
        let state_real = state.canonicalize().unwrap();
        let protected = move |p: &Path| p.starts_with(&state_real);
        let root = open_root(ws.path());
        let [with, _] = modes(&root);
        if with.openat2 {
            let err = open_parent(with, Path::new("sneaky/sub"), true, &protected).unwrap_err();
            assert_eq!(err.kind, ErrorType::PermissionError, "{err}");
        }
        assert!(!state.join("sub").exists());
    }
}
