//! `toolvisor mcp` as an MCP host sees it, through rmcp's client.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, ProtocolVersion,
    ReadResourceRequestParams, ResourceContents,
};
use rmcp::service::PeerRequestOptions;
use serde_json::{Map, Value, json};
use toolvisor_protocol::message::{ServerMessage, Topic};

use super::support::*;
use crate::harness::*;

#[test]
fn the_bridge_lists_calls_truncates_and_serves_artifacts() {
    let s = Server::start(ALLOW_ALL);
    s.write("hello.txt", "hi from toolvisor\n");
    block(T, async {
        let mcp = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        let info = mcp.service.peer_info().expect("server info");
        // The client asked for the newest revision; over `initialize` that is 2025-11-25.
        assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
        let tools = mcp.service.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert_eq!(names.len(), toolvisor_protocol::tools::builtin().len());
        for t in &tools {
            assert!(t.title.is_some(), "{}", t.name);
            assert!(t.output_schema.is_some(), "{}", t.name);
            let a = t.annotations.as_ref().expect("annotations");
            assert!(a.read_only_hint.is_some() && a.destructive_hint.is_some());
        }
        let tool = |n: &str| tools.iter().find(|t| t.name == n).unwrap().clone();
        assert_eq!(tool("read_file").title.as_deref(), Some("Read file"));

        let r = mcp.call("read_file", json!({"path": "hello.txt"})).await;
        assert_eq!(text(&r), "hi from toolvisor\n");
        assert_eq!(r.is_error, Some(false));
        assert_eq!(structured(&r)["status"], "ok");
        assert_fits(&tool("read_file"), &r);

        let r = mcp
            .call("run_command", json!({"command": "echo out; exit 3"}))
            .await;
        assert_eq!(r.is_error, Some(true));
        assert_eq!(
            text(&r),
            "[error: ShellExecutionError] command exited with code 3\nexit code 3\nout\n"
        );
        assert_eq!(structured(&r)["exit_code"], 3);
        assert_fits(&tool("run_command"), &r);

        // Invalid arguments are a tool result the model can read, not a protocol error.
        let r = mcp.call("read_file", json!({"nope": 1})).await;
        assert_eq!(r.is_error, Some(true));
        assert!(
            text(&r).starts_with("[error: InvalidParams]"),
            "{}",
            text(&r)
        );
        assert_eq!(structured(&r)["error"]["type"], "InvalidParams");
        assert_fits(&tool("read_file"), &r);

        let r = mcp.call("no_such_tool", json!({})).await;
        assert_eq!(structured(&r)["error"]["type"], "ToolNotFound");

        // A truncated output links the whole of it, which resources/read returns.
        let r = mcp
            .call("run_command", json!({"command": "seq 1 30000"}))
            .await;
        assert_eq!(r.is_error, Some(false));
        assert!(
            structured(&r)["truncated"]["omitted_lines"]
                .as_u64()
                .unwrap()
                > 0
        );
        assert_fits(&tool("run_command"), &r);
        let link = r
            .content
            .iter()
            .find_map(|c| c.as_resource_link())
            .expect("a resource_link")
            .clone();
        assert!(
            link.uri.starts_with("toolvisor://artifacts/"),
            "{}",
            link.uri
        );
        let read = mcp
            .service
            .read_resource(ReadResourceRequestParams::new(link.uri.clone()))
            .await
            .expect("resources/read");
        let got = match &read.contents[0] {
            ResourceContents::TextResourceContents { text, .. } => text.clone(),
            other => panic!("{other:?}"),
        };
        let want: String = (1..=30000).map(|i| format!("{i}\n")).collect();
        assert!(
            got == want,
            "{} bytes read, {} expected",
            got.len(),
            want.len()
        );
        // Anything but an artifact's plain name is refused.
        for uri in [
            "toolvisor://artifacts/../audit.jsonl",
            "toolvisor://artifacts/..%2Faudit.jsonl",
            "file:///etc/passwd",
        ] {
            let res = mcp
                .service
                .read_resource(ReadResourceRequestParams::new(uri))
                .await;
            assert!(res.is_err(), "{uri}: {res:?}");
        }
        mcp.close().await;
    });
}

