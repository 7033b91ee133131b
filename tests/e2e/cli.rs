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
    Command::new(BIN)
        .arg("--workspace")
        .arg(s.ws())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run toolvisor")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn call_prints_content_and_exits_by_status() {
    let s = Server::start("");
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
    assert_eq!(tools.as_array().unwrap().len(), 14);
}

#[test]
fn a_bad_config_names_the_key_and_line_and_nothing_starts() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolvisor.toml"),
        "[server]\ndrain_grace_ms = 5\nfrobnicate = true\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("serve")
        .arg("--workspace")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let err = text(&out.stderr);
    assert!(
        err.contains("frobnicate") && err.contains("line 3"),
        "{err}"
    );
    assert!(!dir.path().join(".toolvisor/toolvisor.sock").exists());
    std::fs::write(
        dir.path().join("toolvisor.toml"),
        "[policy]\nmode = \"reckless\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("serve")
        .arg("--workspace")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    assert!(
        text(&out.stderr).contains("reckless"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn approve_answers_an_agents_question() {
    let s = Server::start("");
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
    let s = Server::start("");
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
