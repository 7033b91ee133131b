//! A snapshot of the journaled part of the workspace: every path under the writable
//! roots that git does not ignore (`.gitignore`, `.git/info/exclude`, the person's
//! global excludes), `.git` included but not its object database, the state directory
//! left out — each with its [`Node`] and the `stat` [`Stamp`] it had.
//!
//! Taking one again is cheap: a path whose stamp did not change keeps its node (and
//! its blob), only changed files are read. A file modified in the same clock tick as it
//! was read would keep its stamp, so a file whose mtime is that recent is marked racy
//! and read again next time (git's index has the same rule).

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::node::{Node, Stamp, bytes_path};
use super::safe::{At, root_of};
use super::store::Store;

/// What was seen of one path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// Its state.
    pub node: Node,
    /// Its `stat`, to tell next time whether it must be read again.
    pub stamp: Stamp,
    /// Modified too recently for the stamp to vouch for the content.
    #[serde(default)]
    pub racy: bool,
}

/// A snapshot: absolute path → what was there.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tree(#[serde(with = "tree_serde")] pub BTreeMap<PathBuf, Seen>);

/// Where snapshots look and what they leave out.
#[derive(Clone, Debug)]
pub struct Scope {
    /// The writable roots (canonical).
    pub roots: Vec<PathBuf>,
    /// Paths never journaled (the state directory).
    pub skip: Vec<PathBuf>,
}

/// How a content is kept when a snapshot reads it.
pub trait Keeper {
    /// Read `file` (a regular file of `size` bytes): its hash, and whether its content
    /// is now kept.
    fn keep(&mut self, file: &mut File, size: u64) -> io::Result<(String, bool)>;
}

/// Keep every content in `store` (no bound).
pub struct KeepAll<'a>(pub &'a Store);

impl Keeper for KeepAll<'_> {
    fn keep(&mut self, file: &mut File, _size: u64) -> io::Result<(String, bool)> {
        Ok((self.0.put(file)?.sha256, true))
    }
}

/// Hash without keeping: what is there now.
pub struct HashOnly;

impl Keeper for HashOnly {
    fn keep(&mut self, file: &mut File, _size: u64) -> io::Result<(String, bool)> {
        Ok((Store::hash(file)?.sha256, false))
    }
}

/// How recent an mtime makes a file racy.
const RACY: Duration = Duration::from_millis(50);

impl Scope {
    /// Whether `path` is journaled at all (inside a root, not skipped, not in
    /// `.git/objects`). Ignore files are not consulted here.
    pub fn covers(&self, path: &Path) -> bool {
        self.roots.iter().any(|r| path.starts_with(r))
            && !self.skip.iter().any(|s| path.starts_with(s))
            && !in_object_store(path)
    }

    /// Snapshot the whole scope, reusing what `prev` knew of unchanged paths.
    ///
    /// The walk is put in path order, so `prev` is read alongside it in one pass (no
    /// lookup per path) and the new tree is built from a sorted list.
    pub fn take(&self, prev: &Tree, keeper: &mut dyn Keeper) -> Tree {
        let started = SystemTime::now();
        let mut prev_seen = prev.0.iter().peekable();
        let mut out = Vec::new();
        for (path, stamp) in super::walk::list(&self.roots, &self.skip) {
            let before = seek(&mut prev_seen, &path);
            // Unchanged since the last look (the walk's own `lstat` says so): what
            // was seen then stands, without reaching the path again. Anything else
            // is looked at safely (`At`), which is where contents are read.
            if let (Some(p), Some(stamp)) = (before, stamp)
                && p.stamp == stamp
                && !p.racy
            {
                out.push((path, p.clone()));
                continue;
            }
            if let Some(seen) = look(&self.roots, &path, before, keeper, started) {
                out.push((path, seen));
            }
        }
        Tree(out.into_iter().collect())
    }

    /// `paths` and, for each, its missing ancestors up to the first that exists: a
    /// write that makes directories is then seen making them.
    pub fn with_missing_ancestors(&self, paths: &[PathBuf]) -> Vec<PathBuf> {
        let mut out = std::collections::BTreeSet::new();
        for p in paths.iter().filter(|p| self.covers(p)) {
            out.insert(p.clone());
            for a in p.ancestors().skip(1) {
                if !self.covers(a) || std::fs::symlink_metadata(a).is_ok() {
                    break;
                }
                out.insert(a.to_path_buf());
            }
        }
        out.into_iter().collect()
    }

    /// Snapshot exactly `paths` (see [`Scope::with_missing_ancestors`]).
    pub fn take_paths(&self, paths: &[PathBuf], prev: &Tree, keeper: &mut dyn Keeper) -> Tree {
        let started = SystemTime::now();
        let mut out = BTreeMap::new();
        for p in paths.iter().filter(|p| self.covers(p)) {
            if let Some(seen) = look(&self.roots, p, prev.0.get(p), keeper, started) {
                out.insert(p.clone(), seen);
            }
        }
        Tree(out)
    }
}

