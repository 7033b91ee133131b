//! `tools/list`: the daemon's `list_tools` in format `mcp`, as MCP tools.
//!
//! The daemon lists `name`, `title`, `description`, `inputSchema`, `outputSchema` (each
//! built-in tool's own: its `meta` fields, which the bridge puts in
//! `structuredContent`; an MCP server's tool's as the server declared it, or none) and
//! `annotations`. What an older daemon does not list is derived here, in [`complete`]:
//! a `title` from the name.

use rmcp::model::Tool;
use serde_json::Value;
use toolvisor_protocol::message::{ServerMessage, ToolFormat};
use toolvisor_protocol::tools;

use crate::mcp::bridge::{Bridge, Unavailable};
use crate::mcp::passthrough;

/// Every tool the daemon offers, sorted by name (the servers' request tools, which
/// serve resources and prompts, left out). Without a daemon (and `--no-spawn`), the
/// built-in tools: calls then say how to start one.
pub async fn list(bridge: &Bridge) -> Result<Vec<Tool>, Unavailable> {
    let mut out: Vec<Tool> = listed(bridge)
        .await?
        .into_iter()
        .filter_map(to_tool)
        .filter(|t| !passthrough::is_request_tool(&t.name))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The request tools of the MCP servers behind the daemon, sorted.
pub async fn request_tools(bridge: &Bridge) -> Result<Vec<String>, Unavailable> {
    let mut out: Vec<String> = listed(bridge)
        .await?
        .iter()
        .filter_map(|t| t.get("name").and_then(Value::as_str))
        .filter(|n| passthrough::is_request_tool(n))
        .map(str::to_owned)
        .collect();
    out.sort();
    Ok(out)
}

async fn listed(bridge: &Bridge) -> Result<Vec<Value>, Unavailable> {
    match bridge
        .request(|id| toolvisor_protocol::ClientMessage::ListTools {
            id,
            format: Some(ToolFormat::Mcp),
            groups: None,
        })
        .await
    {
        Ok(ServerMessage::Tools { tools, .. }) => Ok(tools),
        Ok(other) => Err(Unavailable(format!("unexpected answer: {other:?}"))),
        Err(_) => Ok(builtin()),
    }
}

/// The built-in tools in format `mcp`.
fn builtin() -> Vec<Value> {
    tools::builtin()
        .iter()
        .map(|t| t.listing(ToolFormat::Mcp))
        .collect()
}

/// One listed tool as an MCP tool (`None` for an entry that is not one).
fn to_tool(mut listed: Value) -> Option<Tool> {
    complete(&mut listed);
    match serde_json::from_value::<Tool>(listed) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!("a listed tool is not an MCP tool: {e}");
            None
        }
    }
}

/// Fill in what the daemon's listing does not carry yet: `title` (from the name). An
/// `outputSchema` is never made up: a tool without one (an MCP server's that declares
/// none) gets whatever structuredContent its server sends, unchecked.
pub fn complete(listed: &mut Value) {
    let Some(m) = listed.as_object_mut() else {
        return;
    };
    if !m.contains_key("title") {
        let name = m.get("name").and_then(Value::as_str).unwrap_or_default();
        m.insert("title".into(), Value::String(title(name)));
    }
}

/// `read_file` → `Read file`; `github__search_issues` → `github: Search issues`.
pub fn title(name: &str) -> String {
    let (server, tool) = match name.split_once("__") {
        Some((s, t)) => (Some(s), t),
        None => (None, name),
    };
    let words = tool.replace(['_', '-'], " ");
    let mut chars = words.trim().chars();
    let human = match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => name.to_owned(),
    };
    match server {
        Some(s) => format!("{s}: {human}"),
        None => human,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_read_like_words() {
        assert_eq!(title("read_file"), "Read file");
        assert_eq!(title("ls"), "Ls");
        assert_eq!(title("github__search_issues"), "github: Search issues");
    }

    #[test]
    fn every_builtin_tool_becomes_an_mcp_tool() {
        let tools: Vec<Tool> = builtin().into_iter().filter_map(to_tool).collect();
        assert_eq!(tools.len(), tools::builtin().len());
        for t in &tools {
            assert!(t.title.is_some() && t.output_schema.is_some(), "{}", t.name);
            assert!(t.annotations.is_some(), "{}", t.name);
        }
    }
}
