//! `grep`: lines matching a regular expression, as `path:line: text`, sorted.

use serde_json::{Map, Value, json};

use super::args::{self, first, text};
use super::def::{PathParam, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "grep";

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        output: super::def::result_schema(&[
            (
                "matches",
                json!({"type": "integer", "description": "Matches shown"}),
            ),
            ("total_matches", json!({"type": "integer"})),
            (
                "files",
                json!({"type": "integer", "description": "Files with a match"}),
            ),
        ]),
        paths: vec![PathParam::or("directory", ".")],
        describe,
        ..ToolDef::new(
            NAME,
            super::SEARCH,
            "Search file contents with a regular expression; prints `path:line: text` per match, sorted by path then line.",
            args::object(
                json!({
                    "pattern": {"type": "string", "minLength": 1, "description": "Regular expression (Rust regex syntax)."},
                    "directory": {"type": "string", "description": "Directory to search in (default: the workspace root)."},
                    "filePattern": {"type": "string", "description": "Glob the files must match: against the file name, or the relative path when it contains `/`."},
                    "caseSensitive": {"type": "boolean", "description": "Match case exactly (default false)."},
                    "maxResults": {"type": "integer", "minimum": 1, "description": "Return at most this many matches (the first in sorted order)."}
                }),
                &["pattern"],
            ),
        )
    }
}

fn describe(_: &ToolDef, a: &Map<String, Value>, paths: &[String]) -> String {
    format!("Search for `{}` in `{}`", text(a, "pattern"), first(paths))
}
