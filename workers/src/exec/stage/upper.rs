//! Reading an overlay's upper directory after a staged command: what it changed
//! relative to the lower layer (the workspace root).
//!
//! - a regular file, symlink or other non-directory in upper: created (nothing below)
//!   or modified (something else below: other content, mode, link target or type);
//!   one the same as below (a copy-up that changed nothing, e.g. `touch`) is no change;
//! - a whiteout (a 0:0 character device, or an empty file with the
//!   `user.overlay.whiteout` attribute): what is below is deleted;
//! - a directory: walked; a new one that stays empty is created; one marked opaque
//!   (`user.overlay.opaque` = `y`) hides everything below it, so the lower directory's
//!   entries that upper does not have are deleted; one that replaced a non-directory
//!   deletes it first.

use std::ffi::OsString;
use std::fs::Metadata;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use toolvisor_os::staged::ChangeKind;

/// One change found in an upper directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    /// Beneath the root.
    pub rel: PathBuf,
    /// What it does.
    pub kind: ChangeKind,
}

/// The xattr overlayfs marks an opaque directory with in a user namespace.
const OPAQUE: &str = "user.overlay.opaque";
/// The xattr of a whiteout that is a regular file (overlayfs in a user namespace may
/// make those where a character device cannot be made).
const WHITEOUT: &str = "user.overlay.whiteout";

/// Every change in `upper` over `lower`, in path order (deletions of a path come
/// before what replaces it).
pub(crate) fn read(upper: &Path, lower: &Path) -> std::io::Result<Vec<Found>> {
    let mut out = Vec::new();
    walk(upper, Some(lower), Path::new(""), &mut out)?;
    Ok(out)
}

fn walk(
    upper: &Path,
    lower: Option<&Path>,
    rel: &Path,
    out: &mut Vec<Found>,
) -> std::io::Result<()> {
    let mut names: Vec<OsString> = std::fs::read_dir(upper)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()?;
    names.sort();
    for name in &names {
        let (up, r) = (upper.join(name), rel.join(name));
        let lo = lower.map(|l| l.join(name));
        let below = lo.as_deref().and_then(lstat);
        let meta = std::fs::symlink_metadata(&up)?;
        let push = |out: &mut Vec<Found>, kind| {
            out.push(Found {
                rel: r.clone(),
                kind,
            })
        };
        if is_whiteout(&up, &meta) {
            if below.is_some() {
                push(out, ChangeKind::Deleted);
            }
            continue;
        }
        if meta.is_dir() {
            let lower_dir = match &below {
                Some(b) if b.is_dir() => lo.as_deref(),
                Some(_) => {
                    push(out, ChangeKind::Deleted);
                    None
                }
                None => None,
            };
            let before = out.len();
            walk(&up, lower_dir, &r, out)?;
            if lower_dir.is_none() && out.len() == before {
                push(out, ChangeKind::Created);
            }
            continue;
        }
        match (&below, lo.as_deref()) {
            (Some(b), Some(lo)) if same(&up, &meta, lo, b)? => {}
            (Some(_), _) => push(out, ChangeKind::Modified),
            (None, _) => push(out, ChangeKind::Created),
        }
    }
    if let Some(lower) = lower.filter(|_| is_opaque(upper)) {
        let mut hidden: Vec<OsString> = std::fs::read_dir(lower)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        hidden.retain(|n| !names.contains(n));
        hidden.sort();
        for name in hidden {
            out.push(Found {
                rel: rel.join(name),
                kind: ChangeKind::Deleted,
            });
        }
        out.sort_by(|a, b| a.rel.cmp(&b.rel));
    }
    Ok(())
}

/// The metadata of `p` (not following a link); None when nothing is there.
fn lstat(p: &Path) -> Option<Metadata> {
    std::fs::symlink_metadata(p).ok()
}

/// An overlay whiteout: a 0:0 character device, or an empty regular file marked with
/// the whiteout attribute.
fn is_whiteout(p: &Path, meta: &Metadata) -> bool {
    let t = meta.file_type();
    (t.is_char_device() && meta.rdev() == 0)
        || (t.is_file() && meta.len() == 0 && has_xattr(p, WHITEOUT))
}

