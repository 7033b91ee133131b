//! `read_output`: a page of a background job's output.

use serde_json::{Map, Value, json};

use super::args::{self, text};
use super::def::{Hints, ToolDef};

pub const NAME: &str = "read_output";

pub fn def() -> ToolDef {
    ToolDef {
        // Not idempotent: a read without `since` moves the job's read position.
        hints: Hints {
            idempotent: false,
            ..Hints::READ
        },
        describe,
        handle_arg: Some("process"),
        ..ToolDef::new(
            NAME,
            super::EXEC,
            "Read a background process's output from byte offset `since` (default: where the last read stopped); meta.next is the offset of the next page.",
            args::object(
                json!({
                    "process": args::process(),
                    "since": {"type": "integer", "minimum": 0, "description": "Byte offset to read from."}
                }),
                &["process"],
            ),
        )
    }
}

fn describe(_: &ToolDef, a: &Map<String, Value>, _: &[String]) -> String {
    format!(
        "Read the output of background process `{}`",
        text(a, "process")
    )
}
