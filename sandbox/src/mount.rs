//! Running a [`super::plan`] inside the command's new mount namespace: a read-only copy
//! of the host tree becomes the root, with the plan's mounts on top.
//!
//! How: every mount is made private (nothing propagates back to the host); the host
//! tree is cloned (`open_tree`), made read-only and nosuid as a whole (`mount_setattr`
//! with `AT_RECURSIVE`), and the writable paths are cloned from the host view *before*
//! the copy is attached (at `/tmp`, which hides the host `/tmp` from this namespace
//! while the copy is built). Then the plan's steps, a minimal `/dev`, a fresh read-only
//! `/proc`, and `pivot_root(".", ".")` into the copy with the old root detached.
//!
//! Mounts copied from the host into a namespace owned by a new user namespace are
//! locked by the kernel (they cannot be unmounted one by one nor made writable again),
//! and the command runs without capabilities, so it can undo none of this.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::CWD;
use rustix::mount::{
    MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags, UnmountFlags,
};

use super::SandboxError;
use super::plan::{DEV, Step};

/// Where the new root is attached while it is built (hidden from the command).
const ATTACH_AT: [&str; 3] = ["/tmp", "/mnt", "/var/tmp"];

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// A failed step, with what was being done.
fn failed(what: &str, path: &Path, e: impl Into<std::io::Error>) -> SandboxError {
    SandboxError::at(what, path, e)
}

/// Build the command's root from `steps` and enter it. Runs in the PID namespace's
/// first process (a fresh `/proc` must be mounted from inside it).
pub fn build(steps: &[Step]) -> Result<(), SandboxError> {
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(|e| failed("cannot make private", Path::new("/"), e))?;
    let tree = clone_tree(Path::new("/"))?;
    set_attr_fd(&tree, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID)?;
    make_beneath_overlays(steps)?;
    let mut sources = Vec::new();
    for s in steps {
        match s {
            Step::Writable(p) => sources.push((p.clone(), clone_tree(p)?)),
            Step::Overlay { path, upper, work } => {
                sources.push((path.clone(), super::overlay::mount(path, upper, work)?));
            }
            Step::Shown(p) => {
                let tree = clone_tree(p)?;
                set_attr_fd(&tree, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID)?;
                sources.push((p.clone(), tree));
            }
            _ => {}
        }
    }
    let base = attach_point()?;
    rustix::mount::move_mount(
        &tree,
        "",
        CWD,
        &base,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(|e| failed("cannot attach the new root at", &base, e))?;
    let at = |p: &Path| base.join(p.strip_prefix("/").unwrap_or(p));
    for s in steps {
        run_step(s, &at, &mut sources)?;
    }
    enter(&base)
}

/// A staged command's root is an overlay: what the plan makes in it (git's `hooks`, a
/// `commondir`) is made on the host first, as for any command, so it is not a held
/// change of the command's.
fn make_beneath_overlays(steps: &[Step]) -> Result<(), SandboxError> {
    let overlays: Vec<&Path> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Overlay { path, .. } => Some(path.as_path()),
            _ => None,
        })
        .collect();
    let beneath = |p: &Path| overlays.iter().any(|o| p.starts_with(o));
    for s in steps {
        match s {
            Step::MakeDir(p) if beneath(p) => match std::fs::create_dir(p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(failed("cannot create", p, e)),
            },
            Step::MakeFile { path, content } if beneath(path) => make_file(path, path, content)?,
            _ => {}
        }
    }
    Ok(())
}