/// A directory overlayfs made opaque (what is below it is hidden).
fn is_opaque(dir: &Path) -> bool {
    let mut buf = [0u8; 8];
    matches!(rustix::fs::lgetxattr(dir, OPAQUE, &mut buf), Ok(n) if buf[..n] == *b"y")
}

fn has_xattr(p: &Path, name: &str) -> bool {
    let mut buf = [0u8; 8];
    rustix::fs::lgetxattr(p, name, &mut buf).is_ok()
}

/// Whether the non-directory `up` is exactly what `lo` is: the same type and mode,
/// and the same content or link target.
fn same(up: &Path, um: &Metadata, lo: &Path, lm: &Metadata) -> std::io::Result<bool> {
    let (ut, lt) = (um.file_type(), lm.file_type());
    if ut.is_symlink() || lt.is_symlink() {
        return Ok(ut.is_symlink()
            && lt.is_symlink()
            && std::fs::read_link(up)?.as_os_str().as_bytes()
                == std::fs::read_link(lo)?.as_os_str().as_bytes());
    }
    let mode = |m: &Metadata| m.permissions().mode();
    if mode(um) != mode(lm) || ut.is_file() != lt.is_file() {
        return Ok(false);
    }
    if !ut.is_file() {
        return Ok(um.rdev() == lm.rdev());
    }
    if um.len() != lm.len() {
        return Ok(false);
    }
    same_content(up, lo)
}

