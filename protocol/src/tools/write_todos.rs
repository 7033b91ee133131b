//! `write_todos`: the agent's durable todo list (`<state_dir>/todos.json`).

use serde_json::{Map, Value, json};

use super::args::{self, text};
use super::def::{Hints, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "write_todos";

/// The longest task, in bytes.
pub const MAX_TASK: usize = 1024;
/// The most todos the list holds.
pub const MAX_TODOS: usize = 1000;

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        output: super::def::result_schema(&[
            (
                "id",
                json!({"type": "string", "description": "The todo added"}),
            ),
            ("todos", json!({"type": "integer"})),
            ("completed", json!({"type": "integer"})),
        ]),
        hints: Hints {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: false,
        },
        describe,
        ..ToolDef::new(
            NAME,
            super::STATE,
            "A durable todo list. add a task (answers `Added todo: <id>`; tasks up to 1024 bytes, at most 1000 todos), complete or remove a todo by id, or list them in the order added, `[x] <id>: <task>` when done and `[ ] <id>: <task>` when not.",
            args::object(
                json!({
                    "action": {"type": "string", "enum": ["add", "complete", "remove", "list"], "description": "What to do."},
                    "task": {"type": "string", "description": "The task to add (add)."},
                    "id": {"type": "string", "description": "The todo's id (complete, remove)."}
                }),
                &["action"],
            ),
        )
    }
}

fn describe(_: &ToolDef, a: &Map<String, Value>, _: &[String]) -> String {
    match (text(a, "action"), text(a, "id")) {
        ("add", _) => format!("Add the todo `{}`", text(a, "task")),
        (action, "") => format!("Todo {action}"),
        (action, id) => format!("Todo {action} `{id}`"),
    }
}
