//! The protected paths: files inside the writable workspace roots that commands may not
//! change and the edit tools refuse, because a person's tools run them later outside
//! any sandbox (git's config and hooks, editor and MCP settings, direnv).
//!
//! Names are relative to each workspace root. Edit tools also refuse everything under
//! any `.git` directory (a nested repository's config is as dangerous as the top one).

use std::path::{Component, Path, PathBuf};

/// The built-in protected names, relative to each workspace root: git's, and the
/// project settings of editors and agent hosts (which run hooks and MCP servers from
/// them: `.claude/settings.json`, `.cursor/mcp.json`, `.gemini/settings.json`, …).
pub const BUILTIN: [&str; 13] = toolvisor_protocol::worker::PROTECTED_NAMES;

/// The built-in names plus `workers.exec.protected`, normalised (relative, no `.`);
/// an extra name that is empty, absolute or climbs with `..` is dropped (the supervisor
/// refuses such a config before a worker sees it).
pub fn names(extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = BUILTIN.iter().map(PathBuf::from).collect();
    for e in extra {
        if let Some(n) = normalised(e)
            && !out.contains(&n)
        {
            out.push(n);
        }
    }
    out
}

/// `p` without `.` components; None when empty, absolute or with `..`.
pub fn normalised(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// Whether a root-relative path has a component named exactly `.git`.
pub fn in_git(rel: &Path) -> bool {
    rel.components()
        .any(|c| matches!(c, Component::Normal(n) if n == ".git"))
}

/// Whether an edit tool must refuse the root-relative path `rel`: inside a `.git`
/// directory (or `.git` itself), or a protected name or anything under one, whether it
/// exists or not.
pub fn refused_for_edits(rel: &Path, names: &[PathBuf]) -> bool {
    in_git(rel) || names.iter().any(|n| rel.starts_with(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_refusals() {
        let n = names(&[PathBuf::from("./secrets/x"), PathBuf::from("../up")]);
        assert!(n.contains(&PathBuf::from("secrets/x")));
        assert!(!n.iter().any(|p| p.starts_with("..")));
        for bad in [
            ".git",
            ".git/config",
            ".git/objects/ab/cd",
            "sub/.git/hooks/pre-commit",
            ".gitmodules",
            ".vscode/settings.json",
            ".idea",
            ".envrc",
            ".mcp.json",
            "secrets/x/y",
        ] {
            assert!(refused_for_edits(Path::new(bad), &n), "{bad}");
        }
        for ok in [
            ".gitignore",
            ".github/workflows/ci.yml",
            "src/.envrc.example",
            "a.git/config",
            "secrets/xy",
            ".vscodex",
        ] {
            assert!(!refused_for_edits(Path::new(ok), &n), "{ok}");
        }
    }

    #[test]
    fn normalising() {
        assert_eq!(normalised(Path::new("./a/./b")), Some(PathBuf::from("a/b")));
        assert_eq!(normalised(Path::new("/a")), None);
        assert_eq!(normalised(Path::new("a/../b")), None);
        assert_eq!(normalised(Path::new(".")), None);
    }
}
