//! The policy engine end to end (docs/PROTOCOL.md `confirm_required` / `confirm` /
//! `grant` / `subscribe`, docs/POLICY.md): decisions, confirmations from the asking or another connection,
//! replay, remembered approvals, timeouts, cancels, grant tokens, modes, compound shell
//! commands, `meta.policy` and the audit records of allowed and denied calls.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolvisor_protocol::client::Client;
use toolvisor_protocol::message::{Remember, Topic};
use toolvisor_protocol::{
    CallRequest, ClientMessage, ErrorType, Id, ServerMessage, Status, ToolResult,
};

use crate::harness::*;

/// Every wait in these tests: a policy test is a handful of round trips.
const FAST: Duration = Duration::from_secs(5);

/// Commands starting with `echo ` run; anything else asks (run_command has no default allow).
const ECHO_ONLY: &str = r#"
[[policy.rules]]
tool = "run_command"
action = "allow"
conditions = [{ param = "command", operator = "startsWith", value = "echo " }]
"#;

/// The fields of one `confirm_required` (message or event).
#[derive(Debug)]
struct Asked {
    id: Id,
    interaction: String,
    tool: String,
    description: String,
    risk: String,
    locations: Vec<String>,
    preview: Option<String>,
    expires_in_ms: u64,
}

impl Asked {
    fn from_message(m: &ServerMessage) -> Option<Asked> {
        match m {
            ServerMessage::ConfirmRequired {
                id,
                interaction,
                tool,
                description,
                risk,
                locations,
                preview,
                expires_in_ms,
            } => Some(Asked {
                id: id.clone(),
                interaction: interaction.clone(),
                tool: tool.clone(),
                description: description.clone(),
                risk: risk.clone(),
                locations: locations.clone(),
                preview: preview.clone(),
                expires_in_ms: *expires_in_ms,
            }),
            _ => None,
        }
    }

    /// A `confirmations` event `confirm_required` carries the same fields as the message.
    fn from_event(m: &ServerMessage) -> Option<Asked> {
        let ServerMessage::Event {
            topic: Topic::Confirmations,
            event,
            fields,
            ..
        } = m
        else {
            return None;
        };
        if event != "confirm_required" {
            return None;
        }
        let mut fields = fields.clone();
        fields.insert("type".into(), json!("confirm_required"));
        let msg: ServerMessage = serde_json::from_value(Value::Object(fields.clone()))
            .unwrap_or_else(|e| {
                panic!("confirm_required event lacks fields of the message ({e}): {fields:?}")
            });
        Asked::from_message(&msg)
    }
}

async fn interactive(s: &Server, name: &str) -> Client {
    Client::connect(&s.socket(), name, true)
        .await
        .expect("connect interactive")
}

fn run(command: &str) -> Value {
    json!({ "command": command })
}

async fn send_call(c: &mut Client, id: &str, tool: &str, args: Value, token: Option<&str>) {
    let mut req = CallRequest::new(id, tool, args);
    req.confirm_token = token.map(str::to_owned);
    c.send(&ClientMessage::Call(req)).await.expect("send call");
}

/// The `confirm_required` of call `id`; panics if the call's result comes first.
async fn asked(c: &mut Client, id: &str) -> Asked {
    let id: Id = id.into();
    let (_, m) = c
        .recv_matching(|m| match m {
            ServerMessage::ConfirmRequired { id: i, .. } if *i == id => Some(()),
            ServerMessage::Result(r) if r.id == id => Some(()),
            _ => None,
        })
        .await
        .expect("confirm_required or result");
    Asked::from_message(&m).unwrap_or_else(|| panic!("call {id} was not asked about: {m:?}"))
}

/// The result of call `id`; panics if the call asks first.
async fn result_without_asking(c: &mut Client, id: &str) -> ToolResult {
    let id: Id = id.into();
    let (_, m) = c
        .recv_matching(|m| match m {
            ServerMessage::ConfirmRequired { id: i, .. } if *i == id => Some(()),
            ServerMessage::Result(r) if r.id == id => Some(()),
            _ => None,
        })
        .await
        .expect("confirm_required or result");
    match m {
        ServerMessage::Result(r) => r,
        other => panic!("call {id} asked although it should not: {other:?}"),
    }
}

/// Send `confirm` and return the answer to it (`confirmed` or an `UnknownInteraction` error).
async fn confirm(
    c: &mut Client,
    interaction: &str,
    approve: bool,
    remember: Option<Remember>,
) -> ServerMessage {
    c.send(&ClientMessage::Confirm {
        interaction: interaction.to_owned(),
        approve,
        remember,
    })
    .await
    .expect("send confirm");
    let want = interaction.to_owned();
    let (_, m) = c
        .recv_matching(|m| match m {
            ServerMessage::Confirmed { interaction, .. } if *interaction == want => Some(()),
            ServerMessage::Error { error, .. } if error.kind == ErrorType::UnknownInteraction => {
                Some(())
            }
            _ => None,
        })
        .await
        .expect("an answer to confirm");
    m
}

