//! Agent hosts: `toolvisor hook` answers each host's recorded events exactly as
//! toolvisor decides its own calls, with the daemon and without; bad events are no
//! opinion; a wrapped shell command runs in the sandbox and is undone; `exec` passes
//! streams, exit status and Ctrl-C through.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{BIN, Server, toolvisor, wait_child};

const CONFIG: &str = r#"
[[policy.rules]]
tool = "run_command"
action = "allow"
conditions = [{ param = "command", operator = "startsWith", value = "touch " }]

[[policy.rules]]
tool = "run_command"
action = "deny"
message = "no deleting everything"
conditions = [{ param = "command", operator = "contains", value = "rm -rf /" }]
"#;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hooks");

/// Each recorded event, the host, and toolvisor's call it stands for.
fn cases() -> Vec<(&'static str, &'static str, &'static str, Value)> {
    let ls = json!({"command": "ls -la"});
    let rm = json!({"command": "rm -rf /"});
    vec![
        ("claude-code", "pre_bash_ls", "run_command", ls.clone()),
        ("claude-code", "pre_bash_rm", "run_command", rm.clone()),
        (
            "claude-code",
            "pre_read",
            "read_file",
            json!({"path": "notes.txt"}),
        ),
        (
            "claude-code",
            "pre_write_outside",
            "write_file",
            json!({"path": "/etc/motd", "content": "hi\n"}),
        ),
        (
            "claude-code",
            "pre_mcp_toolvisor",
            "read_file",
            json!({"path": "notes.txt"}),
        ),
        ("codex", "pre_bash_ls", "run_command", ls.clone()),
        ("codex", "pre_bash_rm", "run_command", rm.clone()),
        (
            "codex",
            "pre_apply_patch",
            "write_file",
            json!({"path": "notes2.txt", "content": ""}),
        ),
        ("gemini", "before_shell_ls", "run_command", ls),
        ("gemini", "before_shell_rm", "run_command", rm),
        (
            "gemini",
            "before_read",
            "read_file",
            json!({"path": "notes.txt"}),
        ),
    ]
}

fn fixture(host: &str, name: &str, ws: &Path) -> String {
    let text = std::fs::read_to_string(format!("{FIXTURES}/{host}/{name}.json")).expect("fixture");
    text.replace("/WORKSPACE", &ws.display().to_string())
}

/// `toolvisor hook HOST` in `dir` with `event` on stdin: (exit code, stdout JSON, stderr).
fn hook(dir: &Path, host: &str, event: &str) -> (i32, Value, String) {
    let out = crate::harness::toolvisor_in(dir, &["hook", host], event);
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), json, err)
}

/// The decision in a host's answer ("none" for no opinion).
fn decision(host: &str, v: &Value) -> String {
    let d = match host {
        "gemini" => &v["decision"],
        _ => &v["hookSpecificOutput"]["permissionDecision"],
    };
    d.as_str().unwrap_or("none").to_owned()
}

fn explained(ws: &Path, tool: &str, args: &Value, local: bool) -> String {
    let cfg = ws.join("toolvisor.toml").display().to_string();
    let args = args.to_string();
    let mut argv = vec!["policy", "explain", "--json", tool, args.as_str()];
    if local {
        argv.extend(["--config", cfg.as_str()]);
    }
    let out = toolvisor(ws, &argv);
    let v: Value = serde_json::from_slice(&out.stdout).expect("explanation");
    v["decision"].as_str().unwrap_or_default().to_owned()
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("toolvisor.toml"), CONFIG).expect("config");
    std::fs::write(dir.path().join("notes.txt"), "hi\n").expect("notes");
    dir
}

#[test]
fn without_a_daemon_each_hosts_events_are_decided_from_the_config() {
    let dir = workspace();
    let ws = dir.path().canonicalize().unwrap();
    for (host, name, tool, args) in cases() {
        let (code, v, err) = hook(&ws, host, &fixture(host, name, &ws));
        assert_eq!(code, 0, "{host}/{name}: {err}");
        let want = explained(&ws, tool, &args, true);
        assert_eq!(decision(host, &v), want, "{host}/{name}: {v} {err}");
        assert!(err.contains("config alone"), "{err}");
    }
}

