//! `[[policy.rules]]` compiled once: tool names resolved to the canonical tool (a
//! `tool` ending in `*` matches every tool whose name starts with the rest), regexes
//! built, and for every tool the order in which its rules are tried — tool-specific
//! rules first, then `*` rules, file order within each (docs/POLICY.md).
//!
//! Conditions on `run_command`'s `command` test one simple command's words after
//! quote removal: `startsWith` is a word prefix, `equals` compares the words re-joined
//! with single spaces, `contains` and `matches` test that joined text. A program
//! written with a path (`./ls`, `/bin/ls`) only matches an allow rule that names that
//! path; deny and ask rules also match it by its last component, so `/bin/rm` cannot
//! dodge a rule on `rm`.

use std::collections::HashMap;

use regex::Regex;
use toolvisor_protocol::tools::{Risk, ToolDef};

use crate::config::{Action, Condition, Hazards, Operator, Rule};

/// The parameter whose conditions are evaluated per simple command.
pub const COMMAND: &str = "command";
/// The parameter an allow rule must test to cover a call with a dangerous `env`.
pub const ENV: &str = "env";

/// One condition, ready to test.
#[derive(Clone, Debug)]
pub struct Test {
    /// The argument tested (`env.KEY` for one variable).
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
    /// The command's words after quote removal.
    pub words: Vec<String>,
    /// The words joined by single spaces: what `startsWith` and `contains` test.
    pub joined: String,
}

impl CommandWords {
    /// The words of one simple command.
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
    /// Its place in the file (`policy.rules[N]`).
    pub index: usize,
    /// What a match does.
    pub action: Action,
    /// The risk to show and record instead of the call's.
    pub risk: Option<Risk>,
    /// The reason to show and record instead of the generated one.
    pub message: Option<String>,
    /// Its conditions, compiled (regexes built once).
    pub tests: Vec<Test>,
    /// `hazards = "allow"`: argument hazards do not turn this rule's allow into an ask.
    pub hazards_allow: bool,
    /// `network`: a command this rule allows gets the host's network (`true`) or these
    /// domains; it grants a call's own `network` that asks for no more.
    pub network: Option<crate::config::Network>,
    /// `writable`: the paths a call this rule allows may add to its writable ones.
    pub writable: Vec<String>,
    /// `reveal`: the hidden paths a call this rule allows may see.
    pub reveal: Vec<String>,
    /// `expose`: the ports a call this rule allows may publish on the host's loopback.
    pub expose: Option<crate::config::Expose>,
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

/// The tool names a rule may name: every tool and alias registered now, and the name
/// spaces of groups whose tools are known only once their worker announces them (an
/// MCP server's `NAME__` prefix; any name at all when an external group is
/// configured). A rule naming nothing that can exist is a configuration error: a rule
/// that silently never matches is a trap.
#[derive(Clone, Debug, Default)]
pub struct ToolNames {
    /// Name or alias → the tool's name.
    canonical: HashMap<String, String>,
    /// Prefixes of names that may appear later.
    prefixes: Vec<String>,
    /// An external group may announce any name.
    open: bool,
}

impl ToolNames {
    /// The names of `tools`.
    pub fn of<'a>(tools: impl IntoIterator<Item = &'a ToolDef>) -> ToolNames {
        let mut canonical = HashMap::new();
        for t in tools {
            canonical.insert(t.name.clone(), t.name.clone());
            for a in &t.aliases {
                canonical.insert(a.clone(), t.name.clone());
            }
        }
        ToolNames {
            canonical,
            ..ToolNames::default()
        }
    }

    /// Names starting with `prefix` may appear later (an MCP server's tools).
    pub fn with_prefix(mut self, prefix: String) -> ToolNames {
        self.prefixes.push(prefix);
        self
    }

    /// Any name may appear later (an external worker group announces its own).
    pub fn open(mut self) -> ToolNames {
        self.open = true;
        self
    }

    /// The tool `name` (a name or an alias) stands for, if it can exist.
    fn resolve(&self, name: &str) -> Option<String> {
        if let Some(c) = self.canonical.get(name) {
            return Some(c.clone());
        }
        let later = self.open || self.prefixes.iter().any(|p| name.starts_with(p.as_str()));
        later.then(|| name.to_owned())
    }

    /// Whether a pattern `prefix*` can match a tool.
    fn can_match_prefix(&self, prefix: &str) -> bool {
        self.open
            || self.canonical.keys().any(|n| n.starts_with(prefix))
            || self
                .prefixes
                .iter()
                .any(|p| p.starts_with(prefix) || prefix.starts_with(p.as_str()))
    }
}

/// Which tools a rule is for.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ToolMatch {
    /// One tool, by its name (an alias in the rule is resolved to it).
    Exact(String),
    /// Every tool whose name starts with this (`github__*`).
    Prefix(String),
}

impl ToolMatch {
    fn matches(&self, tool: &ToolDef) -> bool {
        match self {
            ToolMatch::Exact(name) => tool.name == *name,
            ToolMatch::Prefix(p) => tool.name.starts_with(p.as_str()),
        }
    }
}

