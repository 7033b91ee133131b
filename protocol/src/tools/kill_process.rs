//! `kill_process`: stop a background job and everything it started.

use serde_json::{Map, Value, json};

use super::args::{self, text};
use super::def::{Hints, Risk, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "kill_process";

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        output: {
            let mut f = super::def::process_fields();
            f.extend([("signal_sent", json!({"type": "string"}))]);
            super::def::result_schema(&f)
        },
        risk: Risk::High,
        hints: Hints {
            read_only: false,
            destructive: true,
            idempotent: true,
            open_world: false,
        },
        describe,
        handle_arg: Some("process"),
        acts_on_process: true,
        ..ToolDef::new(
            NAME,
            super::EXEC,
            "Stop a background process and everything it started (TERM, then KILL after 2 s; returns when it is gone), or send it one signal (INT is Ctrl-C).",
            args::object(
                json!({
                    "process": args::process(),
                    "signal": {"type": "string", "enum": super::SIGNALS, "description": "Send only this signal to the process group and return once delivered."}
                }),
                &["process"],
            ),
        )
    }
}

fn describe(_: &ToolDef, a: &Map<String, Value>, _: &[String]) -> String {
    match a.get("signal").and_then(Value::as_str) {
        Some(sig) => format!(
            "Send SIG{sig} to background process `{}`",
            text(a, "process")
        ),
        None => format!(
            "Stop background process `{}` and what it started",
            text(a, "process")
        ),
    }
}
