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
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::node::{Node, same_state, shown};
use super::records::CallEntry;
use super::safe::{At, root_of};
use super::snapshot::{Change, HashOnly, look};
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

/// Where the work happens: the store and the roots paths are reached from.
struct Ctx<'a> {
    store: &'a Store,
    roots: &'a [PathBuf],
}

impl Ctx<'_> {
    /// The state of `path` now.
    fn now(&self, path: &Path) -> Option<Node> {
        look(
            self.roots,
            path,
            None,
            &mut HashOnly,
            SystemTime::UNIX_EPOCH,
        )
        .map(|s| s.node)
    }

    fn at(&self, path: &Path, make_parents: bool) -> io::Result<At> {
        let root = root_of(self.roots, path)
            .ok_or_else(|| io::Error::other("it is outside the journaled roots"))?;
        At::reach(root, path, make_parents)
    }

    /// Remove whatever is at `path` (a directory must be empty: its entries are paths
    /// of their own, removed before it).
    fn remove(&self, path: &Path) -> io::Result<()> {
        match self.at(path, false).and_then(|at| at.remove()) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => Err(io::Error::other(
                "the directory holds paths the journal does not know",
            )),
            r => r,
        }
    }

    /// Make `path` be `node` again.
    fn put(&self, path: &Path, node: &Node) -> io::Result<()> {
        let at = self.at(path, true)?;
        match node {
            Node::Dir { mode } => at.make_dir(*mode),
            Node::File { sha256, mode, .. } => {
                at.replace_with_file(&mut self.store.read_checked(sha256)?, *mode)
            }
            Node::Symlink { target } => at.replace_with_symlink(target),
            Node::Other => Err(io::Error::other("a special file cannot be made again")),
        }
    }
}

/// Undo `entries` (newest first) against the workspace under `roots`.
pub fn undo(entries: &[&CallEntry], store: &Store, roots: &[PathBuf], dry_run: bool) -> Undone {
    let cx = Ctx { store, roots };
    let mut out = Undone::default();
    for e in entries {
        undo_one(e, &cx, dry_run, &mut out);
    }
    out
}

fn depth(p: &Path) -> usize {
    p.components().count()
}

fn undo_one(e: &CallEntry, cx: &Ctx<'_>, dry_run: bool, out: &mut Undone) {
    let mut todo: Vec<&Change> = Vec::new();
    for c in &e.changes {
        match why_not(c, cx.store) {
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
        let cur = cx.now(&c.path);
        if same_state(cur.as_ref(), c.before.as_ref()) {
            continue;
        }
        if !same_state(cur.as_ref(), c.after.as_ref()) {
            out.conflicts
                .push((c.path.clone(), changed_since(cur.as_ref())));
            removed_here.insert(c.path.clone());
            continue;
        }
        if !dry_run && let Err(err) = cx.remove(&c.path) {
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
            let cur = cx.now(&c.path);
            if same_state(cur.as_ref(), Some(before)) {
                continue;
            }
            if !same_state(cur.as_ref(), c.after.as_ref()) {
                out.conflicts
                    .push((c.path.clone(), changed_since(cur.as_ref())));
                continue;
            }
        }
        if !dry_run && let Err(err) = cx.put(&c.path, before) {
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
