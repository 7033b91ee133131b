//! `[[policy.rules]]` compiled once: tool names resolved to the canonical tool,
//! regexes built, and for every tool the order in which its rules are tried —
//! tool-specific rules first, then `*` rules, file order within each
//! (docs/POLICY.md).
//!
//! Conditions on `run_command`'s `command` test one simple command's words after
//! quote removal: `startsWith` is a word prefix, `equals` compares the words re-joined
//! with single spaces, `contains` and `matches` test that joined text. A program
//! written with a path (`./ls`, `/bin/ls`) only matches an allow rule that names that
//! path; deny and ask rules also match it by its last component, so `/bin/rm` cannot
//! dodge a rule on `rm`.

use std::collections::HashMap;

use regex::Regex;
use toolvisor_protocol::tools::{Risk, ToolSpec, find};

use crate::config::{Action, Condition, Hazards, Operator, Rule};

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

    /// Does a simple command satisfy the condition? An allow rule (`strict`) matches a
    /// path-qualified program only when it names that path.
    pub fn holds_words(&self, words: &[String], joined: &str, strict: bool) -> bool {
        let program = words.first().map(String::as_str).unwrap_or("");
        let qualified = strict && program.contains('/');
        match &self.op {
            Op::Equals(v) => joined == v || joined == normalise(v),
            Op::StartsWith(v) => word_prefix(program, joined, &normalise(v)),
            Op::Contains(v) => joined.contains(v.as_str()) && (!qualified || v.contains(program)),
            Op::Matches(re) => {
                let src = re.as_str();
                re.is_match(joined)
                    && (!qualified
                        || src.contains(program)
                        || src.contains(regex::escape(program).as_str()))
            }
        }
    }
}