#[test]
fn every_revision_is_negotiated_stateless_included() {
    let s = Server::start(ALLOW_ALL);
    s.write("a.txt", "a\n");
    block(T, async {
        let mut old = TestClient::new(None);
        old.version = ProtocolVersion::V_2025_06_18;
        let mcp = start(s.ws(), &["--no-spawn"], old).await;
        assert_eq!(
            mcp.service.peer_info().unwrap().protocol_version,
            ProtocolVersion::V_2025_06_18
        );
        assert_eq!(
            text(&mcp.call("read_file", json!({"path": "a.txt"})).await),
            "a\n"
        );
        mcp.close().await;

        // 2026-07-28: no initialize, `server/discover` and per-request metadata.
        let versions = vec![ProtocolVersion::V_2026_07_28];
        let mcp = start_with(
            s.ws(),
            &["--no-spawn"],
            TestClient::new(None),
            Some(versions),
        )
        .await;
        assert_eq!(
            mcp.service.peer_info().unwrap().protocol_version,
            ProtocolVersion::V_2026_07_28
        );
        assert!(!mcp.service.list_all_tools().await.unwrap().is_empty());
        let r = mcp.call("read_file", json!({"path": "a.txt"})).await;
        assert_eq!(text(&r), "a\n");
        mcp.close().await;
    });
}

#[test]
fn a_long_command_sends_progress_from_output_and_heartbeats() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        let mcp = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        // Silent for more than the 5 s heartbeat, with output before and after.
        let r = mcp
            .call(
                "run_command",
                json!({"command": "echo step one; sleep 6; echo step two"}),
            )
            .await;
        assert_eq!(r.is_error, Some(false), "{}", text(&r));
        let progress = mcp.seen.progress();
        assert!(progress.iter().any(|m| m == "step one"), "{progress:?}");
        assert!(
            progress.iter().any(|m| m.starts_with("running for")),
            "{progress:?}"
        );
        mcp.close().await;
    });
}

/// Start `sleep` (marked) through the bridge without waiting for its result.
async fn start_sleep(mcp: &Mcp, marker: &str) -> rmcp::service::RequestHandle<rmcp::RoleClient> {
    let params = CallToolRequestParams::new("run_command").with_arguments(
        json!({"command": "sleep 60", "env": {"E2E_MARK": marker}})
            .as_object()
            .cloned()
            .unwrap(),
    );
    let handle = mcp
        .service
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .expect("tools/call sent");
    wait_procs_with_env(marker, "sleep", 1, Duration::from_secs(30)).await;
    handle
}

#[test]
fn a_cancelled_call_or_a_client_that_goes_away_stops_its_command() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        let mut events = crate::batch::subscriber(&s, vec![Topic::Calls]).await;

        let mcp = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        let marker = unique_marker("mcp-cancel");
        let handle = start_sleep(&mcp, &marker).await;
        handle
            .cancel(Some("the test cancels".into()))
            .await
            .unwrap();
        wait_no_procs_with_env(&marker, Duration::from_secs(20))
            .await
            .expect("the command ended with its cancelled call");
        let (_, finished) = events
            .recv_matching(|m| match m {
                ServerMessage::Event { event, fields, .. }
                    if event == "call_finished" && fields["tool"] == "run_command" =>
                {
                    Some(())
                }
                _ => None,
            })
            .await
            .unwrap();
        let ServerMessage::Event { fields, .. } = finished else {
            unreachable!()
        };
        assert_eq!(fields["status"], "cancelled");

        // A client that disconnects mid-call: its calls end at once.
        let marker = unique_marker("mcp-gone");
        let _handle = start_sleep(&mcp, &marker).await;
        let mut child = mcp.child;
        drop(mcp.service);
        wait_no_procs_with_env(&marker, Duration::from_secs(10))
            .await
            .expect("the command ended with its client");
        tokio::time::timeout(Duration::from_secs(20), child.wait())
            .await
            .expect("toolvisor mcp exits when its client is gone")
            .unwrap();
    });
}

