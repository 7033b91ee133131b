//! A toolvisor `result` as an MCP `CallToolResult`.
//!
//! A built-in tool's: one text item (the call's content, after a status line when it
//! did not succeed, and ending with a line of the result fields a model needs, like
//! `[token: …]`), `structuredContent` with the status and every field of the native
//! `meta` (as the tool's `outputSchema` declares them), `isError` when the status is
//! not `ok`, and a `resource_link` to the full output when it was truncated.
//!
//! An MCP server's tool (`NAME__TOOL`): what the server answered, passed on — its
//! content items as they came (`meta.mcp_content`), its `structuredContent`
//! (`meta.structured`) unchanged, so they fit the `outputSchema` it declared. A call
//! toolvisor ended before or after the server (denied, timed out, a result that broke
//! its schema) is an `isError` result without `structuredContent`, which the spec
//! allows and which cannot break the server's schema.

use rmcp::model::{CallToolResult, ContentBlock, Resource};
use serde_json::{Map, Value, json};
use toolvisor_protocol::message::{Status, ToolResult};
use toolvisor_protocol::tools::def::carried_as;

use crate::mcp::resources;
use crate::mcp::worker::CONTENT_META;

/// The result fields said in the text's last line too, in this order: many hosts show
/// the model only the text, and these are what its next call needs.
const SAID: &[&str] = &[
    "token",
    "process",
    "running",
    "exit_code",
    "matched",
    "next",
];

/// Whether `tool` is an MCP server's (`NAME__TOOL`; built-in names have no `__`), whose
/// results pass on what the server said.
pub fn relayed(tool: &str) -> bool {
    tool.contains("__")
}

/// The MCP result of a call of `tool`.
pub fn to_mcp(tool: &str, r: &ToolResult) -> CallToolResult {
    if let Some(items) = r.meta.get(CONTENT_META).and_then(Value::as_array) {
        return passed_on(r, items);
    }
    // The server's items did not fit a frame even described: its text, as cut.
    if r.meta.get("mcp_content_omitted").is_some() {
        return passed_on(r, &[json!({"type": "text", "text": r.content})]);
    }
    let mut content = vec![ContentBlock::text(with_fields(r))];
    if let Some(link) = artifact_link(r) {
        content.push(ContentBlock::resource_link(link));
    }
    let mut out = if r.status == Status::Ok {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    };
    // An MCP server's tool that toolvisor ended has no structuredContent: the server's
    // outputSchema (if any) is not toolvisor's shape, and an error may go without.
    if !(relayed(tool) && r.status != Status::Ok) {
        out.structured_content = Some(structured(r));
    }
    out
}

/// An MCP server's answer as it gave it (its items as cut to the frame by its worker),
/// after toolvisor's status line when toolvisor turned it into an error.
fn passed_on(r: &ToolResult, items: &[Value]) -> CallToolResult {
    let mut content: Vec<ContentBlock> = items
        .iter()
        .map(|v| {
            serde_json::from_value(v.clone()).unwrap_or_else(|e| {
                ContentBlock::text(format!("[a content item toolvisor cannot read: {e}]"))
            })
        })
        .collect();
    if r.status != Status::Ok
        && let Some(e) = &r.error
    {
        // The server's own isError says why in its text; anything else is toolvisor's.
        let said = content
            .iter()
            .filter_map(|c| c.as_text())
            .any(|t| t.text.contains(&e.message));
        if !said {
            content.insert(
                0,
                ContentBlock::text(text(r).lines().next().unwrap_or_default().to_owned()),
            );
        }
    }
    if let Some(link) = artifact_link(r) {
        content.push(ContentBlock::resource_link(link));
    }
    if r.status == Status::Ok {
        let mut out = CallToolResult::success(content);
        out.structured_content = r.meta.get("structured").cloned();
        out
    } else {
        CallToolResult::error(content)
    }
}

/// The text, then the fields of [`SAID`] the result has, as `[process: w0-1, next: 12]`
/// (a command's exit code only with its process: a foreground one's is in the status
/// line).
pub fn with_fields(r: &ToolResult) -> String {
    let fields: Vec<String> = SAID
        .iter()
        .filter(|k| **k != "exit_code" || r.meta.get("process").is_some())
        .filter_map(|k| {
            let v = r.meta.get(*k).filter(|v| !v.is_null())?;
            Some(match v.as_str() {
                Some(s) => format!("{k}: {s}"),
                None => format!("{k}: {v}"),
            })
        })
        .collect();
    let body = text(r);
    if fields.is_empty() {
        return body;
    }
    let sep = if body.is_empty() || body.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    format!("{body}{sep}[{}]", fields.join(", "))
}

