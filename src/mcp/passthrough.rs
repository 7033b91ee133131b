//! The resources, prompts and completions of the MCP servers behind the daemon, for
//! `toolvisor mcp`'s client: each server's worker offers a tool, `NAME__mcp-request`,
//! that passes one MCP request on to its server, so every read is a call the daemon's
//! policy decides and its audit log records (a low-risk one).
//!
//! Lists run across the servers in order of name; the bridge's cursor is the server's
//! index and that server's own cursor. A read, a prompt or a completion goes to the
//! first server that answers it. Resources and templates carry their server's name in
//! `_meta` (`toolvisor/server`); prompts are named like the server's tools.

use serde_json::{Map, Value, json};
use toolvisor_protocol::message::{CallRequest, Status};
use toolvisor_supervisor::registry::mcp::REQUEST_SUFFIX;

use crate::mcp::call::{self, CallCtx, CallError};

/// The `_meta` key naming a resource's server.
pub const SERVER_META: &str = "toolvisor/server";

/// Whether `tool` is a server's request tool (not listed to the client as a tool).
pub fn is_request_tool(tool: &str) -> bool {
    tool.ends_with(REQUEST_SUFFIX)
}

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// No server answered it (each said why, the last one here).
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Failed(String),
}

/// One request to the server of request tool `tool`: the server's answer.
pub async fn ask(
    ctx: &CallCtx<'_>,
    tool: &str,
    method: &str,
    params: Value,
) -> Result<Value, AskError> {
    let req = CallRequest::new("", tool, json!({"method": method, "params": params}));
    let r = call::run(ctx, req)
        .await
        .map_err(|e| AskError::Failed(call_text(e)))?;
    if r.status != Status::Ok {
        let why = r.error.map_or_else(|| r.content.clone(), |e| e.message);
        return Err(AskError::NotFound(why));
    }
    if r.meta.get("structured_omitted").is_some() {
        return Err(AskError::Failed(format!(
            "{method}: the answer is larger than toolvisor passes on"
        )));
    }
    r.meta
        .get("structured")
        .cloned()
        .ok_or_else(|| AskError::Failed(format!("{method}: the server's answer is missing")))
}

fn call_text(e: CallError) -> String {
    match e {
        CallError::Unavailable(u) => u.to_string(),
        CallError::Cancelled => "the request was cancelled".into(),
        CallError::Refused(m) => format!("the daemon refused the request: {m}"),
    }
}

/// The first answer of the servers `tools`, tried in order.
pub async fn first(
    ctx: &CallCtx<'_>,
    tools: &[String],
    method: &str,
    params: Value,
) -> Result<Value, AskError> {
    let mut last = AskError::NotFound(format!(
        "{method}: no MCP server behind toolvisor offers it"
    ));
    for tool in tools {
        match ask(ctx, tool, method, params.clone()).await {
            Ok(v) => return Ok(v),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// One page of `method`'s list (items under `key`) across the servers `tools`.
pub async fn page(
    ctx: &CallCtx<'_>,
    tools: &[String],
    method: &str,
    key: &str,
    cursor: Option<&str>,
) -> Result<Value, AskError> {
    let (mut i, mut theirs) = parse_cursor(cursor)?;
    while let Some(tool) = tools.get(i) {
        let params = theirs
            .take()
            .map_or_else(|| json!({}), |c| json!({"cursor": c}));
        let mut v = match ask(ctx, tool, method, params).await {
            Ok(v) => v,
            Err(e) => {
                // A server without this kind of thing says so; the others still list.
                tracing::debug!("{tool}: {method}: {e}");
                i += 1;
                continue;
            }
        };
        let mut items = match v.get_mut(key).map(Value::take) {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        };
        if key != "prompts" {
            tag(&mut items, server_of(tool));
        }
        let next = match v.get("nextCursor").and_then(Value::as_str) {
            Some(c) => Some(format!("{i}:{c}")),
            None if i + 1 < tools.len() => Some(format!("{}:", i + 1)),
            None => None,
        };
        if items.is_empty() && next.is_some() {
            (i, theirs) = parse_cursor(next.as_deref())?;
            continue;
        }
        let mut out = Map::new();
        out.insert(key.into(), Value::Array(items));
        if let Some(n) = next {
            out.insert("nextCursor".into(), Value::String(n));
        }
        return Ok(Value::Object(out));
    }
    Ok(json!({ key: [] }))
}

/// `INDEX:THEIRS` (theirs empty: the server's first page).
fn parse_cursor(cursor: Option<&str>) -> Result<(usize, Option<String>), AskError> {
    let Some(c) = cursor else {
        return Ok((0, None));
    };
    let bad = || AskError::NotFound(format!("unknown cursor `{c}`"));
    let (i, theirs) = c.split_once(':').ok_or_else(bad)?;
    let i = i.parse().map_err(|_| bad())?;
    Ok((i, (!theirs.is_empty()).then(|| theirs.to_owned())))
}

fn server_of(tool: &str) -> &str {
    tool.strip_suffix(REQUEST_SUFFIX).unwrap_or(tool)
}

/// Name each item's server in its `_meta`.
fn tag(items: &mut [Value], server: &str) {
    for item in items.iter_mut().filter_map(Value::as_object_mut) {
        let meta = item.entry("_meta").or_insert_with(|| json!({}));
        if let Some(m) = meta.as_object_mut() {
            m.insert(SERVER_META.into(), Value::String(server.to_owned()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_name_a_server_and_its_own_cursor() {
        assert_eq!(parse_cursor(None).ok(), Some((0, None)));
        assert_eq!(
            parse_cursor(Some("2:abc:d")).ok(),
            Some((2, Some("abc:d".into())))
        );
        assert_eq!(parse_cursor(Some("1:")).ok(), Some((1, None)));
        assert!(parse_cursor(Some("x")).is_err());
    }

    #[test]
    fn items_name_their_server() {
        let mut items = vec![json!({"uri": "a"}), json!({"uri": "b", "_meta": {"k": 1}})];
        tag(&mut items, server_of("gh__mcp-request"));
        assert_eq!(items[0]["_meta"][SERVER_META], "gh");
        assert_eq!(items[1]["_meta"]["k"], 1);
        assert!(is_request_tool("gh__mcp-request") && !is_request_tool("gh__read"));
    }
}
