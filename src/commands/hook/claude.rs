//! Claude Code's hook JSON (PreToolUse, PermissionRequest, PostToolUse), which Codex
//! speaks too: `{hook_event_name, session_id, cwd, tool_name, tool_input,
//! tool_use_id, tool_response}` in; `hookSpecificOutput` out.

use std::path::Path;

use serde_json::{Map, Value, json};

use super::event::{
    Answer, Call, Decision, Event, Phase, common, mcp_tool, path_arg, text, unanswered,
};

/// A host's tools as toolvisor's calls (Claude Code's or Codex's).
pub type ToolMap = fn(&str, &Map<String, Value>, &Path) -> Result<Vec<Call>, String>;

/// The event in `v`, its tool mapped by `map` (Claude Code's or Codex's tools).
pub fn parse(v: &Value, workspace: &Path, map: ToolMap) -> Result<Event, String> {
    const ANSWERED: [&str; 4] = [
        "PreToolUse",
        "PermissionRequest",
        "PostToolUse",
        "PostToolUseFailure",
    ];
    let (name, tool, input) = common(v, &ANSWERED)?;
    let phase = match name {
        "PreToolUse" => Phase::Before,
        "PermissionRequest" => Phase::Permission,
        "PostToolUse" => after(v.get("tool_response"), true),
        "PostToolUseFailure" => after(v.get("error"), false),
        other => return Err(unanswered(other)),
    };
    Ok(Event {
        name: name.to_owned(),
        phase,
        call_id: call_id(v),
        cwd: v.get("cwd").and_then(Value::as_str).map(Into::into),
        calls: map(tool, &input, workspace),
        input,
    })
}

/// The host's id for the call: `tool_use_id`, else the session's id.
fn call_id(v: &Value) -> String {
    let field = |k| v.get(k).and_then(Value::as_str);
    field("tool_use_id")
        .or_else(|| field("session_id"))
        .unwrap_or("unknown")
        .to_owned()
}

/// PostToolUse: how the tool ended, from its response.
pub fn after(response: Option<&Value>, ran: bool) -> Phase {
    let failed = response.is_some_and(|r| {
        r.get("success") == Some(&Value::Bool(false))
            || r.get("is_error") == Some(&Value::Bool(true))
            || r.get("error").is_some_and(|e| !e.is_null())
    });
    let summary = match response {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v
            .get("error")
            .or_else(|| v.get("stderr"))
            .or_else(|| v.get("stdout"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        None => String::new(),
    };
    Phase::After {
        ok: ran && !failed,
        summary: summary.lines().next().unwrap_or_default().to_owned(),
    }
}

/// Claude Code's tools as toolvisor's.
pub fn claude_tools(
    tool: &str,
    input: &Map<String, Value>,
    ws: &Path,
) -> Result<Vec<Call>, String> {
    let s = |k: &str| text(input, k).unwrap_or_default();
    let path = |k: &str| path_arg(s(k), ws);
    let one = |tool: &str, args: Value| {
        Ok(vec![Call {
            tool: tool.into(),
            args,
        }])
    };
    match tool {
        "Bash" => one("run_command", json!({"command": s("command")})),
        "Read" => one("read_file", json!({"path": path("file_path")})),
        "Write" => one(
            "write_file",
            json!({"path": path("file_path"), "content": s("content")}),
        ),
        "Edit" => one(
            "edit_file",
            json!({"path": path("file_path"), "edits": [edit(input)]}),
        ),
        "MultiEdit" => {
            let edits: Vec<Value> = input
                .get("edits")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_object).map(edit).collect())
                .unwrap_or_default();
            one(
                "edit_file",
                json!({"path": path("file_path"), "edits": edits}),
            )
        }
        "NotebookEdit" => one(
            "write_file",
            json!({"path": path("notebook_path"), "content": s("new_source")}),
        ),
        "Glob" => one(
            "glob",
            with_dir(json!({"pattern": s("pattern")}), input, ws),
        ),
        "Grep" => one(
            "grep",
            with_dir(json!({"pattern": s("pattern")}), input, ws),
        ),
        "LS" => one("ls", json!({"path": path("path")})),
        "WebFetch" => one("web_fetch", json!({"url": s("url")})),
        "WebSearch" => one("web_search", json!({"query": s("query")})),
        other => mcp(other, input),
    }
}

/// An MCP tool's call; no other tool has a counterpart in toolvisor.
pub fn mcp(tool: &str, input: &Map<String, Value>) -> Result<Vec<Call>, String> {
    match mcp_tool(tool) {
        Some(name) => Ok(vec![Call {
            tool: name,
            args: Value::Object(input.clone()),
        }]),
        None => Err(format!(
            "toolvisor has no counterpart of the host's `{tool}`"
        )),
    }
}

