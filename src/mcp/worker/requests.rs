//! An MCP server's resources, prompts and completions, reached through the daemon like
//! its tools: the worker announces one more tool, `NAME__mcp-request` (low risk, read
//! only), whose call names an MCP method and its params; the bridge (`toolvisor mcp`)
//! calls it to list and read resources, list and get prompts and complete arguments,
//! so each goes through the policy and the audit log.
//!
//! Prompts are named like the server's tools (its prefix, `NAME__` by default, before
//! the server's own name) both ways. A list page is at most [`PAGE`] items: a server's
//! larger page is served in slices, its cursor and the slice's offset in the cursor
//! the bridge gets back.

use rmcp::model::{
    CompleteRequestParams, GetPromptRequestParams, PaginatedRequestParams,
    ReadResourceRequestParams,
};
use rmcp::service::ServiceError;
use rmcp::{Peer, RoleClient};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::worker::{Annotations, AnnouncedTool, McpServerInit, Outcome};
use toolvisor_protocol::{ErrorBody, ErrorType};

use super::subscriptions::Subscriptions;

/// What the request tool's name ends with, after `NAME`.
pub const SUFFIX: &str = toolvisor_supervisor::registry::mcp::REQUEST_SUFFIX;
/// Most items of one list page passed on.
pub const PAGE: usize = 500;
/// The methods the request tool passes on.
pub const METHODS: &[&str] = &[
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "resources/subscribe",
    "resources/unsubscribe",
];
/// Cursors the worker made (a slice of a server's page) start with this.
const OWN_CURSOR: &str = "toolvisor-slice:";

/// The request tool's name for `server`.
pub fn tool_name(server: &str) -> String {
    format!("{server}{SUFFIX}")
}

/// The request tool, when the server offers resources, prompts or completions.
pub fn announced(server: &McpServerInit, peer: &Peer<RoleClient>) -> Option<AnnouncedTool> {
    let caps = peer.peer_info()?.capabilities.clone();
    if caps.resources.is_none() && caps.prompts.is_none() && caps.completions.is_none() {
        return None;
    }
    Some(AnnouncedTool {
        name: tool_name(&server.name),
        title: Some(format!("{}: resources and prompts", server.name)),
        description: format!(
            "Read the resources and prompts of MCP server `{}` (used by `toolvisor mcp`).",
            server.name
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "method": {"type": "string", "enum": METHODS},
                "params": {"type": "object"}
            },
            "required": ["method"],
            "additionalProperties": false
        }),
        output_schema: None,
        annotations: Annotations {
            read_only_hint: Some(true),
            destructive_hint: Some(false),
            idempotent_hint: Some(true),
            open_world_hint: None,
        },
        risk: None,
        paths: Vec::new(),
    })
}

/// Who makes a request: its session's subscriptions are its own.
pub struct Caller {
    pub session: String,
    pub subs: Subscriptions,
}

/// Run one request: the server's answer as `structured` meta, a line saying what it
/// is as the content.
pub async fn run(
    peer: &Peer<RoleClient>,
    server: &McpServerInit,
    caller: &Caller,
    args: Value,
    cancel: &CancellationToken,
) -> Outcome {
    let method = args["method"].as_str().unwrap_or_default().to_owned();
    let params = match args.get("params") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    let prefix = server.tool_prefix();
    let answer = tokio::select! {
        a = send(peer, caller, &method, params, &prefix) => a,
        _ = cancel.cancelled() => Err(Failure::Cancelled),
    };
    match answer {
        Ok(mut v) => {
            rename_prompts(&mut v, |n| format!("{prefix}{n}"));
            let mut o = Outcome::ok(format!("{method}: answered"));
            o.meta.insert("structured".into(), v);
            o
        }
        Err(Failure::Cancelled) => Outcome::err(ErrorBody::new(
            ErrorType::Cancelled,
            "the request was cancelled",
        )),
        Err(Failure::Bad(m)) => Outcome::err(ErrorBody::new(ErrorType::InvalidParams, m)),
        Err(Failure::Server(m)) => Outcome::err(ErrorBody::new(ErrorType::McpToolError, m)),
    }
}

