//! What a newcomer meets in the first hour, driven the way they meet it: a command's
//! time limit raised each documented way, a reload that leaves running jobs alone, a dev
//! server reached from the session's next command.

use std::time::Duration;

use serde_json::json;
use toolvisor_protocol::Status;
use toolvisor_protocol::message::CallRequest;

use crate::harness::*;
use crate::pty::Pty;

/// Longer than the 30 s every command used to be cut at, whatever the call asked for.
const PAST_THIRTY: &str = "sleep 31; echo slept-past-thirty";
const D: Duration = Duration::from_secs(120);

/// `--timeout-ms` on the CLI (on a terminal), the call's `timeout_ms` on the socket and
/// `workers.exec.default_timeout_ms` each give a command more than 30 s; the three run at
/// once so the test costs one wait.
#[test]
fn a_commands_time_limit_is_raised_each_documented_way() {
    let plain = Server::start(ALLOW_ALL);
    let raised = Server::start(&format!(
        "{ALLOW_ALL}\n[workers.exec]\ncount = 1\ndefault_timeout_ms = 45000\n"
    ));
    let args = json!({ "command": PAST_THIRTY }).to_string();
    let mut term = Pty::spawn(
        plain.ws(),
        &["call", "--timeout-ms", "600000", "run_command", &args],
    );
    let (by_call, by_config) = block(D, async {
        let mut c = plain.client().await;
        let mut req = CallRequest::new("t1", "run_command", json!({ "command": PAST_THIRTY }));
        req.timeout_ms = Some(600_000);
        let by_call = c.call(req, |_, _| {});
        let by_config = raised.call("run_command", json!({ "command": PAST_THIRTY }));
        let (a, b) = tokio::join!(by_call, by_config);
        (a.expect("call").result.expect("a result"), b)
    });
    for (how, r) in [("timeout_ms", &by_call), ("default_timeout_ms", &by_config)] {
        assert_eq!(r.status, Status::Ok, "{how}: {r:?}");
        assert!(r.content.contains("slept-past-thirty"), "{how}: {r:?}");
    }
    let status = term.wait_exit(D);
    let screen = term.screen();
    assert!(status.success(), "--timeout-ms: {screen}");
    assert!(screen.contains("slept-past-thirty"), "{screen}");
}

/// README's way to apply a config edit (SIGHUP) applies it — a new time limit takes
/// effect on the next call — and leaves a running dev server alone: an edit that changes
/// nothing an exec worker was started with does not replace it.
#[test]
fn a_reload_applies_the_edit_and_leaves_background_processes_running() {
    let base = format!("{ALLOW_ALL}\n[workers.exec]\ncount = 1\n");
    let mut s = Server::start(&base);
    let (handle, pid_before) = block(D, async {
        let r = s
            .call(
                "run_command",
                json!({"command": "echo serving; sleep 600", "background": true,
                       "ready": {"regex": "serving"}}),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let handle = r.meta["process"].as_str().expect("a handle").to_owned();
        (handle, s.worker_pids("exec").await)
    });
    s.write(
        "toolvisor.toml",
        &format!("{base}default_timeout_ms = 1500\n"),
    );
    crate::supervision::signal(s.pid(), nix::sys::signal::Signal::SIGHUP);
    s.wait_log("every worker restarted", D);
    block(D, async {
        assert_eq!(s.worker_pids("exec").await, pid_before, "exec worker kept");
        let r = s.call("read_output", json!({"process": handle})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.meta["running"], true, "the job still runs: {r:?}");
        let r = s.call("run_command", json!({"command": "sleep 5"})).await;
        assert_eq!(
            r.status,
            Status::Timeout,
            "the new 1.5 s limit applies: {r:?}"
        );
    });
    let audit = std::fs::read_to_string(s.ws().join(".toolvisor/audit.jsonl")).unwrap();
    assert!(
        !audit
            .lines()
            .any(|l| l.contains("\"worker_exited\"") && l.contains("\"exec\"")),
        "no exec worker exited"
    );
}

/// `audit verify` where no log was ever written says so and fails: verifying nothing
/// is not "OK".
#[test]
fn audit_verify_without_a_log_fails_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolvisor.toml"), "").unwrap();
    let out = toolvisor(dir.path(), &["audit", "verify"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("no audit log"), "{text}");
}

/// On a terminal, a command's output without a final newline ends its own line: the
/// error line that follows starts a new one. A background start with `ready` (which
/// prints the output so far) still says its handle.
#[test]
fn the_cli_keeps_output_and_error_apart_and_says_a_background_handle() {
    let s = Server::start(ALLOW_ALL);
    let mut term = Pty::spawn(
        s.ws(),
        &[
            "call",
            "run_command",
            r#"{"command": "printf no-newline; exit 3"}"#,
        ],
    );
    assert!(!term.wait_exit(D).success());
    let screen = term.screen();
    assert!(
        screen.lines().any(|l| l.trim_end() == "no-newline"),
        "glued:\n{screen}"
    );
    assert!(
        screen
            .lines()
            .any(|l| l.starts_with("toolvisor: error (ShellExecutionError)")),
        "{screen}"
    );
    let mut term = Pty::spawn(
        s.ws(),
        &[
            "call",
            "run_command",
            r#"{"command": "echo up; sleep 60", "background": true, "ready": {"regex": "up"}}"#,
        ],
    );
    assert!(term.wait_exit(D).success(), "{}", term.screen());
    let screen = term.screen();
    assert!(
        screen.contains("background process w0-1 is running"),
        "{screen}"
    );
}
