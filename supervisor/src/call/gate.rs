//! The policy gate every admitted call passes before it may run: the policy's
//! decision, a grant token, a remembered approval, or a person's answer.
//!
//! A denial here is a policy outcome (status `denied`); the call never ran, so the
//! router records it as `rejected`.

use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use toolvisor_protocol::message::{CallRequest, ServerMessage, Topic};
use toolvisor_protocol::tools::{ConfirmPreview, Route};
use toolvisor_protocol::worker::Outcome;
use toolvisor_protocol::{ErrorBody, ErrorType};

use crate::audit::record::{ConfirmAnswered, ConfirmRequested, GrantUsed};
use crate::call::changes::change_token;
use crate::call::confirm::{Answer, ConfirmDetails};
use crate::call::grants::TokenUse;
use crate::call::router::{Call, SessionInfo};
use crate::config::Action;
use crate::policy::widen::NetworkGrant;
use crate::policy::{Decision, Policy, how_to_allow};
use crate::service::Service;
use crate::session::events::obj;

fn denied(kind: ErrorType, message: impl Into<String>) -> Outcome {
    Outcome::err(ErrorBody::new(kind, message))
}

/// `meta.policy` of a result.
pub fn meta(d: &Decision) -> Value {
    let decision = if d.confined {
        "confined"
    } else {
        d.action.as_str()
    };
    json!({"decision": decision, "reason": d.reason, "rule": d.rule, "risk": d.risk.as_str()})
}