/// A rule value as words: trimmed, blanks collapsed to one space.
fn normalise(v: &str) -> String {
    v.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `prefix` (normalised) is a whole-word prefix of the joined words, and names the
/// program word whole: `ls` matches `ls -la`, never `lsof`.
fn word_prefix(program: &str, joined: &str, prefix: &str) -> bool {
    if prefix.is_empty() {
        return true;
    }
    let names_program = prefix == program || prefix.starts_with(&format!("{program} "));
    names_program && (joined == prefix || joined.starts_with(&format!("{prefix} ")))
}

/// One simple command of `run_command`, as conditions on `command` see it.
#[derive(Clone, Debug)]
pub struct CommandWords {
    pub words: Vec<String>,
    pub joined: String,
}

impl CommandWords {
    pub fn new(words: Vec<String>) -> CommandWords {
        let joined = words.join(" ");
        CommandWords { words, joined }
    }

    /// The same command with its program by its last path component (`/bin/rm` →
    /// `rm`), when it was written with a path.
    fn by_basename(&self) -> Option<CommandWords> {
        let program = self.words.first()?;
        let base = program.rsplit('/').next()?;
        if base == program || base.is_empty() {
            return None;
        }
        let mut words = self.words.clone();
        words[0] = base.to_owned();
        Some(CommandWords::new(words))
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
    /// `hazards = "allow"`: argument hazards do not turn this rule's allow into an ask.
    pub hazards_allow: bool,
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
    ///
    /// With `command` given (a `run_command` part), conditions on `command` test its
    /// words; deny and ask rules also try the program by its last path component.
    pub fn matches(
        &self,
        values: &dyn Fn(&str) -> Option<Vec<String>>,
        command: Option<&CommandWords>,
    ) -> bool {
        let Some(cmd) = command else {
            return self.matches_values(values, None);
        };
        if self.matches_values(values, Some(cmd)) {
            return true;
        }
        self.action != Action::Allow
            && cmd
                .by_basename()
                .is_some_and(|base| self.matches_values(values, Some(&base)))
    }

    fn matches_values(
        &self,
        values: &dyn Fn(&str) -> Option<Vec<String>>,
        command: Option<&CommandWords>,
    ) -> bool {
        self.tests.iter().all(|t| {
            if t.param == COMMAND
                && let Some(c) = command
            {
                return t.holds_words(&c.words, &c.joined, self.action == Action::Allow);
            }
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
    /// Rules naming tools outside the built-in catalog: `NAME__TOOL` of an MCP server
    /// (known only once it runs) or a pattern ending in `*` (`github__*`), in file order.
    named: Vec<(ToolPattern, usize)>,
    star: Vec<usize>,
}

/// A rule's `tool` that is not a built-in name: an exact name, or a prefix (`x*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolPattern {
    Exact(String),
    Prefix(String),
}

impl ToolPattern {
    /// The pattern of a rule's `tool`, or why it cannot name any tool.
    fn parse(tool: &str) -> Result<ToolPattern, String> {
        match tool.strip_suffix('*') {
            Some(prefix) if !prefix.contains('*') => Ok(ToolPattern::Prefix(prefix.to_owned())),
            Some(_) => Err(format!("`{tool}`: `*` may only end a tool pattern")),
            // `NAME__TOOL`: a tool of MCP server NAME, offered once the server runs.
            None if tool.contains("__") && !tool.contains('*') => {
                Ok(ToolPattern::Exact(tool.to_owned()))
            }
            None => Err(format!("unknown tool `{tool}`")),
        }
    }

    fn matches(&self, tool: &str) -> bool {
        match self {
            ToolPattern::Exact(name) => tool == name,
            ToolPattern::Prefix(prefix) => tool.starts_with(prefix.as_str()),
        }
    }
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
                hazards_allow: rule.hazards == Hazards::Allow,
            });
            if rule.tool == "*" {
                set.star.push(index);
            } else if let Some(spec) = find(tools, &rule.tool) {
                set.by_tool.entry(spec.name).or_default().push(index);
            } else {
                let pattern = ToolPattern::parse(&rule.tool)
                    .map_err(|e| format!("policy.rules[{index}]: {e}"))?;
                set.named.push((pattern, index));
            }
        }
        Ok(set)
    }

    /// The rules for `tool` (canonical name) in the order they are tried: those that
    /// name it or a pattern it matches, in file order, then the `*` rules.
    pub fn for_tool<'a>(&'a self, tool: &str) -> impl Iterator<Item = &'a CompiledRule> + 'a {
        let by_name = self.by_tool.get(tool).map(Vec::as_slice).unwrap_or(&[]);
        let mut specific: Vec<usize> = by_name.to_vec();
        specific.extend(
            self.named
                .iter()
                .filter(|(p, _)| p.matches(tool))
                .map(|(_, i)| *i),
        );
        specific.sort_unstable();
        specific
            .into_iter()
            .chain(self.star.iter().copied())
            .map(|i| &self.rules[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolvisor_protocol::tools::catalog;

    fn rule(tool: &str, action: Action) -> Rule {
        Rule::new(tool, action)
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
    fn patterns_and_mcp_names_are_tool_specific() {
        let rules = vec![
            rule("*", Action::Ask),
            rule("gh__*", Action::Allow),
            rule("read_file", Action::Deny),
            rule("gh__delete", Action::Deny),
            rule("read_*", Action::Allow),
        ];
        let set = RuleSet::new(&rules, &catalog()).unwrap();
        let order = |t: &str| set.for_tool(t).map(|r| r.index).collect::<Vec<_>>();
        assert_eq!(order("gh__delete"), vec![1, 3, 0]);
        assert_eq!(order("gh__list"), vec![1, 0]);
        assert_eq!(order("read_file"), vec![2, 4, 0]);
        assert_eq!(order("other__x"), vec![0]);
        for bad in ["a*b*", "*x", "nope"] {
            let err = RuleSet::new(&[rule(bad, Action::Allow)], &catalog()).unwrap_err();
            assert!(err.contains("policy.rules[0]"), "{bad}: {err}");
        }
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

    fn words(s: &str) -> (Vec<String>, String) {
        let w: Vec<String> = s.split_whitespace().map(String::from).collect();
        let j = w.join(" ");
        (w, j)
    }

    fn holds_on(op: Operator, value: &str, cmd: &str, strict: bool) -> bool {
        let t = Test::compile(&Condition {
            param: "command".into(),
            operator: op,
            value: value.into(),
        })
        .unwrap();
        let (w, j) = words(cmd);
        t.holds_words(&w, &j, strict)
    }

    #[test]
    fn starts_with_is_a_word_prefix() {
        for (value, cmd, want) in [
            ("ls", "ls", true),
            ("ls ", "ls", true),
            ("ls", "ls -la", true),
            ("ls ", "ls -la", true),
            ("ls", "lsof", false),
            ("ls", "lsd94/../../usr/bin/touch M", false),
            ("git status", "git status -s", true),
            ("git status", "git statusx", false),
            ("git  status ", "git status", true),
            ("git sta", "git status", false),
            ("ls", "./ls", false),
            ("./ls", "./ls -la", true),
            ("", "anything", true),
        ] {
            assert_eq!(
                holds_on(Operator::StartsWith, value, cmd, true),
                want,
                "{value:?} {cmd:?}"
            );
        }
    }

    #[test]
    fn equals_contains_matches_on_joined_words() {
        assert!(holds_on(Operator::Equals, "ls -la", "ls -la", true));
        assert!(holds_on(Operator::Equals, " ls  -la ", "ls -la", true));
        assert!(!holds_on(Operator::Equals, "ls", "ls -la", true));
        assert!(holds_on(Operator::Contains, "-rf", "rm -rf x", false));
        assert!(holds_on(Operator::Matches, "^rm ", "rm -rf x", false));
        assert!(!holds_on(Operator::Contains, "ls -la", "/bin/ls -la", true));
        assert!(holds_on(Operator::Contains, "ls -la", "/bin/ls -la", false));
        assert!(holds_on(Operator::Matches, "^/bin/ls", "/bin/ls -la", true));
        assert!(!holds_on(Operator::Matches, "ls", "/bin/ls -la", true));
    }

    #[test]
    fn deny_rules_see_a_path_qualified_program_by_its_name() {
        let mut deny = rule("run_command", Action::Deny);
        deny.conditions.push(Condition {
            param: "command".into(),
            operator: Operator::StartsWith,
            value: "rm".into(),
        });
        let set = RuleSet::new(&[deny], &catalog()).unwrap();
        let r = set.for_tool("run_command").next().unwrap();
        let none = |_: &str| None;
        for cmd in ["rm -rf x", "/bin/rm -rf x", "./x/../rm"] {
            let c = CommandWords::new(words(cmd).0);
            assert!(r.matches(&none, Some(&c)), "{cmd}");
        }
        let c = CommandWords::new(words("rmdir x").0);
        assert!(!r.matches(&none, Some(&c)));
    }
}