#[test]
fn with_the_daemon_each_hosts_events_are_decided_and_audited_as_its_own_calls() {
    let s = Server::start(CONFIG);
    s.write("notes.txt", "hi\n");
    let ws = s.ws().canonicalize().unwrap();
    for (host, name, tool, args) in cases() {
        let (code, v, err) = hook(&ws, host, &fixture(host, name, &ws));
        assert_eq!(code, 0, "{host}/{name}: {err}");
        assert_eq!(
            decision(host, &v),
            explained(&ws, tool, &args, false),
            "{host}/{name}: {v} {err}"
        );
        assert!(!err.contains("config alone"), "{host}/{name}: {err}");
    }
    let (_, v, _) = hook(
        &ws,
        "claude-code",
        &fixture("claude-code", "post_bash_ls", &ws),
    );
    assert_eq!(v, json!({}));
    let tail = toolvisor(&ws, &["audit", "tail", "--json", "-n", "200"]);
    let records: Vec<Value> = String::from_utf8_lossy(&tail.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let by = |kind: &str, id: &str| {
        records
            .iter()
            .find(|r| r["kind"] == kind && r["call_id"] == id)
            .cloned()
    };
    let req = by("requested", "claude-code:toolu_01LS").expect("requested");
    assert_eq!(req["client"], "claude-code");
    assert_eq!(req["tool"], "run_command");
    assert!(
        by("completed", "claude-code:toolu_01LS").is_some(),
        "completed"
    );
    let denied = by("rejected", "codex:call_RM1").expect("rejected");
    assert_eq!(denied["status"], "denied");
    assert!(records.iter().any(|r| r["client"] == "gemini-cli"));
}

#[test]
fn bad_events_are_no_opinion_and_never_break_the_host() {
    let dir = workspace();
    let ws = dir.path().canonicalize().unwrap();
    let other = tempfile::tempdir().unwrap();
    let elsewhere = fixture("claude-code", "pre_bash_ls", other.path());
    let long = "x".repeat(1 << 20);
    let huge = json!({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": "t",
        "cwd": ws, "tool_input": {"command": format!("echo {long}")}})
    .to_string();
    let nul = json!({"hook_event_name": "BeforeTool", "tool_name": "run_shell_command",
        "cwd": ws, "tool_input": {"command": "echo a\u{0}b"}})
    .to_string();
    for (host, event, why) in [
        ("claude-code", "not json".to_owned(), "not JSON"),
        ("claude-code", "[1]".to_owned(), "hook_event_name"),
        ("codex", r#"{"hook_event_name":"Stop"}"#.to_owned(), "Stop"),
        (
            "gemini",
            r#"{"hook_event_name":"BeforeModel"}"#.to_owned(),
            "BeforeModel",
        ),
        (
            "claude-code",
            r#"{"hook_event_name":"PreToolUse","tool_name":"Task","tool_input":{}}"#.to_owned(),
            "Task",
        ),
        ("claude-code", elsewhere, "outside the workspace"),
    ] {
        let (code, v, err) = hook(&ws, host, &event);
        assert_eq!((code, &v), (0, &json!({})), "{host}: {event:.80}");
        assert!(err.contains(why), "{err}");
    }
    // A 1 MiB command and a command with a NUL are decided, not crashed on.
    let (code, v, _) = hook(&ws, "claude-code", &huge);
    assert_eq!((code, decision("claude-code", &v).as_str()), (0, "ask"));
    let (code, v, _) = hook(&ws, "gemini", &nul);
    assert_eq!(code, 0);
    assert!(v["decision"].is_string(), "{v}");
    // From a subdirectory the workspace above is found.
    let sub = ws.join("a/b");
    std::fs::create_dir_all(&sub).unwrap();
    let (_, v, _) = hook(
        &sub,
        "claude-code",
        &fixture("claude-code", "pre_read", &ws),
    );
    assert_eq!(decision("claude-code", &v), "allow");
}

#[test]
fn a_wrapped_shell_command_runs_in_the_sandbox_and_is_undone() {
    let s = Server::start(&format!("[hooks]\nwrap = true\n{CONFIG}"));
    let ws = s.ws().canonicalize().unwrap();
    let event = json!({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": "w1",
        "cwd": ws, "tool_input": {"command": "touch 'made by it.txt'", "description": "d"}});
    let (_, v, err) = hook(&ws, "claude-code", &event.to_string());
    let out = &v["hookSpecificOutput"];
    assert_eq!(out["permissionDecision"], "allow", "{v} {err}");
    assert_eq!(out["updatedInput"]["description"], "d");
    let cmd = out["updatedInput"]["command"].as_str().expect("rewritten");
    assert!(cmd.contains(" exec -- bash -c "), "{cmd}");
    // The host runs the rewritten command with its shell.
    let run = Command::new("bash")
        .args(["-c", cmd])
        .current_dir(&ws)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(ws.join("made by it.txt").exists());
    let undo = toolvisor(&ws, &["undo", "--last", "1"]);
    assert!(
        undo.status.success(),
        "{}",
        String::from_utf8_lossy(&undo.stderr)
    );
    assert!(!ws.join("made by it.txt").exists());
}

#[test]
fn exec_passes_streams_exit_status_and_signals_through() {
    let s = Server::start(CONFIG);
    let ws = s.ws();
    let exec = |args: &[&str]| {
        let mut argv = vec!["exec", "--"];
        argv.extend(args);
        toolvisor(ws, &argv)
    };
    let out = exec(&["touch", "it's here.txt"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(ws.join("it's here.txt").exists());
    let out = exec(&["touch", "a; exit 7", "$HOME", "*"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(ws.join("a; exit 7").exists() && ws.join("$HOME").exists() && ws.join("*").exists());
    let none = toolvisor(ws, &["exec"]);
    assert_eq!(none.status.code(), Some(2));
}

#[test]
fn exec_keeps_stdout_and_stderr_apart_and_passes_codes_through() {
    let s = Server::start(&format!(
        "{CONFIG}\n[[policy.rules]]\ntool = \"run_command\"\naction = \"allow\"\nhazards = \"allow\"\nconditions = [{{ param = \"command\", operator = \"startsWith\", value = \"sh -c \" }}]\n"
    ));
    let out = toolvisor(
        s.ws(),
        &["exec", "--", "sh", "-c", "echo out; echo err >&2; exit 3"],
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
    // Killed by a signal: 128 + its number, as a shell reports it.
    let out = toolvisor(s.ws(), &["exec", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.code(), Some(128 + 15), "{out:?}");
}

#[test]
fn exec_of_a_command_that_asks_is_refused_without_a_person() {
    let s = Server::start(&format!("{CONFIG}\n{}", crate::harness::ASKING));
    let out = toolvisor(
        s.ws(),
        &["exec", "--", "sh", "-c", "echo out; echo err >&2; exit 3"],
    );
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    // Widening asks too: a domain list no rule grants.
    let out = toolvisor(s.ws(), &["exec", "--network=a.example", "--", "true"]);
    assert_eq!(out.status.code(), Some(126), "{out:?}");
}

#[test]
fn ctrl_c_cancels_an_exec() {
    let s = Server::start(&format!(
        "{CONFIG}\n[[policy.rules]]\ntool = \"run_command\"\naction = \"allow\"\nconditions = [{{ param = \"command\", operator = \"startsWith\", value = \"sleep \" }}]\n"
    ));
    let mut child = Command::new(BIN)
        .current_dir(s.ws())
        .args(["exec", "--", "sleep", "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the daemon runs it: `status` lists the call.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let st = toolvisor(s.ws(), &["status", "--json"]);
        if String::from_utf8_lossy(&st.stdout).contains("run_command") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the call never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = wait_child(&mut child, Duration::from_secs(20)).expect("exec ended");
    assert_eq!(status.code(), Some(130));
}
