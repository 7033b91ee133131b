//! The policy gate every admitted call passes before it may run: the policy's
//! decision, a grant token, a remembered approval, or a person's answer.
//!
//! A denial here is a policy outcome (status `denied`); the call never ran, so the
//! router records it as `rejected`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::message::{CallRequest, ServerMessage, Topic};
use toolvisor_protocol::tools::ToolSpec;
use toolvisor_protocol::worker::Outcome;
use toolvisor_protocol::{ErrorBody, ErrorType};

use crate::audit::record::{ConfirmAnswered, ConfirmRequested, GrantUsed};
use crate::call::confirm::{Answer, ConfirmDetails};
use crate::call::grants::TokenUse;
use crate::call::router::SessionInfo;
use crate::config::Action;
use crate::policy::{Decision, how_to_allow};
use crate::service::Service;
use crate::session::events::obj;

fn denied(kind: ErrorType, message: impl Into<String>) -> Outcome {
    Outcome::err(ErrorBody::new(kind, message))
}

/// `meta.policy` of a result.
pub fn meta(d: &Decision) -> Value {
    json!({"decision": action_str(d.action), "reason": d.reason, "rule": d.rule, "risk": d.risk.as_str()})
}

pub fn action_str(a: Action) -> &'static str {
    match a {
        Action::Allow => "allow",
        Action::Deny => "deny",
        Action::Ask => "ask",
    }
}

impl Service {
    /// Decide a call. `Ok` carries the decision it ran under (after any token or
    /// confirmation); `Err` carries the outcome that ends it.
    pub async fn gate(
        &self,
        session: &SessionInfo,
        req: &CallRequest,
        spec: &ToolSpec,
        call_id: &str,
        cancel: &CancellationToken,
    ) -> (Decision, Result<(), Outcome>) {
        let policy = self.policy();
        let mut decision = policy.decide_spec(spec, &req.args);
        if spec.name == "apply_file_change" {
            self.add_change_location(req, &mut decision);
        }
        // A path no root contains can never run: say so, rather than ask a person.
        if let Some(outside) = decision
            .locations
            .iter()
            .find(|l| policy.scopes().resolve(l).is_outside())
        {
            let msg = format!("`{outside}` is outside the workspace");
            return (decision, Err(denied(ErrorType::PathOutsideWorkspace, msg)));
        }
        if decision.action == Action::Ask
            && let Some(token) = &req.confirm_token
        {
            let use_ = TokenUse {
                tool: spec.name,
                trace_id: req.trace_id.as_deref(),
                locations: &decision.locations,
            };
            match self
                .grants
                .settle(decision.action, token, &use_, Instant::now())
            {
                Ok(action) => {
                    decision.action = action;
                    decision.reason = format!("{} (passed by a grant token)", decision.reason);
                    let grant_id = crate::call::grants::fingerprint(token);
                    self.audit.record_detached(&GrantUsed {
                        grant_id: &grant_id,
                        call_id,
                        tool: spec.name,
                    });
                }
                Err(why) => {
                    return (
                        decision,
                        Err(denied(ErrorType::TokenInvalid, why.to_string())),
                    );
                }
            }
        }
        let result = match decision.action {
            Action::Allow => Ok(()),
            Action::Deny => Err(denied(
                ErrorType::PolicyDenied,
                format!("denied by policy: {}", decision.reason),
            )),
            Action::Ask => {
                self.ask(session, req, spec, call_id, &decision, cancel)
                    .await
            }
        };
        if result.is_ok() {
            decision.action = Action::Allow;
        }
        (decision, result)
    }

    /// The path an `apply_file_change` will write, from its pending preview.
    fn add_change_location(&self, req: &CallRequest, decision: &mut Decision) {
        let token = crate::call::router::change_token(&req.args);
        if let Ok(change) = self.previews().peek(token, Instant::now()) {
            decision.locations = vec![change.path.clone()];
            decision.description = format!("Apply the previewed change to {}", change.path);
        }
    }

