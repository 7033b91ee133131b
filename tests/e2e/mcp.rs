//! `toolvisor mcp`: an MCP host on stdio gets the daemon's tools.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;

/// Send JSON-RPC lines to `toolvisor mcp`, collect the answers by id.
fn converse(s: &Server, requests: &[Value], answers: usize) -> Vec<Value> {
    let mut child = Command::new(BIN)
        .args(["mcp", "--socket"])
        .arg(s.socket())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn toolvisor mcp");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut stdin = child.stdin.take().expect("stdin");
    for r in requests {
        writeln!(stdin, "{r}").expect("write");
    }
    let mut got = Vec::new();
    while got.len() < answers {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("an answer within the deadline");
        got.push(serde_json::from_str::<Value>(&line).expect("JSON"));
    }
    drop(stdin);
    let _ = wait_child(&mut child, Duration::from_secs(10));
    got.sort_by_key(|v| v["id"].as_i64().unwrap_or(-1));
    got
}

#[test]
fn an_mcp_host_lists_and_calls_tools() {
    let s = Server::start("");
    s.write("hello.txt", "hi from toolvisor\n");
    let got = converse(
        &s,
        &[
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "hello.txt"}}}),
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "run_command", "arguments": {"command": "true"}}}),
            json!({"jsonrpc": "2.0", "id": 5, "method": "no/such"}),
        ],
        5,
    );
    assert_eq!(got[0]["result"]["serverInfo"]["name"], "toolvisor");
    let tools = got[1]["result"]["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 19);
    assert!(
        tools
            .iter()
            .all(|t| t["inputSchema"].is_object() && t["annotations"].is_object())
    );
    assert_eq!(
        got[2]["result"]["content"][0]["text"],
        "hi from toolvisor\n"
    );
    assert_eq!(got[2]["result"]["isError"], false);
    // Not interactive: the command needs a confirmation and says how to allow it.
    assert_eq!(got[3]["result"]["isError"], true);
    assert!(
        got[3]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("toolvisor grant"),
        "{}",
        got[3]
    );
    assert_eq!(got[4]["error"]["code"], -32601);
}
