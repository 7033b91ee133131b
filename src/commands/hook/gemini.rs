//! Gemini CLI's hook JSON: `{hook_event_name: BeforeTool|AfterTool, session_id, cwd,
//! timestamp, tool_name, tool_input, mcp_context?, tool_response?}` in;
//! `{decision, reason, hookSpecificOutput: {tool_input}}` out (the tool input given
//! there is merged over the model's).

use std::path::Path;

use serde_json::{Map, Value, json};

use super::claude;
use super::event::{
    Answer, Call, Event, Phase, common, from_server, mcp_tool, path_arg, text, unanswered,
};

/// The event in `v`.
pub fn parse(v: &Value, ws: &Path) -> Result<Event, String> {
    let (name, tool, input) = common(v, &["BeforeTool", "AfterTool"])?;
    let phase = match name {
        "BeforeTool" => Phase::Before,
        "AfterTool" => claude::after(v.get("tool_response"), true),
        other => return Err(unanswered(other)),
    };
    let calls = match mcp_name(v) {
        Some(name) => Ok(vec![Call {
            tool: name,
            args: Value::Object(input.clone()),
        }]),
        None => tools(tool, &input, ws),
    };
    Ok(Event {
        name: name.to_owned(),
        phase,
        call_id: call_id(v, tool),
        cwd: v.get("cwd").and_then(Value::as_str).map(Into::into),
        input,
        calls,
    })
}

/// An MCP tool's toolvisor name, from `mcp_context` or an `mcp__S__T` name.
fn mcp_name(v: &Value) -> Option<String> {
    if let Some(ctx) = v.get("mcp_context") {
        let server = ctx.get("server_name").and_then(Value::as_str)?;
        let tool = ctx.get("tool_name").and_then(Value::as_str)?;
        return Some(from_server(server, tool));
    }
    mcp_tool(v.get("tool_name").and_then(Value::as_str)?)
}

/// Gemini CLI gives no call id: its session, the tool and the event's time stand in.
fn call_id(v: &Value, tool: &str) -> String {
    let field = |k| v.get(k).and_then(Value::as_str).unwrap_or_default();
    format!("{}/{tool}/{}", field("session_id"), field("timestamp"))
}

/// Gemini CLI's tools as toolvisor's.
fn tools(tool: &str, input: &Map<String, Value>, ws: &Path) -> Result<Vec<Call>, String> {
    let s = |k: &str| text(input, k).unwrap_or_default();
    let file = || {
        path_arg(
            text(input, "file_path")
                .or(text(input, "absolute_path"))
                .unwrap_or_default(),
            ws,
        )
    };
    let dir = || {
        text(input, "dir_path")
            .or(text(input, "path"))
            .map(|d| path_arg(d, ws))
    };
    let (name, args) = match tool {
        "run_shell_command" => ("run_command", json!({"command": s("command")})),
        "read_file" => ("read_file", json!({"path": file()})),
        "write_file" => (
            "write_file",
            json!({"path": file(), "content": s("content")}),
        ),
        "replace" => (
            "edit_file",
            json!({"path": file(), "edits": [{"target": s("old_string"), "replacement": s("new_string")}]}),
        ),
        "glob" => ("glob", searched(s("pattern"), dir())),
        "search_file_content" | "grep_search" => ("grep", searched(s("pattern"), dir())),
        "list_directory" => ("ls", json!({"path": dir().unwrap_or_else(|| ".".into())})),
        "web_fetch" => ("web_fetch", json!({"url": first_url(s("prompt"))?})),
        "google_web_search" => ("web_search", json!({"query": s("query")})),
        other => {
            return Err(format!(
                "toolvisor has no counterpart of the host's `{other}`"
            ));
        }
    };
    Ok(vec![Call {
        tool: name.into(),
        args,
    }])
}

fn searched(pattern: &str, dir: Option<String>) -> Value {
    match dir {
        Some(d) => json!({"pattern": pattern, "directory": d}),
        None => json!({"pattern": pattern}),
    }
}

/// `web_fetch` takes a prompt that holds the URL(s): the first is decided.
fn first_url(prompt: &str) -> Result<String, String> {
    prompt
        .split_whitespace()
        .find(|w| w.starts_with("https://") || w.starts_with("http://"))
        .map(|w| w.trim_end_matches(['.', ',', ')', '"', '\'']).to_owned())
        .ok_or_else(|| "the web_fetch prompt holds no URL".into())
}

/// The answer in Gemini CLI's JSON.
pub fn render(event: &str, answer: &Answer) -> Value {
    let Answer::Decided {
        decision,
        reason,
        rewrite,
    } = answer
    else {
        return json!({});
    };
    if event != "BeforeTool" {
        return json!({});
    }
    let mut out = json!({"decision": decision.as_str(), "reason": reason});
    if let (Some(input), Some(o)) = (rewrite, out.as_object_mut()) {
        o.insert(
            "hookSpecificOutput".into(),
            json!({"hookEventName": "BeforeTool", "tool_input": input}),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemini_tools_map_to_toolvisor_calls() {
        let v = json!({
            "hook_event_name": "BeforeTool", "session_id": "s", "cwd": "/w",
            "timestamp": "t", "tool_name": "replace",
            "tool_input": {"file_path": "/w/a.rs", "old_string": "x", "new_string": "y"}
        });
        let e = parse(&v, Path::new("/w")).unwrap();
        assert_eq!(e.calls.unwrap()[0].tool, "edit_file");
        let v = json!({
            "hook_event_name": "BeforeTool", "tool_name": "mcp_tool",
            "tool_input": {"path": "a"},
            "mcp_context": {"server_name": "toolvisor", "tool_name": "read_file"}
        });
        assert_eq!(
            parse(&v, Path::new("/w")).unwrap().calls.unwrap()[0].tool,
            "read_file"
        );
        assert_eq!(
            first_url("summarise https://a.example/x. please").unwrap(),
            "https://a.example/x"
        );
    }
}