/// An `isError` result for a call of `tool` that could not reach the daemon, or broke
/// the bridge's own rules (shaped like the daemon's, so the model reads one format).
pub fn failure(tool: &str, kind: &str, message: &str) -> CallToolResult {
    let mut out = CallToolResult::error(vec![ContentBlock::text(format!(
        "[error: {kind}] {message}"
    ))]);
    if relayed(tool) {
        return out;
    }
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

/// `structuredContent`: {status, error?, truncated?, full_output?, duration_ms,
/// audit_seq}, and every field of the result's `meta` (an external worker's
/// `structured` among them), named as [`carried_as`] says.
pub fn structured(r: &ToolResult) -> Value {
    let mut m = Map::new();
    m.insert("status".into(), json!(r.status.as_str()));
    if let Some(e) = &r.error {
        m.insert(
            "error".into(),
            json!({"type": e.kind.as_str(), "message": e.message}),
        );
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
    if let Some(meta) = r.meta.as_object() {
        for (k, v) in meta {
            match k.as_str() {
                // The bridge's own input, passed on as content.
                CONTENT_META => {}
                // An external worker's structured result keeps its name.
                "structured" => {
                    m.insert(k.clone(), v.clone());
                }
                _ => {
                    m.insert(carried_as(k).into_owned(), v.clone());
                }
            }
        }
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
        let out = to_mcp("run_command", &r);
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
        let out = to_mcp("run_command", &r);
        assert_eq!(out.is_error, Some(false));
        let link = out.content[1].as_resource_link().unwrap();
        assert_eq!(link.uri, "toolvisor://artifacts/m4.log");
        let s = out.structured_content.unwrap();
        assert_eq!(s["full_output"], ".toolvisor/artifacts/m4.log");
        assert_eq!(s["truncated"]["omitted_lines"], 2);
    }

    #[test]
    fn structured_content_fits_the_output_schema() {
        let tools = toolvisor_protocol::tools::builtin();
        let schema = &toolvisor_protocol::tools::find(&tools, "run_command")
            .unwrap()
            .output;
        let v = jsonschema::validator_for(schema).unwrap();
        let mut r = result(Status::Denied, "");
        r.error = Some(ErrorBody::new(ErrorType::ConfirmationRequired, "ask"));
        assert!(v.is_valid(&structured(&r)));
        assert!(v.is_valid(&structured(&result(Status::Ok, "x"))));
        assert!(
            v.is_valid(
                &failure("run_command", "WorkerUnavailable", "down")
                    .structured_content
                    .unwrap()
            )
        );
        assert!(text(&r).contains("toolvisor/confirm_token"));
        // A background process: its handle and cursor, in structuredContent and in the
        // text; a job's `error` does not hide the call's.
        let mut bg = result(Status::Ok, "started\n");
        bg.meta = json!({"process": "w0-1", "pid": 7, "running": true, "exit_code": null,
                         "next": 8, "error": {"type": "X", "message": "y"}});
        let s = structured(&bg);
        assert!(v.is_valid(&s), "{s}");
        assert_eq!(
            (s["process"].clone(), s["next"].clone()),
            (json!("w0-1"), json!(8))
        );
        assert_eq!(s["process_error"]["type"], "X");
        assert_eq!(s.get("error"), None);
        assert_eq!(
            with_fields(&bg),
            "started\n[process: w0-1, running: true, next: 8]"
        );
    }

    #[test]
    fn an_mcp_servers_answer_passes_through() {
        let mut r = result(Status::Ok, "a\n[image: image/png, 4 bytes of base64]");
        r.meta = json!({
            "mcp_content": [{"type": "text", "text": "a"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
            "structured": {"n": 1}
        });
        let out = to_mcp("srv__draw", &r);
        assert_eq!(out.content.len(), 2);
        assert_eq!(out.content[1].as_image().unwrap().data, "AAAA");
        assert_eq!(out.structured_content, Some(json!({"n": 1})));
        // Denied before the server: an error without structuredContent.
        let mut denied = result(Status::Denied, "");
        denied.error = Some(ErrorBody::new(ErrorType::PolicyDenied, "no"));
        let out = to_mcp("srv__draw", &denied);
        assert_eq!((out.is_error, out.structured_content), (Some(true), None));
        // A result toolvisor turned into an error says why first.
        let mut broke = r.clone();
        broke.status = Status::Error;
        broke.error = Some(ErrorBody::new(ErrorType::McpToolError, "does not match"));
        let out = to_mcp("srv__draw", &broke);
        assert_eq!(out.content.len(), 3);
        assert!(
            out.content[0]
                .as_text()
                .unwrap()
                .text
                .contains("does not match")
        );
        assert_eq!(out.structured_content, None);
    }
}