    async fn ask(
        &self,
        session: &SessionInfo,
        req: &CallRequest,
        spec: &ToolSpec,
        call_id: &str,
        decision: &Decision,
        cancel: &CancellationToken,
    ) -> Result<(), Outcome> {
        let args_sha256 = crate::audit::canonical::args_sha256(&req.args);
        if self
            .confirmations
            .is_remembered(&session.id, spec.name, &args_sha256)
        {
            return Ok(());
        }
        if !session.interactive {
            return Err(denied(
                ErrorType::ConfirmationRequired,
                how_to_allow(decision, spec.name),
            ));
        }
        let details = ConfirmDetails {
            session: session.id.clone(),
            call_id: call_id.to_owned(),
            tool: spec.name.to_owned(),
            description: decision.description.clone(),
            risk: decision.risk,
            locations: decision.locations.clone(),
            preview: self.preview_for(session, req, spec, cancel).await,
            args_sha256,
        };
        let (interaction, rx) = self.confirmations.register(details.clone(), Instant::now());
        let expires_in = self.confirmations.timeout();
        let msg = confirm_required(req, &interaction, &details, expires_in);
        session.out.send(&msg);
        self.publish_confirmation("confirm_required", &msg);
        self.audit.record_detached(&ConfirmRequested {
            trace_id: req.trace_id.as_deref().unwrap_or_default(),
            call_id,
            tool: spec.name,
            reason: &decision.reason,
            rule: decision.rule.as_deref(),
        });
        let answer = tokio::select! {
            a = self.confirmations.wait(&interaction, rx) => a,
            _ = cancel.cancelled() => {
                self.confirmations.withdraw(&interaction);
                Answer::Withdrawn
            }
        };
        let word = match answer {
            Answer::Approved => "approved",
            Answer::Rejected => "denied",
            Answer::TimedOut => "timeout",
            Answer::Withdrawn => "withdrawn",
        };
        let approve = answer == Answer::Approved;
        self.events.publish(
            Topic::Confirmations,
            "confirm_answered",
            obj(json!({"interaction": interaction, "approve": approve, "id": req.id, "session": session.id, "answer": word})),
        );
        self.audit.record_detached(&ConfirmAnswered {
            call_id,
            answer: word,
            by: "person",
        });
        match answer {
            Answer::Approved => Ok(()),
            Answer::Rejected => Err(denied(
                ErrorType::PolicyDenied,
                "a person declined this call",
            )),
            Answer::TimedOut => Err(denied(
                ErrorType::ConfirmationTimeout,
                format!("nobody answered within {} ms", expires_in.as_millis()),
            )),
            Answer::Withdrawn => Err(denied(
                ErrorType::Cancelled,
                "the call was cancelled while waiting for confirmation",
            )),
        }
    }

    /// What the person sees: the command, or the diff an edit would make.
    async fn preview_for(
        &self,
        session: &SessionInfo,
        req: &CallRequest,
        spec: &ToolSpec,
        cancel: &CancellationToken,
    ) -> Option<String> {
        match spec.name {
            "run_command" => req
                .args
                .get("command")
                .and_then(Value::as_str)
                .map(str::to_owned),
            "apply_file_change" => {
                let token = crate::call::router::change_token(&req.args);
                self.previews()
                    .peek(token, Instant::now())
                    .ok()
                    .map(|c| c.diff.clone())
            }
            "write_file" | "edit_file" => {
                let preview_tool = if spec.name == "write_file" {
                    "preview_write_file"
                } else {
                    "preview_edit_file"
                };
                let (o, _) = self
                    .dispatch(session, req, spec, req.args.clone(), preview_tool, cancel)
                    .await;
                o.meta
                    .get("diff")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            }
            _ if crate::registry::mcp::is_mcp_group(spec.group) => {
                Some(crate::registry::mcp::preview(&req.args))
            }
            _ => None,
        }
    }

    /// Issue a grant token (the `grant` message) and record it.
    pub fn grant(
        &self,
        session: &SessionInfo,
        id: toolvisor_protocol::Id,
        req: &crate::call::grants::GrantRequest,
    ) -> ServerMessage {
        let issued = match self.grants.issue(req, Instant::now()) {
            Ok(i) => i,
            Err(e) => return ServerMessage::error(Some(id), e.error_type(), e.to_string()),
        };
        let expires_at = issued.expires_at;
        let grant_id = crate::call::grants::fingerprint(&issued.token);
        self.audit
            .record_detached(&crate::audit::record::GrantIssued {
                grant_id: &grant_id,
                tools: &req.tools,
                trace_id: req.trace_id.as_deref(),
                paths: &req.paths,
                expires_at,
                reusable: req.reusable,
                issued_by: &session.id,
            });
        ServerMessage::Token {
            id,
            token: issued.token,
            expires_at: crate::audit::record::rfc3339_millis(expires_at),
        }
    }

    /// Tell `confirmations` subscribers.
    fn publish_confirmation(&self, name: &'static str, msg: &ServerMessage) {
        if let Ok(Value::Object(mut fields)) = serde_json::to_value(msg) {
            fields.remove("type");
            self.events.publish(Topic::Confirmations, name, fields);
        }
    }

    /// Replay every pending interaction to a new `confirmations` subscriber.
    pub fn pending_confirmations(&self) -> Vec<ServerMessage> {
        self.confirmations
            .pending(Instant::now())
            .into_iter()
            .map(|p| {
                let id = p
                    .details
                    .call_id
                    .rsplit_once(':')
                    .map_or(p.details.call_id.clone(), |(_, id)| id.to_owned());
                let req = CallRequest::new(id, p.details.tool.clone(), Value::Null);
                confirm_required(&req, &p.interaction, &p.details, p.expires_in)
            })
            .collect()
    }
}

fn confirm_required(
    req: &CallRequest,
    interaction: &str,
    d: &ConfirmDetails,
    expires_in: Duration,
) -> ServerMessage {
    ServerMessage::ConfirmRequired {
        id: req.id.clone(),
        interaction: interaction.to_owned(),
        tool: d.tool.clone(),
        description: d.description.clone(),
        risk: d.risk.as_str().to_owned(),
        locations: d.locations.clone(),
        preview: d.preview.clone(),
        expires_in_ms: expires_in.as_millis() as u64,
    }
}
