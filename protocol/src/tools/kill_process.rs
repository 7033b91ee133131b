//! `kill_process`: stop a background job and everything it started.

use serde_json::{Map, Value, json};

use super::args::{self, text};
use super::def::{Hints, Risk, ToolDef};

pub const NAME: &str = "kill_process";

pub fn def() -> ToolDef {
    ToolDef {
        risk: Risk::High,
        hints: Hints {
            read_only: false,
            destructive: true,
            idempotent: true,
            open_world: false,
        },
        describe,
        handle_arg: Some("process"),
        ..ToolDef::new(
            NAME,
            super::EXEC,
            "Stop a background process and everything it started.",
            args::object(json!({"process": args::process()}), &["process"]),
        )
    }
}

fn describe(_: &ToolDef, a: &Map<String, Value>, _: &[String]) -> String {
    format!(
        "Stop background process `{}` and what it started",
        text(a, "process")
    )
}
