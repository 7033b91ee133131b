//! `ls` (alias `list_dir`): a directory listing, directories ending in `/`.

use serde_json::{Map, Value, json};

use super::args::{self, first, flag};
use super::def::{PathParam, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "ls";

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        output: super::def::result_schema(&[("entries", json!({"type": "integer"}))]),
        aliases: vec!["list_dir".into()],
        paths: vec![PathParam::new("path")],
        describe,
        ..ToolDef::new(
            NAME,
            super::SEARCH,
            "List a directory, one entry per line, directories ending in `/`. Honours .gitignore; hides dot-files unless includeHidden.",
            args::object(
                json!({
                    "path": args::path("Directory to list, relative to the workspace ('.' for its root)."),
                    "recursive": {"type": "boolean", "description": "List subdirectories too (default false)."},
                    "includeHidden": {"type": "boolean", "description": "Show dot-files (default false)."},
                    "maxDepth": {"type": "integer", "minimum": 1, "description": "Deepest level of a recursive listing (default 3)."}
                }),
                &["path"],
            ),
        )
    }
}

fn describe(_: &ToolDef, a: &Map<String, Value>, paths: &[String]) -> String {
    let how = if flag(a, "recursive") {
        " recursively"
    } else {
        ""
    };
    format!("List `{}`{how}", first(paths))
}