async fn subscribe_confirmations(c: &mut Client, id: &str) {
    let id: Id = id.into();
    let m = c
        .request(
            &ClientMessage::Subscribe {
                id: id.clone(),
                topics: vec![Topic::Confirmations],
            },
            &id,
        )
        .await
        .expect("subscribe");
    assert_eq!(m, ServerMessage::Subscribed { id });
}

pub(crate) async fn grant(
    c: &mut Client,
    id: &str,
    tools: &[&str],
    reusable: bool,
) -> (String, String) {
    let rid: Id = id.into();
    let msg = ClientMessage::Grant {
        id: rid.clone(),
        tools: tools.iter().map(|t| t.to_string()).collect(),
        trace_id: None,
        paths: None,
        ttl_ms: 60_000,
        reusable: reusable.then_some(true),
    };
    match c.request(&msg, &rid).await.expect("grant") {
        ServerMessage::Token {
            id,
            token,
            expires_at,
        } => {
            assert_eq!(id, rid);
            (token, expires_at)
        }
        other => panic!("grant answered {other:?}"),
    }
}

#[track_caller]
fn assert_denied(r: &ToolResult, kind: ErrorType) {
    assert_eq!(r.status, Status::Denied, "{r:?}");
    assert_eq!(r.error.as_ref().map(|e| e.kind), Some(kind), "{r:?}");
}

fn message(r: &ToolResult) -> &str {
    r.error.as_ref().map_or("", |e| e.message.as_str())
}

fn exists(ws: &Path, rel: &str) -> bool {
    ws.join(rel).exists()
}

fn records_of<'a>(all: &'a [Value], call_id: &str) -> Vec<&'a Value> {
    all.iter()
        .filter(|r| r["call_id"] == json!(call_id))
        .collect()
}

#[test]
fn non_interactive_ask_is_denied_with_how_to_allow_and_nothing_runs() {
    let s = Server::start(&format!("{ASKING}{ECHO_ONLY}"));
    block(FAST, async {
        let r = s.call("run_command", run("touch marker")).await;
        assert_denied(&r, ErrorType::ConfirmationRequired);
        let msg = message(&r);
        // Names the rule that would allow it, and the grant that would pass it once.
        assert!(
            msg.contains("[[policy.rules]]") && msg.contains("run_command"),
            "{msg}"
        );
        assert!(msg.contains("touch"), "{msg}");
        assert!(
            msg.contains("grant") && msg.contains("confirm_token"),
            "{msg}"
        );
        assert!(!exists(s.ws(), "marker"), "an unconfirmed command ran");
        assert_eq!(r.meta["policy"]["decision"], json!("ask"), "{r:?}");

        // The allow rule still works on the same server.
        let r = s.call("run_command", run("echo hi")).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.content, "hi\n");
    });
}

