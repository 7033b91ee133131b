//! Putting paths back: for each call, newest first, every path it changed goes back to
//! what it was before — but only a path that is still exactly what the call left
//! (anything else changed it since: a conflict, left as it is). Removals go deepest
//! first, then what was there comes back shallowest first, so a directory replaced by
//! a file and back, or a tree removed with `rm -rf`, return whole. Each file comes back
//! atomically (a temporary name beside it, then a rename over).
//!
//! Running the same undo again changes nothing: a path already as it was before is
//! skipped, so an undo cut short by a crash is finished by running it again.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::node::{Node, same_state, shown};
use super::records::CallEntry;
use super::snapshot::{Change, Keeper, look};
use super::store::Store;

/// What an undo did (or, dry, would do).
#[derive(Debug, Default)]
pub struct Undone {
    /// Paths put back to an earlier content or made again.
    pub restored: Vec<PathBuf>,
    /// Paths removed (the calls made them).
    pub removed: Vec<PathBuf>,
    /// Paths left alone, and why.
    pub conflicts: Vec<(PathBuf, String)>,
    /// Calls (or parts of them) that cannot be put back, and why.
    pub not_undoable: Vec<(String, String)>,
    /// What the undo itself changed (its own journal record: undoing it redoes).
    pub changes: Vec<Change>,
}

/// Hash without keeping: what is there now.
struct HashOnly;

impl Keeper for HashOnly {
    fn keep(&mut self, path: &Path, _size: u64) -> io::Result<(String, bool)> {
        Ok((Store::hash(path)?.sha256, false))
    }
}

/// The state of `path` now.
fn now(path: &Path) -> Option<Node> {
    look(path, None, &mut HashOnly, SystemTime::UNIX_EPOCH).map(|s| s.node)
}

/// Undo `entries` (newest first) against the workspace.
pub fn undo(entries: &[&CallEntry], store: &Store, dry_run: bool) -> Undone {
    let mut out = Undone::default();
    for e in entries {
        undo_one(e, store, dry_run, &mut out);
    }
    out
}

fn depth(p: &Path) -> usize {
    p.components().count()
}

fn undo_one(e: &CallEntry, store: &Store, dry_run: bool, out: &mut Undone) {
    let mut todo: Vec<&Change> = Vec::new();
    for c in &e.changes {
        match why_not(c, store) {
            Some(why) => out
                .not_undoable
                .push((e.call.clone(), format!("{}: {why}", shown(&c.path)))),
            None => todo.push(c),
        }
    }
    // Pass 1, deepest first: remove what the call made where something else was (or
    // nothing).
    let mut removed_here = std::collections::HashSet::new();
    todo.sort_by_key(|c| std::cmp::Reverse(depth(&c.path)));
    for c in &todo {
        let kind_changed = match (&c.before, &c.after) {
            (None, Some(_)) => true,
            (Some(b), Some(a)) => std::mem::discriminant(b) != std::mem::discriminant(a),
            _ => false,
        };
        if !kind_changed {
            continue;
        }
        let cur = now(&c.path);
        if same_state(cur.as_ref(), c.before.as_ref()) {
            continue;
        }
        if !same_state(cur.as_ref(), c.after.as_ref()) {
            out.conflicts
                .push((c.path.clone(), changed_since(cur.as_ref())));
            removed_here.insert(c.path.clone());
            continue;
        }
        if !dry_run && let Err(err) = remove(&c.path) {
            out.conflicts
                .push((c.path.clone(), format!("cannot remove it: {err}")));
            removed_here.insert(c.path.clone());
            continue;
        }
        if c.before.is_none() {
            out.removed.push(c.path.clone());
            out.changes.push(reverse(c));
        } else {
            removed_here.insert(c.path.clone());
        }
    }
    // Pass 2, shallowest first: put back what was there.
    todo.reverse();
    for c in &todo {
        let Some(before) = &c.before else { continue };
        let cleared = removed_here.contains(&c.path);
        if cleared && out.conflicts.iter().any(|(p, _)| p == &c.path) {
            continue;
        }
        if !cleared {
            let cur = now(&c.path);
            if same_state(cur.as_ref(), Some(before)) {
                continue;
            }
            if !same_state(cur.as_ref(), c.after.as_ref()) {
                out.conflicts
                    .push((c.path.clone(), changed_since(cur.as_ref())));
                continue;
            }
        }
        if !dry_run && let Err(err) = put(&c.path, before, store) {
            out.conflicts
                .push((c.path.clone(), format!("cannot put it back: {err}")));
            continue;
        }
        out.restored.push(c.path.clone());
        out.changes.push(reverse(c));
    }
}

/// Why `c` cannot be put back, if it cannot.
fn why_not(c: &Change, store: &Store) -> Option<String> {
    match &c.before {
        Some(Node::File {
            stored: false,
            size,
            ..
        }) => Some(format!(
            "its content before the call ({size} bytes) was not kept (over [undo] max_bytes)"
        )),
        Some(Node::File { sha256, .. }) if !store.has(sha256) => Some(
            "its content before the call was dropped from the journal (over [undo] max_bytes)"
                .into(),
        ),
        Some(Node::Other) => Some("it was a special file (socket, FIFO or device)".into()),
        _ => None,
    }
}

fn changed_since(cur: Option<&Node>) -> String {
    match cur {
        None => "changed since: it is gone".into(),
        Some(n) => format!("changed since: it is now a different {}", n.kind()),
    }
}

/// The change that undoing `c` makes.
fn reverse(c: &Change) -> Change {
    Change {
        path: c.path.clone(),
        before: c.after.clone(),
        after: c.before.clone(),
    }
}

/// Remove whatever is at `path` (a directory must be empty: its entries are paths of
/// their own, removed before it).
fn remove(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => std::fs::remove_dir(path).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOTEMPTY) {
                io::Error::other("the directory holds paths the journal does not know")
            } else {
                e
            }
        }),
        Ok(_) => std::fs::remove_file(path),
    }
}

/// Make `path` be `node` again.
fn put(path: &Path, node: &Node, store: &Store) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match node {
        Node::Dir { mode } => {
            match std::fs::create_dir(path) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                r => r?,
            }
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode))
        }
        Node::File { sha256, mode, .. } => {
            let tmp = beside(path);
            let mut src = store.read(sha256)?;
            let mut dst = std::fs::File::create(&tmp)?;
            io::copy(&mut src, &mut dst)?;
            dst.set_permissions(std::fs::Permissions::from_mode(*mode))?;
            dst.sync_data()?;
            replace(&tmp, path)
        }
        Node::Symlink { target } => {
            let tmp = beside(path);
            std::os::unix::fs::symlink(target, &tmp)?;
            replace(&tmp, path)
        }
        Node::Other => Err(io::Error::other("a special file cannot be made again")),
    }
}

/// Rename `tmp` over `path`; a directory in the way (already emptied) is removed first.
fn replace(tmp: &Path, path: &Path) -> io::Result<()> {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        std::fs::remove_dir(path)?;
    }
    std::fs::rename(tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(tmp);
    })
}

/// A temporary name in `path`'s directory.
fn beside(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut name = std::ffi::OsString::from(".toolvisor-undo-");
    name.push(format!("{}-{n}", std::process::id()));
    path.with_file_name(name)
}
