//! Policy engine (docs/POLICY.md): for each validated call, `allow`, `deny` or `ask`,
//! with the risk, the reason and what the call will do in words for a person.
//!
//! Order of evaluation: rules for the tool (by name or alias) in file order, then `*`
//! rules in file order; the first rule whose conditions all hold decides. With no
//! match the mode decides by the call's risk. `run_command` is decided part by part —
//! one part per simple command, words after quote removal (see [`shell`]) — and the
//! strictest answer wins; hazards ([`hazards`]) turn an allow by a rule that tests
//! `command` into an ask.

pub mod awk;
pub mod describe;
pub mod explain;
pub mod hazards;
pub mod paths;
pub mod risk;
pub mod rules;
pub mod sed;
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
use rules::{COMMAND, CommandWords, CompiledRule, RuleSet};
use shell::Analysis;

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
    /// Hazards that decided the call are named in it.
    pub reason: String,
    /// The deciding rule, `policy.rules[N]`; `None` when the mode decided.
    pub rule: Option<String>,
    /// What the call will do, for a person ("Run `cargo test` in .").
    pub description: String,
    /// Paths the call touches, resolved (`src/a.rs`, `shared:/x`).
    pub locations: Vec<String>,
    /// For an `ask`: `[[policy.rules]]` snippets that would allow this very call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
    /// The deciding rule's index in file order (`N` of `policy.rules[N]`).
    #[serde(skip)]
    pub rule_index: Option<usize>,
    /// For `run_command`: how each simple command was decided.
    #[serde(skip)]
    pub parts: Vec<PartDecision>,
}

/// How one simple command of a `run_command` was decided (`explain` shows these).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartDecision {
    pub text: String,
    pub words: Vec<String>,
    pub action: Action,
    pub rule: Option<usize>,
    pub hazards: Vec<String>,
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
        self.decide_spec(spec, call.args)
    }

    /// Decide one call of the tool `spec` describes (a built-in tool, or one the
    /// registry holds besides them, such as an MCP server's).
    pub fn decide_spec(&self, spec: &ToolSpec, args: &Value) -> Decision {
        let call = CallFacts {
            tool: spec.name,
            args,
        };
        let facts = Facts::gather(spec, call.args, &self.scopes);
        let verdicts = self.verdicts(&facts);
        let mut decision = self.combine(&facts, &verdicts);
        if decision.action == Action::Ask {
            decision.suggestion = suggestion(&facts, &verdicts);
        }
        decision
    }

    /// One verdict per unit: each part of a `run_command`, or the call.
    fn verdicts<'s>(&'s self, facts: &Facts<'_>) -> Vec<Verdict<'s>> {
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
            .for_tool(facts.spec.name)
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

    /// The strictest verdict decides; an allow that cannot cover the command's own
    /// hazards, an undecidable command or a dangerous `env` becomes an ask.
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
            description: describe::describe(facts.spec, facts.args, &facts.locations),
            locations: facts.locations.clone(),
            suggestion: None,
            parts: part_decisions(facts, verdicts),
        }
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
            None => format!("this {} call", facts.spec.name),
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

/// What a verdict is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
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
struct Verdict<'r> {
    action: Action,
    rule: Option<&'r CompiledRule>,
    unit: Unit,
    /// The hazards that turned a rule's allow into an ask.
    blocked: Vec<String>,
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

fn unknown_tool(tool: &str) -> Decision {
    Decision {
        action: Action::Deny,
        risk: Risk::High,
        reason: format!("unknown tool `{tool}`"),
        rule: None,
        rule_index: None,
        description: format!("Call `{tool}`"),
        locations: Vec::new(),
        suggestion: None,
        parts: Vec::new(),
    }
}

/// For an ask: rules that would allow this very call. `None` when no narrow rule
/// can (structural hazards, an undecidable command, an `ask` rule, a dangerous `env`):
/// then only a grant or a person helps.
fn suggestion(facts: &Facts<'_>, verdicts: &[Verdict<'_>]) -> Option<String> {
    let tool = facts.spec.name;
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
    let tool = facts.spec.name;
    let Some((param, first)) = facts
        .path_params
        .first()
        .and_then(|(p, v)| Some((*p, v.first()?.to_string())))
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

/// Paths in a command, resolved against its cwd like the worker would.
struct CommandPaths<'a> {
    scopes: &'a Scopes,
    cwd: String,
}

impl hazards::Paths for CommandPaths<'_> {
    fn outside(&self, path: &str) -> bool {
        if path.starts_with('~') || path.contains('$') {
            return true;
        }
        let full = if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("{}/{path}", self.cwd)
        };
        self.scopes.resolve(&full).is_outside()
    }
}

/// Everything the rules and the mode look at, worked out once per call.
struct Facts<'a> {
    spec: &'a ToolSpec,
    args: &'a Map<String, Value>,
    path_params: Vec<(&'static str, Vec<ScopedPath>)>,
    resolved: HashMap<&'static str, Vec<String>>,
    locations: Vec<String>,
    shell: Option<Analysis>,
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
        let shell = (spec.name == RUN_COMMAND).then(|| {
            let cwd: String = resolved
                .get("cwd")
                .and_then(|v: &Vec<String>| v.first().cloned())
                .unwrap_or_else(|| ".".into());
            let paths = CommandPaths { scopes, cwd };
            shell::analyze(
                args.get(COMMAND).and_then(Value::as_str).unwrap_or(""),
                &paths,
            )
        });
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

    fn command(&self) -> &str {
        self.args.get(COMMAND).and_then(Value::as_str).unwrap_or("")
    }

    fn part(&self, unit: Unit) -> Option<&shell::Part> {
        match unit {
            Unit::Part(i) => self.shell.as_ref()?.parts.get(i),
            _ => None,
        }
    }

    /// A unit's text: the part's source, or the whole command line.
    fn unit_text(&self, unit: Unit) -> Option<&str> {
        match unit {
            Unit::Part(i) => self.shell.as_ref()?.parts.get(i).map(|p| p.text.as_str()),
            Unit::Whole => Some(self.command()),
            Unit::Call => None,
        }
    }

    fn touches_public(&self) -> bool {
        self.path_params
            .iter()
            .any(|(_, v)| v.iter().any(ScopedPath::is_public))
    }

    /// A parameter's values as rules compare them: resolved paths, list elements one
    /// by one, `env` as `KEY=VALUE` entries, and `env.KEY` for one entry. `None` when
    /// the call does not have it. (`command` of `run_command` is tested on words.)
    fn values(&self, param: &str) -> Option<Vec<String>> {
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

/// Quote characters dropped, for the words of a command nobody could parse.
fn unquote(word: &str) -> String {
    word.chars()
        .filter(|c| !matches!(c, '\'' | '"' | '\\'))
        .collect()
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