#[test]
fn interactive_approve_runs_and_deny_does_not() {
    let s = Server::start(&format!("{ASKING}{ECHO_ONLY}"));
    block(FAST, async {
        let mut c = interactive(&s, "agent").await;
        send_call(&mut c, "c1", "run_command", run("touch marker"), None).await;
        let q = asked(&mut c, "c1").await;
        assert_eq!(q.id, Id::from("c1"));
        assert!(!q.interaction.is_empty(), "{q:?}");
        assert_eq!(q.tool, "run_command");
        assert!(q.description.contains("touch marker"), "{q:?}");
        assert_eq!(q.risk, "high", "{q:?}");
        assert_eq!(q.locations, vec![".".to_string()], "{q:?}");
        assert_eq!(q.preview.as_deref(), Some("touch marker"), "{q:?}");
        assert!(q.expires_in_ms > 0 && q.expires_in_ms <= 60_000, "{q:?}");
        assert!(!exists(s.ws(), "marker"), "ran before the answer");

        // confirmed, then the call runs and its result comes.
        c.send(&ClientMessage::Confirm {
            interaction: q.interaction.clone(),
            approve: true,
            remember: None,
        })
        .await
        .unwrap();
        let m = c.recv().await.expect("confirmed");
        assert_eq!(
            m,
            ServerMessage::Confirmed {
                interaction: q.interaction.clone(),
                approve: true
            }
        );
        let m = c.recv().await.expect("result");
        let ServerMessage::Result(r) = m else {
            panic!("expected the result after confirmed, got {m:?}")
        };
        assert_eq!(r.id, Id::from("c1"));
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(exists(s.ws(), "marker"), "approved command did not run");
        assert_eq!(r.meta["policy"]["decision"], json!("allow"), "{r:?}");

        // A "no" → PolicyDenied, nothing runs.
        send_call(&mut c, "c2", "run_command", run("touch other"), None).await;
        let q2 = asked(&mut c, "c2").await;
        assert_ne!(q2.interaction, q.interaction, "interaction ids are unique");
        assert_eq!(q2.preview.as_deref(), Some("touch other"));
        let m = confirm(&mut c, &q2.interaction, false, None).await;
        assert_eq!(
            m,
            ServerMessage::Confirmed {
                interaction: q2.interaction.clone(),
                approve: false
            }
        );
        let r = result_of(&mut c, "c2").await;
        assert_denied(&r, ErrorType::PolicyDenied);
        assert!(!exists(s.ws(), "other"), "a declined command ran");

        // A finished interaction cannot be answered again.
        let m = confirm(&mut c, &q.interaction, true, None).await;
        assert!(
            matches!(&m, ServerMessage::Error { error, .. } if error.kind == ErrorType::UnknownInteraction),
            "{m:?}"
        );

        // The audit log tells the story of both calls.
        let all = audit_log(s.ws());
        let recs = records_of(&all, &format!("{}:c1", c.session));
        let kinds: Vec<&str> = recs.iter().filter_map(|r| r["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            vec![
                "confirm_requested",
                "confirm_answered",
                "requested",
                "completed"
            ],
            "{recs:?}"
        );
        assert_eq!(recs[1]["answer"], json!("approved"), "{}", recs[1]);
        assert_eq!(recs[3]["status"], json!("ok"), "{}", recs[3]);
        let recs = records_of(&all, &format!("{}:c2", c.session));
        let kinds: Vec<&str> = recs.iter().filter_map(|r| r["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            vec!["confirm_requested", "confirm_answered", "rejected"],
            "{recs:?}"
        );
        assert_eq!(recs[2]["error_type"], json!("PolicyDenied"), "{}", recs[2]);
    });
}

#[test]
fn a_second_connection_of_the_same_uid_approves() {
    let s = Server::start(&format!("{ASKING}{ECHO_ONLY}"));
    block(FAST, async {
        let mut approver = s.client().await;
        subscribe_confirmations(&mut approver, "sub").await;

        let mut agent = interactive(&s, "agent").await;
        send_call(&mut agent, "c1", "run_command", run("touch marker"), None).await;
        let q = asked(&mut agent, "c1").await;

        let (_, ev) = approver
            .recv_matching(|m| Asked::from_event(m).map(|_| ()))
            .await
            .expect("confirm_required event");
        let e = Asked::from_event(&ev).unwrap();
        assert_eq!(e.interaction, q.interaction);
        assert_eq!(e.id, Id::from("c1"));
        assert_eq!(e.tool, "run_command");
        assert_eq!(e.preview.as_deref(), Some("touch marker"));
        assert_eq!(e.risk, "high");
        assert_eq!(e.locations, vec![".".to_string()]);
        assert!(e.description.contains("touch marker"), "{e:?}");
        assert!(!exists(s.ws(), "marker"));

        let m = confirm(&mut approver, &e.interaction, true, None).await;
        assert_eq!(
            m,
            ServerMessage::Confirmed {
                interaction: q.interaction.clone(),
                approve: true
            }
        );
        let r = result_of(&mut agent, "c1").await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(
            exists(s.ws(), "marker"),
            "approved from another connection, yet it did not run"
        );

        // The subscriber hears the answer too.
        confirm_answered_event(&mut approver, &q.interaction).await;
    });
}

/// The `confirm_answered` event of `interaction` on a `confirmations` subscriber.
async fn confirm_answered_event(
    c: &mut Client,
    interaction: &str,
) -> serde_json::Map<String, Value> {
    let want = json!(interaction);
    let (_, ev) = c
        .recv_matching(|m| match m {
            ServerMessage::Event {
                topic: Topic::Confirmations,
                event,
                fields,
                ..
            } if event == "confirm_answered" && fields.get("interaction") == Some(&want) => {
                Some(())
            }
            _ => None,
        })
        .await
        .expect("confirm_answered event");
    let ServerMessage::Event { fields, .. } = ev else {
        unreachable!()
    };
    fields
}

#[test]
fn confirm_answered_event_carries_approve() {
    let s = Server::start(&format!("{ASKING}{ECHO_ONLY}"));
    block(FAST, async {
        let mut watcher = s.client().await;
        subscribe_confirmations(&mut watcher, "sub").await;
        let mut agent = interactive(&s, "agent").await;
        for (id, approve) in [("c1", true), ("c2", false)] {
            send_call(
                &mut agent,
                id,
                "run_command",
                run("echo -n; touch marker"),
                None,
            )
            .await;
            let q = asked(&mut agent, id).await;
            confirm(&mut agent, &q.interaction, approve, None).await;
            result_of(&mut agent, id).await;
            let fields = confirm_answered_event(&mut watcher, &q.interaction).await;
            assert_eq!(fields.get("approve"), Some(&json!(approve)), "{fields:?}");
        }
    });
}

#[test]
fn audit_confirm_answered_uses_the_documented_words() {
    let s = Server::start(&format!(
        "[policy]\nconfined = \"ask\"\nconfirm_timeout_ms = 300\n{ECHO_ONLY}"
    ));
    block(FAST, async {
        let mut agent = interactive(&s, "agent").await;
        let session = agent.session.clone();
        send_call(&mut agent, "no", "run_command", run("touch marker"), None).await;
        let q = asked(&mut agent, "no").await;
        confirm(&mut agent, &q.interaction, false, None).await;
        assert_denied(&result_of(&mut agent, "no").await, ErrorType::PolicyDenied);
        send_call(&mut agent, "late", "run_command", run("touch marker"), None).await;
        asked(&mut agent, "late").await;
        assert_denied(
            &result_of(&mut agent, "late").await,
            ErrorType::ConfirmationTimeout,
        );

        let all = audit_log(s.ws());
        for (id, word) in [("no", "denied"), ("late", "timeout")] {
            let call_id = format!("{session}:{id}");
            let recs = records_of(&all, &call_id);
            let answered = recs
                .iter()
                .find(|r| r["kind"] == json!("confirm_answered"))
                .unwrap_or_else(|| panic!("no confirm_answered for {call_id}: {recs:?}"));
            assert_eq!(answered["answer"], json!(word), "{answered}");
        }
    });
}

#[test]
fn subscribing_late_replays_pending_questions_first() {
    let s = Server::start(&format!("{ASKING}{ECHO_ONLY}"));
    block(FAST, async {
        let mut agent = interactive(&s, "agent").await;
        send_call(&mut agent, "c1", "run_command", run("touch marker"), None).await;
        let q = asked(&mut agent, "c1").await;

        let mut late = s.client().await;
        subscribe_confirmations(&mut late, "sub").await;
        let first = late.recv().await.expect("replayed event");
        let e = Asked::from_event(&first).unwrap_or_else(|| {
            panic!("first message after subscribed is not the replayed confirm_required: {first:?}")
        });
        assert_eq!(e.interaction, q.interaction);
        assert_eq!(e.id, Id::from("c1"));
        assert_eq!(e.tool, "run_command");
        assert_eq!(e.preview.as_deref(), Some("touch marker"));
        assert_eq!(e.risk, "high");
        assert!(e.expires_in_ms <= q.expires_in_ms, "{e:?} vs {q:?}");

        let m = confirm(&mut late, &e.interaction, false, None).await;
        assert_eq!(
            m,
            ServerMessage::Confirmed {
                interaction: q.interaction.clone(),
                approve: false
            }
        );
        let r = result_of(&mut agent, "c1").await;
        assert_denied(&r, ErrorType::PolicyDenied);
        assert!(!exists(s.ws(), "marker"));
    });
}

#[test]
fn remember_session_approves_the_same_call_only_in_that_session() {
    let s = Server::start(&format!("{ASKING}{ECHO_ONLY}"));
    block(FAST, async {
        let mut c = interactive(&s, "agent").await;
        send_call(&mut c, "c1", "run_command", run("touch marker"), None).await;
        let q = asked(&mut c, "c1").await;
        let m = confirm(&mut c, &q.interaction, true, Some(Remember::Session)).await;
        assert_eq!(
            m,
            ServerMessage::Confirmed {
                interaction: q.interaction.clone(),
                approve: true
            }
        );
        let r = result_of(&mut c, "c1").await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        std::fs::remove_file(s.ws().join("marker")).expect("marker was created");

        // The same call again: no question, it runs.
        send_call(&mut c, "c2", "run_command", run("touch marker"), None).await;
        let r = result_without_asking(&mut c, "c2").await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(exists(s.ws(), "marker"), "remembered call did not run");

        // A different command still asks.
        send_call(&mut c, "c3", "run_command", run("touch other"), None).await;
        let q3 = asked(&mut c, "c3").await;
        assert_eq!(q3.preview.as_deref(), Some("touch other"));
        confirm(&mut c, &q3.interaction, false, None).await;
        assert_denied(&result_of(&mut c, "c3").await, ErrorType::PolicyDenied);

        // Another session is still asked about the remembered call.
        let mut d = interactive(&s, "other-agent").await;
        send_call(&mut d, "d1", "run_command", run("touch marker"), None).await;
        let qd = asked(&mut d, "d1").await;
        confirm(&mut d, &qd.interaction, false, None).await;
        assert_denied(&result_of(&mut d, "d1").await, ErrorType::PolicyDenied);
    });
}

#[test]
fn unanswered_confirmation_times_out() {
    let s = Server::start(&format!(
        "[policy]\nconfined = \"ask\"\nconfirm_timeout_ms = 300\n{ECHO_ONLY}"
    ));
    block(FAST, async {
        let mut c = interactive(&s, "agent").await;
        let t0 = Instant::now();
        send_call(&mut c, "c1", "run_command", run("touch marker"), None).await;
        let q = asked(&mut c, "c1").await;
        assert!(q.expires_in_ms > 0 && q.expires_in_ms <= 300, "{q:?}");
        let r = result_of(&mut c, "c1").await;
        assert_denied(&r, ErrorType::ConfirmationTimeout);
        assert!(
            t0.elapsed() >= Duration::from_millis(250),
            "timed out too early: {:?}",
            t0.elapsed()
        );
        assert!(!exists(s.ws(), "marker"));
        // The question is finished: a late answer is refused.
        let m = confirm(&mut c, &q.interaction, true, None).await;
        assert!(
            matches!(&m, ServerMessage::Error { error, .. } if error.kind == ErrorType::UnknownInteraction),
            "{m:?}"
        );
        assert!(!exists(s.ws(), "marker"));
    });
}

#[test]
fn cancel_while_waiting_for_confirmation() {
    let s = Server::start(&format!("{ASKING}{ECHO_ONLY}"));
    block(FAST, async {
        let mut c = interactive(&s, "agent").await;
        send_call(&mut c, "c1", "run_command", run("touch marker"), None).await;
        let q = asked(&mut c, "c1").await;
        c.send(&ClientMessage::Cancel { id: "c1".into() })
            .await
            .unwrap();
        let r = result_of(&mut c, "c1").await;
        assert_eq!(r.status, Status::Cancelled, "{r:?}");
        assert_eq!(
            r.error.as_ref().map(|e| e.kind),
            Some(ErrorType::Cancelled),
            "{r:?}"
        );
        let m = confirm(&mut c, &q.interaction, true, None).await;
        assert!(
            matches!(&m, ServerMessage::Error { error, .. } if error.kind == ErrorType::UnknownInteraction),
            "{m:?}"
        );
        assert!(!exists(s.ws(), "marker"), "a cancelled call ran");
    });
}

#[test]
fn grant_tokens_pass_an_ask_once_unless_reusable() {
    let s = Server::start(&format!("{ASKING}{ECHO_ONLY}"));
    block(FAST, async {
        let mut c = s.client().await;
        let (token, expires_at) = grant(&mut c, "g1", &["run_command"], false).await;
        assert!(!token.is_empty());
        assert!(
            expires_at.contains('T') && expires_at.ends_with('Z'),
            "RFC 3339 UTC: {expires_at}"
        );

        send_call(
            &mut c,
            "c1",
            "run_command",
            run("touch marker"),
            Some(&token),
        )
        .await;
        let r = result_of(&mut c, "c1").await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(exists(s.ws(), "marker"));

        // Single use.
        send_call(
            &mut c,
            "c2",
            "run_command",
            run("touch second"),
            Some(&token),
        )
        .await;
        let r = result_of(&mut c, "c2").await;
        assert_denied(&r, ErrorType::TokenInvalid);
        assert!(message(&r).contains("already used"), "{r:?}");
        assert!(!exists(s.ws(), "second"));

        // A token for another tool: TokenInvalid naming the tool, and it is not spent.
        let (token2, _) = grant(&mut c, "g2", &["run_command"], false).await;
        send_call(
            &mut c,
            "c3",
            "write_file",
            json!({"path": "w.txt", "content": "x"}),
            Some(&token2),
        )
        .await;
        let r = result_of(&mut c, "c3").await;
        assert_denied(&r, ErrorType::TokenInvalid);
        assert!(message(&r).contains("write_file"), "{r:?}");
        assert!(!exists(s.ws(), "w.txt"));
        send_call(
            &mut c,
            "c4",
            "run_command",
            run("touch third"),
            Some(&token2),
        )
        .await;
        let r = result_of(&mut c, "c4").await;
        assert_eq!(
            r.status,
            Status::Ok,
            "the token was spent by a call it did not fit: {r:?}"
        );
        assert!(exists(s.ws(), "third"));

        // Reusable.
        let (token3, _) = grant(&mut c, "g3", &["run_command"], true).await;
        for (id, file) in [("c5", "r1"), ("c6", "r2")] {
            send_call(
                &mut c,
                id,
                "run_command",
                run(&format!("touch {file}")),
                Some(&token3),
            )
            .await;
            let r = result_of(&mut c, id).await;
            assert_eq!(r.status, Status::Ok, "{r:?}");
            assert!(exists(s.ws(), file));
        }
    });
}

#[test]
fn a_grant_that_cannot_be_honoured_is_a_bad_message_with_its_id() {
    let s = Server::start(&format!("{ASKING}{ECHO_ONLY}"));
    block(FAST, async {
        let mut c = s.client().await;
        let grant_of =
            |id: &str, tools: &[&str], paths: Option<Vec<String>>, ttl_ms| ClientMessage::Grant {
                id: id.into(),
                tools: tools.iter().map(|t| t.to_string()).collect(),
                trace_id: None,
                paths,
                ttl_ms,
                reusable: None,
            };
        for (id, msg, says) in [
            ("g1", grant_of("g1", &[], None, 60_000), "tools"),
            ("g2", grant_of("g2", &["nosuch"], None, 60_000), "nosuch"),
            ("g3", grant_of("g3", &["run_command"], None, 0), "ttl_ms"),
            (
                "g4",
                grant_of("g4", &["ls"], Some(vec!["../../etc".into()]), 60_000),
                "../../etc",
            ),
        ] {
            let rid: Id = id.into();
            match c.request(&msg, &rid).await.expect("grant") {
                ServerMessage::Error { id, error } => {
                    assert_eq!(id, Some(rid), "{error:?}");
                    assert_eq!(error.kind, ErrorType::BadMessage, "{error:?}");
                    assert!(error.message.contains(says), "{error:?}");
                }
                other => panic!("grant {id} answered {other:?}"),
            }
        }
        // The connection goes on, and a valid grant still gets its token.
        let (token, _) = grant(&mut c, "g5", &["run_command"], false).await;
        send_call(
            &mut c,
            "c1",
            "run_command",
            run("touch granted"),
            Some(&token),
        )
        .await;
        let r = result_of(&mut c, "c1").await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(exists(s.ws(), "granted"));
    });
}

#[test]
fn a_deny_rule_beats_a_token() {
    let s = Server::start(
        r#"
[[policy.rules]]
tool = "run_command"
action = "deny"
message = "no touching"
conditions = [{ param = "command", operator = "startsWith", value = "touch " }]

[[policy.rules]]
tool = "run_command"
action = "allow"
conditions = [{ param = "command", operator = "startsWith", value = "echo " }]
"#,
    );
    block(FAST, async {
        let mut c = s.client().await;
        let (token, _) = grant(&mut c, "g1", &["run_command"], false).await;
        send_call(
            &mut c,
            "c1",
            "run_command",
            run("touch marker"),
            Some(&token),
        )
        .await;
        let r = result_of(&mut c, "c1").await;
        assert_denied(&r, ErrorType::PolicyDenied);
        assert!(message(&r).contains("no touching"), "{r:?}");
        assert_eq!(r.meta["policy"]["decision"], json!("deny"), "{r:?}");
        assert_eq!(r.meta["policy"]["rule"], json!("policy.rules[0]"), "{r:?}");
        assert!(!exists(s.ws(), "marker"));

        // The deny did not spend the single-use token: it still passes an ask.
        send_call(&mut c, "c2", "run_command", run("mkdir made"), Some(&token)).await;
        let r = result_of(&mut c, "c2").await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(exists(s.ws(), "made"));
    });
}

#[test]
fn yolo_allows_edits_but_not_commands_and_deny_still_wins() {
    let s = Server::start(
        r#"
[policy]
confined = "ask"
mode = "yolo"

[[policy.rules]]
tool = "write_file"
action = "deny"
conditions = [{ param = "path", operator = "startsWith", value = "locked/" }]

[[policy.rules]]
tool = "run_command"
action = "allow"
conditions = [{ param = "command", operator = "startsWith", value = "echo " }]
"#,
    );
    block(FAST, async {
        let r = s
            .call("write_file", json!({"path": "free.txt", "content": "ok\n"}))
            .await;
        assert_eq!(r.status, Status::Ok, "yolo asked for write_file: {r:?}");
        assert_eq!(
            std::fs::read_to_string(s.ws().join("free.txt")).unwrap(),
            "ok\n"
        );

        let r = s
            .call(
                "write_file",
                json!({"path": "locked/x.txt", "content": "no\n"}),
            )
            .await;
        assert_denied(&r, ErrorType::PolicyDenied);
        assert!(!exists(s.ws(), "locked/x.txt"));

        let r = s.call("run_command", run("touch marker")).await;
        assert_denied(&r, ErrorType::ConfirmationRequired);
        assert!(!exists(s.ws(), "marker"));
    });
}

#[test]
fn ask_mode_asks_even_for_read_file() {
    let s = Server::start("[policy]\nmode = \"ask\"\n");
    s.write("a.txt", "hello\n");
    block(FAST, async {
        let r = s.call("read_file", json!({"path": "a.txt"})).await;
        assert_denied(&r, ErrorType::ConfirmationRequired);

        let mut c = interactive(&s, "agent").await;
        send_call(&mut c, "c1", "read_file", json!({"path": "a.txt"}), None).await;
        let q = asked(&mut c, "c1").await;
        assert_eq!(q.tool, "read_file");
        assert_eq!(q.risk, "low");
        assert_eq!(q.locations, vec!["a.txt".to_string()]);
        confirm(&mut c, &q.interaction, true, None).await;
        let r = result_of(&mut c, "c1").await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.content, "hello\n");
    });
}

