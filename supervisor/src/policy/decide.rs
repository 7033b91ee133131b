//! How one call is decided: a verdict per unit (each part of a shell command, or the
//! call), the strictest verdict wins, and an allow that cannot vouch for hazards or a
//! dangerous `env` becomes an ask. The reasons say which rule, hazard or mode decided.

use toolvisor_protocol::tools::Risk;

use super::facts::{Facts, unquote};
use super::risk::Assessment;
use super::rules::{CommandWords, CompiledRule};
use super::{Decision, PartDecision, Policy, hazards};
use crate::config::{Action, Mode};

impl Policy {
    /// One verdict per unit: each part of a `run_command`, or the call.
    pub(super) fn verdicts<'s>(&'s self, facts: &Facts<'_>) -> Vec<Verdict<'s>> {
        let Some(sh) = &facts.shell else {
            return vec![self.verdict(facts, Unit::Call, None)];
        };
        let mut out: Vec<Verdict<'s>> = sh
            .decided()
            .map(|(i, p)| {
                let words = CommandWords::new(p.texts());
                let mut v = self.verdict(facts, Unit::Part(i), Some(&words));
                v.block_on(&p.hazards, p.neutral);
                v
            })
            .collect();
        let all_neutral = sh.decided().all(|(_, p)| p.neutral);
        if sh.undecidable.is_some() || all_neutral {
            let words =
                CommandWords::new(facts.command().split_whitespace().map(unquote).collect());
            out.push(self.verdict(facts, Unit::Whole, Some(&words)));
        }
        out
    }