fn edit(e: &Map<String, Value>) -> Value {
    json!({
        "target": text(e, "old_string").unwrap_or_default(),
        "replacement": text(e, "new_string").unwrap_or_default(),
    })
}

/// `path` of a search as toolvisor's `directory`, when given.
fn with_dir(mut args: Value, input: &Map<String, Value>, ws: &Path) -> Value {
    if let (Some(dir), Some(obj)) = (text(input, "path"), args.as_object_mut()) {
        obj.insert("directory".into(), path_arg(dir, ws).into());
    }
    args
}

/// The answer in Claude Code's JSON. `rewrites` says whether the host takes
/// `updatedInput` with this event (Codex does not on PermissionRequest).
pub fn render(event: &str, answer: &Answer, rewrites_permission: bool) -> Value {
    let Answer::Decided {
        decision,
        reason,
        rewrite,
    } = answer
    else {
        return json!({});
    };
    match event {
        "PreToolUse" => {
            let mut out = json!({
                "hookEventName": "PreToolUse",
                "permissionDecision": decision.as_str(),
                "permissionDecisionReason": reason,
            });
            if let (Some(input), Some(o)) = (rewrite, out.as_object_mut()) {
                o.insert("updatedInput".into(), Value::Object(input.clone()));
            }
            json!({ "hookSpecificOutput": out })
        }
        "PermissionRequest" => permission(*decision, reason, rewrite.as_ref(), rewrites_permission),
        _ => json!({}),
    }
}

/// PermissionRequest: allow or deny for the user; an `ask` leaves the dialog to them.
fn permission(
    decision: Decision,
    reason: &str,
    rewrite: Option<&Map<String, Value>>,
    rewrites: bool,
) -> Value {
    let verdict = match decision {
        Decision::Ask => return json!({}),
        Decision::Allow => {
            let mut d = json!({"behavior": "allow"});
            if let (Some(input), true, Some(o)) = (rewrite, rewrites, d.as_object_mut()) {
                o.insert("updatedInput".into(), Value::Object(input.clone()));
            }
            d
        }
        Decision::Deny => json!({"behavior": "deny", "message": reason}),
    };
    json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": verdict}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(v: Value) -> Result<Event, String> {
        parse(&v, Path::new("/w"), claude_tools)
    }

    #[test]
    fn claude_code_tools_map_to_toolvisor_calls() {
        let e = event(json!({
            "hook_event_name": "PreToolUse", "session_id": "s", "cwd": "/w",
            "tool_name": "Edit", "tool_use_id": "toolu_1",
            "tool_input": {"file_path": "/w/a.rs", "old_string": "x", "new_string": "y"}
        }))
        .unwrap();
        assert_eq!(e.call_id, "toolu_1");
        let calls = e.calls.unwrap();
        assert_eq!(calls[0].tool, "edit_file");
        assert_eq!(
            calls[0].args,
            json!({"path": "a.rs", "edits": [{"target": "x", "replacement": "y"}]})
        );
        let e = event(json!({
            "hook_event_name": "PreToolUse", "tool_name": "Task", "tool_input": {}
        }))
        .unwrap();
        assert!(e.calls.unwrap_err().contains("Task"));
    }

    #[test]
    fn malformed_and_unknown_events_are_errors() {
        assert!(event(json!({"tool_name": "Bash"})).is_err());
        assert!(
            event(json!({"hook_event_name": "Stop"}))
                .unwrap_err()
                .contains("Stop")
        );
        let no_input = json!({"hook_event_name": "PreToolUse", "tool_name": "Bash"});
        assert!(event(no_input).is_err());
    }

    #[test]
    fn answers_in_claude_codes_shape() {
        let allow = Answer::Decided {
            decision: Decision::Allow,
            reason: "r".into(),
            rewrite: None,
        };
        let out = render("PreToolUse", &allow, true);
        assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "allow");
        let out = render("PermissionRequest", &allow, true);
        assert_eq!(out["hookSpecificOutput"]["decision"]["behavior"], "allow");
        let ask = Answer::Decided {
            decision: Decision::Ask,
            reason: "r".into(),
            rewrite: None,
        };
        assert_eq!(render("PermissionRequest", &ask, true), json!({}));
        assert_eq!(render("PostToolUse", &allow, true), json!({}));
        assert_eq!(
            render("PreToolUse", &Answer::NoOpinion("x".into()), true),
            json!({})
        );
    }
}
