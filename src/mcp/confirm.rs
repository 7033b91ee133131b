//! Confirmations through MCP. The bridge's session is interactive, so an `ask` reaches
//! it as `confirm_required`. A client that declared form elicitation gets
//! `elicitation/create` (the description and preview; `approve` and `remember`); its
//! answer becomes the daemon's `confirm` (`decline`, `cancel` or `approve: false` deny).
//! Any other client is told, by a progress or log notification, that the call waits
//! for `toolvisor approve` until the confirmation expires.

// Log notifications are deprecated from 2026-07-28 on, but the clients that get them
// (no progress token, no elicitation) speak older revisions.
#![allow(deprecated)]

use std::time::Duration;

use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, LoggingLevel, LoggingMessageNotificationParam, ServerRequest,
};
use rmcp::service::{ElicitationMode, PeerRequestOptions, RequestContext, RequestHandle};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use toolvisor_protocol::message::{ClientMessage, Remember};

use crate::mcp::logging::LogLevel;

/// A `confirm_required` as the bridge got it.
#[derive(Clone, Debug)]
pub struct Ask {
    pub interaction: String,
    pub tool: String,
    pub description: String,
    pub risk: String,
    pub preview: Option<String>,
    pub expires_in: Duration,
}

/// How this client can be asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// `elicitation/create` (form mode).
    Elicit,
    /// Only told to wait for `toolvisor approve`.
    Wait,
    /// A 2026-07-28 client that declared elicitation: the request answers
    /// `input_required` with the question, and the client asks again with the answer.
    Rounds,
}

/// Whether the client of this request declared form elicitation, on a protocol that
/// lets the server send requests (before 2026-07-28).
pub fn channel(ctx: &RequestContext<RoleServer>) -> Channel {
    let stateful = ctx.protocol_version().is_none_or(|v| v.has_initialize());
    if !stateful {
        // Capabilities come with each request; no mode named means form.
        let form = ctx
            .client_capabilities()
            .and_then(|c| c.elicitation)
            .is_some_and(|e| e.form.is_some() || e.url.is_none());
        return if form { Channel::Rounds } else { Channel::Wait };
    }
    let form = ctx
        .peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Form);
    if form { Channel::Elicit } else { Channel::Wait }
}

/// The message the person reads.
fn message(ask: &Ask) -> String {
    let mut m = format!(
        "toolvisor asks: {} ({} risk, tool {}).",
        ask.description, ask.risk, ask.tool
    );
    if let Some(p) = ask.preview.as_deref().filter(|p| !p.trim().is_empty()) {
        m.push_str("\n\n");
        m.push_str(p.trim_end());
    }
    m
}

/// The form: `approve` (boolean) and `remember` (`once` or `session`).
fn schema() -> Option<ElicitationSchema> {
    let v = json!({
        "type": "object",
        "properties": {
            "approve": {
                "type": "boolean",
                "title": "Approve",
                "description": "Let this call run",
                "default": false
            },
            "remember": {
                "type": "string",
                "title": "Remember",
                "description": "session: also allow the same call (same arguments) again in this session without asking",
                "enum": ["once", "session"],
                "default": "once"
            }
        },
        "required": ["approve"]
    });
    let Value::Object(m) = v else { return None };
    ElicitationSchema::from_json_schema(m).ok()
}

/// The `elicitation/create` request of a confirmation.
pub fn request(ask: &Ask) -> Option<ElicitRequest> {
    Some(ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message(ask),
            requested_schema: schema()?,
        },
    ))
}

/// The `confirm` an elicitation's answer makes (anything but an accepted approval is
/// a no).
pub fn confirm_of(ask: &Ask, result: &ElicitResult) -> ClientMessage {
    let (approve, remember) = match result.action {
        ElicitationAction::Accept => decision(result.content.as_ref()),
        _ => (false, Remember::Once),
    };
    ClientMessage::Confirm {
        interaction: ask.interaction.clone(),
        approve,
        remember: Some(remember),
    }
}