/// One step, with `at` mapping a host path into the new root.
fn run_step(
    step: &Step,
    at: &dyn Fn(&Path) -> PathBuf,
    sources: &mut Vec<(PathBuf, OwnedFd)>,
) -> Result<(), SandboxError> {
    match step {
        Step::Tmpfs(p) => {
            let t = at(p);
            if t.is_dir() {
                let flags = MountFlags::NOSUID | MountFlags::NODEV;
                mount_fs("tmpfs", &t, "tmpfs", flags, "mode=1777")?;
            }
        }
        Step::Writable(p) | Step::Shown(p) | Step::Overlay { path: p, .. } => {
            let i = sources.iter().position(|(s, _)| s == p);
            let Some((_, fd)) = i.map(|i| sources.swap_remove(i)) else {
                return Err(failed(
                    "no source opened for",
                    p,
                    std::io::Error::other("internal error"),
                ));
            };
            let t = at(p);
            mount_point(&t, is_dir(&fd))?;
            rustix::mount::move_mount(&fd, "", CWD, &t, MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH)
                .map_err(|e| failed("cannot mount", p, e))?;
        }
        Step::MakeDir(p) => match std::fs::create_dir(at(p)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(failed("cannot create", p, e)),
        },
        Step::MakeFile { path, content } => make_file(&at(path), path, content)?,
        Step::Pin(p) => bind_self(&at(p), p)?,
        Step::ReadOnly(p) => {
            let t = at(p);
            bind_self(&t, p)?;
            set_attr_path(&t, MOUNT_ATTR_RDONLY)?;
        }
        Step::Hide { path, dir: true } => {
            let flags = MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV;
            mount_fs(
                "tmpfs",
                &at(path),
                "tmpfs",
                flags | MountFlags::NOEXEC,
                "mode=0555,size=4k",
            )?;
        }
        Step::Hide { path, dir: false } => {
            let t = at(path);
            rustix::mount::mount_bind(at(Path::new("/dev/null")), &t)
                .map_err(|e| failed("cannot hide", path, e))?;
            set_attr_path(&t, MOUNT_ATTR_RDONLY)?;
        }
        Step::Dev => minimal_dev(&at(Path::new(DEV)))?,
        Step::Proc => {
            // Read-only: no write to `/proc/sys` or `/proc/sysrq-trigger`, whoever the
            // command's uid maps to.
            let flags =
                MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
            mount_fs("proc", &at(Path::new("/proc")), "proc", flags, "")?;
        }
    }
    Ok(())
}

/// The host devices a command may use (bound from the host's `/dev`).
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];
/// `/dev` links, as a system sets them up.
const DEV_LINKS: [(&str, &str); 5] = [
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
];

/// Create `target` holding `content` unless something is there already (then it is
/// covered as it is).
fn make_file(target: &Path, shown: &Path, content: &str) -> Result<(), SandboxError> {
    use std::io::Write;
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(target);
    match created {
        Ok(mut f) => f
            .write_all(content.as_bytes())
            .map_err(|e| failed("cannot write", shown, e)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(failed("cannot create", shown, e)),
    }
}

/// Build the minimal `/dev` at `dev` (see [`Step::Dev`]): a tmpfs with the devices
/// bound in and the links made, read-only, then a new `pts` instance (best effort: a
/// kernel may refuse it, and only terminals need it) and a private `shm` on top.
fn minimal_dev(dev: &Path) -> Result<(), SandboxError> {
    if !dev.is_dir() {
        return Ok(());
    }
    let flags = MountFlags::NOSUID | MountFlags::NOEXEC;
    mount_fs("tmpfs", dev, "tmpfs", flags, "mode=0755,size=64k")?;
    for name in DEVICES {
        let host = Path::new(DEV).join(name);
        if !host.exists() {
            continue;
        }
        let t = dev.join(name);
        std::fs::write(&t, b"").map_err(|e| failed("cannot make", &t, e))?;
        rustix::mount::mount_bind(&host, &t).map_err(|e| failed("cannot bind", &host, e))?;
    }
    for (name, to) in DEV_LINKS {
        let t = dev.join(name);
        std::os::unix::fs::symlink(to, &t).map_err(|e| failed("cannot make", &t, e))?;
    }
    for d in ["pts", "shm"] {
        let t = dev.join(d);
        std::fs::create_dir(&t).map_err(|e| failed("cannot make", &t, e))?;
    }
    set_attr_path(dev, MOUNT_ATTR_RDONLY)?;
    let pts = dev.join("pts");
    let _ = mount_fs(
        "devpts",
        &pts,
        "devpts",
        flags,
        "newinstance,ptmxmode=0666,mode=0620",
    );
    let shm = dev.join("shm");
    mount_fs(
        "tmpfs",
        &shm,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        "mode=1777",
    )
}

/// `pivot_root(".", ".")` into `base`, then detach the old root stacked on it.
fn enter(base: &Path) -> Result<(), SandboxError> {
    rustix::process::chdir(base).map_err(|e| failed("cannot enter", base, e))?;
    rustix::process::pivot_root(".", ".").map_err(|e| failed("pivot_root into", base, e))?;
    rustix::mount::unmount(".", UnmountFlags::DETACH)
        .map_err(|e| failed("cannot detach the old root from", base, e))?;
    rustix::process::chdir("/").map_err(|e| failed("cannot enter", Path::new("/"), e))
}

/// The first of [`ATTACH_AT`] that is a directory.
fn attach_point() -> Result<PathBuf, SandboxError> {
    ATTACH_AT
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_dir())
        .ok_or_else(|| {
            SandboxError::Refused(
                "no directory to build the new root at (/tmp, /mnt, /var/tmp)".into(),
            )
        })
}