#[test]
fn edits_ask_in_auto_mode_with_the_diff_as_preview() {
    let s = Server::start("[policy]\nconfined = \"ask\"\nmode = \"auto\"\n");
    s.write("old.txt", "alpha\nbeta\n");
    block(FAST, async {
        let r = s
            .call(
                "write_file",
                json!({"path": "new.txt", "content": "hello edit\n"}),
            )
            .await;
        assert_denied(&r, ErrorType::ConfirmationRequired);
        assert!(!exists(s.ws(), "new.txt"));

        let mut c = interactive(&s, "agent").await;
        send_call(
            &mut c,
            "c1",
            "write_file",
            json!({"path": "new.txt", "content": "hello edit\n"}),
            None,
        )
        .await;
        let q = asked(&mut c, "c1").await;
        assert_eq!(q.tool, "write_file");
        assert_eq!(q.risk, "medium");
        assert_eq!(q.locations, vec!["new.txt".to_string()]);
        let preview = q
            .preview
            .clone()
            .expect("an edit's question carries its diff");
        assert!(preview.contains("+hello edit"), "{preview}");
        assert!(!exists(s.ws(), "new.txt"), "the preview wrote the file");
        confirm(&mut c, &q.interaction, true, None).await;
        let r = result_of(&mut c, "c1").await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(
            std::fs::read_to_string(s.ws().join("new.txt")).unwrap(),
            "hello edit\n"
        );

        send_call(
            &mut c,
            "c2",
            "edit_file",
            json!({"path": "old.txt", "edits": [{"target": "beta", "replacement": "gamma"}]}),
            None,
        )
        .await;
        let q = asked(&mut c, "c2").await;
        assert_eq!(q.tool, "edit_file");
        let preview = q.preview.clone().expect("diff");
        assert!(
            preview.contains("-beta") && preview.contains("+gamma"),
            "{preview}"
        );
        confirm(&mut c, &q.interaction, false, None).await;
        assert_denied(&result_of(&mut c, "c2").await, ErrorType::PolicyDenied);
        assert_eq!(
            std::fs::read_to_string(s.ws().join("old.txt")).unwrap(),
            "alpha\nbeta\n"
        );
    });
}

