//! What the journal knows of one path at one moment: a file (its content's SHA-256 and
//! mode), a directory (its mode), a symbolic link (its target, never followed), or
//! nothing there. Paths and link targets are bytes: a workspace may hold names that are
//! not UTF-8, and those must come back exactly.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One path's state. `None` (in an `Option<Node>`) is "nothing there".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Node {
    /// A regular file.
    File {
        /// Lowercase hex SHA-256 of the content.
        sha256: String,
        /// Permission bits (`0o7777`).
        mode: u32,
        /// Length in bytes.
        size: u64,
        /// Whether the content is in the blob store (a file over the journal's bound is
        /// only hashed: a change to it can be detected, not put back).
        stored: bool,
    },
    /// A directory (its entries are paths of their own).
    Dir {
        /// Permission bits.
        mode: u32,
    },
    /// A symbolic link.
    Symlink {
        /// Where it points, as written.
        #[serde(with = "bytes_path")]
        target: PathBuf,
    },
    /// Something the journal cannot put back (a socket, a FIFO, a device).
    Other,
}

impl Node {
    /// Whether `self` and `other` are the same state (a file's `stored` flag aside).
    pub fn same(&self, other: &Node) -> bool {
        match (self, other) {
            (
                Node::File {
                    sha256: a, mode: m, ..
                },
                Node::File {
                    sha256: b, mode: n, ..
                },
            ) => a == b && m == n,
            _ => self == other,
        }
    }

    /// What kind of thing this is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Node::File { .. } => "file",
            Node::Dir { .. } => "directory",
            Node::Symlink { .. } => "symbolic link",
            Node::Other => "special file",
        }
    }

    /// The blob a file's content is kept under, when it is kept.
    pub fn blob(&self) -> Option<&str> {
        match self {
            Node::File {
                sha256,
                stored: true,
                ..
            } => Some(sha256),
            _ => None,
        }
    }
}

/// Two optional states are the same (both absent, or the same node).
pub fn same_state(a: Option<&Node>, b: Option<&Node>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.same(b),
        _ => false,
    }
}

/// The permission bits of a file's metadata.
pub fn mode_of(meta: &std::fs::Metadata) -> u32 {
    meta.permissions().mode() & 0o7777
}

/// What `stat` says without the content: enough to tell that a file did not change
/// since it was hashed (as git's index does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// Device and inode.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// Status change time, nanoseconds since the epoch.
    pub ctime_ns: i128,
    /// The whole `st_mode` (type and permissions).
    pub mode: u32,
}

impl Stamp {
    /// The stamp of a `stat` result.
    pub fn of_stat(st: &rustix::fs::Stat) -> Stamp {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Stamp {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size as u64,
            mtime_ns: ns(st.st_mtime, st.st_mtime_nsec as i64),
            ctime_ns: ns(st.st_ctime, st.st_ctime_nsec as i64),
            mode: st.st_mode,
        }
    }

    /// The stamp of `meta` (from `lstat`).
    pub fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            mode: meta.mode(),
        }
    }
}

/// Paths as bytes on the wire: a string when they are UTF-8, `{"bytes": [...]}`
/// otherwise.
pub mod bytes_path {
    use super::*;

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Text(String),
        Bytes { bytes: Vec<u8> },
    }

    /// Serialise a path.
    pub fn serialize<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
        match p.to_str() {
            Some(t) => Repr::Text(t.to_owned()),
            None => Repr::Bytes {
                bytes: p.as_os_str().as_bytes().to_vec(),
            },
        }
        .serialize(s)
    }

    /// Deserialise a path.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        Ok(match Repr::deserialize(d)? {
            Repr::Text(t) => PathBuf::from(t),
            Repr::Bytes { bytes } => PathBuf::from(OsString::from_vec(bytes)),
        })
    }
}

/// An optional list of paths, each as [`bytes_path`] writes it.
pub mod opt_paths {
    use super::*;

    #[derive(Serialize, Deserialize)]
    struct P(#[serde(with = "bytes_path")] PathBuf);

    /// Serialise.
    pub fn serialize<S: Serializer>(v: &Option<Vec<PathBuf>>, s: S) -> Result<S::Ok, S::Error> {
        v.as_ref()
            .map(|v| v.iter().map(|p| P(p.clone())).collect::<Vec<_>>())
            .serialize(s)
    }

    /// Deserialise.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<PathBuf>>, D::Error> {
        Ok(Option::<Vec<P>>::deserialize(d)?.map(|v| v.into_iter().map(|p| p.0).collect()))
    }
}

/// A path for people: lossy where it is not UTF-8.
pub fn shown(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct P(#[serde(with = "bytes_path")] PathBuf);

    #[test]
    fn paths_that_are_not_utf8_come_back_exactly() {
        for raw in [&b"a/b.txt"[..], b"new\nline", b"bad\xff\xfename"] {
            let p = P(PathBuf::from(OsString::from_vec(raw.to_vec())));
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(serde_json::from_str::<P>(&json).unwrap(), p);
        }
    }

    #[test]
    fn a_file_is_the_same_whether_or_not_its_content_was_kept() {
        let f = |stored| Node::File {
            sha256: "ab".into(),
            mode: 0o644,
            size: 1,
            stored,
        };
        assert!(f(true).same(&f(false)));
        assert!(!f(true).same(&Node::Dir { mode: 0o644 }));
        assert!(same_state(None, None) && !same_state(Some(&f(true)), None));
    }
}