/// A detached, recursive copy of the mount tree at `p`.
fn clone_tree(p: &Path) -> Result<OwnedFd, SandboxError> {
    let flags = OpenTreeFlags::OPEN_TREE_CLONE
        | OpenTreeFlags::AT_RECURSIVE
        | OpenTreeFlags::OPEN_TREE_CLOEXEC;
    rustix::mount::open_tree(CWD, p, flags).map_err(|e| failed("cannot clone the mounts at", p, e))
}

fn is_dir(fd: &OwnedFd) -> bool {
    rustix::fs::fstat(fd).is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir())
}

/// Make sure a mount point exists at `t` (only our own tmpfs can lack one).
fn mount_point(t: &Path, dir: bool) -> Result<(), SandboxError> {
    if t.exists() {
        return Ok(());
    }
    let made = if dir {
        std::fs::create_dir_all(t)
    } else {
        t.parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(t, b""))
    };
    made.map_err(|e| failed("cannot make a mount point at", t, e))
}

/// Bind `t` onto itself (recursively): a mount point the command cannot rename.
fn bind_self(t: &Path, shown: &Path) -> Result<(), SandboxError> {
    rustix::mount::mount_bind_recursive(t, t).map_err(|e| failed("cannot bind", shown, e))
}

fn mount_fs(
    source: &str,
    t: &Path,
    fs: &str,
    flags: MountFlags,
    data: &str,
) -> Result<(), SandboxError> {
    let data = CString::new(data)
        .map_err(|e| failed("bad mount options for", t, std::io::Error::other(e)))?;
    rustix::mount::mount(source, t, fs, flags, Some(data.as_c_str()))
        .map_err(|e| failed(&format!("cannot mount {fs} at"), t, e))
}

/// `mount_setattr` on the tree at `t`, recursively: set `attrs`.
fn set_attr_path(t: &Path, attrs: u64) -> Result<(), SandboxError> {
    let c = CString::new(t.as_os_str().as_bytes())
        .map_err(|e| failed("bad path", t, std::io::Error::other(e)))?;
    mount_setattr(libc::AT_FDCWD, &c, 0, attrs).map_err(|e| failed("cannot make read-only", t, e))
}

/// `mount_setattr` on a detached tree (`fd`), recursively.
fn set_attr_fd(fd: &OwnedFd, attrs: u64) -> Result<(), SandboxError> {
    mount_setattr(fd.as_raw_fd(), c"", libc::AT_EMPTY_PATH as u32, attrs)
        .map_err(|e| failed("cannot make read-only", Path::new("/"), e))
}

fn mount_setattr(
    dirfd: libc::c_int,
    path: &std::ffi::CStr,
    flags: u32,
    attrs: u64,
) -> std::io::Result<()> {
    let attr = MountAttr {
        attr_set: attrs,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = flags | libc::AT_RECURSIVE as u32;
    // SAFETY: a valid C string and a `struct mount_attr` of the size passed, both
    // living across the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
