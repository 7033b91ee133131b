//! Writing a staged command's held changes into the workspace: all of them or none.
//!
//! First every changed path is checked against what the workspace had when the command
//! ended (its [`toolvisor_os::staged::Fingerprint`]); one that differs, or that now lies behind a symlink,
//! stops the whole apply with nothing written. Then every new file and link is written
//! beside its target under a temporary name (copied from the overlay's upper
//! directory, its mode kept). Only then are deletions made and the temporaries renamed
//! into place (each file atomically), what they remove or replace moved aside first. A
//! failure at any step removes the temporaries and moves everything back: the
//! workspace is as it was.
//!
//! [`apply_staged`] is the one place that writes, so a journal of applied changes can
//! hook it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use toolvisor_os::staged::{self, ChangeKind, Held, Manifest};

/// A path a staged apply changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedPath {
    /// The host path written or removed.
    pub target: PathBuf,
    /// As the tools show it.
    pub path: String,
    /// What was done.
    pub kind: ChangeKind,
}

/// Why nothing (or, for [`ApplyError::Io`] while committing, not everything) was
/// applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The workspace changed at this path since the command ended.
    #[error("{path} changed in the workspace since the staged command ran: nothing was applied")]
    Stale {
        /// The path, as the tools show it.
        path: String,
    },
    /// The record names a path no root holds (a root gone since, or a path that
    /// leaves its root).
    #[error("{path} is not inside a workspace root: nothing was applied")]
    Outside {
        /// The path, as the tools show it.
        path: String,
    },
    /// The OS refused a step.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path, as the tools show it.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// A new file, link or directory prepared for one change.
struct Prepared<'a> {
    held: &'a Held,
    target: PathBuf,
    /// The temporary beside the target (None: a directory, made at commit).
    temp: Option<PathBuf>,
    /// A new directory's mode.
    dir_mode: Option<u32>,
}

/// Apply every change of `manifest` (staging directory `dir`) beneath `roots` (0:
/// `private`, 1: `shared`), or none of them.
pub fn apply_staged(
    manifest: &Manifest,
    dir: &Path,
    roots: &[PathBuf],
) -> Result<Vec<AppliedPath>, ApplyError> {
    let mut targets = Vec::with_capacity(manifest.changes.len());
    for h in &manifest.changes {
        let target = target_of(h, roots)?;
        let now = staged::fingerprint(&target).map_err(|e| io("read", h, e))?;
        if now != h.before {
            return Err(ApplyError::Stale {
                path: h.path.clone(),
            });
        }
        targets.push(target);
    }
    let mut prepared = Vec::new();
    for (h, target) in manifest.changes.iter().zip(&targets) {
        if h.kind == ChangeKind::Deleted {
            continue;
        }
        let source = staged::upper(dir, h.root).join(h.rel_path());
        match prepare(h, &source, target, &roots[h.root]) {
            Ok(p) => prepared.push(p),
            Err(e) => {
                discard(&prepared);
                return Err(e);
            }
        }
    }
    commit(manifest, &targets, &prepared)
}

/// The host path of `h`, checked: a plain relative path inside its root, with no
/// symlink between the root and it (a directory swapped for a link since would send
/// the write elsewhere).
fn target_of(h: &Held, roots: &[PathBuf]) -> Result<PathBuf, ApplyError> {
    let outside = || ApplyError::Outside {
        path: h.path.clone(),
    };
    let root = roots.get(h.root).ok_or_else(outside)?;
    let rel = h.rel_path();
    if rel.as_os_str().is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(outside());
    }
    let mut at = root.clone();
    let parents: Vec<_> = rel.components().collect();
    for c in &parents[..parents.len() - 1] {
        at.push(c);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(ApplyError::Stale {
                path: h.path.clone(),
            });
        }
    }
    Ok(root.join(rel))
}

fn io(what: &'static str, h: &Held, source: std::io::Error) -> ApplyError {
    ApplyError::Io {
        what,
        path: h.path.clone(),
        source,
    }
}

/// Write the new file or link of `h` under a temporary name beside `target` (in the
/// nearest directory that exists, within `root`, when its parent does not yet).
fn prepare<'a>(
    h: &'a Held,
    source: &Path,
    target: &Path,
    root: &Path,
) -> Result<Prepared<'a>, ApplyError> {
    let meta = std::fs::symlink_metadata(source).map_err(|e| io("read the staged", h, e))?;
    let mode = meta.permissions().mode() & 0o7777;
    if meta.is_dir() {
        return Ok(Prepared {
            held: h,
            target: target.to_path_buf(),
            temp: None,
            dir_mode: Some(mode),
        });
    }
    let temp = temp_beside(target, root);
    if meta.file_type().is_symlink() {
        let to = std::fs::read_link(source).map_err(|e| io("read the staged", h, e))?;
        std::os::unix::fs::symlink(&to, &temp).map_err(|e| io("write", h, e))?;
    } else {
        let written = std::fs::copy(source, &temp)
            .and_then(|_| std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(mode)));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(io("write", h, e));
        }
    }
    Ok(Prepared {
        held: h,
        target: target.to_path_buf(),
        temp: Some(temp),
        dir_mode: None,
    })
}

/// A fresh temporary name in `target`'s directory, or in the nearest ancestor
/// directory that exists (down to `root`).
fn temp_beside(target: &Path, root: &Path) -> PathBuf {
    let mut dir = target.parent().unwrap_or(root);
    while !dir.is_dir() && dir != root {
        dir = dir.parent().unwrap_or(root);
    }
    let mut bytes = [0u8; 8];
    let _ = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    let n = u64::from_le_bytes(bytes) ^ u64::from(std::process::id());
    dir.join(format!(".toolvisor-staged-{n:016x}"))
}

