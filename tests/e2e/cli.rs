//! The command line as people and scripts use it: exit codes, config errors that name
//! the key and line, `approve` answering an agent's question.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::json;
use toolvisor_protocol::Status;
use toolvisor_protocol::client::Client;
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage};

use crate::harness::*;

fn tv(s: &Server, args: &[&str]) -> Output {
    toolvisor(s.ws(), args)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn call_prints_content_and_exits_by_status() {
    let s = Server::start(ASKING);
    s.write("a.txt", "alpha\n");
    let out = tv(&s, &["call", "read_file", r#"{"path": "a.txt"}"#]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout), "alpha\n");
    let out = tv(&s, &["call", "read_file", r#"{"path": "missing.txt"}"#]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("FileNotFoundError"), "{out:?}");
    let out = tv(&s, &["call", "read_file", "--json", r#"{"path": "a.txt"}"#]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(v["status"], "ok");
    let out = tv(&s, &["call", "read_file", "not json"]);
    assert_eq!(out.status.code(), Some(2));
    // Flags after the subcommand work too.
    let out = Command::new(BIN)
        .args(["status", "--workspace"])
        .arg(s.ws())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        text(&out.stdout).contains("search"),
        "{}",
        text(&out.stdout)
    );
    let out = tv(&s, &["tools", "--format", "mcp"]);
    let tools: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names = tool_names(&tools);
    let builtin = toolvisor_protocol::tools::builtin();
    let want: Vec<&str> = builtin.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, want, "every built-in tool, sorted, once");
}

/// `toolvisor serve [extra…]` on a workspace whose toolvisor.toml is `config`; it must
/// refuse to start with EX_CONFIG (78). Returns its stderr.
fn serve_refuses(dir: &std::path::Path, config: &str, extra: &[&str]) -> String {
    serve_refuses_with(dir, config, extra, &[])
}

#[test]
fn a_bad_config_names_the_key_and_line_and_nothing_starts() {
    let dir = tempfile::tempdir().unwrap();
    let err = serve_refuses(
        dir.path(),
        "[server]\ndrain_grace_ms = 5\nfrobnicate = true\n",
        &[],
    );
    assert!(
        err.contains("frobnicate") && err.contains("line 3"),
        "{err}"
    );
    let err = serve_refuses(dir.path(), "[policy]\nmode = \"reckless\"\n", &[]);
    assert!(
        err.contains("reckless") && err.contains("`policy.mode`"),
        "{err}"
    );
    // An ill-typed value: serde says what it expected, we say which key it was.
    let err = serve_refuses(
        dir.path(),
        "[server]\n\n[limits]\nfile_max = \"big\"\n",
        &[],
    );
    assert!(
        err.contains("`limits.file_max`") && err.contains("line 4"),
        "{err}"
    );
}

/// `toolvisor tools | head -1`: the reader goes away early; the CLI ends quietly (by
/// SIGPIPE, like other Unix tools), never with a panic.
#[test]
fn a_closed_stdout_ends_the_cli_quietly() {
    use std::io::Read;
    let s = Server::start(ASKING);
    let mut child = Command::new(BIN)
        .arg("--workspace")
        .arg(s.ws())
        .arg("tools")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Hang up at once: the CLI connects to the server first, so its first write finds
    // the pipe closed (a listing is smaller than a pipe buffer, so closing after a
    // first read could miss the case).
    drop(child.stdout.take());
    let status = wait_child(&mut child, Duration::from_secs(20)).expect("the CLI ends");
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!err.contains("panicked"), "{err}");
    use std::os::unix::process::ExitStatusExt;
    assert!(
        status.signal() == Some(nix::sys::signal::Signal::SIGPIPE as i32),
        "{status:?}: {err}"
    );
}

#[test]
fn approve_answers_an_agents_question() {
    let s = Server::start(ASKING);
    let mut approver = Command::new(BIN)
        .arg("--workspace")
        .arg(s.ws())
        .args(["approve", "--all", "--count", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    block(T, async {
        let mut agent = Client::connect(&s.socket(), "agent", true).await.unwrap();
        let req = CallRequest::new(
            "w",
            "write_file",
            json!({"path": "approved.txt", "content": "yes\n"}),
        );
        agent.send(&ClientMessage::Call(req)).await.unwrap();
        let (_, m) = agent
            .recv_matching(|m| matches!(m, ServerMessage::Result(_)).then_some(()))
            .await
            .unwrap();
        let ServerMessage::Result(r) = m else {
            unreachable!()
        };
        assert_eq!(r.status, Status::Ok, "{r:?}");
    });
    assert_eq!(
        std::fs::read_to_string(s.ws().join("approved.txt")).unwrap(),
        "yes\n"
    );
    let status =
        wait_child(&mut approver, Duration::from_secs(20)).expect("approve exits after --count 1");
    assert!(status.success());
}

#[test]
fn grant_prints_a_token_that_passes_one_ask() {
    let s = Server::start(ASKING);
    let out = tv(&s, &["grant", "--tool", "run_command", "--ttl", "1m"]);
    assert!(out.status.success(), "{out:?}");
    let token = text(&out.stdout).trim().to_owned();
    assert!(!token.is_empty());
    let out = tv(
        &s,
        &[
            "call",
            "run_command",
            r#"{"command": "echo granted"}"#,
            "--token",
            &token,
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout), "granted\n");
    let out = tv(
        &s,
        &[
            "call",
            "run_command",
            r#"{"command": "echo again"}"#,
            "--token",
            &token,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("TokenInvalid"), "{out:?}");
}

/// `--log-format json` (here through its variable): every line on stderr is one JSON
/// object, the workers' lines included (they log to the same stderr).
#[test]
fn json_logs_are_json_from_workers_too() {
    let mut s = Server::start_with_env(
        "[policy]\nmode = \"yolo\"\n[[policy.rules]]\ntool = \"run_command\"\naction = \"allow\"\n",
        &[("TOOLVISOR_LOG_FORMAT", "json")],
    );
    block(Duration::from_secs(30), async {
        let r = s
            .call(
                "run_command",
                json!({"command": "sleep 30", "background": true}),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        // A restart kills the job, and the exec worker says so in its own log line.
        s.restart("exec").await;
    });
    let line = s.wait_log("background process killed", Duration::from_secs(20));
    assert!(line.contains("\"process\""), "a worker's fields: {line}");
    s.stop();
    s.wait_log("stopped", Duration::from_secs(20));
    for l in &s.log_seen {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v.get("level").is_some(), "{l}");
    }
}

/// Even a start that fails on its configuration logs in the chosen format.
#[test]
fn a_bad_config_is_logged_as_json_under_log_format_json() {
    let dir = tempfile::tempdir().unwrap();
    let err = serve_refuses(
        dir.path(),
        "[workers.exec]\nmax_in_flight = 0\n",
        &["--log-format", "json"],
    );
    assert!(err.contains("max_in_flight"), "{err}");
    for line in err.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert_eq!(v["level"], "ERROR", "{line}");
    }
}
