//! Policy engine (DESIGN §6): for each validated call, `allow`, `deny` or `ask`, with
//! the risk, the reason and what the call will do in words for a person.
//!
//! Order of evaluation: rules for the tool (by name or alias) in file order, then `*`
//! rules in file order; the first rule whose conditions all hold decides. With no
//! match the mode decides by the call's risk. `run_command` is decided per simple
//! command when a rule tests `command` (see [`shell`]); the strictest answer wins.

pub mod describe;
pub mod paths;
pub mod risk;
pub mod rules;
pub mod shell;

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use toolvisor_protocol::tools::{Risk, ToolSpec, catalog, find};
use toolvisor_protocol::worker::Roots;

use crate::config::{Action, Mode, PolicyConfig};
use paths::{ScopedPath, Scopes};
use risk::Assessment;
use rules::{COMMAND, CompiledRule, RuleSet};
use shell::{Hazard, ShellAnalysis};

/// The tool whose calls ask in every mode unless a rule allows them.
const RUN_COMMAND: &str = "run_command";

/// A call as the policy sees it: after validation, before any confirmation.
#[derive(Clone, Copy, Debug)]
pub struct CallFacts<'a> {
    /// The tool as called: its name or an alias.
    pub tool: &'a str,
    /// The call's arguments (a JSON object).
    pub args: &'a Value,
}

/// The policy's answer for one call. It goes into `meta.policy` of the result, the
/// audit record and `confirm_required`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub action: Action,
    pub risk: Risk,
    /// Why, in a sentence: the rule's message, or what matched, or the mode default.
    pub reason: String,
    /// The deciding rule, `policy.rules[N]`; `None` when the mode decided.
    pub rule: Option<String>,
    /// What the call will do, for a person ("Run `cargo test` in .").
    pub description: String,
    /// Paths the call touches, resolved (`src/a.rs`, `shared:/x`).
    pub locations: Vec<String>,
    /// For an `ask`: a `[[policy.rules]]` snippet that would allow such calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
}

/// The policy engine: compiled rules, the mode and the roots paths resolve against.
#[derive(Clone, Debug)]
pub struct Policy {
    mode: Mode,
    confirm_timeout: Duration,
    rules: RuleSet,
    scopes: Scopes,
    tools: Vec<ToolSpec>,
}

