//! What every host's hook event becomes: the phase, the host's call id, where the host
//! runs, and toolvisor's own call(s) for the host's tool; and what is answered.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// When the host asks.
#[derive(Clone, Debug, PartialEq)]
pub enum Phase {
    /// Before the tool runs (PreToolUse, BeforeTool): decide, and record it.
    Before,
    /// The host is about to ask its user (PermissionRequest): decide, record nothing
    /// (the PreToolUse of the same call did).
    Permission,
    /// After the tool ran (PostToolUse, AfterTool): record how it ended.
    After { ok: bool, summary: String },
}

/// toolvisor's call for (part of) the host's tool call.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub tool: String,
    pub args: Value,
}

/// One hook event, understood.
#[derive(Clone, Debug)]
pub struct Event {
    /// The host's name for the event, echoed in its answer.
    pub name: String,
    pub phase: Phase,
    /// The host's id for the tool call (its tool_use_id, or one made of the session).
    pub call_id: String,
    /// Where the host runs (`cwd`), when it says.
    pub cwd: Option<PathBuf>,
    /// The host's tool input as it was (a rewrite starts from it).
    pub input: Map<String, Value>,
    /// toolvisor's calls for it, or why there is none.
    pub calls: Result<Vec<Call>, String>,
}

/// What the policy says about a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Decision {
    Allow,
    Ask,
    Deny,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }
}

/// What `toolvisor hook` answers.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// Leave the host to its own rules (the reason goes to stderr).
    NoOpinion(String),
    /// allow / ask / deny with the reason a person reads; `rewrite`: the host's tool
    /// input to run instead (only with allow).
    Decided {
        decision: Decision,
        reason: String,
        rewrite: Option<Map<String, Value>>,
    },
}

/// The fields every host's tool event has: its name (one of `answered`), the tool's
/// name, the tool input.
pub fn common<'a>(
    v: &'a Value,
    answered: &[&str],
) -> Result<(&'a str, &'a str, Map<String, Value>), String> {
    let field = |k: &str| v.get(k).and_then(Value::as_str);
    let name = field("hook_event_name").ok_or("the event has no hook_event_name")?;
    if !answered.contains(&name) {
        return Err(unanswered(name));
    }
    let tool = field("tool_name").ok_or("the event has no tool_name")?;
    let input = v
        .get("tool_input")
        .and_then(Value::as_object)
        .cloned()
        .ok_or("the event has no tool_input object")?;
    Ok((name, tool, input))
}

/// Not an event toolvisor answers.
pub fn unanswered(name: &str) -> String {
    format!("toolvisor does not answer `{name}` events")
}

/// A path the host gives (absolute, as hosts do) as toolvisor takes it: relative to
/// the workspace when it is inside it, else as it is (the policy refuses it).
pub fn path_arg(p: &str, workspace: &Path) -> String {
    let path = Path::new(p);
    match path.strip_prefix(workspace) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
        Ok(rel) => rel.to_string_lossy().into_owned(),
        Err(_) => p.to_owned(),
    }
}

/// The string field `k` of a tool input.
pub fn text<'a>(input: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    input.get(k).and_then(Value::as_str)
}

/// An MCP tool as the hosts name it (`mcp__SERVER__TOOL`) as toolvisor's: its own
/// tools by their names, another server's as `SERVER__TOOL`.
pub fn mcp_tool(name: &str) -> Option<String> {
    let rest = name.strip_prefix("mcp__")?;
    let (server, tool) = rest.split_once("__")?;
    Some(from_server(server, tool))
}

/// A tool of MCP server `server` as toolvisor names it.
pub fn from_server(server: &str, tool: &str) -> String {
    if server == "toolvisor" {
        tool.to_owned()
    } else {
        format!("{server}__{tool}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside_become_relative() {
        let ws = Path::new("/w/p");
        assert_eq!(path_arg("/w/p/src/a.rs", ws), "src/a.rs");
        assert_eq!(path_arg("/w/p", ws), ".");
        assert_eq!(path_arg("/etc/passwd", ws), "/etc/passwd");
        assert_eq!(path_arg("rel/x", ws), "rel/x");
    }

    #[test]
    fn mcp_names_map_to_toolvisor_names() {
        assert_eq!(
            mcp_tool("mcp__toolvisor__read_file").as_deref(),
            Some("read_file")
        );
        assert_eq!(
            mcp_tool("mcp__github__create_issue").as_deref(),
            Some("github__create_issue")
        );
        assert_eq!(mcp_tool("Bash"), None);
        assert_eq!(mcp_tool("mcp__broken"), None);
    }
}