    /// The first rule that matches (with `command` read as `words`), else the mode.
    /// A part that runs nothing is decided only by rules that name it.
    fn verdict<'s>(
        &'s self,
        facts: &Facts<'_>,
        unit: Unit,
        words: Option<&CommandWords>,
    ) -> Verdict<'s> {
        let values = |param: &str| facts.values(param);
        let neutral = facts.part(unit).is_some_and(|p| p.neutral);
        let rule = self
            .rules
            .for_tool(facts.def)
            .filter(|r| !neutral || r.tests_command())
            .find(|r| r.matches(&values, words));
        let action = match rule {
            Some(r) => r.action,
            None if neutral => Action::Allow,
            None => self.default_action(facts),
        };
        Verdict {
            action,
            rule,
            unit,
            blocked: Vec::new(),
        }
    }

    /// The mode's answer when no rule matched.
    fn default_action(&self, facts: &Facts<'_>) -> Action {
        if facts.def.policy.always_asks {
            return Action::Ask;
        }
        let risk = facts.assessment.risk;
        match self.mode {
            Mode::Yolo => Action::Allow,
            Mode::Workspace if risk == Risk::High || facts.touches_public() => Action::Ask,
            Mode::Workspace => Action::Allow,
            Mode::Auto if risk == Risk::Low => Action::Allow,
            Mode::Auto | Mode::Ask => Action::Ask,
        }
    }

    /// The strictest verdict decides; an allow that cannot cover the command's own
    /// hazards, an undecidable command or a dangerous `env` becomes an ask.
    pub(super) fn combine(&self, facts: &Facts<'_>, verdicts: &[Verdict<'_>]) -> Decision {
        let decisive = strictest(verdicts);
        let risk = decisive
            .and_then(|v| v.rule)
            .and_then(|r| r.risk)
            .unwrap_or(facts.assessment.risk);
        let (action, reason) = match decisive {
            Some(v) if v.action == Action::Allow => match self.allow_blocker(facts, verdicts) {
                Some(why) => (Action::Ask, why),
                None => (Action::Allow, self.reason(facts, v)),
            },
            Some(v) => (v.action, self.reason(facts, v)),
            None => (Action::Ask, "nothing to decide".to_string()),
        };
        let rule = decisive.and_then(|v| v.rule);
        Decision {
            action,
            risk,
            reason: with_risk_notes(
                with_hazards(reason, action, facts),
                action,
                &facts.assessment,
            ),
            rule: rule.map(CompiledRule::id),
            rule_index: rule.map(|r| r.index),
            description: (facts.def.describe)(facts.def, facts.args, &facts.locations),
            locations: facts.locations.clone(),
            suggestion: None,
            parts: part_decisions(facts, verdicts),
            network: self.network_for(facts, verdicts, action),
            confined: false,
        }
    }

    /// The network the call's command gets if it runs (after a person's yes, too).
    fn network_for(
        &self,
        facts: &Facts<'_>,
        verdicts: &[Verdict<'_>],
        action: Action,
    ) -> super::widen::NetworkGrant {
        if !facts.def.policy.shell {
            return super::widen::NetworkGrant::None;
        }
        let rules: Vec<&CompiledRule> = verdicts.iter().filter_map(|v| v.rule).collect();
        let wants = super::widen::Wants::of(facts.args);
        super::widen::network(&wants, &rules, action == Action::Allow, &self.network_allow)
    }

    /// Why an all-allow verdict still needs a person, if it does.
    fn allow_blocker(&self, facts: &Facts<'_>, verdicts: &[Verdict<'_>]) -> Option<String> {
        let rules: Vec<&CompiledRule> = verdicts.iter().filter_map(|v| v.rule).collect();
        let by_words = rules.iter().find(|r| r.tests_command());
        if let (Some(sh), Some(r)) = (&facts.shell, by_words) {
            if let Some(why) = &sh.undecidable {
                return Some(format!(
                    "{} allows the command's parts, but the command cannot be decided part \
                     by part ({why}); that needs confirmation",
                    r.id()
                ));
            }
            if !sh.hazards.is_empty() {
                return Some(format!(
                    "{} allows the command's parts, but it has hazards no rule on words can \
                     vouch for: {}; that needs confirmation",
                    r.id(),
                    names(&sh.hazards)
                ));
            }
        }
        let wants = super::widen::Wants::of(facts.args);
        let missing = super::widen::ungranted(&wants, &rules, &self.network_allow);
        if wants.any() && !missing.is_empty() {
            let by = rules
                .iter()
                .find(|r| r.tests_command() || rules.len() == 1)
                .map_or("no rule".to_owned(), |r| r.id());
            let what: Vec<&str> = missing.iter().map(|m| m.0.as_str()).collect();
            let how: Vec<&str> = missing.iter().map(|m| m.1.as_str()).collect();
            return Some(format!(
                "the call widens the sandbox ({}), which {by} does not grant; that needs \
                 confirmation (to grant it: {})",
                what.join("; "),
                how.join("; ")
            ));
        }
        if !facts.dangerous_env.is_empty()
            && let Some(r) = rules.iter().find(|r| !r.tests_env())
        {
            return Some(format!(
                "the call's env sets {}, which {} does not test",
                facts.dangerous_env.join(", "),
                r.id()
            ));
        }
        None
    }

    fn reason(&self, facts: &Facts<'_>, v: &Verdict<'_>) -> String {
        let subject = match facts.unit_text(v.unit) {
            Some(text) => format!("`{text}`"),
            None => format!("this {} call", facts.def.name),
        };
        if v.unit == Unit::Whole
            && let Some(why) = facts.shell.as_ref().and_then(|s| s.undecidable.as_ref())
        {
            let by = v.rule.map(|r| format!("{} ", r.id())).unwrap_or_default();
            if v.action != Action::Deny {
                return format!(
                    "{by}the command cannot be decided part by part ({why}); that needs confirmation"
                );
            }
        }
        if !v.blocked.is_empty() {
            let by = match v.rule {
                Some(r) => format!("{} allows {subject}", r.id()),
                None => format!("{subject} runs nothing"),
            };
            let hint = match v.rule {
                Some(r) if !r.hazards_allow => {
                    " (a rule with hazards = \"allow\" would cover the argument hazards)"
                }
                _ => "",
            };
            return format!(
                "{by}, but it has hazards: {}; that needs confirmation{hint}",
                v.blocked.join(", ")
            );
        }
        match v.rule {
            Some(r) => match &r.message {
                Some(m) => format!("{}: {m}", r.id()),
                None => format!("{} {} {subject}", r.id(), verb(r.action)),
            },
            None if facts.part(v.unit).is_some_and(|p| p.neutral) => {
                format!("{subject} runs nothing")
            }
            None if facts.def.policy.always_asks => {
                format!(
                    "no rule allows {subject}; {} asks unless a rule allows it",
                    facts.def.name
                )
            }
            None => format!(
                "no rule matched; mode {} {} {} risk{}",
                mode_name(self.mode),
                verb(v.action),
                facts.assessment.risk.as_str(),
                if facts.touches_public() {
                    " under public:/"
                } else {
                    ""
                }
            ),
        }
    }
}

