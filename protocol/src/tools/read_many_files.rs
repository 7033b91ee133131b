//! `read_many_files`: several files at once, globs allowed, each under a header.

use serde_json::{Map, Value, json};

use super::args;
use super::def::{PathParam, ToolDef, quoted};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "read_many_files";

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        output: super::def::result_schema(&[
            (
                "files",
                json!({"type": "integer", "description": "Files read"}),
            ),
            (
                "errors",
                json!({"type": "integer", "description": "Files that could not be read"}),
            ),
        ]),
        paths: vec![PathParam::new("paths")],
        describe,
        ..ToolDef::new(
            NAME,
            super::SEARCH,
            "Read several files at once; paths may be globs. Each file appears as `=== path ===` followed by its content; a failing file shows `Error: ...`.",
            args::object(
                json!({
                    "paths": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}, "description": "Files or glob patterns, relative to the workspace."}
                }),
                &["paths"],
            ),
        )
    }
}

fn describe(_: &ToolDef, _: &Map<String, Value>, paths: &[String]) -> String {
    format!(
        "Read {} file(s) or pattern(s): {}",
        paths.len(),
        quoted(paths)
    )
}