impl Service {
    /// Decide a call. `Ok` carries the decision it ran under (after any token or
    /// confirmation); `Err` carries the outcome that ends it.
    pub(crate) async fn gate(
        &self,
        call: &Call<'_>,
        call_id: &str,
    ) -> (Decision, Result<(), Outcome>) {
        let (req, tool) = (call.req, call.tool);
        let policy = self.policy();
        let base = call.session.familiar.base_risk(tool, &req.args);
        let mut decision = policy.decide_at(tool, &req.args, base);
        if let Route::ApplyPreview { .. } = tool.route {
            self.add_change_location(call, &mut decision);
            self.decide_as_the_write(call, &policy, &mut decision);
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
                tool: &tool.name,
                trace_id: req.trace_id.as_deref(),
                locations: &decision.locations,
            };
            match self
                .grants()
                .settle(decision.action, token, &use_, Instant::now())
            {
                Ok(action) => {
                    decision.action = action;
                    decision.reason = format!("{} (passed by a grant token)", decision.reason);
                    let grant_id = crate::call::grants::fingerprint(token);
                    self.audit().record_detached(&GrantUsed {
                        grant_id: &grant_id,
                        call_id,
                        tool: &tool.name,
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
            Action::Ask => self.ask(call, call_id, &decision).await,
        };
        if result.is_ok() {
            decision.action = Action::Allow;
        }
        (decision, result)
    }

    /// The path an apply call will write, from its pending preview.
    fn add_change_location(&self, call: &Call<'_>, decision: &mut Decision) {
        let token = change_token(&call.req.args);
        let staged = self.staged().peek(token, Instant::now()).ok().map(|s| {
            let paths = s.manifest.changes.iter().map(|h| h.path.clone());
            paths.collect::<Vec<_>>()
        });
        if let Some(paths) = staged {
            decision.locations = paths;
            let args = call.req.args.as_object().cloned().unwrap_or_default();
            decision.description = (call.tool.describe)(call.tool, &args, &decision.locations);
        } else if let Ok(change) = self.previews().peek(token, Instant::now()) {
            decision.locations = vec![change.path.clone()];
            let args = call.req.args.as_object().cloned().unwrap_or_default();
            decision.description = (call.tool.describe)(call.tool, &args, &decision.locations);
        }
    }

    /// An apply is the write its preview showed: it is never decided more loosely than
    /// that write would be (`write_file` for `preview_write_file`'s change, `edit_file`
    /// for `preview_edit_file`'s), so a rule that denies or asks for the write holds for
    /// the preview-and-apply route (and for an envelope's staged writes) too.
    fn decide_as_the_write(&self, call: &Call<'_>, policy: &Policy, decision: &mut Decision) {
        let token = change_token(&call.req.args);
        let peeked = self
            .previews()
            .peek(token, Instant::now())
            .map(|c| (c.tool.clone(), c.path.clone(), c.content.clone()));
        let Ok((preview_tool, path, content)) = peeked else {
            return;
        };
        let registry = self.registry();
        let Some(write) = registry.entries().find(
            |e| matches!(e.def.confirm_preview, ConfirmPreview::DiffOf(t) if t == preview_tool),
        ) else {
            return;
        };
        let args = json!({"path": path, "content": content});
        let as_write = policy.decide(&write.def, &args);
        let stricter = matches!(
            (as_write.action, decision.action),
            (Action::Deny, Action::Allow | Action::Ask) | (Action::Ask, Action::Allow)
        );
        if stricter {
            decision.action = as_write.action;
            decision.reason = format!("as `{}`: {}", write.def.name, as_write.reason);
            decision.rule = as_write.rule;
            decision.rule_index = as_write.rule_index;
            decision.risk = decision.risk.max(as_write.risk);
        }
    }

    async fn ask(
        &self,
        call: &Call<'_>,
        call_id: &str,
        decision: &Decision,
    ) -> Result<(), Outcome> {
        let (session, req, tool) = (call.session, call.req, call.tool);
        let args_sha256 = crate::audit::canonical::args_sha256(&req.args);
        if self
            .confirmations()
            .is_remembered(&session.id, &tool.name, &args_sha256)
        {
            return Ok(());
        }
        if !session.interactive {
            return Err(denied(
                ErrorType::ConfirmationRequired,
                how_to_allow(decision, &tool.name),
            ));
        }
        let details = ConfirmDetails {
            session: session.id.clone(),
            client: session.client.clone(),
            call_id: call_id.to_owned(),
            tool: tool.name.clone(),
            description: decision.description.clone(),
            risk: decision.risk,
            locations: decision.locations.clone(),
            preview: self.preview_for(call).await,
            args_sha256,
        };
        let (interaction, rx) = self
            .confirmations()
            .register(details.clone(), Instant::now());
        let expires_in = self.confirmations().timeout();
        let msg = confirm_required(&req.id, &interaction, &details, expires_in);
        session.out.send(&msg);
        self.publish_confirmation(&msg, &details);
        self.audit().record_detached(&ConfirmRequested {
            trace_id: req.trace_id.as_deref().unwrap_or_default(),
            call_id,
            tool: &tool.name,
            reason: &decision.reason,
            rule: decision.rule.as_deref(),
        });
        let answer = tokio::select! {
            a = self.confirmations().wait(&interaction, rx) => a,
            _ = call.cancel.cancelled() => {
                self.confirmations().withdraw(&interaction);
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
        let answerer = self.confirmations().answered_by(&interaction);
        let (by, by_client) = match (&answer, &answerer) {
            (Answer::TimedOut, _) => ("timeout", None),
            (Answer::Withdrawn, _) => ("cancel", None),
            (_, Some(a)) => (a.session.as_str(), Some(a.client.as_str())),
            (_, None) => ("unknown", None),
        };
        self.events().publish(
            Topic::Confirmations,
            "confirm_answered",
            obj(
                json!({"interaction": interaction, "approve": approve, "id": req.id,
                "session": session.id, "answer": word, "by": by, "by_client": by_client}),
            ),
        );
        self.audit().record_detached(&ConfirmAnswered {
            call_id,
            answer: word,
            by,
            by_client,
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

    /// What the person sees besides the description: the command, or the diff an
    /// edit would make (its tool's preview, run for the same arguments).
    async fn preview_for(&self, call: &Call<'_>) -> Option<String> {
        match call.tool.confirm_preview {
            ConfirmPreview::None => None,
            ConfirmPreview::Arguments => Some(crate::registry::announced::arguments_preview(
                &call.req.args,
            )),
            ConfirmPreview::Arg(arg) => call
                .req
                .args
                .get(arg)
                .and_then(Value::as_str)
                .map(str::to_owned),
            ConfirmPreview::PendingChange => {
                let token = change_token(&call.req.args);
                if let Ok(s) = self.staged().peek(token, Instant::now()) {
                    return Some(s.summary());
                }
                self.previews()
                    .peek(token, Instant::now())
                    .ok()
                    .map(|c| c.diff.clone())
            }
            ConfirmPreview::DiffOf(preview) => {
                let (o, _) = self
                    .dispatch(call, call.req.args.clone(), preview, &NetworkGrant::None)
                    .await;
                o.meta
                    .get("diff")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            }
        }
    }

    /// Issue a grant token (the `grant` message) and record it.
    pub fn grant(
        &self,
        session: &SessionInfo,
        id: toolvisor_protocol::Id,
        req: &crate::call::grants::GrantRequest,
    ) -> ServerMessage {
        let issued = match self.grants().issue(req, Instant::now(), &self.registry()) {
            Ok(i) => i,
            Err(e) => return ServerMessage::error(Some(id), e.error_type(), e.to_string()),
        };
        let expires_at = issued.expires_at;
        let grant_id = crate::call::grants::fingerprint(&issued.token);
        self.audit()
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
            expires_at: toolvisor_protocol::time::rfc3339_millis(expires_at),
        }
    }

    /// Tell `confirmations` subscribers.
    pub(crate) fn publish_confirmation(&self, msg: &ServerMessage, d: &ConfirmDetails) {
        let fields = confirm_event_fields(msg, d);
        self.events()
            .publish(Topic::Confirmations, "confirm_required", fields);
    }

    /// The `confirm_required` event fields of every pending interaction, for a new
    /// `confirmations` subscriber.
    pub fn pending_confirmations(&self) -> Vec<Map<String, Value>> {
        self.confirmations()
            .pending(Instant::now())
            .into_iter()
            .map(|p| {
                let id = p
                    .details
                    .call_id
                    .rsplit_once(':')
                    .map_or(p.details.call_id.clone(), |(_, id)| id.to_owned());
                let req = CallRequest::new(id, p.details.tool.clone(), Value::Null);
                let msg = confirm_required(&req.id, &p.interaction, &p.details, p.expires_in);
                confirm_event_fields(&msg, &p.details)
            })
            .collect()
    }
}

/// A `confirm_required` event: the message's fields, and who asks (the asking
/// `session` and its `client`), so whoever answers knows.
fn confirm_event_fields(msg: &ServerMessage, d: &ConfirmDetails) -> Map<String, Value> {
    let mut fields = match serde_json::to_value(msg) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    fields.remove("type");
    fields.insert("session".into(), Value::String(d.session.clone()));
    fields.insert("client".into(), Value::String(d.client.clone()));
    fields
}

/// The `confirm_required` message for call `id` of the asking session.
pub(crate) fn confirm_required(
    id: &toolvisor_protocol::Id,
    interaction: &str,
    d: &ConfirmDetails,
    expires_in: Duration,
) -> ServerMessage {
    ServerMessage::ConfirmRequired {
        id: id.clone(),
        interaction: interaction.to_owned(),
        tool: d.tool.clone(),
        description: d.description.clone(),
        risk: d.risk.as_str().to_owned(),
        locations: d.locations.clone(),
        preview: d.preview.clone(),
        expires_in_ms: expires_in.as_millis() as u64,
    }
}