#[test]
fn compound_commands_need_every_part_allowed() {
    let s = Server::start(
        r#"
[policy]
confined = "ask"

[[policy.rules]]
tool = "run_command"
action = "allow"
conditions = [{ param = "command", operator = "startsWith", value = "git status" }]
"#,
    );
    block(FAST, async {
        let r = s.call("run_command", run("git status")).await;
        match r.status {
            Status::Ok => {}
            Status::Error => assert_eq!(
                r.error.as_ref().map(|e| e.kind),
                Some(ErrorType::ShellExecutionError),
                "{r:?}"
            ),
            _ => panic!("`git status` is allowed, got {r:?}"),
        }
        assert_eq!(r.meta["policy"]["decision"], json!("allow"), "{r:?}");

        for cmd in [
            "git status; touch pwned",
            "git status && touch pwned",
            "git status $(touch pwned)",
            "git status\ntouch pwned",
            "git status | sh",
            "git status > pwned",
        ] {
            let r = s.call("run_command", run(cmd)).await;
            assert_eq!(r.status, Status::Denied, "{cmd:?} was not denied: {r:?}");
            assert_eq!(
                r.error.as_ref().map(|e| e.kind),
                Some(ErrorType::ConfirmationRequired),
                "{cmd:?}: {r:?}"
            );
            assert!(!exists(s.ws(), "pwned"), "{cmd:?} created pwned");
        }
        assert!(!exists(s.ws(), "pwned"));
    });
}

