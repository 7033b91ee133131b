//! What the search tools may open, beyond the resolver's confinement and protection:
//!
//! - Nothing inside `.git` (docs/PROTOCOL.md "Paths": search never shows or reads it, like the
//!   state directory). Walks from above skip it; a path or directory naming it is
//!   refused with `PermissionError`, lexically first and then by the real path of what
//!   was opened, so a symlink to `.git` does not get in either. Only components *below*
//!   the root count: a workspace that itself lies inside a `.git` directory works.
//! - One exception to the state directory's protection: a file of
//!   `<state_dir>/artifacts/`, named explicitly to `read_file` or `read_many_files`, is
//!   readable, because `truncated.full_output` points there for the agent to read more
//!   (docs/PROTOCOL.md "Truncation"). Listings and globs never show it.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Component, Path};

use toolvisor_protocol::ErrorType;

use crate::paths::{ArtifactPath, Resolved};
use crate::{ToolContext, ToolError};

/// A file a read tool was asked for.
pub enum Target {
    /// A command's full output in the artifacts directory.
    Artifact(ArtifactPath),
    /// A path inside a root.
    Path(Resolved),
}

impl Target {
    /// What `path` names: an artifact file first (it may lie outside every root), else
    /// a path resolved inside a root.
    pub fn of(ctx: &ToolContext, path: &str) -> Result<Target, ToolError> {
        match ctx.resolver.artifact(path)? {
            Some(a) => Ok(Target::Artifact(a)),
            None => ctx.resolver.resolve(path).map(Target::Path),
        }
    }

    /// How tools print it.
    pub fn display(&self) -> &str {
        match self {
            Target::Artifact(a) => &a.display,
            Target::Path(r) => &r.display,
        }
    }

    /// Open it for reading: artifacts through their own checks, other paths through the
    /// resolver and the `.git` refusal.
    pub fn open(&self, ctx: &ToolContext) -> Result<File, ToolError> {
        match self {
            Target::Artifact(a) => ctx.resolver.open_artifact(a),
            Target::Path(r) => {
                refuse_git(r)?;
                let file = ctx.resolver.open_read(r)?;
                refuse_git_fd(ctx, r, &file)?;
                Ok(file)
            }
        }
    }
}

/// `PermissionError` when `r`'s path below its root goes through `.git`.
pub fn refuse_git(r: &Resolved) -> Result<(), ToolError> {
    if in_git(&r.rel) {
        Err(git_error(r))
    } else {
        Ok(())
    }
}

/// After an open: `PermissionError` when the real path of `fd` goes through `.git` below
/// `r`'s root (a symlink such as `g -> .git`). Best effort like the protected-path check:
/// without `/proc` the lexical check alone applies.
pub fn refuse_git_fd(ctx: &ToolContext, r: &Resolved, fd: &impl AsRawFd) -> Result<(), ToolError> {
    match ctx.resolver.real_rel(r.root, fd) {
        Some(rel) if in_git(&rel) => Err(git_error(r)),
        _ => Ok(()),
    }
}

/// Whether a root-relative path has a component named exactly `.git`.
fn in_git(rel: &Path) -> bool {
    rel.components()
        .any(|c| matches!(c, Component::Normal(n) if n == ".git"))
}

fn git_error(r: &Resolved) -> ToolError {
    ToolError::new(
        ErrorType::PermissionError,
        format!(
            "`{}` is inside a `.git` directory, which search tools never list or read",
            r.display
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err_kind, ws, ws_with};
    use super::*;
    use serde_json::json;
    use toolvisor_protocol::worker::Limits;

    #[test]
    fn git_components_only() {
        assert!(in_git(Path::new(".git")));
        assert!(in_git(Path::new("a/.git/HEAD")));
        assert!(!in_git(Path::new("")));
        assert!(!in_git(Path::new(".gitignore")));
        assert!(!in_git(Path::new("a.git/x")));
        assert!(!in_git(Path::new("x/.github/y")));
    }

    #[test]
    fn every_search_tool_refuses_git() {
        let w = ws();
        w.write(".git/HEAD", "ref: refs/heads/main\n");
        w.write("sub/.git/config", "ref\n");
        w.write("a.txt", "ref\n");
        let calls = [
            ("read_file", json!({"path": ".git/HEAD"})),
            ("read_file", json!({"path": "sub/.git/config"})),
            ("read_file", json!({"path": ".git/missing"})),
            ("ls", json!({"path": ".git"})),
            ("ls", json!({"path": "./sub/.git", "recursive": true})),
            ("glob", json!({"pattern": "**/*", "directory": ".git"})),
            ("grep", json!({"pattern": "ref", "directory": ".git"})),
        ];
        for (tool, args) in calls {
            let o = w.run(tool, args.clone());
            assert_eq!(
                err_kind(&o),
                Some(ErrorType::PermissionError),
                "{tool} {args}"
            );
            assert!(o.content.contains(".git"), "{}", o.content);
        }
        let o = w.run(
            "read_many_files",
            json!({"paths": [".git/HEAD", ".git/*", "**/*"]}),
        );
        assert_eq!(o.meta["errors"], 2, "{}", o.content);
        assert!(!o.content.contains("refs/heads"), "{}", o.content);
        assert!(o.content.contains("=== a.txt ===\nref\n"), "{}", o.content);
        // Walks from the root still skip `.git`.
        let o = w.run("grep", json!({"pattern": "ref"}));
        assert_eq!(o.content, "a.txt:1: ref");
    }

    #[test]
    fn a_symlink_to_git_is_refused() {
        let w = ws();
        w.write(".git/HEAD", "ref\n");
        std::os::unix::fs::symlink(".git", w.root().join("g")).unwrap();
        std::os::unix::fs::symlink(".git/HEAD", w.root().join("h")).unwrap();
        if !w.ctx.resolver.has_openat2() {
            return; // the fallback refuses every symlink anyway
        }
        for (tool, args) in [
            ("ls", json!({"path": "g"})),
            ("read_file", json!({"path": "h"})),
            ("read_file", json!({"path": "g/HEAD"})),
        ] {
            let o = w.run(tool, args.clone());
            assert_eq!(
                err_kind(&o),
                Some(ErrorType::PermissionError),
                "{tool} {args}"
            );
        }
    }

    #[test]
    fn a_root_inside_git_is_fine() {
        let w = ws_with(Limits::default(), &[]);
        // The fixture's root is `<tmp>/ws`; build one whose path goes through `.git`.
        let inner = w.root().join(".git").join("ws2");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::write(inner.join("a.txt"), "hi\n").unwrap();
        let roots = toolvisor_protocol::worker::Roots {
            private: inner.clone(),
            shared: None,
            public: None,
        };
        let resolver = crate::paths::Resolver::new(&roots, &[]).unwrap();
        let ctx = ToolContext {
            resolver: std::sync::Arc::new(resolver),
            ..w.ctx.clone()
        };
        let o = super::super::run("read_file", &json!({"path": "a.txt"}), &ctx);
        assert_eq!(o.content, "hi\n");
        let o = super::super::run("ls", &json!({"path": "."}), &ctx);
        assert_eq!(o.content, "a.txt");
    }
}
