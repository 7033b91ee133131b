//! `[policy]`: the mode, the confirmation timeout and the rules (docs/POLICY.md).

use serde::{Deserialize, Serialize};

/// What decides a call no rule matches, by its risk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Everything runs but `run_command`, which asks.
    Yolo,
    /// Low and medium risk run; high risk and anything under `public:/` ask.
    Workspace,
    /// Low risk runs; medium and high risk ask.
    #[default]
    Auto,
    /// Everything asks.
    Ask,
}

/// What a matching rule does with a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Run it (argument hazards still ask, unless the rule allows them).
    Allow,
    /// Refuse it, `PolicyDenied`.
    Deny,
    /// Ask a person (or deny, in a session nobody answers).
    Ask,
}

impl Action {
    /// The wire and config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
            Action::Ask => "ask",
        }
    }
}

/// How a condition compares a parameter with its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Operator {
    /// The whole value.
    #[serde(rename = "equals")]
    Equals,
    /// Anywhere in the value.
    #[serde(rename = "contains")]
    Contains,
    /// A prefix of the value.
    #[serde(rename = "startsWith")]
    StartsWith,
    /// An unanchored Rust regex.
    #[serde(rename = "matches")]
    Matches,
}

/// One test of a rule: all of a rule's must hold for it to match.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    /// The argument tested (`env.KEY` for one variable; path parameters resolved).
    pub param: String,
    /// How it is compared.
    pub operator: Operator,
    /// What it is compared with.
    pub value: String,
}

/// One `[[policy.rules]]` entry; the first matching rule decides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// A tool, an alias, a `NAME__*` pattern of announced tools, or `*`.
    pub tool: String,
    /// What a match does.
    pub action: Action,
    /// The risk shown to the person asked and recorded, instead of the call's.
    #[serde(default)]
    pub risk: Option<toolvisor_protocol::tools::Risk>,
    /// The reason shown and recorded, instead of the generated one.
    #[serde(default)]
    pub message: Option<String>,
    /// The tests; none means the rule always matches its tool.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// `hazards = "allow"`: argument hazards (docs/POLICY.md) do not make this rule ask.
    #[serde(default)]
    pub hazards: Hazards,
    /// An `allow` of `run_command` by this rule gives the command network: the host's
    /// (`true`), or these domains through the egress proxy (a list). It also grants a
    /// call's own `network` argument that asks for no more.
    #[serde(default)]
    pub network: Option<super::Network>,
    /// An `allow` of `run_command` by this rule grants a call's `writable` paths that
    /// lie under these (absolute or `~/`).
    #[serde(default)]
    pub writable: Option<Vec<String>>,
    /// An `allow` of `run_command` by this rule grants a call's `reveal` paths that lie
    /// under these.
    #[serde(default)]
    pub reveal: Option<Vec<String>>,
    /// An `allow` of `run_command` by this rule may publish the background process's
    /// ports (`expose`) on the host's loopback: all (`true`) or these.
    #[serde(default)]
    pub expose: Option<Expose>,
}

/// A rule's `expose`: every port, or a list. Without it, a call that exposes a port
/// asks (it widens what reaches the command: the host's loopback).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Expose {
    /// `expose = true` (every port) or `false` (none, like leaving it out).
    All(bool),
    /// `expose = [8000, 8080]`.
    Ports(Vec<u16>),
}

impl Expose {
    /// Whether the rule lets a call publish `port`.
    pub fn grants(&self, port: u16) -> bool {
        match self {
            Expose::All(all) => *all,
            Expose::Ports(ports) => ports.contains(&port),
        }
    }
}

impl Rule {
    /// A rule with no conditions and every optional key at its default.
    pub fn new(tool: &str, action: Action) -> Rule {
        Rule {
            tool: tool.into(),
            action,
            risk: None,
            message: None,
            conditions: Vec::new(),
            hazards: Hazards::default(),
            network: None,
            writable: None,
            reveal: None,
            expose: None,
        }
    }
}

/// What argument hazards do to a rule's allow: ask (the default) or nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hazards {
    /// A hazard in an allowed call still asks.
    #[default]
    Ask,
    /// The rule's author read the hazards: the allow stands.
    Allow,
}

/// What a confined call (one that stays inside the verified boundary) meets when no
/// rule asks or denies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confined {
    /// It runs without asking (modes `auto`, `workspace` and `yolo`).
    #[default]
    Allow,
    /// It is decided like any call (the mode asks).
    Ask,
}

/// `[policy]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// What decides when no rule matches.
    pub mode: Mode,
    /// Whether calls that stay inside the verified boundary run without asking.
    pub confined: Confined,
    /// How long a `confirm_required` waits for an answer.
    pub confirm_timeout_ms: u64,
    /// The rules, in file order.
    pub rules: Vec<Rule>,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            mode: Mode::Auto,
            confined: Confined::Allow,
            confirm_timeout_ms: 60_000,
            rules: Vec::new(),
        }
    }
}