/// A pending elicitation; dropped before its answer, it is cancelled on the client.
struct Pending(Option<RequestHandle<RoleServer>>);

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            tokio::spawn(async move {
                let _ = h.cancel(Some("answered elsewhere".into())).await;
            });
        }
    }
}

/// Ask the person through the client. `Some(confirm)` to send to the daemon; `None`
/// when the client could not ask (the daemon's own timeout then decides).
pub async fn elicit(peer: &Peer<RoleServer>, ask: &Ask) -> Option<ClientMessage> {
    let request = ServerRequest::ElicitRequest(request(ask)?);
    let options = PeerRequestOptions::no_options();
    let handle = match peer.send_cancellable_request(request, options).await {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!("cannot ask the MCP client: {e}");
            return None;
        }
    };
    let mut pending = Pending(Some(handle));
    let answer = match pending.0.as_mut() {
        // Past the confirmation's own expiry nobody can answer it any more.
        Some(h) => tokio::time::timeout(ask.expires_in, &mut h.rx).await.ok()?,
        None => return None,
    };
    pending.0 = None;
    let result = match answer {
        Ok(Ok(ClientResult::ElicitResult(r))) => r,
        Ok(Ok(other)) => {
            tracing::warn!("the MCP client answered an elicitation with {other:?}");
            return None;
        }
        Ok(Err(e)) => {
            tracing::warn!("the MCP client did not answer the elicitation: {e}");
            return None;
        }
        Err(_) => return None,
    };
    Some(confirm_of(ask, &result))
}

/// `approve` and `remember` of an accepted form; anything unclear is a no.
fn decision(content: Option<&Value>) -> (bool, Remember) {
    let approve = content
        .and_then(|c| c.get("approve"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let remember = match content
        .and_then(|c| c.get("remember"))
        .and_then(Value::as_str)
    {
        Some("session") if approve => Remember::Session,
        _ => Remember::Once,
    };
    (approve, remember)
}

/// What a client that cannot be asked is told.
pub fn waiting_notice(ask: &Ask, workspace: &std::path::Path) -> String {
    format!(
        "Waiting for a person to approve: {} ({} risk). Run `toolvisor approve --workspace {}` \
         in a terminal to answer; the call is denied if nobody does within {} s.",
        ask.description,
        ask.risk,
        workspace.display(),
        ask.expires_in.as_secs()
    )
}

/// Tell a client without progress token, by a log notification.
pub async fn log_notice(peer: &Peer<RoleServer>, level: &LogLevel, text: &str) {
    if !level.allows(LoggingLevel::Warning) {
        return;
    }
    let param = LoggingMessageNotificationParam::new(LoggingLevel::Warning, json!(text));
    let sent = peer.notify_logging_message(param).await;
    if let Err(e) = sent {
        tracing::debug!("log notification not sent: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_explicit_approve_approves() {
        assert_eq!(
            decision(Some(&json!({"approve": true}))),
            (true, Remember::Once)
        );
        assert_eq!(
            decision(Some(&json!({"approve": true, "remember": "session"}))),
            (true, Remember::Session)
        );
        assert_eq!(
            decision(Some(&json!({"approve": false, "remember": "session"}))),
            (false, Remember::Once)
        );
        assert_eq!(
            decision(Some(&json!({"approve": "yes"}))),
            (false, Remember::Once)
        );
        assert_eq!(decision(None), (false, Remember::Once));
    }

    #[test]
    fn the_form_is_a_valid_elicitation_schema() {
        assert!(schema().is_some());
        let ask = Ask {
            interaction: "i1".into(),
            tool: "run_command".into(),
            description: "Run `ls` in .".into(),
            risk: "high".into(),
            preview: Some("ls\n".into()),
            expires_in: Duration::from_secs(60),
        };
        assert!(message(&ask).ends_with("\n\nls"));
        assert!(
            waiting_notice(&ask, std::path::Path::new("/w"))
                .contains("toolvisor approve --workspace /w")
        );
    }
}
