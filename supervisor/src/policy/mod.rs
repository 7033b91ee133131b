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

pub mod confine;
pub mod decide;
pub mod facts;
pub mod suggest;
pub mod widen;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolvisor_protocol::tools::{Risk, ToolDef};
use toolvisor_protocol::worker::Roots;

use crate::config::{Action, Confined, Mode, PolicyConfig};
use facts::Facts;
use paths::Scopes;
use rules::RuleSet;
pub use rules::ToolNames;
pub use suggest::how_to_allow;

/// The policy's answer for one call. It goes into `meta.policy` of the result, the
/// audit record and `confirm_required`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Run, refuse, or ask.
    pub action: Action,
    /// The risk shown and recorded (a rule's, or the call's own raised by its arguments).
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
    /// The network the call's command gets when it runs: the host's, domains through
    /// the egress proxy, or none.
    #[serde(skip)]
    pub network: widen::NetworkGrant,
    /// It runs because it stays inside the verified boundary (`[policy] confined`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub confined: bool,
}

/// How one simple command of a `run_command` was decided (`explain` shows these).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartDecision {
    /// Its source text.
    pub text: String,
    /// Its words after quote removal.
    pub words: Vec<String>,
    /// What this part alone would meet.
    pub action: Action,
    /// The deciding rule's index, if a rule decided.
    pub rule: Option<usize>,
    /// The hazards found in it.
    pub hazards: Vec<String>,
}

/// The policy engine: compiled rules, the mode and the roots paths resolve against.
#[derive(Clone, Debug)]
pub struct Policy {
    mode: Mode,
    confined: Confined,
    /// Whether the command sandbox's guards are verified (shared by every policy the
    /// service has had: a reload keeps what the last canary found).
    boundary: confine::Boundary,
    confirm_timeout: Duration,
    rules: RuleSet,
    scopes: Scopes,
    /// `[network] allow`: domains every command and `web_fetch` reach without asking.
    network_allow: Vec<String>,
}

impl Policy {
    /// Compile the `[policy]` table against the tools that can exist. Errors name
    /// the offending rule.
    pub fn new(cfg: &PolicyConfig, roots: &Roots, tools: &ToolNames) -> Result<Policy, String> {
        Ok(Policy {
            mode: cfg.mode,
            confined: cfg.confined,
            boundary: confine::Boundary::default(),
            confirm_timeout: Duration::from_millis(cfg.confirm_timeout_ms),
            rules: RuleSet::new(&cfg.rules, tools)?,
            scopes: Scopes::new(roots).map_err(|e| e.to_string())?,
            network_allow: Vec::new(),
        })
    }

    /// The policy of a whole configuration: `[policy]`, with `[network] allow` as the
    /// domains commands and `web_fetch` reach.
    pub fn for_config(
        cfg: &crate::config::Config,
        roots: &Roots,
        tools: &ToolNames,
    ) -> Result<Policy, String> {
        Ok(Policy::new(&cfg.policy, roots, tools)?.with_network_allow(&cfg.network.allow))
    }

    /// The domains every command and `web_fetch` reach without asking (`[network]
    /// allow`).
    pub fn with_network_allow(mut self, allow: &[String]) -> Policy {
        self.network_allow = allow.to_vec();
        self
    }

    /// `[network] allow`.
    pub fn network_allow(&self) -> &[String] {
        &self.network_allow
    }

    /// What decides calls no rule matches.
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

    /// Decide one validated call of `tool` (its definition, whatever name it was
    /// called by).
    pub fn decide(&self, tool: &ToolDef, args: &Value) -> Decision {
        self.decide_at(tool, args, tool.risk)
    }

    /// [`Policy::decide`] with `base` in place of the tool's own risk (what the
    /// session already knows may lower it: [`ToolDef::policy`]`.familiar_by`). The
    /// arguments may still raise it.
    pub fn decide_at(&self, tool: &ToolDef, args: &Value, base: Risk) -> Decision {
        let facts = Facts::gather(tool, args, &self.scopes, base);
        let verdicts = self.verdicts(&facts);
        let mut decision = self.combine(&facts, &verdicts);
        self.confine(&facts, &verdicts, &mut decision);
        let by_rule = verdicts.iter().any(|v| v.rule.is_some());
        self.fetch_off_list(&facts, by_rule, &mut decision);
        if decision.action == Action::Ask {
            decision.suggestion = suggest::suggestion(&facts, &verdicts);
        }
        decision
    }
}

#[cfg(test)]
mod differential;
#[cfg(test)]
mod tests;
