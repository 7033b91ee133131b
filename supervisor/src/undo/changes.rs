//! Helpers over a call's changes: whether they can be undone, merged per path, and the
//! sizes of the stored contents.

use super::*;

/// Why not everything in `changes` can be put back.
pub(super) fn not_undoable(changes: &[Change], store: &Store) -> Option<String> {
    let mut why = Vec::new();
    for c in changes {
        match &c.before {
            Some(Node::File { stored: false, .. }) => why.push(format!(
                "{}: its content before the call was not kept (over [undo] max_bytes)",
                node::shown(&c.path)
            )),
            Some(Node::File { sha256, .. }) if !store.has(sha256) => why.push(format!(
                "{}: its content before the call is missing from the journal",
                node::shown(&c.path)
            )),
            Some(Node::Other) => why.push(format!("{}: a special file", node::shown(&c.path))),
            _ => {}
        }
    }
    match why.len() {
        0 => None,
        1 => Some(format!("not undoable: {}", why[0])),
        n => Some(format!("not undoable: {} (and {} more)", why[0], n - 1)),
    }
}

/// One change per path: the first state it had and the last (an undo of several calls
/// may change a path more than once).
pub(super) fn coalesce(changes: &[Change]) -> Vec<Change> {
    let mut at: HashMap<&Path, usize> = HashMap::new();
    let mut out: Vec<Change> = Vec::new();
    for c in changes {
        match at.get(c.path.as_path()) {
            Some(&i) => out[i].after = c.after.clone(),
            None => {
                at.insert(&c.path, out.len());
                out.push(c.clone());
            }
        }
    }
    out.retain(|c| !same_state(c.before.as_ref(), c.after.as_ref()));
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

pub(super) fn merge(into: &mut restore::Undone, from: restore::Undone) {
    into.restored.extend(from.restored);
    into.removed.extend(from.removed);
    into.conflicts.extend(from.conflicts);
    into.not_undoable.extend(from.not_undoable);
    into.changes.extend(from.changes);
}

/// The size of every blob under `dir`.
pub(super) fn blob_sizes(dir: &Path) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    for sub in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if sub.file_name() == "tmp" {
            continue;
        }
        for f in std::fs::read_dir(sub.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if let (Some(name), Ok(m)) = (f.file_name().to_str(), f.metadata()) {
                out.insert(name.to_owned(), m.len());
            }
        }
    }
    out
}