/// Every rule, and for each tool the order to try them in.
#[derive(Clone, Debug, Default)]
pub struct RuleSet {
    rules: Vec<CompiledRule>,
    /// Tool-specific rules (by name or pattern), in file order.
    specific: Vec<(ToolMatch, usize)>,
    star: Vec<usize>,
}

impl RuleSet {
    /// Compile `rules`; a rule naming no tool that can exist, or a bad regex, is an
    /// error naming the rule.
    pub fn new(rules: &[Rule], tools: &ToolNames) -> Result<RuleSet, String> {
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
                network: rule.network.clone(),
                writable: rule.writable.clone().unwrap_or_default(),
                reveal: rule.reveal.clone().unwrap_or_default(),
                expose: rule.expose.clone(),
            });
            if rule.tool == "*" {
                set.star.push(index);
                continue;
            }
            let matcher = match rule.tool.strip_suffix('*') {
                Some(prefix) if tools.can_match_prefix(prefix) => {
                    ToolMatch::Prefix(prefix.to_owned())
                }
                Some(_) => {
                    return Err(format!(
                        "policy.rules[{index}]: `{}` matches no tool",
                        rule.tool
                    ));
                }
                None => ToolMatch::Exact(tools.resolve(&rule.tool).ok_or_else(|| {
                    format!("policy.rules[{index}]: unknown tool `{}`", rule.tool)
                })?),
            };
            set.specific.push((matcher, index));
        }
        Ok(set)
    }

    /// The rules for `tool` in the order they are tried.
    pub fn for_tool<'a, 't>(
        &'a self,
        tool: &'t ToolDef,
    ) -> impl Iterator<Item = &'a CompiledRule> + use<'a, 't> {
        self.specific
            .iter()
            .filter(move |(m, _)| m.matches(tool))
            .map(|(_, i)| *i)
            .chain(self.star.iter().copied())
            .map(|i| &self.rules[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolvisor_protocol::tools::{builtin, find};

    fn rule(tool: &str, action: Action) -> Rule {
        Rule::new(tool, action)
    }

    fn names() -> ToolNames {
        ToolNames::of(&builtin())
    }

    fn order(set: &RuleSet, tool: &str) -> Vec<usize> {
        let tools = builtin();
        let def = find(&tools, tool).unwrap();
        set.for_tool(def).map(|r| r.index).collect()
    }

    #[test]
    fn tool_specific_rules_come_before_star_rules() {
        let rules = vec![
            rule("*", Action::Deny),
            rule("shell", Action::Allow),
            rule("run_command", Action::Ask),
            rule("*", Action::Ask),
        ];
        let set = RuleSet::new(&rules, &names()).unwrap();
        assert_eq!(order(&set, "run_command"), [1, 2, 0, 3]);
        assert_eq!(order(&set, "ls"), [0, 3]);
    }

    #[test]
    fn a_pattern_rule_is_tool_specific_for_every_tool_it_matches() {
        let rules = vec![
            rule("*", Action::Deny),
            rule("read_*", Action::Allow),
            rule("read_file", Action::Ask),
        ];
        let set = RuleSet::new(&rules, &names()).unwrap();
        assert_eq!(order(&set, "read_file"), [1, 2, 0]);
        assert_eq!(order(&set, "read_many_files"), [1, 0]);
        assert_eq!(order(&set, "ls"), [0]);
        let err = RuleSet::new(&[rule("nothing_*", Action::Allow)], &names()).unwrap_err();
        assert!(err.contains("matches no tool"), "{err}");
    }

    #[test]
    fn names_of_tools_that_appear_later_are_accepted() {
        let mcp = names().with_prefix("github__".into());
        assert!(RuleSet::new(&[rule("github__search", Action::Allow)], &mcp).is_ok());
        assert!(RuleSet::new(&[rule("github__*", Action::Allow)], &mcp).is_ok());
        assert!(RuleSet::new(&[rule("gitlab__search", Action::Allow)], &mcp).is_err());
        let open = names().open();
        assert!(RuleSet::new(&[rule("word_count", Action::Allow)], &open).is_ok());
    }

    #[test]
    fn unknown_tools_and_bad_regexes_are_refused() {
        let err = RuleSet::new(&[rule("nope", Action::Allow)], &names()).unwrap_err();
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
        assert!(RuleSet::new(&[r], &names()).is_err());
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
        let set = RuleSet::new(&[deny], &names()).unwrap();
        let tools = builtin();
        let r = set
            .for_tool(find(&tools, "run_command").unwrap())
            .next()
            .unwrap();
        let none = |_: &str| None;
        for cmd in ["rm -rf x", "/bin/rm -rf x", "./x/../rm"] {
            let c = CommandWords::new(words(cmd).0);
            assert!(r.matches(&none, Some(&c)), "{cmd}");
        }
        let c = CommandWords::new(words("rmdir x").0);
        assert!(!r.matches(&none, Some(&c)));
    }
}
