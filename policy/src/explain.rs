//! `explain`: what the policy would do with a call, part by part, without running it
//! or asking anyone — so a person can see why a command is allowed or asked before
//! trusting a rule. The session answers the `explain` message with it, and
//! `toolvisor policy explain --config FILE` computes it with no daemon.

use serde_json::Value;
use toolvisor_protocol::message::{ExplainedPart, ServerMessage};
use toolvisor_protocol::tools::ToolDef;
use toolvisor_protocol::{ErrorBody, ErrorType, Id};

use super::Policy;

/// The `explanation` of a call that cannot be decided: its tool is unknown or its
/// arguments are invalid (`kind` says which; the caller looked the tool up).
pub fn refused(id: Id, kind: ErrorType, risk: &str, message: String) -> ServerMessage {
    ServerMessage::Explanation {
        id,
        decision: "error".into(),
        risk: risk.into(),
        reason: message.clone(),
        rule: None,
        parts: None,
        error: Some(ErrorBody::new(kind, message)),
    }
}

/// The `explanation` for a call of `def` with `args`, already validated against its
/// schema.
pub fn explain(id: Id, policy: &Policy, def: &ToolDef, args: &Value) -> ServerMessage {
    let d = policy.decide(def, args);
    // The gate refuses a path outside every root before anyone is asked.
    let outside = d
        .locations
        .iter()
        .find(|l| policy.scopes().resolve(l).is_outside());
    let (decision, reason) = match outside {
        Some(path) => ("deny", format!("`{path}` is outside the workspace")),
        None => (d.action.as_str(), d.reason.clone()),
    };
    let parts = def.policy.shell.then(|| {
        d.parts
            .iter()
            .map(|p| ExplainedPart {
                text: p.text.clone(),
                words: p.words.clone(),
                decision: p.action.as_str().into(),
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
