//! `glob`: files whose workspace-relative path matches a pattern, sorted.

use serde_json::{Map, Value, json};

use super::args::{self, first, text};
use super::def::{PathParam, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "glob";

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        output: super::def::result_schema(&[
            (
                "files",
                json!({"type": "integer", "description": "Paths shown"}),
            ),
            (
                "total",
                json!({"type": "integer", "description": "Paths that matched"}),
            ),
        ]),
        paths: vec![PathParam::or("directory", ".")],
        describe,
        ..ToolDef::new(
            NAME,
            super::SEARCH,
            "Find files whose workspace-relative path matches a glob (`**/*.rs`); one path per line, sorted.",
            args::object(
                json!({
                    "pattern": {"type": "string", "minLength": 1, "description": "Glob pattern; `*` does not cross `/`, `**` does."},
                    "directory": {"type": "string", "description": "Directory to search in (default: the workspace root)."},
                    "maxResults": {"type": "integer", "minimum": 1, "description": "Return at most this many paths."},
                    "includeHidden": {"type": "boolean", "description": "Include dot-files (default false)."}
                }),
                &["pattern"],
            ),
        )
    }
}

fn describe(_: &ToolDef, a: &Map<String, Value>, paths: &[String]) -> String {
    format!(
        "Find files matching `{}` in `{}`",
        text(a, "pattern"),
        first(paths)
    )
}
