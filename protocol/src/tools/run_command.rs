//! `run_command` (alias `shell`): a bash command in the workspace's sandbox.

use serde_json::{Map, Value, json};

use super::args::{self, first, flag, text};
use super::def::{ConfirmPreview, Hints, PathParam, PolicyTraits, Risk, ToolDef, result_schema};

pub const NAME: &str = "run_command";

pub fn def() -> ToolDef {
    ToolDef {
        risk: Risk::High,
        hints: Hints {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: true,
        },
        aliases: vec!["shell".into()],
        paths: vec![PathParam::or("cwd", ".")],
        describe,
        output: result_schema(&[
            ("exit_code", json!({"type": "integer"})),
            ("signal", json!({"type": "integer"})),
        ]),
        confirm_preview: ConfirmPreview::Arg("command"),
        policy: PolicyTraits {
            shell: true,
            always_asks: true,
            edits_paths: false,
        },
        timeout_arg: Some("timeout"),
        ..ToolDef::new(
            NAME,
            super::EXEC,
            "Run a shell command (`bash -c`) in the workspace with stdin closed. Output is stdout and stderr interleaved; long output keeps its head and tail and the rest goes to a file named in truncated.full_output.",
            args::object(
                json!({
                    "command": {"type": "string", "minLength": 1, "description": "The command line, run by bash -c."},
                    "cwd": {"type": "string", "description": "Working directory inside the workspace (default: its root)."},
                    "timeout": {"type": "integer", "minimum": 1, "description": "Milliseconds before the command is killed (default 30000)."},
                    "background": {"type": "boolean", "description": "Start and return at once with meta.process; read its output with read_output."},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Extra environment variables."}
                }),
                &["command"],
            ),
        )
    }
}

fn describe(_: &ToolDef, a: &Map<String, Value>, paths: &[String]) -> String {
    let mut out = format!("Run `{}` in {}", text(a, "command"), first(paths));
    if flag(a, "background") {
        out.push_str(" in the background");
    }
    if let Some(env) = a
        .get("env")
        .and_then(Value::as_object)
        .filter(|e| !e.is_empty())
    {
        let keys: Vec<&str> = env.keys().map(String::as_str).collect();
        out.push_str(&format!(" with env {}", keys.join(", ")));
    }
    out
}
