//! `write_file`: a whole file, atomically; an existing file only with `overwrite`.

use serde_json::{Map, Value, json};

use super::args::{self, first, flag, text};
use super::def::{ConfirmPreview, Hints, PathParam, PolicyTraits, Risk, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "write_file";

/// The arguments, shared with its preview.
pub fn parameters() -> Value {
    args::object(
        json!({
            "path": args::path("File to write, relative to the workspace (or scope:/path)."),
            "content": {"type": "string", "description": "The complete new content."},
            "overwrite": {"type": "boolean", "description": "Replace an existing file (default false)."}
        }),
        &["path", "content"],
    )
}

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        output: super::def::result_schema(&[
            ("path", json!({"type": "string"})),
            (
                "diff",
                json!({"type": "string", "description": "The change made, as a unified diff"}),
            ),
        ]),
        risk: Risk::Medium,
        hints: Hints {
            read_only: false,
            destructive: true,
            idempotent: true,
            open_world: false,
        },
        paths: vec![PathParam::new("path")],
        describe,
        confirm_preview: ConfirmPreview::DiffOf(super::preview_write_file::NAME),
        envelope_as: Some(super::preview_write_file::NAME),
        policy: PolicyTraits {
            edits_paths: true,
            ..PolicyTraits::default()
        },
        ..ToolDef::new(
            NAME,
            super::EDIT,
            "Write a whole file atomically, creating parent directories. Refuses to replace an existing file unless overwrite is true.",
            parameters(),
        )
    }
}

fn describe(_: &ToolDef, a: &Map<String, Value>, paths: &[String]) -> String {
    let how = if flag(a, "overwrite") {
        "Write (overwriting)"
    } else {
        "Create"
    };
    format!(
        "{how} `{}` ({} bytes)",
        first(paths),
        text(a, "content").len()
    )
}
