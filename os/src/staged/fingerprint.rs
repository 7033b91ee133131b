//! What is at a path, precisely enough to tell whether it changed: a file's mode and
//! content hash, a link's target, a directory's whole tree. A staged command's changes
//! are applied only where the workspace still has what it had when the command ended.

use crate::hex::hex;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The state of one path (never following a final symlink).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Fingerprint {
    /// Nothing there.
    Missing,
    /// A regular file.
    File {
        /// Permission bits (`0o7777`).
        mode: u32,
        /// Lowercase hex SHA-256 of its content.
        sha256: String,
    },
    /// A symbolic link.
    Symlink {
        /// Its target, raw bytes.
        target: Vec<u8>,
    },
    /// A directory: a hash over every name, mode and content beneath it.
    Dir {
        /// Permission bits (`0o7777`).
        mode: u32,
        /// Lowercase hex SHA-256 of the tree.
        tree: String,
    },
    /// Anything else (a fifo, a socket, a device node).
    Other {
        /// `st_mode`, type bits included.
        mode: u32,
    },
}

impl Fingerprint {
    /// Whether something is there.
    pub fn exists(&self) -> bool {
        !matches!(self, Fingerprint::Missing)
    }
}

/// The fingerprint of `path` now.
pub fn fingerprint(path: &Path) -> std::io::Result<Fingerprint> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if missing(&e) => return Ok(Fingerprint::Missing),
        Err(e) => return Err(e),
    };
    let mode = meta.permissions().mode() & 0o7777;
    let t = meta.file_type();
    if t.is_symlink() {
        let target = std::fs::read_link(path)?;
        return Ok(Fingerprint::Symlink {
            target: target.as_os_str().as_bytes().to_vec(),
        });
    }
    if t.is_file() {
        return Ok(Fingerprint::File {
            mode,
            sha256: file_sha256(path)?,
        });
    }
    if t.is_dir() {
        let mut h = Sha256::new();
        tree(path, &mut h)?;
        return Ok(Fingerprint::Dir {
            mode,
            tree: hex(&h.finalize()),
        });
    }
    Ok(Fingerprint::Other { mode: meta.mode() })
}

/// Whether an error means "nothing at that path" (also a component that is a file).
fn missing(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

/// Hash every entry beneath `dir`, sorted by name: its name and its fingerprint.
fn tree(dir: &Path, h: &mut Sha256) -> std::io::Result<()> {
    let mut names: Vec<_> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()?;
    names.sort();
    for name in names {
        let f = fingerprint(&dir.join(&name))?;
        h.update((name.as_bytes().len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        let line = match &f {
            Fingerprint::Missing => "missing".to_owned(),
            Fingerprint::File { mode, sha256 } => format!("file {mode:o} {sha256}"),
            Fingerprint::Symlink { target } => format!("link {}", hex(target)),
            Fingerprint::Dir { mode, tree } => format!("dir {mode:o} {tree}"),
            Fingerprint::Other { mode } => format!("other {mode:o}"),
        };
        h.update(line.as_bytes());
        h.update(b"\n");
    }
    Ok(())
}

/// Lowercase hex SHA-256 of a file's content.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_changes_with_its_content_and_its_mode() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        assert_eq!(fingerprint(&f).unwrap(), Fingerprint::Missing);
        std::fs::write(&f, b"a").unwrap();
        let a = fingerprint(&f).unwrap();
        std::fs::write(&f, b"b").unwrap();
        let b = fingerprint(&f).unwrap();
        assert_ne!(a, b);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_ne!(fingerprint(&f).unwrap(), b);
        assert_eq!(
            fingerprint(&f.join("below")).unwrap(),
            Fingerprint::Missing,
            "a file as a directory component"
        );
    }

    #[test]
    fn a_directory_changes_with_anything_beneath_it() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("d");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/x"), b"1").unwrap();
        let a = fingerprint(&d).unwrap();
        assert_eq!(a, fingerprint(&d).unwrap());
        std::fs::write(d.join("sub/x"), b"2").unwrap();
        assert_ne!(a, fingerprint(&d).unwrap());
    }

    #[test]
    fn a_link_is_its_target_not_what_it_points_to() {
        let t = tempfile::tempdir().unwrap();
        let l = t.path().join("l");
        std::os::unix::fs::symlink("nowhere", &l).unwrap();
        assert_eq!(
            fingerprint(&l).unwrap(),
            Fingerprint::Symlink {
                target: b"nowhere".to_vec()
            }
        );
    }
}
