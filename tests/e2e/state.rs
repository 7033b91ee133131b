//! `memory` and `write_todos` through the real socket: durable across a restart of the
//! daemon, no lost update under 16 concurrent clients (with two state workers), files
//! intact when the worker is killed mid-write, and the store invisible to every other
//! tool. Also through the MCP bridge.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use toolvisor_protocol::message::CallRequest;
use toolvisor_protocol::{ErrorType, Status};

use crate::harness::*;

fn ok(r: &toolvisor_protocol::ToolResult) -> String {
    assert_eq!(r.status, Status::Ok, "{r:?}");
    r.content.clone()
}

#[test]
fn memory_and_todos_survive_a_restart_of_the_daemon() {
    let mut s = Server::start(ASKING);
    block(T, async {
        let set = s
            .call(
                "memory",
                json!({"action": "set", "key": "lang", "value": "Rust 🦀"}),
            )
            .await;
        assert_eq!(ok(&set), "Stored lang");
        assert_eq!(
            ok(&s
                .call("memory", json!({"action": "get", "key": "lang"}))
                .await),
            "Rust 🦀"
        );
        let missing = s
            .call("memory", json!({"action": "get", "key": "nope"}))
            .await;
        assert_eq!(ok(&missing), "Key not found");
        let added = ok(&s
            .call("write_todos", json!({"action": "add", "task": "ship it"}))
            .await);
        assert!(added.starts_with("Added todo: "), "{added}");
        let r = s.call("write_todos", json!({"action": "add"})).await;
        assert_eq!(r.error.unwrap().kind, ErrorType::TodoError);
        let r = s.call("memory", json!({"action": "set", "key": "k"})).await;
        assert_eq!(r.error.unwrap().kind, ErrorType::MemoryError);
    });
    assert!(s.stop().is_some_and(|st| st.success()));
    let dir = std::mem::replace(&mut s.dir, tempfile::tempdir().unwrap());
    // The documented paths hold the data.
    let mem: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join(".toolvisor/memory.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(mem["lang"], "Rust 🦀");
    let s = Server::start_in(dir);
    block(T, async {
        assert_eq!(
            ok(&s.call("memory", json!({"action": "list"})).await),
            "lang"
        );
        let list = ok(&s.call("write_todos", json!({"action": "list"})).await);
        assert!(
            list.starts_with("[ ] ") && list.ends_with(": ship it"),
            "{list}"
        );
        let id = list[4..].split(':').next().unwrap().to_owned();
        assert_eq!(
            ok(&s
                .call("write_todos", json!({"action": "complete", "id": id}))
                .await),
            format!("Completed todo: {id}")
        );
        let list = ok(&s.call("write_todos", json!({"action": "list"})).await);
        assert_eq!(list, format!("[x] {id}: ship it"));
        assert_eq!(
            ok(&s
                .call("write_todos", json!({"action": "remove", "id": id}))
                .await),
            format!("Removed todo: {id}")
        );
        assert_eq!(
            ok(&s.call("write_todos", json!({"action": "list"})).await),
            ""
        );
    });
}

#[test]
fn sixteen_clients_adding_todos_lose_none() {
    // Two state workers: the store's lock must hold across processes too.
    let s = Server::start("[workers.state]\ncount = 2\n");
    assert_eq!(block(T, s.worker_pids("state")).len(), 2);
    let socket = s.socket();
    block(T, async {
        let mut clients = tokio::task::JoinSet::new();
        for i in 0..16 {
            let socket = socket.clone();
            clients.spawn(async move {
                let mut c = toolvisor_protocol::client::Client::connect(&socket, "e2e", false)
                    .await
                    .expect("connect");
                for j in 0..5 {
                    let args = json!({"action": "add", "task": format!("task {i}-{j}")});
                    let r = call_on(&mut c, &format!("c{j}"), "write_todos", args).await;
                    assert_eq!(r.status, Status::Ok, "{r:?}");
                }
            });
        }
        while let Some(done) = clients.join_next().await {
            done.expect("a client task");
        }
        let list = ok(&s.call("write_todos", json!({"action": "list"})).await);
        let tasks: BTreeSet<&str> = list
            .lines()
            .map(|l| l.split_once(": ").unwrap().1)
            .collect();
        assert_eq!(tasks.len(), 80, "every add is in the list");
        let ids: BTreeSet<&str> = list.lines().map(|l| &l[4..12]).collect();
        assert_eq!(ids.len(), 80, "ids are unique");
    });
}

#[test]
fn a_killed_state_worker_leaves_whole_files() {
    let s = Server::start(ASKING);
    // Generous: each round restarts the worker and rewrites a growing store durably.
    block(Duration::from_secs(180), async {
        for round in 0..4 {
            let mut c = s.client().await;
            // Calls in flight while the worker dies: each ends ok or crashed, never lost.
            for j in 0..8 {
                let mut req = CallRequest::new(
                    format!("r{round}-{j}"),
                    "memory",
                    json!({"action": "set", "key": format!("k{round}-{j}"), "value": "v".repeat(20_000)}),
                );
                req.timeout_ms = Some(20_000);
                c.send(&toolvisor_protocol::message::ClientMessage::Call(req))
                    .await
                    .unwrap();
            }
            let pid = s.worker_pids("state").await[0];
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            for _ in 0..8 {
                let m = tokio::time::timeout(Duration::from_secs(90), c.recv())
                    .await
                    .unwrap()
                    .unwrap();
                if let toolvisor_protocol::ServerMessage::Result(r) = m {
                    assert!(matches!(r.status, Status::Ok | Status::Crashed), "{r:?}");
                }
            }
            s.wait_group_back("state", &[pid], T).await;
        }
        // Every file reads back as a whole: the last write of each key is there or not.
        let list = ok(&s.call("memory", json!({"action": "list"})).await);
        for key in list.lines() {
            let v = ok(&s.call("memory", json!({"action": "get", "key": key})).await);
            assert_eq!(v.len(), 20_000, "{key}");
        }
        let store = s.ws().join(".toolvisor/store");
        let leftovers: Vec<_> = std::fs::read_dir(&store)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    });
}

#[test]
fn the_store_is_invisible_to_every_other_tool() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        ok(&s
            .call(
                "memory",
                json!({"action": "set", "key": "secret", "value": "hunter2"}),
            )
            .await);
        for path in [
            ".toolvisor/memory.json",
            ".toolvisor/store/memory.json",
            ".toolvisor/store/lock",
        ] {
            let r = s.call("read_file", json!({"path": path})).await;
            assert_eq!(
                r.error.map(|e| e.kind),
                Some(ErrorType::PermissionError),
                "{path}"
            );
            let w = s
                .call(
                    "write_file",
                    json!({"path": path, "content": "{}", "overwrite": true}),
                )
                .await;
            assert_eq!(
                w.error.map(|e| e.kind),
                Some(ErrorType::PermissionError),
                "{path}"
            );
        }
        let g = s
            .call("grep", json!({"pattern": "hunter2", "directory": "."}))
            .await;
        assert!(!g.content.contains("hunter2"), "{g:?}");
        let r = s
            .call(
                "run_command",
                json!({"command": "cat .toolvisor/store/memory.json"}),
            )
            .await;
        let guards = s.guards().await;
        if guards.namespaces {
            assert!(!r.content.contains("hunter2"), "{r:?}");
        }
        assert_eq!(
            ok(&s
                .call("memory", json!({"action": "get", "key": "secret"}))
                .await),
            "hunter2"
        );
    });
}

