//! `read_file`: a text file of the workspace, or a range of its lines.

use serde_json::{Map, Value, json};

use super::args::{self, first};
use super::def::{PathParam, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "read_file";

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        output: super::def::result_schema(&[
            (
                "lines",
                json!({"type": "integer", "description": "Lines shown"}),
            ),
            (
                "start_line",
                json!({"type": "integer", "description": "The first line shown (1-based)"}),
            ),
        ]),
        paths: vec![PathParam::new("path")],
        describe,
        ..ToolDef::new(
            NAME,
            super::SEARCH,
            "Read a text file of the workspace, optionally a range of lines (1-based, inclusive). Large files are truncated with a marker.",
            args::object(
                json!({
                    "path": args::path("File to read, relative to the workspace (or scope:/path)."),
                    "startLine": {"type": "integer", "minimum": 1, "description": "First line to return (1-based)."},
                    "endLine": {"type": "integer", "minimum": 1, "description": "Last line to return (inclusive)."}
                }),
                &["path"],
            ),
        )
    }
}

fn describe(_: &ToolDef, a: &Map<String, Value>, paths: &[String]) -> String {
    let n = |k: &str| a.get(k).and_then(Value::as_u64);
    let range = match (n("startLine"), n("endLine")) {
        (Some(s), Some(e)) => format!(" lines {s}-{e}"),
        (Some(s), None) => format!(" from line {s}"),
        (None, Some(e)) => format!(" up to line {e}"),
        (None, None) => String::new(),
    };
    format!("Read `{}`{range}", first(paths))
}
