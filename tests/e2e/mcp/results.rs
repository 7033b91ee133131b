//! What a result carries through `toolvisor mcp`, driven by rmcp's client against the
//! real binary: `logging/setLevel` answered and obeyed, each built-in tool's own fields
//! (`token`, `process`, `next`, `matched`, …) in `structuredContent` (fitting the
//! tool's `outputSchema`) and in the text, and an MCP server's answer passed on as it
//! gave it — every kind of content item, its progress, its `structuredContent` and
//! `outputSchema` — bounded by the frame.

#![allow(deprecated)] // logging/setLevel: deprecated from 2026-07-28, used before it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rmcp::model::{LoggingLevel, SetLevelRequestParams, Tool};
use serde_json::{Value, json};

use super::support::*;
use crate::harness::*;

/// The listed tool `name`.
fn find(tools: &[Tool], name: &str) -> Tool {
    tools
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("{name} is not listed"))
        .clone()
}

/// The text's last line.
fn last_line(r: &rmcp::model::CallToolResult) -> String {
    text(r).lines().last().unwrap_or_default().to_owned()
}

#[test]
fn logging_set_level_is_answered_and_obeyed() {
    let s = Server::start(ASKING);
    block(T, async {
        let mcp = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        let caps = &mcp.service.peer_info().expect("server info").capabilities;
        assert!(caps.logging.is_some());
        mcp.service
            .peer()
            .set_level(SetLevelRequestParams::new(LoggingLevel::Error))
            .await
            .expect("logging/setLevel is answered");
        mcp.close().await;
    });
    // At `error`, the `warning` that a call waits for `toolvisor approve` is not sent
    // (raw JSON-RPC: rmcp's client would send a progress token, which gets progress).
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
        json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "error"}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "run_command", "arguments": {"command": "echo ok"}}}),
    ] {
        writeln!(stdin, "{m}").unwrap();
    }
    let mut seen = Vec::new();
    let mut next = |id: i64| loop {
        let v = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no answer to {id}"));
        if v["id"] == id {
            return v;
        }
        seen.push(v);
    };
    let set = next(2);
    assert_eq!(set["result"], json!({}), "{set}");
    assert!(
        toolvisor(s.ws(), &["approve", "--all", "--count", "1"])
            .status
            .success()
    );
    let result = next(3);
    assert_eq!(result["result"]["content"][0]["text"], "ok\n", "{result}");
    assert!(
        !seen.iter().any(|v| v["method"] == "notifications/message"),
        "a log message below the level was sent: {seen:?}"
    );
    drop(stdin);
    assert!(wait_child(&mut child, Duration::from_secs(20)).is_some());
}

