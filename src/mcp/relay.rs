//! A supervised MCP server's requests to the client (`relay_request`: sampling,
//! elicitation), put to this bridge's MCP client and answered with `relay_answer`.
//!
//! The bridge says in its `hello` which of them its client takes: `sampling` when the
//! client declared it, form `elicitation` likewise, and only on a session that lets a
//! server send requests (before 2026-07-28). An elicitation's message names the server
//! that asks, so the person knows it is not toolvisor (nor the agent) asking.

// Sampling is deprecated from 2026-07-28 on; the clients that get it speak older
// revisions.
#![allow(deprecated)]

use rmcp::model::{
    ClientCapabilities, CreateMessageRequestParams, ElicitRequestParams, InitializeRequestParams,
};
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use toolvisor_protocol::message::ClientMessage;

/// The MCP method of a sampling request.
pub const SAMPLING: &str = "sampling/createMessage";
/// The MCP method of an elicitation.
pub const ELICITATION: &str = "elicitation/create";

/// The requests a client that initialized with `init` answers.
pub fn methods(init: &InitializeRequestParams) -> Vec<String> {
    methods_of(&init.capabilities)
}

fn methods_of(caps: &ClientCapabilities) -> Vec<String> {
    let mut m = Vec::new();
    if caps.sampling.is_some() {
        m.push(SAMPLING.to_owned());
    }
    // No mode named means form.
    if caps
        .elicitation
        .as_ref()
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
    {
        m.push(ELICITATION.to_owned());
    }
    m
}

/// Put request `request` of MCP server `server` to the client; its `relay_answer`.
pub async fn answer(
    peer: &Peer<RoleServer>,
    request: u64,
    server: &str,
    method: &str,
    params: Value,
) -> ClientMessage {
    let result = match method {
        SAMPLING => sample(peer, params).await,
        ELICITATION => elicit(peer, server, params).await,
        other => Err(format!("the bridge does not pass `{other}` on")),
    };
    let (result, error) = toolvisor_protocol::message::relay_fields(result);
    ClientMessage::RelayAnswer {
        request,
        result,
        error,
    }
}

async fn sample(peer: &Peer<RoleServer>, params: Value) -> Result<Value, String> {
    let params: CreateMessageRequestParams =
        serde_json::from_value(params).map_err(|e| format!("not a sampling request: {e}"))?;
    let result = peer
        .create_message(params)
        .await
        .map_err(|e| format!("the client refused: {e}"))?;
    serde_json::to_value(result).map_err(|e| e.to_string())
}

async fn elicit(peer: &Peer<RoleServer>, server: &str, params: Value) -> Result<Value, String> {
    let params: ElicitRequestParams =
        serde_json::from_value(params).map_err(|e| format!("not an elicitation: {e}"))?;
    let ElicitRequestParams::FormElicitationParams {
        meta,
        message,
        requested_schema,
    } = params
    else {
        return Err("only form elicitation is passed on".into());
    };
    let params = ElicitRequestParams::FormElicitationParams {
        meta,
        message: named(server, &message),
        requested_schema,
    };
    let result = peer
        .create_elicitation(params)
        .await
        .map_err(|e| format!("the client refused: {e}"))?;
    serde_json::to_value(result).map_err(|e| e.to_string())
}

/// The message the person reads: which server asks, then what it says.
fn named(server: &str, message: &str) -> String {
    format!("The MCP server `{server}` asks (through toolvisor): {message}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn caps(v: Value) -> ClientCapabilities {
        serde_json::from_value(v).unwrap_or_default()
    }

    #[test]
    fn only_what_the_client_declared_is_asked_for() {
        assert!(methods_of(&caps(json!({}))).is_empty());
        assert_eq!(
            methods_of(&caps(json!({"sampling": {}, "elicitation": {}}))),
            [SAMPLING, ELICITATION]
        );
        // URL-only elicitation is not form elicitation.
        assert!(methods_of(&caps(json!({"elicitation": {"url": {}}}))).is_empty());
        assert_eq!(
            methods_of(&caps(json!({"elicitation": {"form": {}, "url": {}}}))),
            [ELICITATION]
        );
    }

    #[test]
    fn the_person_reads_which_server_asks() {
        assert!(named("github", "Your token?").starts_with("The MCP server `github` asks"));
    }
}
