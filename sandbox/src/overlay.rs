//! The overlay a staged command's workspace root becomes: the host's root as the lower
//! layer (never written), the command's writes in an upper directory outside the
//! workspace. Made with the new mount API in the command's user namespace, where
//! overlayfs needs `userxattr` (its whiteouts and opaque marks are then `user.overlay.*`
//! attributes and 0:0 character devices).

use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags};

use super::SandboxError;

/// A detached overlay mount of `lower` with `upper` and `work`, to be moved into place.
pub fn mount(lower: &Path, upper: &Path, work: &Path) -> Result<OwnedFd, SandboxError> {
    let fail = |what: &str, e: rustix::io::Errno| {
        SandboxError::at(
            format!("cannot stage the workspace with an overlay ({what})"),
            lower,
            e,
        )
    };
    let fs = rustix::mount::fsopen("overlay", FsOpenFlags::FSOPEN_CLOEXEC)
        .map_err(|e| fail("fsopen", e))?;
    // `lowerdir+` (Linux 6.8) takes one path as it is; `lowerdir` splits at `:`.
    if rustix::mount::fsconfig_set_string(&fs, "lowerdir+", lower).is_err() {
        rustix::mount::fsconfig_set_string(&fs, "lowerdir", escape_lower(lower).as_slice())
            .map_err(|e| fail("lowerdir", e))?;
    }
    rustix::mount::fsconfig_set_string(&fs, "upperdir", upper).map_err(|e| fail("upperdir", e))?;
    rustix::mount::fsconfig_set_string(&fs, "workdir", work).map_err(|e| fail("workdir", e))?;
    rustix::mount::fsconfig_set_flag(&fs, "userxattr").map_err(|e| fail("userxattr", e))?;
    rustix::mount::fsconfig_create(&fs).map_err(|e| fail("create", e))?;
    rustix::mount::fsmount(
        &fs,
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV,
    )
    .map_err(|e| fail("fsmount", e))
}

/// `lowerdir`'s syntax: `:` separates layers and `\` escapes.
fn escape_lower(p: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for &b in p.as_os_str().as_bytes() {
        if b == b':' || b == b'\\' {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn separators_in_a_lower_path_are_escaped() {
        let p = std::path::Path::new("/w/a:b\\c");
        assert_eq!(super::escape_lower(p), b"/w/a\\:b\\\\c".to_vec());
    }
}