#[test]
fn asks_become_elicitations_and_their_answers_count() {
    let s = Server::start(ASKING);
    block(T, async {
        let yes = start(
            s.ws(),
            &["--no-spawn"],
            TestClient::new(Some(Answer::Approve { session: false })),
        )
        .await;
        let r = yes
            .call("write_file", json!({"path": "a.txt", "content": "hello\n"}))
            .await;
        assert_eq!(r.is_error, Some(false), "{}", text(&r));
        assert_eq!(
            std::fs::read_to_string(s.ws().join("a.txt")).unwrap(),
            "hello\n"
        );
        let asked = yes.seen.elicitations();
        assert_eq!(asked.len(), 1);
        assert!(asked[0].contains("a.txt"), "{}", asked[0]);
        assert!(
            asked[0].contains("+hello"),
            "the diff is shown: {}",
            asked[0]
        );
        yes.close().await;

        for answer in [Answer::Decline, Answer::Cancel, Answer::Reject] {
            let no = start(s.ws(), &["--no-spawn"], TestClient::new(Some(answer))).await;
            let r = no
                .call("write_file", json!({"path": "b.txt", "content": "no\n"}))
                .await;
            assert_eq!(r.is_error, Some(true), "{answer:?}");
            assert_eq!(structured(&r)["status"], "denied", "{answer:?}");
            assert_eq!(
                structured(&r)["error"]["type"],
                "PolicyDenied",
                "{answer:?}"
            );
            assert_eq!(no.seen.elicitations().len(), 1);
            no.close().await;
        }
        assert!(!s.ws().join("b.txt").exists());

        // `remember: session` approves the same call again without asking.
        let session = start(
            s.ws(),
            &["--no-spawn"],
            TestClient::new(Some(Answer::Approve { session: true })),
        )
        .await;
        for _ in 0..2 {
            let r = session
                .call("run_command", json!({"command": "echo same"}))
                .await;
            assert_eq!(text(&r), "same\n");
        }
        assert_eq!(session.seen.elicitations().len(), 1);
        session.close().await;
    });
}

#[test]
fn without_elicitation_another_connection_answers_and_tokens_pass() {
    let s = Server::start(ASKING);
    block(T, async {
        let mcp = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        let approver = {
            let ws = s.ws().to_owned();
            tokio::task::spawn_blocking(move || {
                toolvisor(&ws, &["approve", "--all", "--count", "1"])
            })
        };
        let r = mcp
            .call(
                "write_file",
                json!({"path": "c.txt", "content": "approved elsewhere\n"}),
            )
            .await;
        assert_eq!(r.is_error, Some(false), "{}", text(&r));
        let progress = mcp.seen.progress();
        assert!(
            progress.iter().any(|m| m.contains("toolvisor approve")),
            "the client was told how to answer: {progress:?}"
        );
        assert!(approver.await.unwrap().status.success());
        assert_eq!(
            std::fs::read_to_string(s.ws().join("c.txt")).unwrap(),
            "approved elsewhere\n"
        );

        // A grant token in `_meta` passes the ask; a wrong one is refused, saying why.
        let mut c = s.client().await;
        let (token, _) = crate::policy::grant(&mut c, "g", &["run_command"], false).await;
        let meta = |t: &str| {
            let mut m = Map::new();
            m.insert("toolvisor/confirm_token".into(), json!(t));
            m
        };
        let r = mcp
            .call_meta(
                "run_command",
                json!({"command": "echo granted"}),
                meta(&token),
            )
            .await;
        assert_eq!(text(&r), "granted\n");
        let r = mcp
            .call_meta(
                "run_command",
                json!({"command": "echo again"}),
                meta(&token),
            )
            .await;
        assert_eq!(structured(&r)["error"]["type"], "TokenInvalid");
        assert!(text(&r).contains("toolvisor/confirm_token"), "{}", text(&r));
        mcp.close().await;
    });
}

#[test]
fn a_client_without_progress_token_gets_a_log_notice_while_it_waits() {
    let s = Server::start(ASKING);
    let mut child = Command::new(BIN)
        .args(["mcp", "--no-spawn", "--workspace"])
        .arg(s.ws())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    let mut stdin = child.stdin.take().unwrap();
    for m in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run_command", "arguments": {"command": "echo ok"}}}),
    ] {
        writeln!(stdin, "{m}").unwrap();
    }
    let next = |what: &str, pick: &dyn Fn(&Value) -> bool| loop {
        let v = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no {what}"));
        if pick(&v) {
            return v;
        }
    };
    let notice = next("log notice", &|v| v["method"] == "notifications/message");
    assert!(
        notice["params"]["data"]
            .as_str()
            .unwrap()
            .contains("toolvisor approve"),
        "{notice}"
    );
    assert!(
        toolvisor(s.ws(), &["approve", "--all", "--count", "1"])
            .status
            .success()
    );
    let result = next("result", &|v| v["id"] == 2);
    assert_eq!(result["result"]["content"][0]["text"], "ok\n", "{result}");
    drop(stdin);
    assert!(wait_child(&mut child, Duration::from_secs(20)).is_some());
}

