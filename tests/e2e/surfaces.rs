//! What people and init systems touch around the daemon: `init`, finding the workspace
//! from a subdirectory, client commands that need only the socket when the config has
//! become invalid, arguments on stdin, help text, the Timeout hint, `status.calls` and
//! per-worker CPU, SIGHUP applying `confirm_timeout_ms`, `by` in `confirm_answered`,
//! `approve` across a daemon restart, a second Ctrl-C, systemd readiness, structured
//! SIGUSR1 dumps and the state directory's `.gitignore`.

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use toolvisor_protocol::Status;
use toolvisor_protocol::client::Client;
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage};
use toolvisor_protocol::tools::builtin;

use crate::harness::*;

const D: Duration = Duration::from_secs(30);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn signal(pid: u32, sig: Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).expect("signal");
}

async fn status(s: &Server) -> ServerMessage {
    let mut c = s.client().await;
    let id = "st".into();
    c.request(&ClientMessage::Status { id: "st".into() }, &id)
        .await
        .expect("status")
}

#[test]
fn init_writes_a_starter_and_keeps_the_state_out_of_git() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().to_owned();
    let ws = ws.as_path();
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(ws)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    let have_git = git(&["init", "-q"]).is_some();
    let out = toolvisor_in(ws, &["init"], "");
    assert!(out.status.success(), "{out:?}");
    let starter = std::fs::read_to_string(ws.join("toolvisor.toml")).unwrap();
    assert!(starter.contains("# toolvisor.toml") && starter.contains("mode = \"auto\""));
    assert!(ws.join(".toolvisor/.gitignore").is_file());
    // A second init keeps the file; --force replaces it.
    std::fs::write(ws.join("toolvisor.toml"), "# mine\n").unwrap();
    let out = toolvisor_in(ws, &["init"], "");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("--force"), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(ws.join("toolvisor.toml")).unwrap(),
        "# mine\n"
    );
    let out = toolvisor_in(ws, &["init", "--force"], "");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(ws.join("toolvisor.toml")).unwrap(),
        starter
    );
    // The starter serves, and what serving writes stays out of git.
    let mut s = Server::start_in(dir);
    block(T, async {
        let r = s.call("ls", json!({"path": "."})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
    });
    if have_git {
        let porcelain = git(&["status", "--porcelain", "--untracked-files=all"]).unwrap();
        let listed = text(&porcelain.stdout);
        assert_eq!(listed.trim(), "?? toolvisor.toml", "{listed}");
    }
    s.stop();
}

#[test]
fn serve_keeps_a_new_state_dir_out_of_git() {
    let s = Server::start(ASKING);
    let ignore = std::fs::read_to_string(s.ws().join(".toolvisor/.gitignore")).unwrap();
    assert!(ignore.lines().any(|l| l == "*"), "{ignore}");
}

#[test]
fn client_commands_find_the_workspace_from_a_subdirectory() {
    let s = Server::start(ALLOW_ALL);
    s.write("a/b/c/note.txt", "deep\n");
    let sub = s.ws().join("a/b/c");
    let out = toolvisor_in(&sub, &["status"], "");
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stdout).contains("search"), "{out:?}");
    let out = toolvisor_in(
        &sub,
        &["call", "read_file", r#"{"path": "a/b/c/note.txt"}"#],
        "",
    );
    assert_eq!(text(&out.stdout), "deep\n", "{out:?}");
    let out = toolvisor_in(&sub, &["audit", "verify"], "");
    assert!(
        out.status.success() && text(&out.stdout).starts_with("OK:"),
        "{out:?}"
    );
    let out = toolvisor_in(
        &sub,
        &["call", "read_file", "-"],
        r#"{"path": "a/b/c/note.txt"}"#,
    );
    assert_eq!(text(&out.stdout), "deep\n", "stdin arguments: {out:?}");
    let out = toolvisor_in(&sub, &["call", "read_file", "-"], "[1, 2]");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    // Outside any workspace there is no daemon to find, and the error says where it looked.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = toolvisor_in(elsewhere.path(), &["status"], "");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("toolvisor serve"), "{out:?}");
    assert!(out.stdout.is_empty(), "errors go to stderr: {out:?}");
}