#[test]
fn a_preview_token_and_a_process_handle_reach_the_host() {
    let s = Server::start(ALLOW_ALL);
    s.write("f.txt", "old line\n");
    block(T, async {
        let mcp = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        let tools = mcp.service.list_all_tools().await.unwrap();
        let preview = find(&tools, "preview_edit_file");
        let d = preview.description.as_deref().unwrap_or_default();
        assert!(d.contains("structuredContent.token"), "{d}");
        assert!(!d.contains("meta."), "{d}");

        let edits = json!({"path": "f.txt", "edits": [{"target": "old", "replacement": "new"}]});
        let r = mcp.call("preview_edit_file", edits).await;
        assert_eq!(r.is_error, Some(false), "{}", text(&r));
        assert_fits(&preview, &r);
        let token = structured(&r)["token"]
            .as_str()
            .expect("structuredContent.token")
            .to_owned();
        assert_eq!(last_line(&r), format!("[token: {token}]"));
        let r = mcp.call("apply_file_change", json!({"token": token})).await;
        assert_eq!(r.is_error, Some(false), "{}", text(&r));
        assert_fits(&find(&tools, "apply_file_change"), &r);
        assert_eq!(
            std::fs::read_to_string(s.ws().join("f.txt")).unwrap(),
            "new line\n"
        );

        let r = mcp
            .call(
                "run_command",
                json!({"command": "echo starting; sleep 1; echo up and ready; sleep 60", "background": true}),
            )
            .await;
        assert_eq!(r.is_error, Some(false), "{}", text(&r));
        assert_fits(&find(&tools, "run_command"), &r);
        let process = structured(&r)["process"]
            .as_str()
            .expect("structuredContent.process")
            .to_owned();
        assert_eq!(structured(&r)["running"], true);
        assert!(
            last_line(&r).starts_with(&format!("[process: {process}, running: true")),
            "{}",
            text(&r)
        );
        let r = mcp
            .call(
                "read_output",
                json!({"process": process, "since": 0, "until": "ready", "wait_ms": 20000}),
            )
            .await;
        assert_eq!(r.is_error, Some(false), "{}", text(&r));
        assert_fits(&find(&tools, "read_output"), &r);
        let st = structured(&r);
        assert_eq!(st["matched"], true, "{st}");
        let next = st["next"].as_u64().expect("structuredContent.next");
        assert_eq!(next as usize, "starting\nup and ready\n".len(), "{st}");
        assert!(text(&r).contains("up and ready\n"), "{}", text(&r));
        assert!(
            last_line(&r).ends_with(&format!("matched: true, next: {next}]")),
            "{}",
            text(&r)
        );
        let r = mcp.call("kill_process", json!({"process": process})).await;
        assert_fits(&find(&tools, "kill_process"), &r);
        mcp.close().await;
    });
}

