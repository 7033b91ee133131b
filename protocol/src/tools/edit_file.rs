//! `edit_file`: exact replacements in a file, in order, all or nothing.

use serde_json::{Map, Value, json};

use super::args::{self, count, first};
use super::def::{ConfirmPreview, Hints, PathParam, PolicyTraits, Risk, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "edit_file";

/// The arguments, shared with its preview.
pub fn parameters() -> Value {
    args::object(
        json!({
            "path": args::path("File to edit, relative to the workspace (or scope:/path)."),
            "edits": {
                "type": "array",
                "minItems": 1,
                "description": "Edits applied in order, each to the result of the previous one; all or nothing.",
                "items": {
                    "type": "object",
                    "properties": {
                        "target": {"type": "string", "minLength": 1, "description": "Exact text to replace; must occur once, or use lineHint."},
                        "replacement": {"type": "string", "description": "Text that replaces target."},
                        "lineHint": {"type": "integer", "minimum": 1, "description": "1-based line near the intended occurrence when target occurs several times."}
                    },
                    "required": ["target", "replacement"],
                    "additionalProperties": false
                }
            }
        }),
        &["path", "edits"],
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
            idempotent: false,
            open_world: false,
        },
        paths: vec![PathParam::new("path")],
        describe,
        confirm_preview: ConfirmPreview::DiffOf(super::preview_edit_file::NAME),
        envelope_as: Some(super::preview_edit_file::NAME),
        policy: PolicyTraits {
            edits_paths: true,
            ..PolicyTraits::default()
        },
        ..ToolDef::new(
            NAME,
            super::EDIT,
            "Replace exact text in a file. Each target must occur exactly once (or give lineHint); edits apply in order, all or nothing.",
            parameters(),
        )
    }
}

fn describe(_: &ToolDef, a: &Map<String, Value>, paths: &[String]) -> String {
    format!("Apply {} edit(s) to `{}`", count(a, "edits"), first(paths))
}
