//! `explain`: what the policy would do with a call, part by part, without running it
//! or asking anyone — so a person can see why a command is allowed or asked before
//! trusting a rule. The session answers the `explain` message with it, and
//! `toolvisor policy explain --config FILE` computes it with no daemon.

use serde_json::Value;
use toolvisor_protocol::message::{ExplainedPart, ServerMessage};
use toolvisor_protocol::{ErrorBody, ErrorType, Id};

use super::{CallFacts, Decision, Policy};
use crate::call::gate::action_str;
use crate::registry::validate::Validators;
use toolvisor_protocol::tools::ToolSpec;

/// The `explanation` for a call of `tool` with `args`.
pub fn explain(
    id: Id,
    policy: &Policy,
    validators: &Validators,
    tool: &str,
    args: &Value,
) -> ServerMessage {
    let spec = toolvisor_protocol::tools::find(&policy.tools, tool);
    if let Err(message) = validators.check(tool, args) {
        let kind = if spec.is_some() {
            ErrorType::InvalidParams
        } else {
            ErrorType::ToolNotFound
        };
        return refused(id, spec, kind, message);
    }
    let d = policy.decide(&CallFacts { tool, args });
    explained(id, policy, spec, &d)
}

/// [`explain`] for a tool the registry holds besides the built-in ones (an MCP
/// server's), whose arguments `checked` says whether they fit its schema.
pub fn explain_spec(
    id: Id,
    policy: &Policy,
    spec: &ToolSpec,
    checked: Result<(), String>,
    args: &Value,
) -> ServerMessage {
    if let Err(message) = checked {
        return refused(id, Some(spec), ErrorType::InvalidParams, message);
    }
    let d = policy.decide_spec(spec, args);
    explained(id, policy, Some(spec), &d)
}

/// A call that fails validation: decision `error`.
fn refused(id: Id, spec: Option<&ToolSpec>, kind: ErrorType, message: String) -> ServerMessage {
    ServerMessage::Explanation {
        id,
        decision: "error".into(),
        risk: spec.map_or("high", |s| s.risk.as_str()).into(),
        reason: message.clone(),
        rule: None,
        parts: None,
        error: Some(ErrorBody::new(kind, message)),
    }
}

/// The explanation of a decision.
fn explained(id: Id, policy: &Policy, spec: Option<&ToolSpec>, d: &Decision) -> ServerMessage {
    // The gate refuses a path outside every root before anyone is asked.
    let outside = d
        .locations
        .iter()
        .find(|l| policy.scopes().resolve(l).is_outside());
    let (decision, reason) = match outside {
        Some(path) => ("deny", format!("`{path}` is outside the workspace")),
        None => (action_str(d.action), d.reason.clone()),
    };
    let is_command = spec.is_some_and(|s| s.name == "run_command");
    let parts = is_command.then(|| {
        d.parts
            .iter()
            .map(|p| ExplainedPart {
                text: p.text.clone(),
                words: p.words.clone(),
                decision: action_str(p.action).into(),
                rule: p.rule.map(|r| r as u64),
                hazards: p.hazards.clone(),
            })
            .collect()
    });
    ServerMessage::Explanation {
        id,
        decision: decision.into(),
        risk: d.risk.as_str().into(),
        reason,
        rule: d.rule_index.map(|r| r as u64),
        parts,
        error: None,
    }
}

/// An explanation as a person reads it (the CLI without `--json`).
pub fn render(m: &ServerMessage) -> String {
    let ServerMessage::Explanation {
        decision,
        risk,
        reason,
        rule,
        parts,
        error,
        ..
    } = m
    else {
        return format!("{m:?}\n");
    };
    let mut out = format!("decision: {decision} (risk {risk})\n");
    if let Some(e) = error {
        out.push_str(&format!("error: {}: {}\n", e.kind, e.message));
        return out;
    }
    out.push_str(&format!("reason: {reason}\n"));
    if let Some(r) = rule {
        out.push_str(&format!("rule: policy.rules[{r}]\n"));
    }
    for p in parts.iter().flatten() {
        out.push_str(&format!("  {:<5}  {}", p.decision, p.text));
        if let Some(r) = p.rule {
            out.push_str(&format!("  (policy.rules[{r}])"));
        }
        out.push('\n');
        out.push_str(&format!("         words: {:?}\n", p.words));
        if !p.hazards.is_empty() {
            out.push_str(&format!("         hazards: {}\n", p.hazards.join(", ")));
        }
    }
    out
}