#[test]
fn meta_policy_and_audit_records_of_allowed_and_denied_calls() {
    let s = Server::start(&format!("{ASKING}{ECHO_ONLY}"));
    block(FAST, async {
        let mut c = s.client().await;
        let session = c.session.clone();
        assert!(!session.is_empty());

        send_call(&mut c, "ok1", "run_command", run("echo hi"), None).await;
        let ok = result_of(&mut c, "ok1").await;
        assert_eq!(ok.status, Status::Ok, "{ok:?}");
        let p = &ok.meta["policy"];
        assert_eq!(p["decision"], json!("allow"), "{ok:?}");
        assert_eq!(p["rule"], json!("policy.rules[0]"), "{ok:?}");
        assert!(
            p["reason"].as_str().is_some_and(|r| !r.is_empty()),
            "{ok:?}"
        );

        send_call(&mut c, "no1", "run_command", run("touch marker"), None).await;
        let no = result_of(&mut c, "no1").await;
        assert_denied(&no, ErrorType::ConfirmationRequired);
        let p = &no.meta["policy"];
        assert!(
            p.get("decision").is_some() && p.get("reason").is_some() && p.get("rule").is_some(),
            "{no:?}"
        );
        assert!(
            p["reason"].as_str().is_some_and(|r| !r.is_empty()),
            "{no:?}"
        );

        let all = audit_log(s.ws());
        let ok_id = format!("{session}:ok1");
        let recs = records_of(&all, &ok_id);
        let kinds: Vec<&str> = recs.iter().filter_map(|r| r["kind"].as_str()).collect();
        assert_eq!(kinds, vec!["requested", "completed"], "{recs:?}");
        let req = recs[0];
        assert_eq!(req["tool"], json!("run_command"));
        assert_eq!(req["session"], json!(session));
        assert_eq!(req["policy"]["decision"], json!("allow"), "{req}");
        assert_eq!(req["policy"]["rule"], json!("policy.rules[0]"), "{req}");
        assert_eq!(recs[1]["status"], json!("ok"), "{}", recs[1]);
        assert_eq!(
            recs[1]["seq"],
            json!(ok.audit_seq),
            "audit_seq names the completed record"
        );

        let no_id = format!("{session}:no1");
        let recs = records_of(&all, &no_id);
        let kinds: Vec<&str> = recs.iter().filter_map(|r| r["kind"].as_str()).collect();
        assert_eq!(kinds, vec!["rejected"], "{recs:?}");
        let rej = recs[0];
        assert_eq!(rej["status"], json!("denied"), "{rej}");
        assert_eq!(rej["error_type"], json!("ConfirmationRequired"), "{rej}");
        assert_eq!(rej["tool"], json!("run_command"), "{rej}");
        assert!(rej["policy"]["decision"].is_string(), "{rej}");
        assert_eq!(
            rej["seq"],
            json!(no.audit_seq),
            "audit_seq names the rejected record"
        );
    });
}