/// What a verdict is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unit {
    /// A call of a tool other than `run_command`.
    Call,
    /// One part of a `run_command`.
    Part(usize),
    /// A `run_command` taken whole (it has no part a rule could decide, or it
    /// cannot be decided part by part and only deny rules may still speak).
    Whole,
}

/// One unit's outcome: the action and the rule that gave it (`None`: the mode).
#[derive(Clone, Debug)]
pub(super) struct Verdict<'r> {
    pub(super) action: Action,
    pub(super) rule: Option<&'r CompiledRule>,
    pub(super) unit: Unit,
    /// The hazards that turned a rule's allow into an ask.
    pub(super) blocked: Vec<String>,
}

impl Verdict<'_> {
    /// An allow by a rule on words, or of a part that runs nothing, does not cover
    /// hazards it cannot see.
    fn block_on(&mut self, hazards: &[hazards::Hazard], neutral: bool) {
        if self.action != Action::Allow {
            return;
        }
        let lifted = match self.rule {
            Some(r) if r.tests_command() => r.hazards_allow,
            None if neutral => false,
            _ => return,
        };
        self.blocked = hazards
            .iter()
            .filter(|h| !(h.kind.overridable() && lifted))
            .map(|h| h.name.clone())
            .collect();
        if !self.blocked.is_empty() {
            self.action = Action::Ask;
        }
    }
}

/// deny > ask > allow; the first of equals, so messages name the earliest part.
fn strictest<'a, 'r>(verdicts: &'a [Verdict<'r>]) -> Option<&'a Verdict<'r>> {
    let rank = |a: Action| match a {
        Action::Allow => 0,
        Action::Ask => 1,
        Action::Deny => 2,
    };
    verdicts.iter().reduce(|best, v| {
        if rank(v.action) > rank(best.action) {
            v
        } else {
            best
        }
    })
}

fn part_decisions(facts: &Facts<'_>, verdicts: &[Verdict<'_>]) -> Vec<PartDecision> {
    verdicts
        .iter()
        .filter_map(|v| {
            let p = facts.part(v.unit)?;
            Some(PartDecision {
                text: p.text.clone(),
                words: p.texts(),
                action: v.action,
                rule: v.rule.map(|r| r.index),
                hazards: p.hazards.iter().map(|h| h.name.clone()).collect(),
            })
        })
        .collect()
}

fn names(hazards: &[hazards::Hazard]) -> String {
    hazards
        .iter()
        .map(|h| h.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn verb(action: Action) -> &'static str {
    match action {
        Action::Allow => "allows",
        Action::Deny => "denies",
        Action::Ask => "asks for",
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Yolo => "yolo",
        Mode::Workspace => "workspace",
        Mode::Auto => "auto",
        Mode::Ask => "ask",
    }
}

/// A person deciding also wants to know what in the command needs care.
fn with_hazards(reason: String, action: Action, facts: &Facts<'_>) -> String {
    let Some(shell) = facts.shell.as_ref().filter(|_| action != Action::Allow) else {
        return reason;
    };
    let mut extra: Vec<&str> = Vec::new();
    for h in shell.all_hazards() {
        if !reason.contains(h.name.as_str()) && !extra.contains(&h.name.as_str()) {
            extra.push(&h.name);
        }
    }
    if extra.is_empty() {
        reason
    } else {
        format!("{reason}; hazards: {}", extra.join(", "))
    }
}

/// A person deciding wants to know why the risk is high.
fn with_risk_notes(reason: String, action: Action, a: &Assessment) -> String {
    if action == Action::Allow || a.notes.is_empty() {
        return reason;
    }
    format!(
        "{reason} (risk {}: {})",
        a.risk.as_str(),
        a.notes.join("; ")
    )
}
