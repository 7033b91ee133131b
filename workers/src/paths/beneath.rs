//! Confinement by the kernel: `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` from
//! a root's directory fd refuses, at the moment of the open, any symlink or `..` that
//! would leave the root. Probed once; where the kernel (or a seccomp filter) refuses
//! `openat2`, [`open_confined`] walks with the [`fallback`](super::fallback) instead.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::fallback::open_walk;

/// Probe `openat2` on the root: `ENOSYS` (old kernel) or `EPERM` (a seccomp filter
/// that refuses unknown syscalls) means it cannot be used.
pub(super) fn probe_openat2(root: &OwnedFd) -> bool {
    let flags = OFlags::PATH | OFlags::CLOEXEC;
    rustix::fs::openat2(root, ".", flags, Mode::empty(), resolve_flags()).is_ok()
}

/// Whether this process can use `openat2` (probed once on the current directory), for
/// `status.guards`; [`Resolver::has_openat2`] answers for one resolver.
pub fn openat2_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let flags = OFlags::PATH | OFlags::CLOEXEC;
        rustix::fs::openat2(rustix::fs::CWD, ".", flags, Mode::empty(), resolve_flags()).is_ok()
    })
}

fn resolve_flags() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS
}

/// Open `rel` beneath `dir` with `openat2`, refusing every symlink on the way (`ELOOP`),
/// the last component included: what is opened is exactly the lexical path `rel`.
/// `ENOSYS` where `openat2` is not available (callers check first).
pub(crate) fn open_beneath_no_symlinks(
    dir: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
) -> Result<OwnedFd, Errno> {
    let how = resolve_flags() | ResolveFlags::NO_SYMLINKS;
    rustix::fs::openat2(dir, rel, flags | OFlags::NOFOLLOW, Mode::empty(), how)
}

/// Open `rel` beneath `dir`: with `openat2` when available, else one component at a time.
pub(crate) fn open_confined(
    dir: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    use_openat2: bool,
) -> Result<OwnedFd, Errno> {
    let target: &Path = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    if use_openat2 {
        return rustix::fs::openat2(dir, target, flags, Mode::empty(), resolve_flags());
    }
    open_walk(dir, rel, flags)
}
