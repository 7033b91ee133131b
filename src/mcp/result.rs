//! A toolvisor `result` as an MCP `CallToolResult`: one text item (the call's content,
//! after a status line when it did not succeed), `structuredContent` that follows the
//! tools' `outputSchema`, `isError` when the status is not `ok`, and a `resource_link`
//! to the full output when it was truncated.

use rmcp::model::{CallToolResult, ContentBlock, Resource};
use serde_json::{Map, Value, json};
use toolvisor_protocol::message::{Status, ToolResult};

use crate::mcp::resources;

/// The MCP result of a call.
pub fn to_mcp(r: &ToolResult) -> CallToolResult {
    let mut content = vec![ContentBlock::text(text(r))];
    if let Some(link) = artifact_link(r) {
        content.push(ContentBlock::resource_link(link));
    }
    let mut out = if r.status == Status::Ok {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    };
    out.structured_content = Some(structured(r));
    out
}

/// An `isError` result for a call that could not reach the daemon, or broke the
/// bridge's own rules (shaped like the daemon's, so the model reads one format).
pub fn failure(kind: &str, message: &str) -> CallToolResult {
    let mut out = CallToolResult::error(vec![ContentBlock::text(format!(
        "[error: {kind}] {message}"
    ))]);
    out.structured_content = Some(json!({
        "status": "error",
        "error": {"type": kind, "message": message},
        "duration_ms": 0,
        "audit_seq": 0,
    }));
    out
}

/// What the model reads: the content, after `[status: Type] message` (and the exit
/// code of a command) when the call did not succeed.
pub fn text(r: &ToolResult) -> String {
    if r.status == Status::Ok {
        return r.content.clone();
    }
    let mut head = match &r.error {
        Some(e) => format!("[{}: {}] {}", r.status.as_str(), e.kind, e.message),
        None => format!("[{}]", r.status.as_str()),
    };
    if let Some(code) = r.meta.get("exit_code").and_then(Value::as_i64) {
        head.push_str(&format!("\nexit code {code}"));
    }
    if let Some(signal) = r.meta.get("signal").and_then(Value::as_i64) {
        head.push_str(&format!("\nkilled by signal {signal}"));
    }
    if matches!(
        r.error.as_ref().map(|e| e.kind),
        Some(
            toolvisor_protocol::ErrorType::ConfirmationRequired
                | toolvisor_protocol::ErrorType::TokenInvalid
        )
    ) {
        head.push_str(
            "\n(Through MCP, a grant token goes in the request's `_meta` as `toolvisor/confirm_token`.)",
        );
    }
    let body = r.content.trim_end();
    if body.is_empty() || r.error.as_ref().is_some_and(|e| body.ends_with(&e.message)) {
        head
    } else {
        format!("{head}\n{}", r.content)
    }
}

/// `structuredContent`: {status, error?, exit_code?, signal?, truncated?, full_output?,
/// structured?, duration_ms, audit_seq}.
pub fn structured(r: &ToolResult) -> Value {
    let mut m = Map::new();
    m.insert("status".into(), json!(r.status.as_str()));
    if let Some(e) = &r.error {
        m.insert(
            "error".into(),
            json!({"type": e.kind.as_str(), "message": e.message}),
        );
    }
    for key in ["exit_code", "signal"] {
        if let Some(n) = r.meta.get(key).filter(|v| v.is_i64() || v.is_u64()) {
            m.insert(key.into(), n.clone());
        }
    }
    if let Some(t) = &r.truncated {
        m.insert(
            "truncated".into(),
            json!({"omitted_bytes": t.omitted_bytes, "omitted_lines": t.omitted_lines}),
        );
        if let Some(path) = &t.full_output {
            m.insert("full_output".into(), json!(path));
        }
    }
    if let Some(s) = r.meta.get("structured") {
        m.insert("structured".into(), s.clone());
    }
    m.insert("duration_ms".into(), json!(r.duration_ms));
    m.insert("audit_seq".into(), json!(r.audit_seq));
    Value::Object(m)
}

/// The link to a truncated call's full output.
fn artifact_link(r: &ToolResult) -> Option<Resource> {
    let path = r.truncated.as_ref()?.full_output.as_deref()?;
    let name = resources::artifact_name(path)?;
    Some(
        Resource::new(resources::uri_of(&name), name)
            .with_title("Full output of the call")
            .with_description(format!(
                "The call's whole output (also readable with read_file at `{path}`, by line ranges)"
            ))
            .with_mime_type("text/plain"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolvisor_protocol::message::Truncated;
    use toolvisor_protocol::{ErrorBody, ErrorType, Id};

    fn result(status: Status, content: &str) -> ToolResult {
        ToolResult {
            id: Id::Str("m1".into()),
            status,
            content: content.into(),
            display: content.into(),
            error: None,
            truncated: None,
            meta: json!({}),
            duration_ms: 3,
            audit_seq: 9,
        }
    }

    #[test]
    fn a_failed_command_says_its_status_and_exit_code() {
        let mut r = result(Status::Error, "boom\n");
        r.error = Some(ErrorBody::new(
            ErrorType::ShellExecutionError,
            "the command failed",
        ));
        r.meta = json!({"exit_code": 3});
        let out = to_mcp(&r);
        assert_eq!(out.is_error, Some(true));
        let text = &out.content[0].as_text().unwrap().text;
        assert_eq!(
            text,
            "[error: ShellExecutionError] the command failed\nexit code 3\nboom\n"
        );
        let s = out.structured_content.unwrap();
        assert_eq!(s["status"], "error");
        assert_eq!(s["exit_code"], 3);
        assert_eq!(s["error"]["type"], "ShellExecutionError");
        assert_eq!(s["audit_seq"], 9);
    }

    #[test]
    fn a_truncated_result_links_its_full_output() {
        let mut r = result(Status::Ok, "head…tail");
        r.truncated = Some(Truncated {
            omitted_bytes: 10,
            omitted_lines: 2,
            full_output: Some(".toolvisor/artifacts/m4.log".into()),
        });
        let out = to_mcp(&r);
        assert_eq!(out.is_error, Some(false));
        let link = out.content[1].as_resource_link().unwrap();
        assert_eq!(link.uri, "toolvisor://artifacts/m4.log");
        let s = out.structured_content.unwrap();
        assert_eq!(s["full_output"], ".toolvisor/artifacts/m4.log");
        assert_eq!(s["truncated"]["omitted_lines"], 2);
    }

    #[test]
    fn structured_content_fits_the_output_schema() {
        let schema = crate::mcp::listing::output_schema();
        let v = jsonschema::validator_for(&schema).unwrap();
        let mut r = result(Status::Denied, "");
        r.error = Some(ErrorBody::new(ErrorType::ConfirmationRequired, "ask"));
        assert!(v.is_valid(&structured(&r)));
        assert!(v.is_valid(&structured(&result(Status::Ok, "x"))));
        assert!(
            v.is_valid(
                &failure("WorkerUnavailable", "down")
                    .structured_content
                    .unwrap()
            )
        );
        assert!(text(&r).contains("toolvisor/confirm_token"));
    }
}