#[test]
fn the_bridge_starts_a_daemon_and_stops_it_on_exit() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("x.txt"), "x\n").unwrap();
    block(T, async {
        // --no-spawn: no daemon, calls say how to start one, the built-in tools are listed.
        let lonely = start(dir.path(), &["--no-spawn"], TestClient::new(None)).await;
        let tools = lonely.service.list_all_tools().await.unwrap();
        assert_eq!(tools.len(), toolvisor_protocol::tools::builtin().len());
        let r = lonely.call("read_file", json!({"path": "x.txt"})).await;
        assert_eq!(r.is_error, Some(true));
        assert!(
            text(&r).contains("toolvisor serve --workspace"),
            "{}",
            text(&r)
        );
        lonely.close().await;

        let mcp = start(dir.path(), &[], TestClient::new(None)).await;
        let r = mcp.call("read_file", json!({"path": "x.txt"})).await;
        assert_eq!(text(&r), "x\n");
        let pid: i32 = std::fs::read_to_string(dir.path().join(".toolvisor/toolvisor.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(pid_alive(pid as u32));
        assert!(mcp.close().await.success());
        // `close` returned once the bridge exited, and it stops its daemon before that.
        assert!(!pid_alive(pid as u32), "the daemon outlived its bridge");
        assert!(!dir.path().join(".toolvisor/toolvisor.sock").exists());
    });
}

#[test]
fn a_changed_mcp_server_list_reaches_the_client() {
    let s = start_with_tools(&with_server("test", &[], "risk = \"low\""), &["test__add"]);
    block(T, async {
        let mcp = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        let before = mcp.service.list_all_tools().await.unwrap();
        assert!(before.iter().any(|t| t.name == "test__add"));
        assert!(before.iter().all(|t| t.name != "test__extra"));
        let r = mcp.call("test__add", json!({"a": 2, "b": 3})).await;
        assert_eq!(text(&r), "5");
        // The server's structuredContent, unchanged.
        assert_eq!(structured(&r), json!({"sum": 5}));
        mcp.call("test__add_tool", json!({})).await;
        mcp.seen
            .wait("tools/list_changed", Duration::from_secs(20), |s| {
                s.list_changed.load(std::sync::atomic::Ordering::SeqCst) > 0
            })
            .await;
        let after = mcp.service.list_all_tools().await.unwrap();
        let extra = after
            .iter()
            .find(|t| t.name == "test__extra")
            .expect("test__extra");
        assert_eq!(extra.title.as_deref(), Some("test: Extra"));
        mcp.close().await;
    });
}

#[test]
fn a_stateless_client_answers_an_ask_in_a_second_round() {
    let s = Server::start(ASKING);
    let latest = || Some(vec![ProtocolVersion::V_2026_07_28]);
    block(T, async {
        let yes = TestClient::new(Some(Answer::Approve { session: false }));
        let mcp = start_with(s.ws(), &["--no-spawn"], yes, latest()).await;
        let r = mcp
            .call(
                "write_file",
                json!({"path": "r.txt", "content": "two rounds\n"}),
            )
            .await;
        assert_eq!(r.is_error, Some(false), "{}", text(&r));
        assert_eq!(mcp.seen.elicitations().len(), 1);
        assert!(mcp.seen.elicitations()[0].contains("r.txt"));
        assert_eq!(
            std::fs::read_to_string(s.ws().join("r.txt")).unwrap(),
            "two rounds\n"
        );
        mcp.close().await;

        let no = TestClient::new(Some(Answer::Decline));
        let mcp = start_with(s.ws(), &["--no-spawn"], no, latest()).await;
        let r = mcp
            .call("write_file", json!({"path": "n.txt", "content": "no\n"}))
            .await;
        assert_eq!(
            structured(&r)["error"]["type"],
            "PolicyDenied",
            "{}",
            text(&r)
        );
        assert!(!s.ws().join("n.txt").exists());
        // A second round that names no waiting call is refused.
        let params = rmcp::model::CallToolRequestParams::new("write_file")
            .with_arguments(
                json!({"path": "n.txt", "content": "no\n"})
                    .as_object()
                    .cloned()
                    .unwrap(),
            )
            .with_request_state("not-a-handle");
        let r = mcp.service.call_tool(params).await.unwrap();
        assert_eq!(r.is_error, Some(true));
        assert!(text(&r).contains("requestState"), "{}", text(&r));
        mcp.close().await;
    });
}
