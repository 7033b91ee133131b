//! What would allow an asked call: a `[[policy.rules]]` snippet that matches this
//! very call (for a command, its own words), or a grant; and the message a caller
//! that cannot ask gets.

use super::Decision;
use super::decide::Verdict;
use super::describe;
use super::facts::Facts;
use super::rules::COMMAND;
use crate::config::Action;

/// For an ask: rules that would allow this very call. `None` when no narrow rule
/// can (structural hazards, an undecidable command, an `ask` rule, a dangerous `env`):
/// then only a grant or a person helps.
pub(super) fn suggestion(facts: &Facts<'_>, verdicts: &[Verdict<'_>]) -> Option<String> {
    let tool = facts.def.name.as_str();
    let Some(shell) = &facts.shell else {
        return Some(call_suggestion(facts));
    };
    if shell.undecidable.is_some() || !shell.hazards.is_empty() || !facts.dangerous_env.is_empty() {
        return None;
    }
    // Exact rules for parts with argument hazards first: a suggested prefix rule
    // must not catch them before.
    let mut exact: Vec<String> = Vec::new();
    let mut snippets: Vec<String> = Vec::new();
    for v in verdicts.iter().filter(|v| v.action == Action::Ask) {
        let part = facts.part(v.unit)?;
        if v.rule.is_some_and(|r| r.action == Action::Ask)
            || part.hazards.iter().any(|h| !h.kind.overridable())
        {
            return None;
        }
        let words = part.texts();
        let (list, snippet) = if part.hazards.is_empty() {
            let prefix = describe::command_prefix(&words);
            let rule = describe::rule_snippet(tool, Some((COMMAND, "startsWith", &prefix)));
            (&mut snippets, rule)
        } else {
            let rule = describe::rule_snippet(tool, Some((COMMAND, "equals", &part.joined())));
            let at = v
                .rule
                .map(|r| {
                    format!(
                        "# before policy.rules[{}], which matches it first\n",
                        r.index
                    )
                })
                .unwrap_or_default();
            (&mut exact, format!("{at}{rule}hazards = \"allow\"\n"))
        };
        if !list.contains(&snippet) {
            list.push(snippet);
        }
    }
    exact.extend(snippets);
    (!exact.is_empty()).then(|| exact.join("\n"))
}

/// The rule for a call of another tool: its path's directory, or the tool.
fn call_suggestion(facts: &Facts<'_>) -> String {
    let tool = facts.def.name.as_str();
    let Some((param, first)) = facts
        .path_params
        .first()
        .and_then(|(p, v)| Some((p.as_str(), v.first()?.to_string())))
    else {
        return describe::rule_snippet(tool, None);
    };
    match describe::path_prefix(&first) {
        Some(dir) => describe::rule_snippet(tool, Some((param, "startsWith", &dir))),
        None => describe::rule_snippet(tool, Some((param, "equals", &first))),
    }
}

/// How a caller that cannot ask explains the way to allow such a call: the rule to
/// add, and the grant that would pass it once.
pub fn how_to_allow(decision: &Decision, tool: &str) -> String {
    if decision.action == Action::Deny {
        return format!(
            "{tool} is denied ({}); a grant cannot pass a deny, change the rule in toolvisor.toml",
            decision.reason
        );
    }
    let grant = format!(
        "run `toolvisor grant --tool {tool}` and pass its token as the call's confirm_token \
         (`toolvisor call --token TOKEN`)"
    );
    match &decision.suggestion {
        Some(rule) => format!(
            "{tool} needs confirmation ({}). To allow it, add to toolvisor.toml:\n{rule}or {grant}.",
            decision.reason
        ),
        None => format!(
            "{tool} needs confirmation ({}). To allow it, {grant}, or use an interactive session.",
            decision.reason
        ),
    }
}