enum Failure {
    Cancelled,
    /// The request cannot be sent as given.
    Bad(String),
    /// The server's error.
    Server(String),
}

impl From<ServiceError> for Failure {
    fn from(e: ServiceError) -> Failure {
        Failure::Server(e.to_string())
    }
}

fn parse<T: serde::de::DeserializeOwned>(params: Map<String, Value>) -> Result<T, Failure> {
    serde_json::from_value(Value::Object(params)).map_err(|e| Failure::Bad(e.to_string()))
}

fn value<T: serde::Serialize>(t: T) -> Result<Value, Failure> {
    serde_json::to_value(t).map_err(|e| Failure::Server(e.to_string()))
}

async fn send(
    peer: &Peer<RoleClient>,
    caller: &Caller,
    method: &str,
    mut params: Map<String, Value>,
    prefix: &str,
) -> Result<Value, Failure> {
    match method {
        "resources/subscribe" | "resources/unsubscribe" => {
            subscription(peer, caller, method, &params).await
        }
        "resources/list" | "resources/templates/list" | "prompts/list" => {
            list(peer, method, params).await
        }
        "resources/read" => value(
            peer.read_resource(parse::<ReadResourceRequestParams>(params)?)
                .await?,
        ),
        "prompts/get" => {
            strip(&mut params, "name", prefix)?;
            value(
                peer.get_prompt(parse::<GetPromptRequestParams>(params)?)
                    .await?,
            )
        }
        "completion/complete" => {
            if let Some(Value::Object(r)) = params.get_mut("ref")
                && r.get("type").and_then(Value::as_str) == Some("ref/prompt")
            {
                strip(r, "name", prefix)?;
            }
            value(
                peer.complete(parse::<CompleteRequestParams>(params)?)
                    .await?,
            )
        }
        other => Err(Failure::Bad(format!("`{other}` is not one of {METHODS:?}"))),
    }
}

/// Subscribe the caller's session to a resource, or end its subscription: `{}`.
async fn subscription(
    peer: &Peer<RoleClient>,
    caller: &Caller,
    method: &str,
    params: &Map<String, Value>,
) -> Result<Value, Failure> {
    let Some(uri) = params.get("uri").and_then(Value::as_str) else {
        return Err(Failure::Bad(format!("{method} needs a `uri`")));
    };
    let subscribes = peer
        .peer_info()
        .and_then(|i| i.capabilities.resources.as_ref().and_then(|r| r.subscribe))
        .unwrap_or(false);
    if !subscribes {
        return Err(Failure::Server(
            "the server offers no resource subscriptions".into(),
        ));
    }
    let (subs, session) = (&caller.subs, caller.session.as_str());
    let done = match method {
        "resources/subscribe" => subs.subscribe(peer, session, uri).await,
        _ => subs.unsubscribe(peer, session, uri).await,
    };
    done.map(|()| json!({})).map_err(Failure::Server)
}

/// The server's own name of a prompt named `PREFIX` + name here.
fn strip(params: &mut Map<String, Value>, key: &str, prefix: &str) -> Result<(), Failure> {
    let Some(name) = params.get(key).and_then(Value::as_str) else {
        return Ok(());
    };
    let own = name.strip_prefix(prefix).ok_or_else(|| {
        Failure::Bad(format!(
            "no prompt `{name}` here (names start with `{prefix}`)"
        ))
    })?;
    params.insert(key.into(), Value::String(own.to_owned()));
    Ok(())
}

