//! `read_output`: a page of a background job's output.

use serde_json::{Map, Value, json};

use super::args::{self, text};
use super::def::{Hints, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "read_output";

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        output: {
            let mut f = super::def::process_fields();
            f.extend([("matched", json!({"type": "boolean", "description": "With until: whether a line matched (the page ends with it)"})), ("output_bytes", json!({"type": "integer", "description": "All the output the process wrote so far"})), ("raw", json!({"type": "string", "description": "With tty: the page as the terminal wrote it"}))]);
            super::def::result_schema(&f)
        },
        // Not idempotent: a read without `since` moves the job's read position.
        hints: Hints {
            idempotent: false,
            ..Hints::READ
        },
        describe,
        handle_arg: Some("process"),
        check: Some(|args| args::compiles(args, "until", "until")),
        waits: Some(waits),
        ..ToolDef::new(
            NAME,
            super::EXEC,
            "Read a background process's output from byte offset `since` (default: where the last read stopped); meta.next is the offset of the next page. wait_ms waits for new output or the exit; until waits for a line matching a regex and ends the page with it.",
            args::object(
                json!({
                    "process": args::process(),
                    "since": {"type": "integer", "minimum": 0, "description": "Byte offset to read from."},
                    "wait_ms": {"type": "integer", "minimum": 0, "maximum": super::MAX_WAIT_MS, "description": "Wait up to this long for new output (or the exit) when there is none yet."},
                    "until": {"type": "string", "minLength": 1, "description": "Regular expression: wait (wait_ms, default 30000) until an unread line matches; the page ends with that line (meta.matched)."}
                }),
                &["process"],
            ),
        )
    }
}

/// How long `until` waits when the call gives no `wait_ms` (the worker's default).
pub const UNTIL_WAIT_MS: u64 = 30_000;

/// A long poll waits up to `wait_ms`, or [`UNTIL_WAIT_MS`] for an `until` without one.
fn waits(args: &Value) -> u64 {
    match (args::millis(args, "wait_ms"), args.get("until")) {
        (Some(w), _) => w.min(super::MAX_WAIT_MS),
        (None, Some(_)) => UNTIL_WAIT_MS,
        (None, None) => 0,
    }
}

fn describe(_: &ToolDef, a: &Map<String, Value>, _: &[String]) -> String {
    format!(
        "Read the output of background process `{}`",
        text(a, "process")
    )
}
