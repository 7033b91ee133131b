//! `[[policy.rules]]` compiled once: tool names resolved to the canonical tool,
//! regexes built, and for every tool the order in which its rules are tried —
//! tool-specific rules first, then `*` rules, file order within each (DESIGN §6).

use std::collections::HashMap;

use regex::Regex;
use toolvisor_protocol::tools::{Risk, ToolSpec, find};

use crate::config::{Action, Condition, Operator, Rule};

/// The parameter whose conditions are evaluated per simple command.
pub const COMMAND: &str = "command";
/// The parameter an allow rule must test to cover a call with a dangerous `env`.
pub const ENV: &str = "env";

/// One condition, ready to test.
#[derive(Clone, Debug)]
pub struct Test {
    pub param: String,
    op: Op,
}

#[derive(Clone, Debug)]
enum Op {
    Equals(String),
    Contains(String),
    StartsWith(String),
    Matches(Regex),
}

impl Test {
    fn compile(c: &Condition) -> Result<Test, regex::Error> {
        let value = c.value.clone();
        let op = match c.operator {
            Operator::Equals => Op::Equals(value),
            Operator::Contains => Op::Contains(value),
            Operator::StartsWith => Op::StartsWith(value),
            Operator::Matches => Op::Matches(Regex::new(&value)?),
        };
        Ok(Test {
            param: c.param.clone(),
            op,
        })
    }

    /// Does one value satisfy the condition?
    pub fn holds(&self, value: &str) -> bool {
        match &self.op {
            Op::Equals(v) => value == v,
            Op::Contains(v) => value.contains(v.as_str()),
            Op::StartsWith(v) => value.starts_with(v.as_str()),
            Op::Matches(re) => re.is_match(value),
        }
    }
}

/// A rule after compilation; `index` is its place in the file, for messages.
#[derive(Clone, Debug)]
pub struct CompiledRule {
    pub index: usize,
    pub action: Action,
    pub risk: Option<Risk>,
    pub message: Option<String>,
    pub tests: Vec<Test>,
}

impl CompiledRule {
    /// `policy.rules[2]`: how audit records and messages name the rule.
    pub fn id(&self) -> String {
        format!("policy.rules[{}]", self.index)
    }

    /// A rule that tests `command` is decided per simple command.
    pub fn tests_command(&self) -> bool {
        self.tests.iter().any(|t| t.param == COMMAND)
    }

    /// A rule that tests `env` (or `env.KEY`) may allow a call setting `PATH` etc.
    pub fn tests_env(&self) -> bool {
        self.tests
            .iter()
            .any(|t| t.param == ENV || t.param.starts_with("env."))
    }

    /// All conditions hold. `values` gives a parameter's resolved values (`None` when
    /// absent, so the condition fails). A list parameter must satisfy the condition in
    /// every element for an allow rule, in any element for a deny or ask rule: each
    /// reading errs on the strict side.
    pub fn matches(&self, values: &dyn Fn(&str) -> Option<Vec<String>>) -> bool {
        self.tests.iter().all(|t| {
            let Some(vals) = values(&t.param) else {
                return false;
            };
            if vals.is_empty() {
                return t.holds("");
            }
            match self.action {
                Action::Allow => vals.iter().all(|v| t.holds(v)),
                Action::Deny | Action::Ask => vals.iter().any(|v| t.holds(v)),
            }
        })
    }
}

/// Every rule, and for each tool the order to try them in.
#[derive(Clone, Debug, Default)]
pub struct RuleSet {
    rules: Vec<CompiledRule>,
    by_tool: HashMap<&'static str, Vec<usize>>,
    star: Vec<usize>,
}

impl RuleSet {
    /// Compile `rules`; a rule naming no known tool or alias, or a bad regex, is an
    /// error naming the rule, since a rule that silently never matches is a trap.
    pub fn new(rules: &[Rule], tools: &[ToolSpec]) -> Result<RuleSet, String> {
        let mut set = RuleSet::default();
        for (index, rule) in rules.iter().enumerate() {
            let tests = rule
                .conditions
                .iter()
                .map(Test::compile)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("policy.rules[{index}]: bad regex: {e}"))?;
            set.rules.push(CompiledRule {
                index,
                action: rule.action,
                risk: rule.risk,
                message: rule.message.clone(),
                tests,
            });
            if rule.tool == "*" {
                set.star.push(index);
            } else {
                let spec = find(tools, &rule.tool).ok_or_else(|| {
                    format!("policy.rules[{index}]: unknown tool `{}`", rule.tool)
                })?;
                set.by_tool.entry(spec.name).or_default().push(index);
            }
        }
        Ok(set)
    }

    /// The rules for `tool` (canonical name) in the order they are tried.
    pub fn for_tool<'a>(&'a self, tool: &str) -> impl Iterator<Item = &'a CompiledRule> + 'a {
        let specific = self.by_tool.get(tool).map(Vec::as_slice).unwrap_or(&[]);
        specific
            .iter()
            .chain(self.star.iter())
            .map(|&i| &self.rules[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolvisor_protocol::tools::catalog;

    fn rule(tool: &str, action: Action) -> Rule {
        Rule {
            tool: tool.into(),
            action,
            risk: None,
            message: None,
            conditions: vec![],
            network: None,
        }
    }

    #[test]
    fn tool_specific_rules_come_before_star_rules() {
        let rules = vec![
            rule("*", Action::Deny),
            rule("shell", Action::Allow),
            rule("run_command", Action::Ask),
            rule("*", Action::Ask),
        ];
        let set = RuleSet::new(&rules, &catalog()).unwrap();
        let order: Vec<usize> = set.for_tool("run_command").map(|r| r.index).collect();
        assert_eq!(order, [1, 2, 0, 3]);
        let order: Vec<usize> = set.for_tool("ls").map(|r| r.index).collect();
        assert_eq!(order, [0, 3]);
    }

    #[test]
    fn unknown_tools_and_bad_regexes_are_refused() {
        let err = RuleSet::new(&[rule("nope", Action::Allow)], &catalog()).unwrap_err();
        assert!(
            err.contains("policy.rules[0]") && err.contains("nope"),
            "{err}"
        );
        let mut r = rule("*", Action::Allow);
        r.conditions.push(Condition {
            param: "path".into(),
            operator: Operator::Matches,
            value: "(".into(),
        });
        assert!(RuleSet::new(&[r], &catalog()).is_err());
    }

    #[test]
    fn operators() {
        let t = |op, v: &str| {
            Test::compile(&Condition {
                param: "p".into(),
                operator: op,
                value: v.into(),
            })
            .unwrap()
        };
        assert!(t(Operator::Equals, "a").holds("a"));
        assert!(!t(Operator::Equals, "a").holds("ab"));
        assert!(t(Operator::Contains, "b").holds("abc"));
        assert!(t(Operator::StartsWith, "ls ").holds("ls -la"));
        assert!(!t(Operator::StartsWith, "ls ").holds("lsof"));
        assert!(t(Operator::Matches, "b+c").holds("abbc"), "unanchored");
        assert!(!t(Operator::Matches, "^b").holds("abc"));
    }
}