/// Remove the temporaries of `prepared`.
fn discard(prepared: &[Prepared<'_>]) {
    for p in prepared {
        if let Some(t) = &p.temp {
            let _ = std::fs::remove_file(t);
        }
    }
}

/// One step of a commit, and how to take it back.
enum Undo {
    /// `target` was moved aside to `backup`: move it back.
    Restore { backup: PathBuf, target: PathBuf },
    /// `target` is new: remove it (a directory with what it holds).
    Remove(PathBuf),
}

impl Undo {
    fn run(&self) {
        let undone = match self {
            Undo::Restore { backup, target } => std::fs::rename(backup, target),
            Undo::Remove(target) => remove_any(target),
        };
        if let Err(e) = undone {
            tracing::warn!("cannot undo a staged apply step ({e})");
        }
    }
}

/// Deletions first (what a new entry replaces goes with them), deepest first; then
/// directories and renames, shallow first. What is removed or replaced is first moved
/// aside beside itself (a rename, on the same file system), so a failure part way
/// puts everything back: all or nothing. The moved-aside entries are removed at the
/// end.
fn commit(
    manifest: &Manifest,
    targets: &[PathBuf],
    prepared: &[Prepared<'_>],
) -> Result<Vec<AppliedPath>, ApplyError> {
    let mut undo = Vec::new();
    let mut applied = Vec::new();
    let result = commit_steps(manifest, targets, prepared, &mut undo, &mut applied);
    match result {
        Ok(()) => {
            for u in &undo {
                if let Undo::Restore { backup, .. } = u
                    && let Err(e) = remove_any(backup)
                {
                    tracing::warn!("cannot remove {backup:?} after a staged apply: {e}");
                }
            }
            Ok(applied)
        }
        Err(e) => {
            for u in undo.iter().rev() {
                u.run();
            }
            discard(prepared);
            Err(e)
        }
    }
}

fn commit_steps(
    manifest: &Manifest,
    targets: &[PathBuf],
    prepared: &[Prepared<'_>],
    undo: &mut Vec<Undo>,
    applied: &mut Vec<AppliedPath>,
) -> Result<(), ApplyError> {
    let mut doomed: Vec<(&Held, &PathBuf)> = manifest
        .changes
        .iter()
        .zip(targets)
        .filter(|(h, _)| h.kind == ChangeKind::Deleted)
        .collect();
    doomed.sort_by_key(|(_, t)| std::cmp::Reverse(t.components().count()));
    for (h, target) in doomed {
        set_aside(target, false, undo).map_err(|e| io("remove", h, e))?;
        applied.push(AppliedPath {
            target: target.clone(),
            path: h.path.clone(),
            kind: h.kind,
        });
    }
    for p in prepared {
        place(p, undo).map_err(|e| io("write", p.held, e))?;
        applied.push(AppliedPath {
            target: p.target.clone(),
            path: p.held.path.clone(),
            kind: p.held.kind,
        });
    }
    Ok(())
}

/// Keep what is at `target` aside (nothing there: nothing to do). A file or link gets
/// a second name (a hard link), so it stays in place until it is replaced in one
/// rename (`replace`) or removed; a directory, or a file system without hard links,
/// is renamed aside.
fn set_aside(target: &Path, replace: bool, undo: &mut Vec<Undo>) -> std::io::Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(target) else {
        return Ok(());
    };
    let root = target.parent().unwrap_or(target);
    let backup = temp_beside(target, root);
    let restore = Undo::Restore {
        backup: backup.clone(),
        target: target.to_path_buf(),
    };
    if !meta.is_dir() && std::fs::hard_link(target, &backup).is_ok() {
        undo.push(restore);
        if !replace {
            std::fs::remove_file(target)?;
        }
        return Ok(());
    }
    std::fs::rename(target, &backup)?;
    undo.push(restore);
    Ok(())
}

/// Make the missing parents of `target` (each recorded for the undo).
fn make_parents(target: &Path, undo: &mut Vec<Undo>) -> std::io::Result<()> {
    let Some(parent) = target.parent() else {
        return Ok(());
    };
    let mut missing = Vec::new();
    let mut at = Some(parent);
    while let Some(p) = at.filter(|p| std::fs::symlink_metadata(p).is_err()) {
        missing.push(p.to_path_buf());
        at = p.parent();
    }
    for dir in missing.into_iter().rev() {
        std::fs::create_dir(&dir)?;
        undo.push(Undo::Remove(dir));
    }
    Ok(())
}

/// Put one prepared entry in place: its parents made, what is there moved aside
/// (another file, or something of another type), the temporary renamed over the target
/// (or the directory made).
fn place(p: &Prepared<'_>, undo: &mut Vec<Undo>) -> std::io::Result<()> {
    make_parents(&p.target, undo)?;
    let there = std::fs::symlink_metadata(&p.target).ok();
    match (&p.temp, p.dir_mode) {
        (Some(temp), _) => {
            set_aside(&p.target, true, undo)?;
            std::fs::rename(temp, &p.target)?;
            undo.push(Undo::Remove(p.target.clone()));
            Ok(())
        }
        (None, mode) => {
            if there.as_ref().is_some_and(|m| m.is_dir()) {
                return Ok(());
            }
            set_aside(&p.target, false, undo)?;
            std::fs::create_dir(&p.target)?;
            undo.push(Undo::Remove(p.target.clone()));
            match mode {
                Some(m) => std::fs::set_permissions(&p.target, std::fs::Permissions::from_mode(m)),
                None => Ok(()),
            }
        }
    }
}

/// Remove a file, link or whole directory; nothing there is fine.
fn remove_any(p: &Path) -> std::io::Result<()> {
    let removed = match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) => Err(e),
    };
    match removed {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests;
