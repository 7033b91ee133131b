//! `envelope` through the real socket: plain text, `yips-agent` and legacy
//! `yips-tools` blocks run as batches, skill and subagent actions unsupported, unknown
//! tools `ToolNotFound`, `write_file`/`edit_file` staged as previews, every malformed
//! block a `BadEnvelope` with nothing run, and 10,000 actions refused in bounded memory.

use std::time::Duration;

use serde_json::{Value, json};
use toolvisor_protocol::client::Client;
use toolvisor_protocol::message::{ClientMessage, ServerMessage};
use toolvisor_protocol::{ErrorType, Id, Status, ToolResult};

use crate::harness::*;

/// Everything the server sends about envelope `id`, up to its end: `envelope_done`, or
/// the connection-level error that refused it.
async fn send_envelope(c: &mut Client, id: &str, text: &str) -> Vec<ServerMessage> {
    c.send(&ClientMessage::Envelope {
        id: id.into(),
        text: text.to_owned(),
    })
    .await
    .unwrap();
    let mut seen = Vec::new();
    loop {
        let m = tokio::time::timeout(Duration::from_secs(30), c.recv())
            .await
            .expect("a message in time")
            .expect("message");
        let end = match &m {
            ServerMessage::EnvelopeDone { id: i, .. } => *i == Id::from(id),
            ServerMessage::Error { id: Some(i), error } => {
                *i == Id::from(id) && error.kind == ErrorType::BadEnvelope
            }
            _ => false,
        };
        seen.push(m);
        if end {
            return seen;
        }
    }
}

