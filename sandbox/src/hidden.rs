//! Hidden paths: what a command must not see at all (`workers.exec.hidden`, the
//! credential stores by default). Each entry is an absolute path (the supervisor has
//! already turned `~/` into `$HOME` and workspace-relative ones into paths under each
//! root); any component may be a glob (`*`, `?`, `[…]`, `{a,b}`), matched against the
//! directory's entries as the plan's [`View`] lists them, so a spare sandbox notices a
//! matching file that appears later (the listing is one of its observations). A match
//! that is a symlink is hidden where it leads too, since covering the link's own path
//! would leave its target one `readlink` away.

use std::path::{Component, Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};

use super::plan::{Kind, View};

/// Whether a path component is a pattern rather than a name.
fn is_glob(name: &str) -> bool {
    name.contains(['*', '?', '[', '{'])
}

/// One component as a matcher (`*` never crosses a `/`: it is one component).
fn matcher(pattern: &str) -> Option<GlobMatcher> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .ok()
        .map(|g| g.compile_matcher())
}

/// The host paths `pattern` names now: itself when it has no wildcard, else every
/// match, each symlink followed by its target too. Relative patterns name nothing (the
/// supervisor makes them absolute).
pub fn expand(pattern: &Path, view: &dyn View) -> Vec<PathBuf> {
    if !pattern.is_absolute() {
        return Vec::new();
    }
    let mut found = vec![PathBuf::from("/")];
    for c in pattern.components() {
        let Component::Normal(name) = c else {
            continue;
        };
        let name = name.to_string_lossy();
        found = if is_glob(&name) {
            let Some(m) = matcher(&name) else {
                return Vec::new();
            };
            found
                .iter()
                .flat_map(|dir| view.entries(dir))
                .filter(|e| e.file_name().is_some_and(|n| m.is_match(n)))
                .collect()
        } else {
            found.iter().map(|d| d.join(name.as_ref())).collect()
        };
    }
    let mut out = Vec::new();
    for p in found {
        if view.kind(&p) == Kind::Symlink
            && let Some(t) = view.target(&p)
        {
            out.push(t);
        }
        out.push(p);
    }
    out
}

/// The hidden paths inside the workspace `roots`, for the file tools to refuse
/// (`PermissionError`) as they refuse the state directory: literal ones as they are
/// (refused even before they exist), globs as they match when the worker starts, and
/// where a symlinked one leads.
pub fn inside(patterns: &[PathBuf], roots: &[&Path]) -> Vec<PathBuf> {
    let view = super::plan::HostView;
    let mut out = Vec::new();
    for p in patterns {
        let found = expand(p, &view);
        out.extend(
            found
                .into_iter()
                .filter(|f| roots.iter().any(|r| f.starts_with(r))),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::plan::HostView;
    use super::*;

    #[test]
    fn names_are_themselves_and_globs_match_one_component() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(r.join(".cargo/registry")).unwrap();
        std::fs::write(r.join(".cargo/credentials"), "t").unwrap();
        std::fs::write(r.join(".cargo/credentials.toml"), "t").unwrap();
        std::fs::write(r.join(".cargo/config.toml"), "c").unwrap();
        let got = expand(&r.join(".cargo/credentials*"), &HostView);
        assert_eq!(
            got,
            vec![
                r.join(".cargo/credentials"),
                r.join(".cargo/credentials.toml")
            ]
        );
        assert_eq!(expand(&r.join(".ssh"), &HostView), vec![r.join(".ssh")]);
        assert!(
            expand(&r.join("*/credentials"), &HostView).contains(&r.join(".cargo/credentials"))
        );
        assert!(expand(Path::new("relative/.ssh"), &HostView).is_empty());
    }

    #[test]
    fn a_symlinked_store_is_hidden_where_it_leads_too() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(r.join("vault/ssh")).unwrap();
        std::os::unix::fs::symlink(r.join("vault/ssh"), r.join(".ssh")).unwrap();
        let got = expand(&r.join(".ssh"), &HostView);
        assert_eq!(got, vec![r.join("vault/ssh"), r.join(".ssh")]);
    }
}
