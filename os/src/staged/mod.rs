//! A staged command's held changes (`run_command` with `stage: true`): where they are
//! kept, and the record the exec worker makes of them when the command ends
//! ([`Manifest`]) for the supervisor, which applies them.
//!
//! Layout: `STATE/staged/<id>/<root>/upper` and `…/work` are the overlay's upper and
//! work directories of workspace root number `<root>` (0: `private`, 1: `shared`).
//! Commands never see the state directory.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod fingerprint;

pub use fingerprint::{Fingerprint, fingerprint};

/// The directory of the state directory that holds every staging directory.
pub const DIR: &str = "staged";

/// What a held change does to its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// Nothing was there.
    Created,
    /// Something was there and is replaced (content, mode, link target or type).
    Modified,
    /// It is removed (a directory with all it holds).
    Deleted,
}

impl ChangeKind {
    /// The wire name (`meta.changes[].kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Created => "created",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
        }
    }
}

/// One held change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// The workspace root's number (0: `private`, 1: `shared`).
    pub root: usize,
    /// The path beneath the root, as raw bytes (any name the kernel allows).
    pub rel: Vec<u8>,
    /// The path as the tools display it (`src/a.rs`, `shared:/x`; lossy).
    pub path: String,
    /// What the change does.
    pub kind: ChangeKind,
    /// What the workspace had at the path when the command ended: applying it checks
    /// the workspace still has exactly that.
    pub before: Fingerprint,
}

impl Held {
    /// [`Held::rel`] as a path.
    pub fn rel_path(&self) -> &Path {
        Path::new(std::ffi::OsStr::from_bytes(&self.rel))
    }
}

/// Every change one staged command held, and where.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The staging directory's name beneath `STATE/staged` ([`valid_id`]).
    pub id: String,
    /// The changes, in path order.
    pub changes: Vec<Held>,
}

/// `STATE/staged`.
pub fn base(state_dir: &Path) -> PathBuf {
    state_dir.join(DIR)
}

/// The staging directory `id` of the state directory.
pub fn dir(state_dir: &Path, id: &str) -> PathBuf {
    base(state_dir).join(id)
}

/// The overlay's upper directory of root `root` in staging directory `dir`.
pub fn upper(dir: &Path, root: usize) -> PathBuf {
    dir.join(root.to_string()).join("upper")
}

/// The overlay's work directory of root `root` in staging directory `dir`.
pub fn work(dir: &Path, root: usize) -> PathBuf {
    dir.join(root.to_string()).join("work")
}

/// Whether `id` can name a staging directory: 1 to 64 ASCII letters, digits, `-`, `_`
/// (never `..` nor a separator).
pub fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Remove a staging directory and all it holds. The kernel leaves the overlay's
/// `work/work` without any permission (mode 0): directories are opened up before they
/// are emptied. Missing is fine.
pub fn remove(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(_) => {}
    }
    open_up(dir);
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Give every directory beneath `dir` (not following links) owner rwx, so it can be
/// emptied.
fn open_up(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let mode = meta.permissions().mode() | 0o700;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode));
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            open_up(&e.path());
        }
    }
}

/// Remove every staging directory left in the state directory (by a daemon that ended
/// with changes held: its tokens died with it). Returns how many were removed.
pub fn remove_leftovers(state_dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(base(state_dir)) else {
        return 0;
    };
    rd.flatten().filter(|e| remove(&e.path()).is_ok()).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_never_leave_the_staging_base() {
        assert!(valid_id("st_0a9f-x"));
        for bad in ["", "..", "a/b", ".", "a b", &"x".repeat(65)] {
            assert!(!valid_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn remove_empties_directories_without_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("s");
        let locked = work(&d, 0).join("work");
        std::fs::create_dir_all(&locked).unwrap();
        std::fs::write(locked.join("f"), b"x").unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        remove(&d).unwrap();
        assert!(!d.exists());
        remove(&d).unwrap();
    }

    #[test]
    fn leftovers_are_removed() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(upper(&dir(t.path(), "a"), 0)).unwrap();
        std::fs::create_dir_all(dir(t.path(), "b")).unwrap();
        assert_eq!(remove_leftovers(t.path()), 2);
        assert_eq!(std::fs::read_dir(base(t.path())).unwrap().count(), 0);
    }
}
