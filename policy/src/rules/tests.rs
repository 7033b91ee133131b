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