#[test]
fn every_builtin_tools_results_fit_its_output_schema() {
    let s = Server::start(ALLOW_ALL);
    s.write("a.txt", "alpha\nbeta\n");
    block(Duration::from_secs(120), async {
        let mcp = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        let tools = mcp.service.list_all_tools().await.unwrap();
        let bg = mcp
            .call("run_command", json!({"command": "cat", "background": true}))
            .await;
        let process = structured(&bg)["process"]
            .as_str()
            .unwrap_or("w0-1")
            .to_owned();
        // Each call, and fields of the tool's own its structuredContent must carry.
        let calls: &[(&str, Value, &[&str])] = &[
            (
                "read_file",
                json!({"path": "a.txt"}),
                &["lines", "start_line"],
            ),
            ("read_file", json!({"path": "missing.txt"}), &[]),
            (
                "read_many_files",
                json!({"paths": ["a.txt", "nope.txt"]}),
                &["files", "errors"],
            ),
            ("ls", json!({"path": "."}), &["entries"]),
            ("glob", json!({"pattern": "*.txt"}), &["files", "total"]),
            (
                "grep",
                json!({"pattern": "beta"}),
                &["matches", "total_matches", "files"],
            ),
            (
                "write_file",
                json!({"path": "b.txt", "content": "x\n"}),
                &["path", "diff"],
            ),
            (
                "edit_file",
                json!({"path": "b.txt", "edits": [{"target": "x", "replacement": "y"}]}),
                &["path", "diff"],
            ),
            (
                "preview_write_file",
                json!({"path": "c.txt", "content": "c\n"}),
                &["token", "path", "diff", "before_sha256"],
            ),
            (
                "preview_edit_file",
                json!({"path": "a.txt", "edits": [{"target": "alpha", "replacement": "gamma"}]}),
                &["token", "path", "diff"],
            ),
            ("apply_file_change", json!({"token": "not-a-token"}), &[]),
            (
                "run_command",
                json!({"command": "echo hi"}),
                &["exit_code", "resources"],
            ),
            ("run_command", json!({"command": "exit 4"}), &["exit_code"]),
            (
                "run_command",
                json!({"command": "sleep 30", "timeout": 200}),
                &[],
            ),
            (
                "run_command",
                json!({"command": "echo a; sleep 30", "yield_ms": 300}),
                &["process", "pid", "running", "next"],
            ),
            ("list_processes", json!({}), &["processes"]),
            (
                "write_input",
                json!({"process": process, "data": "typed\n"}),
                &["written", "process", "running"],
            ),
            (
                "read_output",
                json!({"process": process, "wait_ms": 2000}),
                &["next", "output_bytes", "process"],
            ),
            (
                "read_output",
                json!({"process": process, "since": 0, "until": "never", "wait_ms": 200}),
                &["matched", "next"],
            ),
            (
                "kill_process",
                json!({"process": process}),
                &["process", "running"],
            ),
            (
                "read_output",
                json!({"process": "w0-999999", "since": 0}),
                &[],
            ),
            (
                "memory",
                json!({"action": "set", "key": "k", "value": "v"}),
                &[],
            ),
            ("memory", json!({"action": "list"}), &["keys"]),
            (
                "write_todos",
                json!({"action": "add", "task": "t"}),
                &["id"],
            ),
            (
                "write_todos",
                json!({"action": "list"}),
                &["todos", "completed"],
            ),
            ("web_fetch", json!({"url": "http://127.0.0.1:1/"}), &[]),
            ("web_search", json!({"query": "x"}), &[]),
        ];
        let mut called = std::collections::BTreeSet::new();
        for (tool, args, fields) in calls {
            let r = mcp.call(tool, args.clone()).await;
            let listed = find(&tools, tool);
            let schema =
                Value::Object((*listed.output_schema.clone().expect("outputSchema")).clone());
            let v = jsonschema::validator_for(&schema).expect("the outputSchema compiles");
            let st = r
                .structured_content
                .clone()
                .unwrap_or_else(|| panic!("{tool} {args}: no structuredContent"));
            let errors: Vec<String> = v.iter_errors(&st).map(|e| e.to_string()).collect();
            assert!(
                errors.is_empty(),
                "{tool} {args}: {st} breaks the outputSchema: {errors:?}"
            );
            for f in *fields {
                assert!(st.get(f).is_some(), "{tool} {args}: no `{f}` in {st}");
                assert!(
                    schema["properties"].get(f).is_some(),
                    "{tool}: the outputSchema does not declare `{f}`"
                );
            }
            called.insert(*tool);
        }
        let missed: Vec<&str> = tools
            .iter()
            .map(|t| t.name.as_ref())
            .filter(|n| !called.contains(n))
            .collect();
        // activate_skill is listed only when the workspace has skills.
        assert!(missed.is_empty(), "not called: {missed:?}");
        mcp.close().await;
    });
}

/// The test server's content items of every kind.
fn every_kind() -> Value {
    json!([
        {"type": "text", "text": "a picture, a sound and some resources"},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        {"type": "resource_link", "uri": "file:///notes.md", "name": "notes.md", "mimeType": "text/markdown"},
        {"type": "resource", "resource": {"uri": "mem://a", "mimeType": "text/plain", "text": "embedded text"}},
        {"type": "resource", "resource": {"uri": "mem://b", "mimeType": "application/octet-stream", "blob": "AAEC"}}
    ])
}