/// One page of a list, at most [`PAGE`] items.
async fn list(
    peer: &Peer<RoleClient>,
    method: &str,
    params: Map<String, Value>,
) -> Result<Value, Failure> {
    let cursor = params.get("cursor").and_then(Value::as_str);
    let (theirs, offset) = match cursor.and_then(|c| c.strip_prefix(OWN_CURSOR)) {
        Some(own) => split_own(own)?,
        None => (cursor.map(str::to_owned), 0),
    };
    let page = theirs
        .clone()
        .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
    let mut v = match method {
        "resources/list" => value(peer.list_resources(page).await?)?,
        "resources/templates/list" => value(peer.list_resource_templates(page).await?)?,
        _ => value(peer.list_prompts(page).await?)?,
    };
    let key = match method {
        "resources/list" => "resources",
        "resources/templates/list" => "resourceTemplates",
        _ => "prompts",
    };
    slice(&mut v, key, theirs.as_deref(), offset);
    Ok(v)
}

/// `OFFSET:CURSOR` (the server's cursor empty for its first page).
fn split_own(own: &str) -> Result<(Option<String>, usize), Failure> {
    let (offset, theirs) = own
        .split_once(':')
        .ok_or_else(|| Failure::Bad("a malformed cursor".into()))?;
    let offset = offset
        .parse()
        .map_err(|_| Failure::Bad("a malformed cursor".into()))?;
    Ok(((!theirs.is_empty()).then(|| theirs.to_owned()), offset))
}

/// Keep `PAGE` items of `v[key]` from `offset`; when more follow in the server's
/// page, the next cursor points at them.
fn slice(v: &mut Value, key: &str, theirs: Option<&str>, offset: usize) {
    let Some(Value::Array(items)) = v.get_mut(key) else {
        return;
    };
    let total = items.len();
    let kept: Vec<Value> = items.drain(..).skip(offset).take(PAGE).collect();
    *items = kept;
    if offset + PAGE < total {
        let next = format!(
            "{OWN_CURSOR}{}:{}",
            offset + PAGE,
            theirs.unwrap_or_default()
        );
        v["nextCursor"] = Value::String(next);
    }
}

/// Rename each prompt of a `prompts/list` answer.
fn rename_prompts(v: &mut Value, rename: impl Fn(&str) -> String) {
    if let Some(Value::Array(prompts)) = v.get_mut("prompts") {
        for p in prompts {
            if let Some(n) = p.get("name").and_then(Value::as_str) {
                p["name"] = Value::String(rename(n));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_page_is_served_in_slices() {
        let items: Vec<Value> = (0..1200).map(|i| json!({"uri": format!("u{i}")})).collect();
        let mut v = json!({"resources": items, "nextCursor": "theirs-2"});
        slice(&mut v, "resources", Some("theirs-1"), 0);
        assert_eq!(v["resources"].as_array().map(Vec::len), Some(PAGE));
        let next = v["nextCursor"].as_str().unwrap_or_default().to_owned();
        assert_eq!(next, format!("{OWN_CURSOR}{PAGE}:theirs-1"));
        let own = next.strip_prefix(OWN_CURSOR).unwrap_or_default();
        let (theirs, offset) = split_own(own).unwrap_or_else(|_| panic!("cursor"));
        assert_eq!((theirs.as_deref(), offset), (Some("theirs-1"), PAGE));

        let items: Vec<Value> = (0..1200).map(|i| json!({"uri": format!("u{i}")})).collect();
        let mut last = json!({"resources": items, "nextCursor": "theirs-2"});
        slice(&mut last, "resources", Some("theirs-1"), 1000);
        assert_eq!(last["resources"].as_array().map(Vec::len), Some(200));
        assert_eq!(last["resources"][0]["uri"], "u1000");
        assert_eq!(
            last["nextCursor"], "theirs-2",
            "the server's next page follows"
        );
    }

    #[test]
    fn prompts_carry_the_prefix_both_ways() {
        let mut v = json!({"prompts": [{"name": "p"}]});
        rename_prompts(&mut v, |n| format!("gh__{n}"));
        assert_eq!(v["prompts"][0]["name"], "gh__p");
        let mut params = Map::new();
        params.insert("name".into(), json!("gh__p"));
        assert!(strip(&mut params, "name", "gh__").is_ok());
        assert_eq!(params["name"], "p");
        params.insert("name".into(), json!("other"));
        assert!(strip(&mut params, "name", "gh__").is_err());
    }
}