fn results(ms: &[ServerMessage]) -> Vec<&ToolResult> {
    ms.iter()
        .filter_map(|m| match m {
            ServerMessage::Result(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn result<'a>(ms: &'a [ServerMessage], id: &str) -> &'a ToolResult {
    results(ms)
        .into_iter()
        .find(|r| r.id == Id::from(id))
        .unwrap_or_else(|| panic!("no result for {id}: {ms:?}"))
}

fn agent(actions: Value) -> String {
    format!("```yips-agent\n{}\n```", json!({ "actions": actions }))
}

#[test]
fn plain_text_is_just_assistant_text() {
    let s = Server::start(ASKING);
    block(T, async {
        let mut c = s.client().await;
        let text = "No tools needed.\n```rust\nfn main() {}\n```\n";
        let got = send_envelope(&mut c, "e1", text).await;
        assert_eq!(
            got,
            [ServerMessage::EnvelopeDone {
                id: "e1".into(),
                assistant_text: text.into(),
                ids: vec![]
            }]
        );
    });
}

#[test]
fn an_agent_envelope_runs_its_tools_as_a_batch() {
    let s = Server::start(ASKING);
    s.write("README.md", "hello\n");
    block(T, async {
        let mut c = s.client().await;
        let text = format!(
            "Let me look around.\n{}\nThat is all.",
            agent(json!([
                {"type": "tool", "id": "t1", "name": "list_dir", "arguments": {"path": "."}},
                {"type": "skill", "id": "s1", "name": "search", "arguments": {"query": "x"}},
                {"type": "tool", "id": "t2", "name": "read_file", "arguments": {"path": "README.md"}},
                {"type": "subagent", "id": "a1", "task": "summarise"},
                {"type": "tool", "id": "x1", "name": "delete_everything", "arguments": {}},
                {"type": "tool", "id": "t3", "name": "read_file", "arguments": {"nope": 1}}
            ]))
        );
        let got = send_envelope(&mut c, "env", &text).await;
        assert_eq!(result(&got, "t1").status, Status::Ok);
        assert!(result(&got, "t1").content.contains("README.md"));
        assert_eq!(result(&got, "t2").content, "hello\n");
        for id in ["s1", "a1"] {
            let r = result(&got, id);
            assert_eq!(r.status, Status::Error);
            assert_eq!(r.error.as_ref().unwrap().kind, ErrorType::UnsupportedAction);
        }
        assert_eq!(
            result(&got, "x1").error.as_ref().unwrap().kind,
            ErrorType::ToolNotFound
        );
        assert_eq!(
            result(&got, "t3").error.as_ref().unwrap().kind,
            ErrorType::InvalidParams
        );
        // batch_done (tool actions), then envelope_done (every action, in order), last.
        let n = got.len();
        assert_eq!(
            got[n - 2],
            ServerMessage::BatchDone {
                id: "env".into(),
                ids: vec!["t1".into(), "t2".into(), "x1".into(), "t3".into()]
            }
        );
        assert_eq!(
            got[n - 1],
            ServerMessage::EnvelopeDone {
                id: "env".into(),
                assistant_text: "Let me look around.\nThat is all.".into(),
                ids: ["t1", "s1", "t2", "a1", "x1", "t3"]
                    .iter()
                    .map(|&i| i.into())
                    .collect()
            }
        );
        assert_eq!(results(&got).len(), 6, "one result per action");
        // The audit log has the tool calls like any batch's.
        let audit = std::fs::read_to_string(s.ws().join(".toolvisor/audit.jsonl")).unwrap();
        assert!(audit.contains(":t2\""), "the read is audited");
    });
}

#[test]
fn legacy_write_and_edit_are_staged_as_previews() {
    // In auto mode write_file would ask; its preview (low risk) runs without asking.
    let s = Server::start("");
    s.write("a.txt", "one\n");
    block(T, async {
        let mut c = s.client().await;
        let text = "```yips-tools\n".to_owned()
            + &json!({
                "assistant_text": "Staging.",
                "tool_calls": [
                    {"id": "w1", "name": "write_file", "arguments": {"path": "new.txt", "content": "fresh\n"}},
                    {"id": "e1", "name": "edit_file", "arguments": {"path": "a.txt", "edits": [{"target": "one", "replacement": "two"}]}},
                    {"id": "l1", "name": "list_dir", "arguments": {"path": "."}}
                ],
                "skill_calls": [{"id": "s1", "name": "search"}],
                "subagent_calls": [{"id": "a1", "task": "x", "max_rounds": 2}]
            })
            .to_string()
            + "\n```";
        let got = send_envelope(&mut c, "leg", &text).await;
        for id in ["w1", "e1"] {
            let r = result(&got, id);
            assert_eq!(r.status, Status::Ok, "{r:?}");
            assert_eq!(r.meta["legacyTranslated"], json!(true), "{r:?}");
            assert!(
                r.meta["token"].as_str().is_some_and(|t| !t.is_empty()),
                "{r:?}"
            );
            assert!(r.meta["diff"].as_str().is_some(), "{r:?}");
        }
        assert!(result(&got, "l1").meta.get("legacyTranslated").is_none());
        assert!(!s.ws().join("new.txt").exists(), "nothing was written");
        assert_eq!(
            std::fs::read_to_string(s.ws().join("a.txt")).unwrap(),
            "one\n"
        );
        let Some(ServerMessage::EnvelopeDone {
            assistant_text,
            ids,
            ..
        }) = got.last()
        else {
            panic!("{got:?}")
        };
        assert_eq!(assistant_text, "Staging.");
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        assert_eq!(ids, ["w1", "e1", "l1", "s1", "a1"]);
        // The token applies exactly the staged change.
        let token = result(&got, "w1").meta["token"]
            .as_str()
            .unwrap()
            .to_owned();
        let audit = std::fs::read_to_string(s.ws().join(".toolvisor/audit.jsonl")).unwrap();
        assert!(
            audit.contains("\"tool\":\"preview_write_file\""),
            "decided as the preview it is"
        );
        drop(c);
        let out = toolvisor(
            s.ws(),
            &[
                "call",
                "apply_file_change",
                &json!({"token": token}).to_string(),
            ],
        );
        // apply_file_change is medium risk, but an edit inside the workspace is confined:
        // it runs without asking (`[policy] confined`), and the audit says why.
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(s.ws().join("new.txt").exists());
        let audit = std::fs::read_to_string(s.ws().join(".toolvisor/audit.jsonl")).unwrap();
        assert!(audit.contains("\"decision\":\"confined\""), "{audit}");
    });
}

#[test]
fn malformed_envelopes_are_refused_whole_and_nothing_runs() {
    let s = Server::start(ALLOW_ALL);
    let touch = |id: &str| json!({"type": "tool", "id": id, "name": "run_command", "arguments": {"command": format!("touch ran-{id}")}});
    let cases = [
        (
            format!(
                "{}\n{}",
                agent(json!([touch("a")])),
                agent(json!([touch("b")]))
            ),
            "exactly one",
        ),
        (
            "```yips-agent\n{\"actions\": [\n```".to_owned(),
            "not valid JSON",
        ),
        (
            agent(json!([touch("d"), touch("d")])),
            "used more than once",
        ),
        (
            agent(json!([touch("e"), {"type": "tool", "name": "ls", "arguments": {"path": "."}}])),
            "has no `id`",
        ),
        (
            agent(json!([touch("f"), {"type": "tool", "id": "g"}])),
            "has no `name`",
        ),
        ("```yips-tools\n[1, 2]\n```".to_owned(), "JSON object"),
        (
            format!("```yips-agent\n{}\n", json!({"actions": [touch("h")]})),
            "not closed",
        ),
    ];
    block(T, async {
        let mut c = s.client().await;
        for (i, (text, needle)) in cases.iter().enumerate() {
            let id = format!("bad{i}");
            let got = send_envelope(&mut c, &id, text).await;
            assert_eq!(got.len(), 1, "only the error: {got:?}");
            let ServerMessage::Error {
                id: Some(eid),
                error,
            } = &got[0]
            else {
                panic!("{got:?}")
            };
            assert_eq!(*eid, Id::from(id.as_str()));
            assert_eq!(error.kind, ErrorType::BadEnvelope);
            assert!(
                error.message.contains(needle),
                "{}: {}",
                needle,
                error.message
            );
        }
        // Nothing ran, and the connection serves on.
        let r = call_on(&mut c, "after", "ls", json!({"path": "."})).await;
        assert_eq!(r.status, Status::Ok);
        assert!(!r.content.contains("ran-"), "{}", r.content);
    });
}

#[test]
fn ten_thousand_actions_are_refused_in_bounded_memory() {
    let s = Server::start(ASKING);
    let actions: Vec<Value> = (0..10_000)
        .map(|i| json!({"type": "tool", "id": format!("t{i}"), "name": "read_file", "arguments": {"path": "x"}}))
        .collect();
    let text = agent(json!(actions));
    block(T, async {
        let before = rss_bytes(s.pid()).unwrap_or(0);
        let mut c = s.client().await;
        for round in 0..3 {
            let got = send_envelope(&mut c, &format!("big{round}"), &text).await;
            let [ServerMessage::Error { error, .. }] = got.as_slice() else {
                panic!("{got:?}")
            };
            assert_eq!(error.kind, ErrorType::BadEnvelope);
            assert!(
                error.message.contains("10000 actions") && error.message.contains("at most 64"),
                "{}",
                error.message
            );
        }
        let after = rss_bytes(s.pid()).unwrap_or(0);
        assert!(after < before + (64 << 20), "{before} → {after}");
        // An envelope within the bound still runs in the same connection.
        let small: Vec<Value> = (0..64)
            .map(|i| json!({"type": "tool", "id": format!("s{i}"), "name": "ls", "arguments": {"path": "."}}))
            .collect();
        let got = send_envelope(&mut c, "small", &agent(json!(small))).await;
        assert_eq!(results(&got).len(), 64);
        assert!(
            matches!(got.last(), Some(ServerMessage::EnvelopeDone { ids, .. }) if ids.len() == 64)
        );
    });
}

#[test]
fn an_envelope_id_shares_the_connections_id_space() {
    let s = Server::start(ASKING);
    block(T, async {
        let mut c = s.client().await;
        // An action whose id is the envelope's own is refused like a batch call's.
        let got = send_envelope(
            &mut c,
            "same",
            &agent(json!([
                {"type": "tool", "id": "same", "name": "ls", "arguments": {"path": "."}},
                {"type": "tool", "id": "other", "name": "ls", "arguments": {"path": "."}}
            ])),
        )
        .await;
        assert!(got.iter().any(|m| matches!(m, ServerMessage::Error { error, .. } if error.kind == ErrorType::DuplicateCallId)));
        assert_eq!(results(&got).len(), 1);
        let Some(ServerMessage::EnvelopeDone { ids, .. }) = got.last() else {
            panic!("{got:?}")
        };
        assert_eq!(ids.len(), 2, "envelope_done lists every action");
    });
}
