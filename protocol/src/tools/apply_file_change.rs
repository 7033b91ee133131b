//! `apply_file_change`: exactly the change a preview showed, once, by its token.

use serde_json::{Map, Value, json};

use super::args;
use super::def::{ConfirmPreview, Hints, PolicyTraits, Risk, Route, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "apply_file_change";

/// The edit worker's internal operation that writes a kept change.
pub const WORKER_OP: &str = "apply_change";

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        output: super::def::result_schema(&[
            ("path", json!({"type": "string"})),
            (
                "changes",
                json!({"type": "array", "description": "A staged command's changes, written", "items": {"type": "object"}}),
            ),
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
        describe,
        route: Route::ApplyPreview { op: WORKER_OP },
        confirm_preview: ConfirmPreview::PendingChange,
        policy: PolicyTraits {
            edits_paths: true,
            ..PolicyTraits::default()
        },
        ..ToolDef::new(
            NAME,
            super::EDIT,
            "Apply exactly the change a preview showed, or every change a staged run_command held (all or none), by its token. Fails with StaleChange if a file changed since.",
            args::object(
                json!({"token": {"type": "string", "minLength": 1, "description": "meta.token of a preview or of a staged run_command."}}),
                &["token"],
            ),
        )
    }
}

fn describe(_: &ToolDef, _: &Map<String, Value>, paths: &[String]) -> String {
    match paths {
        [] => "Apply a previewed file change".to_owned(),
        [p] => format!("Apply the previewed change to {p}"),
        many => format!(
            "Apply {} held changes of a staged command to {}",
            many.len(),
            many.join(", ")
        ),
    }
}
