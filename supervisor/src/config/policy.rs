//! `[policy]`: the mode, the confirmation timeout and the rules (docs/POLICY.md).

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Yolo,
    Workspace,
    #[default]
    Auto,
    Ask,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Allow,
    Deny,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Operator {
    #[serde(rename = "equals")]
    Equals,
    #[serde(rename = "contains")]
    Contains,
    #[serde(rename = "startsWith")]
    StartsWith,
    #[serde(rename = "matches")]
    Matches,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    pub param: String,
    pub operator: Operator,
    pub value: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub tool: String,
    pub action: Action,
    #[serde(default)]
    pub risk: Option<toolvisor_protocol::tools::Risk>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// `hazards = "allow"`: argument hazards (docs/POLICY.md) do not make this rule ask.
    #[serde(default)]
    pub hazards: Hazards,
    /// An `allow` of `run_command` by this rule gives the command the host's network.
    #[serde(default)]
    pub network: Option<bool>,
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
        }
    }
}

/// What argument hazards do to a rule's allow: ask (the default) or nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hazards {
    #[default]
    Ask,
    Allow,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    pub mode: Mode,
    pub confirm_timeout_ms: u64,
    pub rules: Vec<Rule>,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            mode: Mode::Auto,
            confirm_timeout_ms: 60_000,
            rules: Vec::new(),
        }
    }
}