#[test]
fn the_mcp_bridge_serves_the_state_tools() {
    let s = Server::start(ASKING);
    let out = toolvisor(
        s.ws(),
        &[
            "call",
            "memory",
            r#"{"action":"set","key":"from","value":"cli"}"#,
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let mut child = std::process::Command::new(BIN)
        .args(["mcp", "--socket"])
        .arg(s.socket())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn toolvisor mcp");
    let mut stdin = child.stdin.take().unwrap();
    use std::io::{BufRead, Write};
    for m in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "memory", "arguments": {"action": "get", "key": "from"}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "write_todos", "arguments": {"action": "complete", "id": "zzz"}}}),
    ] {
        writeln!(stdin, "{m}").unwrap();
    }
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut got: Vec<Value> = (0..3)
        .map(|_| serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap())
        .collect();
    drop(stdin);
    let _ = wait_child(&mut child, Duration::from_secs(10));
    got.sort_by_key(|v| v["id"].as_i64());
    assert_eq!(got[1]["result"]["content"][0]["text"], "cli");
    assert_eq!(got[2]["result"]["isError"], true);
    // The error type travels with the result (its form is the bridge's).
    assert!(
        got[2]["result"].to_string().contains("TodoError"),
        "{}",
        got[2]
    );
    assert!(
        got[2]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Todo not found: zzz"),
        "{}",
        got[2]
    );
}
