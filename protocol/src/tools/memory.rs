//! `memory`: a small durable key-value store the agent keeps across sessions
//! (`<state_dir>/memory.json`).

use serde_json::{Map, Value, json};

use super::args::{self, text};
use super::def::{Hints, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "memory";

/// The longest key, in bytes.
pub const MAX_KEY: usize = 256;
/// The longest value, in bytes.
pub const MAX_VALUE: usize = 64 * 1024;
/// The most keys the store holds.
pub const MAX_KEYS: usize = 1000;

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        output: super::def::result_schema(&[("keys", json!({"type": "integer"}))]),
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
            "A durable key-value memory that outlives the session. get a key's value (`Key not found` when absent), set a key to a value (keys up to 256 bytes without control characters, values up to 64 KiB, at most 1000 keys), delete a key, or list the keys, one per line, sorted.",
            args::object(
                json!({
                    "action": {"type": "string", "enum": ["get", "set", "delete", "list"], "description": "What to do."},
                    "key": {"type": "string", "description": "The key (get, set, delete)."},
                    "value": {"type": "string", "description": "The value to store (set); an empty string is a value."}
                }),
                &["action"],
            ),
        )
    }
}

fn describe(_: &ToolDef, a: &Map<String, Value>, _: &[String]) -> String {
    match text(a, "key") {
        "" => format!("Memory {}", text(a, "action")),
        key => format!("Memory {} `{key}`", text(a, "action")),
    }
}
