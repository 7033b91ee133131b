//! The `search` group's tools. OWNER: search helper.
//!
//! Read-only tools: [`read_file`], [`read_many_files`], [`ls`], [`glob`] and [`grep`].
//! Every path goes through the confined [`crate::paths::Resolver`]; discovery shares one
//! walk ([`walk`]) that honours `.gitignore`, hides dot-files unless asked, never enters
//! `.git` and never shows protected paths. A path or directory inside `.git` is refused,
//! and an artifact file named explicitly is readable ([`guard`]). Output is cut by
//! [`crate::truncate`].

mod glob;
mod grep;
mod guard;
mod linecut;
mod ls;
mod read_file;
mod read_many_files;
mod walk;

use serde_json::Value;
use toolvisor_protocol::tools;
use toolvisor_protocol::worker::Outcome;

use crate::{ToolContext, ToolError, context::outcome};

/// Run one `search` tool (blocking; the worker calls it on a blocking thread).
pub fn run(tool: &str, args: &Value, ctx: &ToolContext) -> Outcome {
    let result = match tool {
        tools::read_file::NAME => read_file::run(args, ctx),
        tools::read_many_files::NAME => read_many_files::run(args, ctx),
        tools::ls::NAME => ls::run(args, ctx),
        tools::glob::NAME => glob::run(args, ctx),
        tools::grep::NAME => grep::run(args, ctx),
        other => Err(ToolError::new(
            toolvisor_protocol::ErrorType::ToolNotFound,
            format!("the search group has no tool `{other}`"),
        )),
    };
    outcome(result)
}

/// The calls cheap enough to run on the worker's frame loop, without a hand-off to a
/// blocking thread: `read_file` of a small file. None: run it with [`run`] on a
/// blocking thread.
pub fn run_inline(tool: &str, args: &Value, ctx: &ToolContext) -> Option<Outcome> {
    match tool {
        tools::read_file::NAME => read_file::run_if_small(args, ctx).map(outcome),
        _ => None,
    }
}

/// A required string argument (the schema already checked it; this guards the worker).
fn str_arg<'a>(args: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    opt_str(args, key)?.ok_or_else(|| ToolError::invalid(format!("`{key}` is required")))
}

fn opt_str<'a>(args: &'a Value, key: &str) -> Result<Option<&'a str>, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ToolError::invalid(format!("`{key}` must be a string"))),
    }
}

fn opt_bool(args: &Value, key: &str) -> Result<Option<bool>, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ToolError::invalid(format!("`{key}` must be a boolean"))),
    }
}

/// An optional positive integer argument.
fn opt_count(args: &Value, key: &str) -> Result<Option<usize>, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            _ => Err(ToolError::invalid(format!(
                "`{key}` must be a positive integer"
            ))),
        },
    }
}

/// "1 file", "2 files": `n` with the singular or plural word.
fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
pub(crate) mod testutil {
    //! A temp workspace and a `ToolContext` over it.

    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use serde_json::Value;
    use toolvisor_protocol::worker::{ExecSettings, Limits, Outcome, Roots, WorkerInit};

    use crate::paths::Resolver;
    use crate::{CancelFlag, ToolContext};

    pub struct Ws {
        /// Keeps the temp directory alive.
        pub _dir: tempfile::TempDir,
        pub ctx: ToolContext,
    }

    impl Ws {
        pub fn root(&self) -> PathBuf {
            self.ctx.resolver.root_path(0).to_path_buf()
        }

        /// Write `content` at `rel`, creating parents.
        pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) {
            let p = self.root().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }

        pub fn mkdir(&self, rel: &str) {
            std::fs::create_dir_all(self.root().join(rel)).unwrap();
        }

        pub fn run(&self, tool: &str, args: Value) -> Outcome {
            super::run(tool, &args, &self.ctx)
        }
    }

    /// A fresh workspace under a temp dir, with default limits.
    pub fn ws() -> Ws {
        ws_with(Limits::default(), &[])
    }

    pub fn ws_with(limits: Limits, protected: &[&str]) -> Ws {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir(&root).unwrap();
        let protected: Vec<PathBuf> = protected.iter().map(|p| root.join(p)).collect();
        ctx_for(dir, &root, limits, &protected)
    }

    fn ctx_for(dir: tempfile::TempDir, root: &Path, limits: Limits, protected: &[PathBuf]) -> Ws {
        let roots = Roots {
            private: root.to_path_buf(),
            shared: None,
            public: None,
        };
        let init = WorkerInit {
            generation: 0,
            web: Default::default(),
            skills: Default::default(),
            mcp: None,
            group: "search".into(),
            index: 0,
            roots: roots.clone(),
            protected: protected.to_vec(),
            state_dir: root.join(".toolvisor"),
            limits,
            exec: ExecSettings::default(),
        };
        let resolver = Resolver::new(&roots, protected)
            .unwrap()
            .with_artifacts(&init.state_dir);
        let ctx = ToolContext {
            init: Arc::new(init),
            resolver: Arc::new(resolver),
            call: 1,
            name: "test".into(),
            cancel: CancelFlag::new(),
            output: None,
            deadline: None,
            network: false,
            egress: None,
            session: "s1".into(),
            takeover: false,
        };
        Ws { _dir: dir, ctx }
    }

    /// The error type of a failed outcome.
    pub fn err_kind(o: &Outcome) -> Option<toolvisor_protocol::ErrorType> {
        o.error.as_ref().map(|e| e.kind)
    }
}
