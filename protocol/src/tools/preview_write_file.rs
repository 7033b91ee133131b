//! `preview_write_file`: the diff `write_file` would make, and a token to apply it.

use serde_json::{Map, Value};

use super::args::first;
use super::def::{PathParam, Route, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "preview_write_file";

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        output: super::def::result_schema(&super::def::preview_fields()),
        paths: vec![PathParam::new("path")],
        describe,
        route: Route::Preview,
        ..ToolDef::new(
            NAME,
            super::EDIT,
            "Show the unified diff write_file would make (meta.diff) and a single-use token (meta.token) for apply_file_change.",
            super::write_file::parameters(),
        )
    }
}

fn describe(_: &ToolDef, _: &Map<String, Value>, paths: &[String]) -> String {
    format!("Preview writing `{}`", first(paths))
}