/// The entry of `prev` for `path`, moving `prev` past every path before it (both go in
/// path order).
fn seek<'a>(
    prev: &mut std::iter::Peekable<std::collections::btree_map::Iter<'a, PathBuf, Seen>>,
    path: &Path,
) -> Option<&'a Seen> {
    while let Some((p, seen)) = prev.peek() {
        match super::walk::path_order(p, path) {
            std::cmp::Ordering::Less => {
                prev.next();
            }
            std::cmp::Ordering::Equal => {
                let seen = *seen;
                prev.next();
                return Some(seen);
            }
            std::cmp::Ordering::Greater => return None,
        }
    }
    None
}

/// Whether `path` is in a git object database (immutable, content-addressed: new
/// objects are harmless to leave, and copying packs would cost more than it saves).
pub(super) fn in_object_store(path: &Path) -> bool {
    let mut prev: Option<&std::ffi::OsStr> = None;
    for c in path.components() {
        let c = c.as_os_str();
        if c == "objects" && prev == Some(std::ffi::OsStr::new(".git")) {
            return true;
        }
        prev = Some(c);
    }
    false
}

/// What is at `path` now (`None`: nothing, or it vanished while looked at), reached
/// from its root in `roots` without following a symlink ([`At`]).
pub fn look(
    roots: &[PathBuf],
    path: &Path,
    prev: Option<&Seen>,
    keeper: &mut dyn Keeper,
    now: SystemTime,
) -> Option<Seen> {
    let at = At::reach(root_of(roots, path)?, path, false).ok()?;
    let st = at.stat().ok()?;
    let stamp = Stamp::of_stat(&st);
    if let Some(p) = prev
        && p.stamp == stamp
        && !p.racy
    {
        return Some(p.clone());
    }
    let mode = st.st_mode & 0o7777;
    let node = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => {
            let (mut file, fst) = at.open_file().ok()?;
            if fst.st_ino != st.st_ino {
                // Replaced between the two looks: the next snapshot sees it.
                return None;
            }
            let (sha256, stored) = keeper.keep(&mut file, fst.st_size as u64).ok()?;
            Node::File {
                sha256,
                mode,
                size: fst.st_size as u64,
                stored,
            }
        }
        libc::S_IFDIR => Node::Dir { mode },
        libc::S_IFLNK => Node::Symlink {
            target: at.readlink().ok()?,
        },
        _ => Node::Other,
    };
    let modified = std::time::UNIX_EPOCH
        + std::time::Duration::new(st.st_mtime.max(0) as u64, st.st_mtime_nsec as u32);
    let racy = matches!(node, Node::File { .. }) && modified + RACY >= now;
    Some(Seen { node, stamp, racy })
}

/// One change between two snapshots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The path.
    #[serde(with = "bytes_path")]
    pub path: PathBuf,
    /// What was there before (`None`: nothing).
    pub before: Option<Node>,
    /// What is there after.
    pub after: Option<Node>,
}

/// The paths whose state differs between `before` and `after`, in path order.
pub fn diff(before: &Tree, after: &Tree) -> Vec<Change> {
    paired(before, after)
        .filter(|(_, b, a)| !super::node::same_state(b.map(|s| &s.node), a.map(|s| &s.node)))
        .map(|(path, b, a)| Change {
            path: path.clone(),
            before: b.map(|s| s.node.clone()),
            after: a.map(|s| s.node.clone()),
        })
        .collect()
}

/// What one path was in each of two trees.
type Pair<'a> = (&'a PathBuf, Option<&'a Seen>, Option<&'a Seen>);

/// Every path of `before` and `after` once, in path order, with what each tree has
/// of it: one pass over both (they are sorted alike).
fn paired<'a>(before: &'a Tree, after: &'a Tree) -> impl Iterator<Item = Pair<'a>> {
    use std::cmp::Ordering;
    let (mut b, mut a) = (before.0.iter().peekable(), after.0.iter().peekable());
    std::iter::from_fn(move || {
        let order = match (b.peek(), a.peek()) {
            (None, None) => return None,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((bp, _)), Some((ap, _))) => bp.cmp(ap),
        };
        match order {
            Ordering::Less => b.next().map(|(p, s)| (p, Some(s), None)),
            Ordering::Greater => a.next().map(|(p, s)| (p, None, Some(s))),
            Ordering::Equal => b
                .next()
                .zip(a.next())
                .map(|((p, x), (_, y))| (p, Some(x), Some(y))),
        }
    })
}