fn same_content(a: &Path, b: &Path) -> std::io::Result<bool> {
    let (mut fa, mut fb) = (std::fs::File::open(a)?, std::fs::File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = fa.read(&mut ba)?;
        if n == 0 {
            return Ok(fb.read(&mut bb[..1])? == 0);
        }
        if fb.read_exact(&mut bb[..n]).is_err() || ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    struct Layers {
        _t: tempfile::TempDir,
        upper: PathBuf,
        lower: PathBuf,
    }

    fn layers() -> Layers {
        let t = tempfile::tempdir().unwrap();
        let (upper, lower) = (t.path().join("upper"), t.path().join("lower"));
        std::fs::create_dir_all(&upper).unwrap();
        std::fs::create_dir_all(&lower).unwrap();
        Layers {
            _t: t,
            upper,
            lower,
        }
    }

    fn found(l: &Layers) -> Vec<(String, ChangeKind)> {
        read(&l.upper, &l.lower)
            .unwrap()
            .into_iter()
            .map(|f| (f.rel.to_string_lossy().into_owned(), f.kind))
            .collect()
    }

    /// A 0:0 character device (needs the right to make one: root, or a user namespace
    /// on a file system that allows whiteouts); else the xattr form.
    fn whiteout(p: &Path) {
        let made = rustix::fs::mknodat(
            rustix::fs::CWD,
            p,
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::empty(),
            0,
        );
        if made.is_err() {
            std::fs::write(p, b"").unwrap();
            rustix::fs::lsetxattr(p, WHITEOUT, b"y", rustix::fs::XattrFlags::empty()).unwrap();
        }
    }

    use ChangeKind::*;

    #[test]
    fn files_are_created_modified_or_unchanged() {
        let l = layers();
        std::fs::write(l.lower.join("old"), b"a\n").unwrap();
        std::fs::write(l.lower.join("same"), b"s\n").unwrap();
        std::fs::write(l.upper.join("old"), b"b\n").unwrap();
        std::fs::write(l.upper.join("same"), b"s\n").unwrap();
        std::fs::write(l.upper.join("new"), b"x\n").unwrap();
        assert_eq!(
            found(&l),
            vec![("new".into(), Created), ("old".into(), Modified)]
        );
    }

    #[test]
    fn a_mode_change_is_a_modification() {
        let l = layers();
        std::fs::write(l.lower.join("run"), b"#!/bin/sh\n").unwrap();
        std::fs::write(l.upper.join("run"), b"#!/bin/sh\n").unwrap();
        let exec = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(l.upper.join("run"), exec).unwrap();
        std::fs::set_permissions(l.lower.join("run"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        assert_eq!(found(&l), vec![("run".into(), Modified)]);
    }

    #[test]
    fn whiteouts_delete_what_is_below_them() {
        let l = layers();
        std::fs::write(l.lower.join("gone"), b"g").unwrap();
        whiteout(&l.upper.join("gone"));
        whiteout(&l.upper.join("never-was"));
        assert_eq!(found(&l), vec![("gone".into(), Deleted)]);
    }

    #[test]
    fn an_opaque_directory_deletes_the_lower_entries_it_lacks() {
        let l = layers();
        std::fs::create_dir_all(l.lower.join("d")).unwrap();
        std::fs::write(l.lower.join("d/a"), b"a").unwrap();
        std::fs::write(l.lower.join("d/b"), b"b").unwrap();
        std::fs::create_dir_all(l.upper.join("d")).unwrap();
        std::fs::write(l.upper.join("d/b"), b"b").unwrap();
        std::fs::write(l.upper.join("d/c"), b"c").unwrap();
        let opaque = rustix::fs::XattrFlags::empty();
        rustix::fs::lsetxattr(l.upper.join("d"), OPAQUE, b"y", opaque).unwrap();
        assert_eq!(
            found(&l),
            vec![("d/a".into(), Deleted), ("d/c".into(), Created)]
        );
    }

    #[test]
    fn new_directories_list_their_files_or_themselves_when_empty() {
        let l = layers();
        std::fs::create_dir_all(l.upper.join("n/m")).unwrap();
        std::fs::write(l.upper.join("n/f"), b"f").unwrap();
        std::fs::create_dir_all(l.upper.join("empty")).unwrap();
        assert_eq!(
            found(&l),
            vec![
                ("empty".into(), Created),
                ("n/f".into(), Created),
                ("n/m".into(), Created)
            ]
        );
    }

    #[test]
    fn a_directory_that_replaced_a_file_deletes_it_first() {
        let l = layers();
        std::fs::write(l.lower.join("x"), b"file").unwrap();
        std::fs::create_dir_all(l.upper.join("x")).unwrap();
        std::fs::write(l.upper.join("x/in"), b"in").unwrap();
        assert_eq!(
            found(&l),
            vec![("x".into(), Deleted), ("x/in".into(), Created)]
        );
    }

    #[test]
    fn symlinks_compare_by_target() {
        let l = layers();
        std::os::unix::fs::symlink("a", l.lower.join("same")).unwrap();
        std::os::unix::fs::symlink("a", l.upper.join("same")).unwrap();
        std::os::unix::fs::symlink("a", l.lower.join("moved")).unwrap();
        std::os::unix::fs::symlink("b", l.upper.join("moved")).unwrap();
        std::os::unix::fs::symlink("t", l.upper.join("new")).unwrap();
        std::fs::write(l.lower.join("was-file"), b"t").unwrap();
        std::os::unix::fs::symlink("t", l.upper.join("was-file")).unwrap();
        assert_eq!(
            found(&l),
            vec![
                ("moved".into(), Modified),
                ("new".into(), Created),
                ("was-file".into(), Modified)
            ]
        );
    }

    #[test]
    fn odd_names_survive_as_bytes() {
        let l = layers();
        let newline = OsString::from("two\nlines");
        let invalid = OsString::from_vec(vec![b'b', 0xff, b'd']);
        std::fs::write(l.upper.join(&newline), b"1").unwrap();
        std::fs::write(l.lower.join(&invalid), b"1").unwrap();
        whiteout(&l.upper.join(&invalid));
        let got = read(&l.upper, &l.lower).unwrap();
        assert_eq!(
            got,
            vec![
                Found {
                    rel: PathBuf::from(invalid),
                    kind: Deleted
                },
                Found {
                    rel: PathBuf::from(newline),
                    kind: Created
                },
            ]
        );
    }
}