/// `toolvisor mcp` run in `dir`: `initialize`, then `tools/list`; the tools listed.
fn mcp_tools(dir: &std::path::Path) -> Vec<Value> {
    use std::io::{BufRead, BufReader, Write};
    let mut child = Command::new(BIN)
        .current_dir(dir)
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut stdin = child.stdin.take().unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "e2e", "version": "1"}}});
    writeln!(stdin, "{init}").unwrap();
    let mut tools = None;
    while tools.is_none() {
        let line = rx
            .recv_timeout(D)
            .expect("an MCP answer within the deadline");
        let v: Value = serde_json::from_str(&line).expect("JSON-RPC");
        if v["id"] == 1 {
            let ready = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
            writeln!(stdin, "{ready}\n{list}").unwrap();
        } else if v["id"] == 2 {
            tools = v["result"]["tools"].as_array().cloned();
            assert!(tools.is_some(), "{v}");
        }
    }
    drop(stdin);
    let _ = wait_child(&mut child, D);
    tools.unwrap_or_default()
}

#[test]
fn an_invalid_config_does_not_cut_clients_off_a_running_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let config = ws.join("toolvisor.toml");
    std::fs::write(&config, "[server]\nstate_dir = \"state\"\n").unwrap();
    std::fs::write(ws.join("a.txt"), "alpha\n").unwrap();
    let sub = ws.join("deeper");
    std::fs::create_dir_all(&sub).unwrap();
    let (mut daemon, log) = spawn_serve(ws);
    wait_line(&log, &mut Vec::new(), "serving", START_DEADLINE);
    // The typo of the issue: the daemon keeps its configuration, clients keep working,
    // and find it in the state directory the broken file still names.
    std::fs::write(
        &config,
        "[server]\nstate_dir = \"state\"\n[policy]\nmode = \"autoo\"\n",
    )
    .unwrap();
    let out = toolvisor_in(&sub, &["status"], "");
    assert!(out.status.success(), "{out:?}");
    let err = text(&out.stderr);
    assert!(err.contains("autoo") && err.contains("last good"), "{err}");
    let out = toolvisor_in(&sub, &["audit", "verify"], "");
    assert!(out.status.success(), "{out:?}");
    let out = toolvisor_in(&sub, &["call", "read_file", r#"{"path": "a.txt"}"#], "");
    assert_eq!(text(&out.stdout), "alpha\n", "{out:?}");
    assert_eq!(mcp_tools(&sub).len(), builtin().len());
    // Not even TOML: the default state directory, and a note saying so.
    std::fs::write(&config, "[server\n").unwrap();
    let out = toolvisor_in(&sub, &["status"], "");
    assert_eq!(
        out.status.code(),
        Some(1),
        "the daemon is in state/, not .toolvisor/: {out:?}"
    );
    assert!(text(&out.stderr).contains("not valid TOML"), "{out:?}");
    signal(daemon.id(), Signal::SIGTERM);
    assert!(wait_child(&mut daemon, D).is_some());
    // serve itself still refuses a bad file.
    let out = Command::new(BIN)
        .args(["serve", "--workspace"])
        .arg(ws)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "{out:?}");
}

