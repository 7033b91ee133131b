//! Lexical resolution: which root a path names and where beneath it, without touching
//! the file system. A path is a `scope:` prefix and a path in that root, a path
//! relative to the workspace, or an absolute host path inside some root; `.` and `..`
//! are folded, and a `..` that climbs above its root is refused here, before any open.

use std::path::{Component, Path, PathBuf};

use super::errors::outside;
use super::{Resolved, Resolver};
use crate::ToolError;

/// The scopes a path may name with a `scope:` prefix.
const SCOPES: [&str; 3] = ["private", "shared", "public"];

impl Resolver {
    /// Lexically resolve `path` (scope prefix, relative or absolute inside a root).
    ///
    /// Empty paths and paths with NUL bytes are `InvalidParams`; an unconfigured scope is
    /// `InvalidParams` naming it; `..` above the root or an absolute path outside every
    /// root is `PathOutsideWorkspace`.
    pub fn resolve(&self, path: &str) -> Result<Resolved, ToolError> {
        if path.is_empty() {
            return Err(ToolError::invalid("the path is empty"));
        }
        if path.contains('\0') {
            return Err(ToolError::invalid("the path contains a NUL byte"));
        }
        if let Some((scope, rest)) = split_scope(path) {
            let root = self.scope_index(scope)?;
            let rel = normalise(Path::new(rest.trim_start_matches('/')), path)?;
            return Ok(self.make(root, rel));
        }
        let p = Path::new(path);
        if p.is_absolute() {
            return self.resolve_absolute(p, path);
        }
        let rel = normalise(p, path)?;
        Ok(self.make(0, rel))
    }

    /// Index of `scope` among the configured roots, or `InvalidParams`.
    fn scope_index(&self, scope: &str) -> Result<usize, ToolError> {
        self.roots
            .iter()
            .position(|(name, _)| name == scope)
            .ok_or_else(|| ToolError::invalid(format!("the `{scope}` scope is not configured")))
    }

    /// Map an absolute host path to the most specific root containing it.
    fn resolve_absolute(&self, p: &Path, original: &str) -> Result<Resolved, ToolError> {
        let lexical = normalise_absolute(p);
        if let Some(r) = self.map_host(&lexical) {
            return Ok(r);
        }
        // The caller may name the workspace through a symlinked prefix (e.g. /tmp ->
        // /private/tmp): canonicalise the longest existing ancestor. Only the mapping uses
        // this; the open itself is still confined, so no race matters here.
        if let Some(canon) = canonical_prefix(&lexical)
            && let Some(r) = self.map_host(&canon)
        {
            return Ok(r);
        }
        Err(outside(original))
    }

    /// The [`Resolved`] for a normalised absolute host path inside some root.
    pub(super) fn map_host(&self, host: &Path) -> Option<Resolved> {
        let (idx, root) = self
            .roots
            .iter()
            .enumerate()
            .filter(|(_, (_, root))| host.starts_with(root))
            .max_by_key(|(_, (_, root))| root.components().count())?;
        let rel = host.strip_prefix(&root.1).ok()?.to_path_buf();
        Some(self.make(idx, rel))
    }
}

/// `scope:rest` when `path` starts with a known scope name and a colon.
fn split_scope(path: &str) -> Option<(&str, &str)> {
    let (scope, rest) = path.split_once(':')?;
    SCOPES.contains(&scope).then_some((scope, rest))
}

/// Fold `.` and `..` of a relative path; `..` above the start is `PathOutsideWorkspace`.
pub(super) fn normalise(p: &Path, original: &str) -> Result<PathBuf, ToolError> {
    let mut out = PathBuf::new();
    for comp in p.components() {
        match comp {
            Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                if !out.pop() {
                    return Err(outside(original));
                }
            }
            Component::RootDir | Component::Prefix(_) => return Err(outside(original)),
        }
    }
    Ok(out)
}

/// Fold `.` and `..` of an absolute path (`..` at `/` stays at `/`, like the kernel).
pub(super) fn normalise_absolute(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for comp in p.components() {
        match comp {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// Canonicalise the longest existing ancestor of `p` and append the rest.
pub(super) fn canonical_prefix(p: &Path) -> Option<PathBuf> {
    let mut existing = p;
    let mut rest = Vec::new();
    loop {
        if let Ok(c) = existing.canonicalize() {
            let mut out = c;
            out.extend(rest.iter().rev());
            return Some(out);
        }
        rest.push(existing.file_name()?);
        existing = existing.parent()?;
    }
}

/// How a resolved path is printed to the model.
pub(super) fn display_of(scope: &str, root: usize, rel: &Path) -> String {
    let rel = rel.to_string_lossy();
    match (root, rel.is_empty()) {
        (0, true) => ".".to_owned(),
        (0, false) => rel.into_owned(),
        (_, _) => format!("{scope}:/{rel}"),
    }
}
