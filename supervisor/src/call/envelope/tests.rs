use super::*;
use proptest::prelude::*;
use serde_json::json;

fn one(text: &str) -> Envelope {
    parse(text, 64).unwrap().expect("a block")
}

fn bad(text: &str) -> String {
    parse(text, 64).unwrap_err()
}

#[test]
fn plain_text_has_no_envelope() {
    assert_eq!(parse("just words\n```rust\nfn x() {}\n```\n", 64), Ok(None));
    assert_eq!(parse("", 64), Ok(None));
}

#[test]
fn an_agent_block_gives_its_actions_and_the_text_around_it() {
    let text = "Let me look.\n```yips-agent\n{\"actions\":[{\"type\":\"tool\",\"id\":\"t1\",\"name\":\"list_dir\",\"arguments\":{\"path\":\".\"}},{\"type\":\"skill\",\"id\":\"s1\",\"name\":\"search\"}]}\n```\nDone.\n";
    let e = one(text);
    assert_eq!(e.assistant_text, "Let me look.\nDone.");
    assert_eq!(
        e.actions,
        [
            Action {
                id: "t1".into(),
                kind: ActionKind::Tool {
                    name: "list_dir".into(),
                    arguments: json!({"path": "."})
                }
            },
            Action {
                id: "s1".into(),
                kind: ActionKind::Skill
            }
        ]
    );
    let own = one("x\n```yips-agent\n{\"assistant_text\":\"hi\",\"actions\":[]}\n```\n");
    assert_eq!(own.assistant_text, "hi");
    assert!(own.actions.is_empty());
}

#[test]
fn a_legacy_block_keeps_the_order_of_its_lists() {
    let text = "```yips-tools\n{\"skill_calls\":[{\"id\":\"s1\",\"name\":\"search\"}],\"tool_calls\":[{\"id\":\"t1\",\"name\":\"read_file\",\"arguments\":{\"path\":\"a\"}}],\"subagent_calls\":[{\"id\":\"a1\",\"task\":\"x\"}]}\n```";
    let e = one(text);
    let ids: Vec<String> = e.actions.iter().map(|a| a.id.to_string()).collect();
    assert_eq!(ids, ["s1", "t1", "a1"]);
    assert_eq!(e.actions[2].kind, ActionKind::Subagent);
    assert_eq!(e.assistant_text, "");
}

#[test]
fn every_malformed_block_is_named() {
    let agent = |body: &str| format!("```yips-agent\n{body}\n```\n");
    for (text, needle) in [
        (format!("{}{}", agent("{}"), agent("{}")), "exactly one"),
        (
            "```yips-agent\n{}\n```\n```yips-tools\n{}\n```".to_owned(),
            "found 2",
        ),
        (agent("{not json"), "not valid JSON"),
        (agent("[1]"), "must hold a JSON object"),
        (agent("{\"actions\": 3}"), "`actions` must be an array"),
        (agent("{\"actions\":[3]}"), "action 1 is not an object"),
        (
            agent("{\"actions\":[{\"type\":\"tool\",\"name\":\"ls\"}]}"),
            "action 1 has no `id`",
        ),
        (
            agent("{\"actions\":[{\"type\":\"tool\",\"id\":\"\"}]}"),
            "empty `id`",
        ),
        (
            agent("{\"actions\":[{\"type\":\"tool\",\"id\":\"t1\"}]}"),
            "tool action `t1` has no `name`",
        ),
        (
            agent("{\"actions\":[{\"id\":\"t1\",\"name\":\"ls\"}]}"),
            "has no `type`",
        ),
        (
            agent("{\"actions\":[{\"type\":\"magic\",\"id\":\"t1\"}]}"),
            "unknown type `magic`",
        ),
        (
            agent(
                "{\"actions\":[{\"type\":\"skill\",\"id\":\"x\"},{\"type\":\"tool\",\"id\":\"x\",\"name\":\"ls\"}]}",
            ),
            "`x` is used more than once",
        ),
        (
            agent("{\"assistant_text\":5}"),
            "`assistant_text` must be a string",
        ),
        ("```yips-agent\n{\"actions\":[]}\n".to_owned(), "not closed"),
        (
            "```yips-tools\n{\"tool_calls\":[{\"id\":\"t\"}]}\n```".to_owned(),
            "tool action `t` has no `name`",
        ),
    ] {
        let e = bad(&text);
        assert!(e.contains(needle), "{text:?}: {e}");
    }
}

#[test]
fn blocks_inside_other_fences_are_text() {
    let text = "````markdown\n```yips-agent\n{\"actions\":[]}\n```\n````\n";
    assert_eq!(parse(text, 64), Ok(None));
    // A longer fence closes with at least as many backticks.
    let text = "````yips-agent\n{\"actions\":[{\"type\":\"tool\",\"id\":\"t\",\"name\":\"ls\",\"arguments\":{\"path\":\"```\"}}]}\n````\n";
    assert_eq!(one(text).actions.len(), 1);
}

#[test]
fn too_many_actions_are_refused_before_they_are_read() {
    let actions: Vec<Value> = (0..10_000)
        .map(|i| json!({"type": "tool", "id": format!("t{i}"), "name": "ls", "arguments": {"path": "."}}))
        .collect();
    let text = format!("```yips-agent\n{}\n```", json!({"actions": actions}));
    let e = parse(&text, 64).unwrap_err();
    assert!(
        e.contains("10000 actions") && e.contains("at most 64"),
        "{e}"
    );
    let legacy: Vec<Value> = (0..100).map(|i| json!({"id": i, "name": "ls"})).collect();
    let text = format!("```yips-tools\n{}\n```", json!({"tool_calls": legacy}));
    assert!(parse(&text, 64).unwrap_err().contains("100 actions"));
}

proptest! {
    #[test]
    fn any_text_parses_or_is_refused_without_panicking(text in ".{0,300}") {
        let _ = parse(&text, 64);
    }

    #[test]
    fn generated_envelopes_keep_their_ids_in_order(
        ids in prop::collection::btree_set("[a-z][a-z0-9]{0,6}", 0..20),
        before in "[a-zA-Z .]{0,30}",
        after in "[a-zA-Z .]{0,30}",
    ) {
        let ids: Vec<String> = ids.into_iter().collect();
        let actions: Vec<Value> = ids.iter().enumerate().map(|(i, id)| match i % 3 {
            0 => json!({"type": "tool", "id": id, "name": "read_file", "arguments": {"path": id}}),
            1 => json!({"type": "skill", "id": id, "name": "fetch"}),
            _ => json!({"type": "subagent", "id": id, "task": "t"}),
        }).collect();
        let text = format!("{before}\n```yips-agent\n{}\n```\n{after}", json!({"actions": actions}));
        let e = parse(&text, 64).unwrap().unwrap();
        let got: Vec<String> = e.actions.iter().map(|a| a.id.to_string()).collect();
        prop_assert_eq!(got, ids);
        prop_assert_eq!(e.assistant_text, format!("{before}\n{after}").trim().to_owned());
    }
}
