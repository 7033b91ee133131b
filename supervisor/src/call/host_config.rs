//! Protected names a command created. The sandbox keeps an agent host's or an editor's
//! project settings read-only when they exist (`.claude/`, `.cursor/`, `.vscode/`,
//! `.mcp.json`, …: their hosts run hooks and servers from them), but a mount needs a
//! place to stand, and making empty placeholders in a person's workspace would be worse.
//! So when a command (or an MCP / external tool) ends, any protected name that was
//! missing when it began and is there now is moved aside into the state directory
//! (`quarantine/<call>/`, nothing is deleted) and the result says so. A background job's
//! are moved when the supervisor sees it end.

use std::path::{Path, PathBuf};

use toolvisor_protocol::worker::{Outcome, PROTECTED_NAMES};

/// The protected names missing from `roots` now (git's own are kept by the sandbox
/// whether they exist or not, and are left out).
pub fn missing(roots: &[PathBuf]) -> Vec<PathBuf> {
    roots
        .iter()
        .flat_map(|r| {
            PROTECTED_NAMES
                .iter()
                .filter(|n| !n.starts_with(".git/"))
                .map(move |n| r.join(n))
        })
        .filter(|p| std::fs::symlink_metadata(p).is_err())
        .collect()
}

/// Move aside what of `were_missing` exists now; say so in `outcome`.
pub fn quarantine(were_missing: &[PathBuf], state_dir: &Path, call: &str, outcome: &mut Outcome) {
    let made: Vec<&PathBuf> = were_missing
        .iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .collect();
    if made.is_empty() {
        return;
    }
    let dir = state_dir
        .join("quarantine")
        .join(call.replace(['/', '\0'], "_"));
    let mut moved = Vec::new();
    for p in made {
        let Some(name) = p.file_name() else { continue };
        let what = p.to_string_lossy().into_owned();
        match std::fs::create_dir_all(&dir).and_then(|()| move_aside(p, &dir.join(name))) {
            Ok(()) => moved.push(what),
            Err(e) => tracing::error!("cannot move aside {what}, which a command created: {e}"),
        }
    }
    if moved.is_empty() {
        return;
    }
    tracing::warn!(
        call,
        "moved aside protected names a command created: {moved:?}"
    );
    outcome.content.push_str(&format!(
        "\n[toolvisor: moved aside {} — the command created it, and an agent host or editor \
         would run what it holds; kept in {}]",
        moved.join(", "),
        dir.display()
    ));
    outcome
        .meta
        .insert("quarantined".into(), serde_json::Value::from(moved));
}

/// Rename `from` to `to`; across file systems, copy nothing and remove it instead
/// (the state directory is usually inside the workspace, so this is rare).
fn move_aside(from: &Path, to: &Path) -> std::io::Result<()> {
    match std::fs::rename(from, to) {
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            let m = std::fs::symlink_metadata(from)?;
            if m.is_dir() {
                std::fs::remove_dir_all(from)
            } else {
                std::fs::remove_file(from)
            }
        }
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_command_created_is_moved_aside_and_said() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("w");
        std::fs::create_dir_all(root.join(".vscode")).unwrap();
        let before = missing(std::slice::from_ref(&root));
        assert!(before.contains(&root.join(".claude")));
        assert!(!before.contains(&root.join(".vscode")), "it exists");
        std::fs::create_dir_all(root.join(".claude")).unwrap();
        std::fs::write(root.join(".claude/settings.json"), "{\"hooks\":{}}").unwrap();
        std::fs::write(root.join(".mcp.json"), "{}").unwrap();
        let mut o = Outcome::ok("done".into());
        quarantine(&before, &d.path().join("state"), "s1:c1", &mut o);
        assert!(!root.join(".claude").exists() && !root.join(".mcp.json").exists());
        assert!(
            d.path()
                .join("state/quarantine/s1:c1/.claude/settings.json")
                .exists()
        );
        assert!(root.join(".vscode").exists(), "what was there stays");
        assert!(o.content.contains("moved aside"), "{}", o.content);
        assert_eq!(o.meta["quarantined"].as_array().map(Vec::len), Some(2));
    }
}