#[test]
fn an_mcp_servers_answer_reaches_the_host_as_it_gave_it() {
    let s = start_with_tools(
        &with_server("test", &[], "risk = \"low\""),
        &["test__rich", "test__steps"],
    );
    block(Duration::from_secs(120), async {
        let mcp = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        let tools = mcp.service.list_all_tools().await.unwrap();
        let rich = find(&tools, "test__rich");
        assert_eq!(
            rich.output_schema
                .as_deref()
                .map(|m| Value::Object(m.clone())),
            Some(
                json!({"type": "object", "properties": {"label": {"type": "string"}, "n": {"type": "integer"}}, "required": ["label"]})
            ),
        );
        // A tool that declares no outputSchema lists none.
        assert!(find(&tools, "test__echo").output_schema.is_none());

        let r = mcp
            .call(
                "test__rich",
                json!({"content": every_kind(), "structured": {"label": "x", "n": 2}}),
            )
            .await;
        assert_eq!(r.is_error, Some(false), "{r:?}");
        assert_eq!(serde_json::to_value(&r.content).unwrap(), every_kind());
        assert_eq!(structured(&r), json!({"label": "x", "n": 2}));
        assert_fits(&rich, &r);

        // A result that breaks its schema is toolvisor's error, without the content it broke.
        let r = mcp
            .call(
                "test__rich",
                json!({"content": [], "structured": {"n": "two"}}),
            )
            .await;
        assert_eq!(r.is_error, Some(true));
        assert_eq!(r.structured_content, None);
        assert!(text(&r).contains("McpToolError"), "{}", text(&r));

        // Progress, as the server sent it (rmcp's client sends a progress token).
        let r = mcp.call("test__steps", json!({"n": 4})).await;
        assert_eq!(text(&r), "4 steps");
        let want: Vec<ProgressSeen> = (1..=4)
            .map(|i| (i as f64, Some(4.0), Some(format!("step {i}"))))
            .collect();
        mcp.seen
            .wait("the server's progress", Duration::from_secs(20), |s| {
                let got = s.progress_values.lock().unwrap();
                want.iter().all(|w| got.contains(w))
            })
            .await;

        mcp.close().await;
    });
}

#[test]
fn an_mcp_servers_result_larger_than_a_frame_is_cut_never_hung() {
    let s = start_with_tools(
        &with_server("test", &[], "risk = \"low\""),
        &["test__rich", "test__big"],
    );
    block(Duration::from_secs(120), async {
        let mcp = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        // A result larger than a frame is cut, promptly, never hung.
        let started = Instant::now();
        let r = mcp.call("test__big", json!({"n": 9 * 1024 * 1024})).await;
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            r.is_error,
            Some(false),
            "{}",
            &text(&r)[..200.min(text(&r).len())]
        );
        assert!(text(&r).len() < 2 * 1024 * 1024, "{}", text(&r).len());
        assert!(
            text(&r).contains("[Output truncated: "),
            "{}",
            &text(&r)[..200]
        );
        // Twice that (text and structuredContent): longer than the line an MCP client
        // reads. Answered as an error in its place, at once.
        let started = Instant::now();
        let r = mcp
            .call("test__big", json!({"n": 9 * 1024 * 1024, "twice": true}))
            .await;
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(r.is_error, Some(true));
        assert!(
            text(&r).contains("[Output truncated: ") && text(&r).contains("bytes, more than"),
            "{}",
            text(&r)
        );
        let items = json!([{"type": "text", "text": "huge"}]);
        let started = Instant::now();
        let r = mcp
            .call(
                "test__rich",
                json!({"content": items, "structured": {"label": "big"}, "image_bytes": 9 * 1024 * 1024}),
            )
            .await;
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        let said = serde_json::to_string(&r.content).unwrap();
        assert!(said.len() < 64 * 1024, "{}", said.len());
        assert!(said.contains("larger than a frame"), "{said}");
        mcp.close().await;
    });
}

#[test]
fn an_mcp_servers_stderr_is_bounded_in_the_daemons_log() {
    let mut s = start_with_tools(
        &with_server("test", &[], "risk = \"low\""),
        &["test__shout"],
    );
    let r = block(T, async {
        let mcp = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        // 20 000 lines, 2 MB: far more than the log takes from one server.
        let r = mcp
            .call("test__shout", json!({"n": 20000, "bytes": 100}))
            .await;
        mcp.close().await;
        r
    });
    assert_eq!(text(&r), "shouted");
    let said = s.wait_log("of the server's stderr dropped", Duration::from_secs(20));
    assert!(said.contains("[mcp:test]"), "{said}");
    let passed = s
        .log_seen
        .iter()
        .filter(|l| l.contains("shout-line"))
        .count();
    assert!(passed > 0, "none of the server's stderr reached the log");
    assert!(
        passed <= 1000,
        "{passed} lines of the server's stderr were logged"
    );
}
