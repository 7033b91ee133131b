//! The registry's promises: every violation reported with its pointer, close names
//! for a typo, and a group's announced tools joining (or being left out) whole.

use super::*;
use proptest::prelude::*;
use serde_json::json;
use toolvisor_protocol::tools::builtin;

fn r() -> Registry {
    Registry::new(builtin()).unwrap()
}

fn check(r: &Registry, tool: &str, args: &Value) -> Result<(), String> {
    match r.find(tool) {
        Some(e) => e.check(args),
        None => Err(r.not_found(tool)),
    }
}

#[test]
fn valid_calls_pass() {
    let r = r();
    assert!(check(&r, "read_file", &json!({"path": "a", "startLine": 1})).is_ok());
    assert!(check(&r, "shell", &json!({"command": "ls", "env": {"A": "b"}})).is_ok());
    assert!(check(&r, "list_processes", &json!({})).is_ok());
}

#[test]
fn every_violation_is_listed_with_its_pointer() {
    let r = r();
    let err = check(
        &r,
        "read_file",
        &json!({"startLine": 0, "endLine": "x", "bogus": true}),
    )
    .unwrap_err();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "{err}");
    assert!(
        err.contains("/startLine: 0 is less than the minimum of 1"),
        "{err}"
    );
    assert!(err.contains("/endLine: "), "{err}");
    assert!(err.contains("\"path\" is a required property"), "{err}");
    assert!(err.contains("bogus"), "{err}");
    let err = check(
        &r,
        "edit_file",
        &json!({"path": "a", "edits": [{"target": "", "replacement": 1}]}),
    )
    .unwrap_err();
    assert!(err.contains("/edits/0/target: "), "{err}");
    assert!(err.contains("/edits/0/replacement: "), "{err}");
}

#[test]
fn non_object_arguments_are_refused() {
    let err = check(&r(), "ls", &json!(null)).unwrap_err();
    assert!(err.starts_with("/: "), "{err}");
}

#[test]
fn unknown_tools_suggest_close_names() {
    let r = r();
    assert_eq!(r.suggest("read_fil")[0], "read_file");
    assert_eq!(r.suggest("shel")[0], "shell");
    assert!(r.suggest("list_di").contains(&"list_dir".to_string()));
    assert!(
        r.suggest("RUN_COMMAND")
            .contains(&"run_command".to_string())
    );
    assert!(r.suggest("process").contains(&"kill_process".to_string()));
    assert!(r.suggest("zzzzzzzzzz").is_empty());
    let err = check(&r, "grpe", &json!({})).unwrap_err();
    assert!(err.contains("did you mean `grep`"), "{err}");
}

#[test]
fn aliases_find_the_same_entry() {
    let r = r();
    assert_eq!(r.find("shell").unwrap().def.name, "run_command");
    assert_eq!(r.find("list_dir").unwrap().def.name, "ls");
    assert_eq!(r.len(), builtin().len());
    assert_eq!(r.groups(), ["edit", "exec", "search", "state", "web"]);
}

fn tool(name: &str, group: &str, schema: Value) -> ToolDef {
    ToolDef::new(name, group, "a tool", schema)
}

#[test]
fn a_group_announcing_tools_replaces_only_its_own() {
    let r = r();
    let obj = json!({"type": "object"});
    let (r2, warnings) = r.with_group(
        "words",
        vec![
            tool("count", "words", obj.clone()),
            tool("split", "words", obj.clone()),
        ],
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(r2.len(), builtin().len() + 2);
    assert_eq!(r2.names_in("words"), ["count", "split"]);
    let (r3, _) = r2.with_group("words", vec![tool("count", "words", obj)]);
    assert_eq!(r3.names_in("words"), ["count"]);
    assert!(r3.find("split").is_none());
    assert!(r3.find("read_file").is_some(), "other groups stay");
    assert_eq!(r.len(), builtin().len(), "a snapshot never changes");
}

#[test]
fn a_clashing_name_or_a_broken_schema_leaves_only_that_tool_out() {
    let obj = json!({"type": "object"});
    let (r2, warnings) = r().with_group(
        "evil",
        vec![
            tool("read_file", "evil", obj.clone()),
            tool("shell", "evil", obj.clone()),
            tool("broken", "evil", json!({"type": 12})),
            tool("fine", "evil", obj),
        ],
    );
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert_eq!(r2.names_in("evil"), ["fine"]);
    assert_eq!(r2.find("read_file").unwrap().def.group, "search");
    assert_eq!(r2.find("shell").unwrap().def.name, "run_command");
}

proptest! {
    /// Property 44: an unknown property is always reported, by name.
    #[test]
    fn unexpected_properties_are_reported(key in "[a-z]{12}") {
        let r = r();
        for e in r.entries() {
            let mut args = json!({});
            args[key.as_str()] = json!(1);
            let err = e.check(&args).unwrap_err();
            prop_assert!(err.contains(&key), "{}: {}", e.def.name, err);
        }
    }

    /// A wrong type for a required string parameter is reported at its pointer.
    #[test]
    fn wrong_types_are_reported(n in any::<i64>()) {
        let err = check(&r(), "grep", &json!({"pattern": n})).unwrap_err();
        prop_assert!(err.starts_with("/pattern: "), "{}", err);
    }
}