/// A rule that denies (or asks for) a write holds for the preview-and-apply route too:
/// the apply is decided as the write it stands for.
#[test]
fn a_write_denied_by_a_rule_cannot_go_through_preview_and_apply() {
    let cfg = r#"
[policy]
confined = "ask"
mode = "workspace"

[[policy.rules]]
tool = "write_file"
action = "deny"
conditions = [{ param = "path", operator = "startsWith", value = "src/generated/" }]
"#;
    let s = Server::start(cfg);
    s.write("src/generated/gen.rs", "original\n");
    block(T, async {
        let r = s
            .call(
                "write_file",
                json!({"path": "src/generated/gen.rs", "content": "x\n", "overwrite": true}),
            )
            .await;
        assert_denied(&r, ErrorType::PolicyDenied);
        let r = s
            .call(
                "preview_write_file",
                json!({"path": "src/generated/gen.rs", "content": "pwned\n", "overwrite": true}),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "a preview changes nothing: {r:?}");
        let token = r.meta["token"].as_str().expect("meta.token").to_owned();
        let r = s.call("apply_file_change", json!({"token": token})).await;
        assert_denied(&r, ErrorType::PolicyDenied);
        assert!(message(&r).contains("write_file"), "{r:?}");
        // Elsewhere the same route still writes.
        let r = s
            .call(
                "preview_write_file",
                json!({"path": "src/ok.rs", "content": "fine\n"}),
            )
            .await;
        let token = r.meta["token"].as_str().expect("meta.token").to_owned();
        let r = s.call("apply_file_change", json!({"token": token})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
    });
    let now = std::fs::read_to_string(s.ws().join("src/generated/gen.rs")).unwrap();
    assert_eq!(now, "original\n");
}

/// Path rules and a grant's paths see where a symlink in the workspace leads.
#[test]
fn path_rules_and_grant_paths_follow_symlinks() {
    let cfg = r#"
[policy]
confined = "ask"
mode = "workspace"

[[policy.rules]]
tool = "*"
action = "deny"
conditions = [{ param = "path", operator = "startsWith", value = "src/generated/" }]
"#;
    let s = Server::start(cfg);
    s.write("src/generated/gen.rs", "original\n");
    std::os::unix::fs::symlink("generated", s.ws().join("src/gen2")).unwrap();
    block(T, async {
        for (tool, args) in [
            ("read_file", json!({"path": "src/gen2/gen.rs"})),
            (
                "write_file",
                json!({"path": "src/gen2/gen.rs", "content": "x\n", "overwrite": true}),
            ),
            (
                "edit_file",
                json!({"path": "src/gen2/gen.rs", "edits": [{"target": "original", "replacement": "x"}]}),
            ),
        ] {
            let r = s.call(tool, args).await;
            assert_denied(&r, ErrorType::PolicyDenied);
        }
    });
    let now = std::fs::read_to_string(s.ws().join("src/generated/gen.rs")).unwrap();
    assert_eq!(now, "original\n");
}

/// With the defaults (no rule at all), a command that stays inside the verified
/// sandbox runs without asking, whatever its text, and says why; its changes can be
/// undone. `confined = "ask"` brings the question back.
#[test]
fn a_confined_command_runs_without_asking_under_the_defaults() {
    let s = Server::start("");
    s.write("build/out.o", "x");
    let r = block(
        T,
        s.call(
            "run_command",
            json!({"command": "rm -rf build && echo $(echo made) > made.txt"}),
        ),
    );
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.meta["policy"]["decision"], json!("confined"), "{r:?}");
    assert!(
        r.meta["policy"]["reason"]
            .as_str()
            .unwrap_or_default()
            .starts_with("confined: ")
    );
    assert_eq!(r.meta["undo"], json!(true));
    let audit = std::fs::read_to_string(s.ws().join(".toolvisor/audit.jsonl")).unwrap();
    assert!(audit.contains("\"decision\":\"confined\""));
    let s = Server::start(ASKING);
    let r = block(T, s.call("run_command", json!({"command": "echo hi"})));
    assert_eq!(r.status, Status::Denied, "{r:?}");
}