mod tree_serde {
    use super::*;
    use serde::{Deserializer, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Entry {
        #[serde(with = "bytes_path")]
        path: PathBuf,
        seen: Seen,
    }

    pub fn serialize<S: Serializer>(m: &BTreeMap<PathBuf, Seen>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(m.iter().map(|(p, seen)| Entry {
            path: p.clone(),
            seen: seen.clone(),
        }))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<PathBuf, Seen>, D::Error> {
        let v: Vec<Entry> = Vec::deserialize(d)?;
        Ok(v.into_iter().map(|e| (e.path, e.seen)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(root: &Path) -> Scope {
        Scope {
            roots: vec![root.to_path_buf()],
            skip: vec![root.join(".toolvisor")],
        }
    }

    #[test]
    fn a_snapshot_sees_files_dirs_links_and_leaves_out_ignored_and_state() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(&d.path().join("blobs")).unwrap();
        let w = d.path().join("w");
        std::fs::create_dir_all(w.join("src")).unwrap();
        std::fs::create_dir_all(w.join(".toolvisor")).unwrap();
        std::fs::create_dir_all(w.join("target")).unwrap();
        std::fs::create_dir_all(w.join(".git/objects/ab")).unwrap();
        std::fs::write(w.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(w.join(".git/objects/ab/cd"), "x").unwrap();
        std::fs::write(w.join(".gitignore"), "target/\n").unwrap();
        std::fs::write(w.join("src/a.rs"), "fn a() {}").unwrap();
        std::fs::write(w.join("target/out"), "x").unwrap();
        std::fs::write(w.join(".toolvisor/state"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", w.join("link")).unwrap();
        let t = scope(&w).take(&Tree::default(), &mut KeepAll(&store));
        let names: Vec<_> =
            t.0.keys()
                .map(|p| p.strip_prefix(&w).unwrap().to_string_lossy().into_owned())
                .collect();
        assert_eq!(
            names,
            [".git", ".git/HEAD", ".gitignore", "link", "src", "src/a.rs"]
        );
        assert_eq!(
            t.0[&w.join("link")].node,
            Node::Symlink {
                target: "/etc/passwd".into()
            }
        );
    }

    #[test]
    fn a_diff_names_what_was_made_changed_and_removed() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(&d.path().join("blobs")).unwrap();
        let w = d.path().join("w");
        std::fs::create_dir_all(&w).unwrap();
        std::fs::write(w.join("keep"), "k").unwrap();
        std::fs::write(w.join("change"), "1").unwrap();
        std::fs::write(w.join("gone"), "g").unwrap();
        let s = scope(&w);
        let before = s.take(&Tree::default(), &mut KeepAll(&store));
        std::fs::write(w.join("change"), "2").unwrap();
        std::fs::remove_file(w.join("gone")).unwrap();
        std::fs::create_dir(w.join("new")).unwrap();
        let after = s.take(&before, &mut KeepAll(&store));
        let changed: Vec<_> = diff(&before, &after)
            .into_iter()
            .map(|c| {
                (
                    c.path.file_name().unwrap().to_owned(),
                    c.before.is_some(),
                    c.after.is_some(),
                )
            })
            .collect();
        assert_eq!(
            changed,
            [
                ("change".into(), true, true),
                ("gone".into(), true, false),
                ("new".into(), false, true)
            ]
        );
    }

    #[test]
    fn a_root_inside_another_is_walked_once_and_in_path_order() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(&d.path().join("blobs")).unwrap();
        let w = d.path().join("w");
        for p in ["b/x", "a.b", "a/z", "sh/c"] {
            std::fs::create_dir_all(w.join(p).parent().unwrap()).unwrap();
            std::fs::write(w.join(p), p).unwrap();
        }
        let s = Scope {
            roots: vec![w.join("sh"), w.clone()],
            skip: vec![],
        };
        let t = s.take(&Tree::default(), &mut KeepAll(&store));
        let names: Vec<_> =
            t.0.keys()
                .map(|p| p.strip_prefix(&w).unwrap().to_string_lossy().into_owned())
                .collect();
        assert_eq!(names, ["a", "a/z", "a.b", "b", "b/x", "sh", "sh/c"]);
        std::fs::write(w.join("sh/c"), "changed").unwrap();
        let again = s.take(&t, &mut KeepAll(&store));
        let changed: Vec<_> = diff(&t, &again).into_iter().map(|c| c.path).collect();
        assert_eq!(changed, [w.join("sh/c")]);
    }

    #[test]
    fn named_paths_bring_their_missing_ancestors() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(&d.path().join("blobs")).unwrap();
        let w = d.path().join("w");
        std::fs::create_dir_all(&w).unwrap();
        let s = scope(&w);
        let target = w.join("a/b/c.txt");
        let paths = s.with_missing_ancestors(std::slice::from_ref(&target));
        assert_eq!(paths.len(), 3);
        let before = s.take_paths(&paths, &Tree::default(), &mut KeepAll(&store));
        assert!(before.0.is_empty(), "nothing there yet: {before:?}");
        std::fs::create_dir_all(w.join("a/b")).unwrap();
        std::fs::write(&target, "x").unwrap();
        let after = s.take_paths(&paths, &before, &mut KeepAll(&store));
        assert_eq!(after.0.len(), 3, "a, a/b and the file: {after:?}");
    }
}