impl Policy {
    /// Compile the `[policy]` table. Errors name the offending rule.
    pub fn new(cfg: &PolicyConfig, roots: &Roots) -> Result<Policy, String> {
        let tools = catalog();
        Ok(Policy {
            mode: cfg.mode,
            confirm_timeout: Duration::from_millis(cfg.confirm_timeout_ms),
            rules: RuleSet::new(&cfg.rules, &tools)?,
            scopes: Scopes::new(roots)?,
            tools,
        })
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// How long a person has to answer a confirmation.
    pub fn confirm_timeout(&self) -> Duration {
        self.confirm_timeout
    }

    /// The roots, for resolving grant paths the same way rules see them.
    pub fn scopes(&self) -> &Scopes {
        &self.scopes
    }

    /// Decide one call.
    pub fn decide(&self, call: &CallFacts<'_>) -> Decision {
        let Some(spec) = find(&self.tools, call.tool) else {
            return unknown_tool(call.tool);
        };
        let facts = Facts::gather(spec, call.args, &self.scopes);
        let verdicts = self.verdicts(&facts);
        let mut decision = self.combine(&facts, &verdicts);
        if decision.action == Action::Ask {
            decision.suggestion = suggestion(&facts, &verdicts);
        }
        decision
    }

    /// One verdict per unit: each simple command of a `run_command`, or the call.
    fn verdicts<'s>(&'s self, facts: &Facts<'_>) -> Vec<Verdict<'s>> {
        facts
            .units()
            .into_iter()
            .map(|unit| self.verdict(facts, unit))
            .collect()
    }

    /// The first rule that matches (with `command` read as `unit`), else the mode.
    fn verdict<'s>(&'s self, facts: &Facts<'_>, unit: Option<usize>) -> Verdict<'s> {
        let command = unit.and_then(|i| facts.unit_text(i));
        let values = |param: &str| facts.values(param, command);
        let rule = self
            .rules
            .for_tool(facts.spec.name)
            .find(|r| r.matches(&values));
        let action = match rule {
            Some(r) => r.action,
            None => self.default_action(facts),
        };
        Verdict { action, rule, unit }
    }

    /// The mode's answer when no rule matched.
    fn default_action(&self, facts: &Facts<'_>) -> Action {
        if facts.spec.name == RUN_COMMAND {
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

    /// The strictest verdict decides; an allow that cannot cover hazards or a
    /// dangerous `env` becomes an ask.
    fn combine(&self, facts: &Facts<'_>, verdicts: &[Verdict<'_>]) -> Decision {
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
        let rule = decisive.and_then(|v| v.rule).map(CompiledRule::id);
        Decision {
            action,
            risk,
            reason: with_risk_notes(
                with_hazards(reason, action, facts),
                action,
                &facts.assessment,
            ),
            rule,
            description: describe::describe(facts.spec, facts.args, &facts.locations),
            locations: facts.locations.clone(),
            suggestion: None,
        }
    }

    /// Why an all-allow verdict still needs a person, if it does.
    fn allow_blocker(&self, facts: &Facts<'_>, verdicts: &[Verdict<'_>]) -> Option<String> {
        let rules: Vec<&CompiledRule> = verdicts.iter().filter_map(|v| v.rule).collect();
        if let Some(shell) = &facts.shell
            && let Some(r) = rules.iter().find(|r| r.tests_command())
            && let Some(h) = shell.hazards.first()
        {
            return Some(format!(
                "{} allows the command's parts, but {h}; that needs confirmation",
                r.id()
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
        let subject = match v.unit.and_then(|i| facts.unit_text(i)) {
            Some(text) => format!("`{text}`"),
            _ => format!("this {} call", facts.spec.name),
        };
        match v.rule {
            Some(r) => match &r.message {
                Some(m) => format!("{}: {m}", r.id()),
                None => format!("{} {} {subject}", r.id(), verb(r.action)),
            },
            None if facts.spec.name == RUN_COMMAND => {
                format!("no rule allows {subject}; run_command asks unless a rule allows it")
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

/// One unit's outcome: the action and the rule that gave it (`None`: the mode).
#[derive(Clone, Copy, Debug)]
struct Verdict<'r> {
    action: Action,
    rule: Option<&'r CompiledRule>,
    unit: Option<usize>,
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
    let extra: Vec<String> = shell
        .hazards
        .iter()
        .map(ToString::to_string)
        .filter(|h| !reason.contains(h.as_str()))
        .collect();
    if extra.is_empty() {
        reason
    } else {
        format!("{reason}; also {}", extra.join(", "))
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

fn unknown_tool(tool: &str) -> Decision {
    Decision {
        action: Action::Deny,
        risk: Risk::High,
        reason: format!("unknown tool `{tool}`"),
        rule: None,
        description: format!("Call `{tool}`"),
        locations: Vec::new(),
        suggestion: None,
    }
}

/// For an ask: the rule that would allow the asking part, unless hazards make any
/// narrow rule useless (then only a grant helps).
fn suggestion(facts: &Facts<'_>, verdicts: &[Verdict<'_>]) -> Option<String> {
    let tool = facts.spec.name;
    if let Some(shell) = &facts.shell {
        if !shell.hazards.is_empty() || !facts.dangerous_env.is_empty() {
            return None;
        }
        let asking = verdicts.iter().find(|v| v.action == Action::Ask)?;
        let words = &shell.commands.get(asking.unit?)?.words;
        let prefix = describe::command_prefix(words);
        return Some(describe::rule_snippet(
            tool,
            Some((COMMAND, "startsWith", &prefix)),
        ));
    }
    let Some((param, first)) = facts
        .path_params
        .first()
        .and_then(|(p, v)| Some((*p, v.first()?.to_string())))
    else {
        return Some(describe::rule_snippet(tool, None));
    };
    let snippet = match describe::path_prefix(&first) {
        Some(dir) => describe::rule_snippet(tool, Some((param, "startsWith", &dir))),
        None => describe::rule_snippet(tool, Some((param, "equals", &first))),
    };
    Some(snippet)
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
    let grant = format!("run `toolvisor grant --tool {tool}` and pass its token as confirm_token");
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

/// The path parameters of each tool, and the default a missing one takes.
fn path_params(tool: &str) -> &'static [(&'static str, Option<&'static str>)] {
    match tool {
        "read_file" | "ls" | "write_file" | "edit_file" | "preview_write_file"
        | "preview_edit_file" => &[("path", None)],
        "read_many_files" => &[("paths", None)],
        "glob" | "grep" => &[("directory", Some("."))],
        RUN_COMMAND => &[("cwd", Some("."))],
        _ => &[],
    }
}

/// Everything the rules and the mode look at, worked out once per call.
struct Facts<'a> {
    spec: &'a ToolSpec,
    args: &'a Map<String, Value>,
    path_params: Vec<(&'static str, Vec<ScopedPath>)>,
    resolved: HashMap<&'static str, Vec<String>>,
    locations: Vec<String>,
    shell: Option<ShellAnalysis>,
    dangerous_env: Vec<String>,
    assessment: Assessment,
}

static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

impl<'a> Facts<'a> {
    fn gather(spec: &'a ToolSpec, args: &'a Value, scopes: &Scopes) -> Facts<'a> {
        let args = args.as_object().unwrap_or(&EMPTY);
        let path_params = resolve_paths(spec.name, args, scopes);
        let resolved: HashMap<_, _> = path_params
            .iter()
            .map(|(p, v)| (*p, v.iter().map(ToString::to_string).collect()))
            .collect();
        let all_paths: Vec<ScopedPath> = path_params.iter().flat_map(|(_, v)| v.clone()).collect();
        let locations = all_paths.iter().map(ToString::to_string).collect();
        let shell = (spec.name == RUN_COMMAND)
            .then(|| shell::analyze(args.get(COMMAND).and_then(Value::as_str).unwrap_or("")));
        let dangerous_env = risk::dangerous_env(args.get(rules::ENV).and_then(Value::as_object));
        let assessment = risk::assess(spec, &all_paths, shell.as_ref(), &dangerous_env);
        Facts {
            spec,
            args,
            path_params,
            resolved,
            locations,
            shell,
            dangerous_env,
            assessment,
        }
    }

    /// Units decided on their own: each simple command when the command parsed into
    /// some (plus the whole text when it did not parse cleanly, so a deny rule still
    /// sees it), else the call as a whole.
    fn units(&self) -> Vec<Option<usize>> {
        match &self.shell {
            None => vec![None],
            Some(sh) => {
                let mut units: Vec<Option<usize>> = (0..sh.commands.len()).map(Some).collect();
                if units.is_empty() || sh.hazards.contains(&Hazard::ParseError) {
                    units.push(Some(sh.commands.len()));
                }
                units
            }
        }
    }

    /// A unit's command text; index `commands.len()` is the whole command line.
    fn unit_text(&self, i: usize) -> Option<&str> {
        let sh = self.shell.as_ref()?;
        match sh.commands.get(i) {
            Some(c) => Some(&c.text),
            None => self.args.get(COMMAND).and_then(Value::as_str),
        }
    }

    fn touches_public(&self) -> bool {
        self.path_params
            .iter()
            .any(|(_, v)| v.iter().any(ScopedPath::is_public))
    }

    /// A parameter's values as rules compare them: resolved paths, `command` as the
    /// unit's text, list elements one by one, `env` as `KEY=VALUE` entries, and
    /// `env.KEY` for one entry. `None` when the call does not have it.
    fn values(&self, param: &str, command: Option<&str>) -> Option<Vec<String>> {
        if param == COMMAND
            && let Some(c) = command
        {
            return Some(vec![c.to_string()]);
        }
        if let Some(v) = self.resolved.get(param) {
            return Some(v.clone());
        }
        let mut parts = param.split('.');
        let mut value = self.args.get(parts.next()?)?;
        for part in parts {
            value = value.get(part)?;
        }
        Some(texts(value))
    }
}

/// Resolve each path parameter the tool has (missing ones take their default).
fn resolve_paths(
    tool: &str,
    args: &Map<String, Value>,
    scopes: &Scopes,
) -> Vec<(&'static str, Vec<ScopedPath>)> {
    path_params(tool)
        .iter()
        .filter_map(|(param, default)| {
            let raw: Vec<&str> = match args.get(*param) {
                Some(Value::String(s)) => vec![s.as_str()],
                Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
                _ => vec![(*default)?],
            };
            Some((*param, raw.into_iter().map(|p| scopes.resolve(p)).collect()))
        })
        .collect()
}

/// A JSON value as the strings a condition tests.
fn texts(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items.iter().flat_map(texts).collect(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect(),
        Value::Null => vec![String::new()],
        other => vec![other.to_string()],
    }
}

#[cfg(test)]
mod tests;
