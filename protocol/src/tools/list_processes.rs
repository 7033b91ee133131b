//! `list_processes`: the background jobs of every exec worker, merged.

use serde_json::{Map, Value, json};

use super::args;
use super::def::{Hints, Route, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "list_processes";

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        output: super::def::result_schema(&[(
            "processes",
            json!({"type": "array", "description": "One object per background process: process, pid, running, exit_code, …", "items": {"type": "object"}}),
        )]),
        hints: Hints::READ,
        route: Route::EveryWorker,
        describe,
        ..ToolDef::new(
            NAME,
            super::EXEC,
            "List background processes: handle, command, pid, start time, state, exit code and output size.",
            args::object(json!({}), &[]),
        )
    }
}

fn describe(_: &ToolDef, _: &Map<String, Value>, _: &[String]) -> String {
    "List background processes".to_owned()
}
