//! Tools a worker announces (an external worker's, an MCP server's) as registry
//! definitions. The announcement is the worker's word; the supervisor decides how far
//! to trust it: a tool's risk may only be raised (by the group's configured floor, and
//! to `high` by a destructive hint), never lowered below the floor.

use serde_json::Value;
use toolvisor_protocol::tools::def::{MCP_GROUP_PREFIX, result_schema};
use toolvisor_protocol::tools::{ConfirmPreview, Hints, PathParam, Risk, ToolDef};
use toolvisor_protocol::worker::AnnouncedTool;

/// The registry definition of an announced tool of `group`, at least `floor` risk.
pub fn to_def(group: &str, floor: Risk, t: AnnouncedTool) -> ToolDef {
    let a = &t.annotations;
    // MCP's defaults for absent hints are the cautious ones.
    let hints = Hints {
        read_only: a.read_only_hint.unwrap_or(false),
        destructive: a
            .destructive_hint
            .unwrap_or(!a.read_only_hint.unwrap_or(false)),
        idempotent: a.idempotent_hint.unwrap_or(false),
        open_world: a.open_world_hint.unwrap_or(true),
    };
    let mut risk = t.risk.unwrap_or(Risk::Medium).max(floor);
    if a.destructive_hint == Some(true) {
        risk = Risk::High;
    }
    let mut def = ToolDef::new(&t.name, group, &t.description, t.input_schema);
    if let Some(title) = t.title {
        def.title = title;
    }
    // An MCP server's tool keeps the outputSchema it declared (or none): `toolvisor mcp`
    // passes its structuredContent on unchanged. Another worker's results are shaped
    // like the built-in tools'.
    def.output = if group.starts_with(MCP_GROUP_PREFIX) {
        t.output_schema.unwrap_or(Value::Null)
    } else {
        result_schema(&[])
    };
    def.risk = risk;
    def.hints = hints;
    def.paths = t.paths.iter().map(|p| PathParam::new(p)).collect();
    def.confirm_preview = ConfirmPreview::Arguments;
    def
}

/// Longest argument preview a confirmation shows for an announced tool.
const MAX_PREVIEW: usize = 8 * 1024;

/// What a person asked to confirm a call of an announced tool sees besides its
/// description: the arguments, as indented JSON, at most [`MAX_PREVIEW`] bytes.
pub fn arguments_preview(args: &Value) -> String {
    let mut text = serde_json::to_string_pretty(args).unwrap_or_default();
    if text.len() > MAX_PREVIEW {
        let mut end = MAX_PREVIEW;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("\n…");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolvisor_protocol::worker::Annotations;

    #[test]
    fn the_arguments_preview_is_bounded() {
        assert_eq!(
            arguments_preview(&json!({"q": "x"})),
            "{\n  \"q\": \"x\"\n}"
        );
        let long = arguments_preview(&json!({"q": "é".repeat(10_000)}));
        assert!(long.len() <= MAX_PREVIEW + 4 && long.ends_with('…'));
    }

    fn announced(risk: Option<Risk>, destructive: Option<bool>) -> AnnouncedTool {
        AnnouncedTool {
            name: "t".into(),
            title: None,
            description: "d".into(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: Annotations {
                destructive_hint: destructive,
                ..Annotations::default()
            },
            risk,
            paths: vec!["file".into()],
        }
    }

    #[test]
    fn risk_is_only_ever_raised() {
        let d = to_def("g", Risk::Medium, announced(Some(Risk::Low), Some(false)));
        assert_eq!(
            d.risk,
            Risk::Medium,
            "the floor holds against a claimed low"
        );
        let d = to_def("g", Risk::Low, announced(Some(Risk::Low), Some(false)));
        assert_eq!(d.risk, Risk::Low);
        let d = to_def("g", Risk::Low, announced(None, Some(true)));
        assert_eq!(d.risk, Risk::High, "a destructive hint raises to high");
        assert_eq!(d.paths, [PathParam::new("file")]);
        assert_eq!(d.confirm_preview, ConfirmPreview::Arguments);
        assert!(!d.hints.read_only && d.hints.open_world);
    }
}