#[test]
fn call_help_explains_every_argument_and_option() {
    let out = Command::new(BIN).args(["call", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = text(&out.stdout);
    let entries: Vec<&str> = help
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('<') || l.starts_with('[') || l.starts_with('-'))
        .collect();
    assert!(entries.len() >= 8, "{help}");
    for e in entries {
        let words = e.split_whitespace().count();
        assert!(words >= 3, "an entry without an explanation: {e:?}\n{help}");
    }
    assert!(help.contains("`-` reads them from stdin"), "{help}");
}

#[test]
fn a_timeout_says_how_to_allow_more() {
    let s = Server::start(ALLOW_ALL);
    let out = toolvisor(
        s.ws(),
        &[
            "call",
            "run_command",
            r#"{"command": "sleep 10", "timeout": 300}"#,
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = text(&out.stderr);
    assert!(err.contains("Timeout"), "{err}");
    assert!(err.contains("300 ms the call asked for"), "{err}");
    assert!(err.contains("workers.exec.max_timeout_ms"), "{err}");
    let out = toolvisor(
        s.ws(),
        &[
            "call",
            "--json",
            "run_command",
            r#"{"command": "sleep 10", "timeout": 300}"#,
        ],
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        r["content"].as_str().unwrap().contains("max_timeout_ms"),
        "{r}"
    );
}

#[test]
fn status_lists_calls_in_flight_and_counts_commands_in_cpu() {
    let s = Server::start(ALLOW_ALL);
    let busy = "i=0; while [ $i -lt 2000000000 ]; do i=$((i+1)); done";
    block(Duration::from_secs(90), async {
        let mut agent = s.client().await;
        let mut req = CallRequest::new("busy", "run_command", json!({"command": busy}));
        req.timeout_ms = Some(60_000);
        agent.send(&ClientMessage::Call(req)).await.unwrap();
        let end = Instant::now() + Duration::from_secs(45);
        let (calls, cpu) = loop {
            let ServerMessage::Status { workers, calls, .. } = status(&s).await else {
                panic!("no status")
            };
            let cpu: f32 = workers
                .iter()
                .filter(|w| w.group == "exec")
                .map(|w| w.cpu_percent)
                .fold(0.0, f32::max);
            if !calls.is_empty() && cpu > 20.0 {
                break (calls, cpu);
            }
            assert!(
                Instant::now() < end,
                "no busy exec worker in status: calls {calls:?}, workers {workers:?}"
            );
            // CPU is a rate: it needs time to pass between samples.
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(calls[0].id, "busy".into());
        assert_eq!(calls[0].session, agent.session);
        assert_eq!(calls[0].tool, "run_command");
        assert!(calls[0].running_ms > 0);
        assert!(cpu <= 250.0, "{cpu}");
        agent
            .send(&ClientMessage::Cancel { id: "busy".into() })
            .await
            .unwrap();
        let r = next_result(&mut agent).await;
        assert_eq!(r.status, Status::Cancelled);
        let ServerMessage::Status { calls, .. } = status(&s).await else {
            panic!()
        };
        assert!(
            calls.is_empty(),
            "a call that ended is still listed: {calls:?}"
        );
    });
    let out = toolvisor(s.ws(), &["status"]);
    assert!(text(&out.stdout).contains("no calls in flight"), "{out:?}");
}

#[test]
fn sighup_applies_confirm_timeout_and_audit_says_who_answered() {
    let mut s = Server::start("[policy]\nconfined = \"ask\"\nconfirm_timeout_ms = 60000\n");
    s.write(
        "toolvisor.toml",
        "[policy]\nconfined = \"ask\"\nconfirm_timeout_ms = 1000\n",
    );
    signal(s.pid(), Signal::SIGHUP);
    s.wait_log("configuration reloaded", D);
    block(T, async {
        let mut agent = Client::connect(&s.socket(), "agent", true).await.unwrap();
        let req = CallRequest::new("t1", "write_file", json!({"path": "t.txt", "content": "x"}));
        let t = agent.call(req, |_, _| {}).await.unwrap();
        let asked = t.confirmations.first().expect("a question");
        let ServerMessage::ConfirmRequired { expires_in_ms, .. } = asked else {
            panic!("{asked:?}")
        };
        assert_eq!(*expires_in_ms, 1000);
        let r = t.result.unwrap();
        assert_eq!(
            r.error.unwrap().kind,
            toolvisor_protocol::ErrorType::ConfirmationTimeout
        );
        // A question answered by another connection names it.
        let mut approver = Client::connect(&s.socket(), "e2e-approver", false)
            .await
            .unwrap();
        let req = CallRequest::new("t2", "write_file", json!({"path": "t.txt", "content": "x"}));
        agent.send(&ClientMessage::Call(req)).await.unwrap();
        let interaction = next_interaction(&mut agent).await;
        approver
            .send(&ClientMessage::Confirm {
                interaction,
                approve: true,
                remember: None,
            })
            .await
            .unwrap();
        let r = next_result(&mut agent).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let answers: Vec<Value> = audit_log(s.ws())
            .into_iter()
            .filter(|r| r["kind"] == "confirm_answered")
            .collect();
        assert_eq!(answers.len(), 2, "{answers:?}");
        assert_eq!(answers[0]["answer"], "timeout");
        assert_eq!(answers[0]["by"], "timeout");
        assert_eq!(answers[1]["answer"], "approved");
        assert_eq!(answers[1]["by"], approver.session.as_str());
        assert_eq!(answers[1]["by_client"], "e2e-approver");
    });
}

#[test]
fn approve_waits_for_a_restarted_daemon_and_answers_it() {
    let mut s = Server::start(ASKING);
    let mut approver = Command::new(BIN)
        .current_dir(s.ws())
        .args(["approve", "--all", "--count", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut approver, "approve");
    let mut seen = Vec::new();
    wait_line(&lines, &mut seen, "waiting for questions", D);
    s.stop().expect("the daemon stops");
    wait_line(&lines, &mut seen, "went away", D);
    wait_line(&lines, &mut seen, "waiting for one", D);
    s.serve_again();
    let mut after = Vec::new();
    wait_line(&lines, &mut after, "connected", D);
    block(T, async {
        let mut agent = Client::connect(&s.socket(), "agent", true).await.unwrap();
        let req = CallRequest::new(
            "w",
            "write_file",
            json!({"path": "back.txt", "content": "ok"}),
        );
        let t = agent.call(req, |_, _| {}).await.unwrap();
        assert_eq!(t.result.unwrap().status, Status::Ok);
    });
    let status = wait_child(&mut approver, D).expect("approve ends after --count 1");
    assert!(status.success(), "{seen:?} {after:?}");
}

#[test]
fn a_second_interrupt_skips_the_drain() {
    let config = format!("[server]\ndrain_grace_ms = 120000\n{ALLOW_ALL}");
    let mut s = Server::start(&config);
    let pid = s.pid();
    let socket = s.socket();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = block(Duration::from_secs(120), async {
            let mut c = Client::connect(&socket, "e2e", false).await.unwrap();
            let mut req = CallRequest::new("long", "run_command", json!({"command": "sleep 100"}));
            req.timeout_ms = Some(110_000);
            c.call(req, |_, _| {}).await.map(|t| t.result)
        });
        let _ = tx.send(r);
    });
    block(D, async {
        loop {
            if let ServerMessage::Status { calls, .. } = status(&s).await
                && !calls.is_empty()
            {
                break;
            }
            // The call has no event this test can wait on: poll status (bounded by D).
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let started = Instant::now();
    signal(pid, Signal::SIGINT);
    s.wait_log("SIGINT: draining", D);
    signal(pid, Signal::SIGINT);
    s.wait_log("skipping the drain", D);
    let mut child = s.child.take().unwrap();
    let exit = wait_child(&mut child, D).expect("exits without waiting out the grace");
    assert!(exit.success(), "{exit:?}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    let r = rx.recv_timeout(D).expect("the call ended");
    if let Ok(Some(r)) = r {
        assert_eq!(r.status, Status::Cancelled, "{r:?}");
    }
}

/// Read one datagram with a deadline.
fn recv_notify(sock: &UnixDatagram) -> String {
    sock.set_read_timeout(Some(D)).unwrap();
    let mut buf = [0u8; 1024];
    let n = sock
        .recv(&mut buf)
        .expect("a notification within the deadline");
    text(&buf[..n])
}

fn readiness_is_notified(sock: UnixDatagram, address: &str) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolvisor.toml"), "").unwrap();
    let (mut child, log) = spawn_serve_env(dir.path(), &[("NOTIFY_SOCKET", address)]);
    let ready = recv_notify(&sock);
    assert!(ready.starts_with("READY=1"), "{ready}");
    assert!(
        ready.contains(&format!("MAINPID={}", child.id())),
        "{ready}"
    );
    // Ready means the socket accepts already.
    block(D, async {
        let sock = dir.path().join(".toolvisor/toolvisor.sock");
        Client::connect(&sock, "e2e", false)
            .await
            .expect("connect once ready");
    });
    signal(child.id(), Signal::SIGHUP);
    assert!(recv_notify(&sock).starts_with("RELOADING=1"));
    assert!(recv_notify(&sock).starts_with("READY=1"));
    signal(child.id(), Signal::SIGTERM);
    assert!(recv_notify(&sock).starts_with("STOPPING=1"));
    assert!(wait_child(&mut child, D).is_some_and(|s| s.success()));
    drop(log);
}

#[test]
fn systemd_hears_ready_reloading_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    readiness_is_notified(sock, path.to_str().unwrap());
}

#[test]
fn systemd_readiness_reaches_an_abstract_socket() {
    use std::os::linux::net::SocketAddrExt;
    let name = unique_marker("notify");
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let sock = UnixDatagram::bind_addr(&addr).unwrap();
    readiness_is_notified(sock, &format!("@{name}"));
}

#[test]
fn sigusr1_dumps_structured_fields_under_json_logs() {
    let mut s = Server::start_with_env(ALLOW_ALL, &[("TOOLVISOR_LOG_FORMAT", "json")]);
    signal(s.pid(), Signal::SIGUSR1);
    let line = s.wait_log("\"status: worker\"", D);
    let v: Value = serde_json::from_str(&line).unwrap();
    let f = &v["fields"];
    assert!(f["group"].is_string() && f["pid"].is_u64(), "{line}");
    assert!(
        f["cpu_percent"].is_number() && f["rss_bytes"].is_u64(),
        "{line}"
    );
    let line = s.wait_log("\"audit_seq\"", D);
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["fields"]["message"], "status");
    assert!(v["fields"]["uptime_ms"].is_u64(), "{line}");
    assert!(v["fields"]["openat2"].is_boolean(), "{line}");
}

/// The service outlives the reader of its log: with stderr a closed pipe (a journal
/// that restarted, `serve | head`), logging fails quietly and it goes on serving.
#[test]
fn a_closed_log_pipe_does_not_stop_the_service() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolvisor.toml"), ALLOW_ALL).unwrap();
    let (mut child, log) = spawn_serve(dir.path());
    wait_line(&log, &mut Vec::new(), "serving", START_DEADLINE);
    drop(log); // the reader thread ends at its next line, closing the pipe
    let sock = dir.path().join(".toolvisor/toolvisor.sock");
    for _ in 0..3 {
        signal(child.id(), Signal::SIGUSR1); // a burst of lines into the closed pipe
    }
    block(D, async {
        let mut c = Client::connect(&sock, "e2e", false)
            .await
            .expect("still serving");
        let r = call_on(&mut c, "c", "run_command", json!({"command": "echo alive"})).await;
        assert_eq!(r.content, "alive\n", "{r:?}");
    });
    signal(child.id(), Signal::SIGTERM);
    let status = wait_child(&mut child, D).expect("it stops");
    assert!(status.success(), "{status:?}");
}
